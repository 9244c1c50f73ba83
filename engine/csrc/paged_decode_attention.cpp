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

// exp(x) for x <= 0 as a few multiplies and adds, so that the compiler vectorises the softmax
// loops (the library's expf stays one scalar call per score without -ffast-math, which would
// change other results too): x = k·ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to
// r^7 (relative error under 1e-7 over [-87, 0], below one float ulp), times 2^k written into the exponent
// bits. Below -87 (and for -inf, the running max before the first block) it is 0, as a float's
// e^x underflows there.
inline float exp_nonpositive(float x) {
  const float kf = __builtin_floorf(x * 1.44269504f + 0.5f);
  const float r = (x - kf * 0.693145752f) - kf * 1.42860677e-6f;  // ln2 in two parts: r stays exact
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const bool tiny = x < -87.0f;
  const float two_k = __builtin_bit_cast(float, ((tiny ? 0 : (int)kf) + 127) << 23);
  return tiny ? 0.0f : p * two_k;
}

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
    int t = lo;
    for (; t + 4 <= hi; t += 4) {  // four keys at once: four independent sums, each query read once
      const float* k0 = k_head + (base + t) * D;
      const float* k1 = k0 + D;
      const float* k2 = k1 + D;
      const float* k3 = k2 + D;
      for (int j = 0; j < g; ++j) {
        const float* qj = qr + j * q_head_stride;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int d = 0; d < D; ++d) {
          const float qd = qj[d];
          s0 += qd * k0[d];
          s1 += qd * k1[d];
          s2 += qd * k2[d];
          s3 += qd * k3[d];
        }
        scores[j][t] = s0 * scale;
        scores[j][t + 1] = s1 * scale;
        scores[j][t + 2] = s2 * scale;
        scores[j][t + 3] = s3 * scale;
      }
    }
    for (; t < hi; ++t) {  // the block's last keys
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
      const float rescale = exp_nonpositive(m[j] - m_new);  // 0 on the first block (m = -inf)
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int t = lo; t < hi; ++t) {
        scores[j][t] = exp_nonpositive(scores[j][t] - m_new);
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
