// Decode attention straight from the paged KV pool, one query token per request: for each
// request and KV head, walk the request's block table, score each cached key against the query
// heads that share that KV head, and fold the values in with an online softmax (running max and
// sum, rescaled block by block as PagedAttention kernels do). Nothing is gathered or padded:
// each block is read once, in place.
//
// Plain C ABI (loaded with ctypes by engine/cpu_attention.py); float32, CPU; OpenMP over
// (request, KV head) pairs. Built with -fopenmp, it shares the libgomp torch has already loaded
// (same soname), so torch's threads and these are one pool. Common head sizes are compiled with
// the size fixed, so a query head's accumulator stays in registers.
#include <cmath>
#include <cstdint>

namespace {

constexpr int kMaxGroup = 16;   // query heads per KV head handled at once
constexpr int kMaxBlock = 128;  // tokens per block
constexpr int kMaxDim = 256;    // head size

template <int kDim>
void attend_one(const float* qr, int64_t q_head_stride, float* o, const float* k_head, const float* v_head, const int64_t* table,
                int64_t pos, int64_t first, int g, int runtime_dim, int block_size, float scale) {
  const int D = kDim > 0 ? kDim : runtime_dim;
  float scores[kMaxGroup][kMaxBlock];
  float m[kMaxGroup], l[kMaxGroup];
  alignas(64) float acc[kMaxGroup][kDim > 0 ? kDim : kMaxDim];
  for (int j = 0; j < g; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
    for (int d = 0; d < D; ++d) acc[j][d] = 0.0f;
  }
  for (int64_t b = first / block_size; b * block_size <= pos; ++b) {
    const int64_t start = b * block_size;
    const int lo = (int)(first > start ? first - start : 0);
    const int hi = (int)(pos - start + 1 < block_size ? pos - start + 1 : block_size);
    const int64_t base = table[b] * block_size;
    if ((b + 1) * block_size <= pos) {  // fetch the next block while this one is worked on
      const int64_t next = table[b + 1] * block_size * D;
      for (int64_t at = 0; at < (int64_t)block_size * D; at += 16) {  // a 64-byte line each
        __builtin_prefetch(k_head + next + at);
        __builtin_prefetch(v_head + next + at);
      }
    }
    for (int t = lo; t < hi; ++t) {  // each key, read once for every query head
      const float* k = k_head + (base + t) * D;
      for (int j = 0; j < g; ++j) {
        const float* qj = qr + j * q_head_stride;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < D; ++d) s += qj[d] * k[d];
        scores[j][t] = s * scale;
      }
    }
    for (int j = 0; j < g; ++j) {
      float block_max = -INFINITY;
      for (int t = lo; t < hi; ++t) block_max = scores[j][t] > block_max ? scores[j][t] : block_max;
      const float m_new = block_max > m[j] ? block_max : m[j];
      const float rescale = std::exp(m[j] - m_new);  // exp(-inf) = 0 on the first block
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int t = lo; t < hi; ++t) {
        scores[j][t] = std::exp(scores[j][t] - m_new);
        sum += scores[j][t];
      }
      l[j] = l[j] * rescale + sum;
      m[j] = m_new;
      float a[kDim > 0 ? kDim : kMaxDim];  // in registers when the size is fixed
#pragma omp simd
      for (int d = 0; d < D; ++d) a[d] = acc[j][d] * rescale;
      for (int t = lo; t < hi; ++t) {
        const float p = scores[j][t];
        const float* v = v_head + (base + t) * D;
#pragma omp simd
        for (int d = 0; d < D; ++d) a[d] += p * v[d];
      }
#pragma omp simd
      for (int d = 0; d < D; ++d) acc[j][d] = a[d];
    }
  }
  for (int j = 0; j < g; ++j) {
    const float inv = 1.0f / l[j];
    for (int d = 0; d < D; ++d) o[(int64_t)j * D + d] = acc[j][d] * inv;
  }
}

}  // namespace

// Returns 0, or -1 when a size is beyond what the kernel holds (the caller then uses torch).
extern "C" int paged_decode_attention(
    const float* q, int64_t q_row_stride, int64_t q_head_stride,  // q[token][head] in floats from q
    float* out,                            // [tokens, H, D], contiguous
    const int64_t* tokens,                 // [R] each request's query token in the step
    const float* pool,                     // [2 * Hkv, slots, D]: K heads, then V heads
    int64_t num_slots,
    const int64_t* table, int64_t table_stride,  // [R, table_stride] block ids
    const int64_t* positions,              // [R] each query's position: it sees keys 0 … position
    int R, int H, int Hkv, int D, int block_size, float scale, int window) {
  const int g = H / Hkv;
  if (g > kMaxGroup || block_size > kMaxBlock || D > kMaxDim) return -1;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)  // contexts differ in length
  for (int r = 0; r < R; ++r) {
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      const int64_t pos = positions[r];
      const int64_t first = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
      const float* qr = q + tokens[r] * q_row_stride + kvh * g * q_head_stride;
      float* o = out + tokens[r] * (int64_t)H * D + (int64_t)kvh * g * D;
      const float* k_head = pool + (int64_t)kvh * num_slots * D;
      const float* v_head = pool + (int64_t)(Hkv + kvh) * num_slots * D;
      const int64_t* row = table + r * table_stride;
      switch (D) {
        case 64: attend_one<64>(qr, q_head_stride, o, k_head, v_head, row, pos, first, g, D, block_size, scale); break;
        case 128: attend_one<128>(qr, q_head_stride, o, k_head, v_head, row, pos, first, g, D, block_size, scale); break;
        default: attend_one<0>(qr, q_head_stride, o, k_head, v_head, row, pos, first, g, D, block_size, scale);
      }
    }
  }
  return 0;
}
