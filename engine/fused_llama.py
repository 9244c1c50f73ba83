"""The engine's own forward for Llama-family decoders (Llama, Qwen2, Mistral), as vLLM runs its
own model code rather than transformers' modules.

Same weights, same arithmetic as transformers' forward, with less around it: Q, K and V come
from one matmul and the MLP's gate and up from another (the fused weights are made once; the
model's own projections become views of them); rotary cos/sin are computed once per step for
every layer; there is no per-layer mask building, cache object or output dataclass; only the rows
that are sampled reach the final norm and the LM head. On a CPU in float32 each matmul also keeps
a copy of its weight in oneDNN's packed layout and runs on that (Linear, rows_bucket). The paged
attention is engine/attention.py's, the same one transformers' modules call.

Other architectures run through transformers' own forward (ModelRunner falls back to it).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention import StepMetadata, paged_attention

ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"})


def supports(model: nn.Module) -> bool:
    """A Llama-shaped decoder with nothing this forward leaves out (per-head Q/K norms, biased
    MLPs and the like belong to architectures outside ARCHITECTURES)."""
    if type(model).__name__ not in ARCHITECTURES or getattr(model.config, "pretraining_tp", 1) != 1:
        return False
    return not getattr(model.config, "mlp_bias", False) and model.config.hidden_act in ("silu", "swish")


def _fuse(*linears: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for several projections of the same input; each projection's own
    parameter becomes a view of its rows, so the model's modules keep working on the same memory."""
    weight = torch.cat([lin.weight.detach() for lin in linears])
    biases = [lin.bias for lin in linears]
    bias = torch.cat([b.detach() if b is not None else weight.new_zeros(lin.out_features)
                      for b, lin in zip(biases, linears)]) if any(b is not None for b in biases) else None
    at = 0
    for lin in linears:
        n = lin.out_features
        lin.weight = nn.Parameter(weight[at: at + n], requires_grad=False)
        if lin.bias is not None:
            lin.bias = nn.Parameter(bias[at: at + n], requires_grad=False)
        at += n
    return weight, bias


PACK_ROWS = 16  # oneDNN lays packed weights out for about this many rows (a decode step's size)


def pack_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight in oneDNN's own blocked layout, for float32 on a CPU with oneDNN; else None.

    Measured on this project's 2-core machine, oneDNN's packed matmul runs a decode step's shapes
    (17 rows × 256 → 1,408) 2–3× faster than F.linear's MKL call (which on this AMD CPU does not
    reach its 512-bit units), and prompt-sized ones 2× faster; inductor's `freezing` makes the
    same substitution when it compiles for a CPU."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)
    except (AttributeError, RuntimeError):  # a torch built without it
        return None


def rows_bucket(m: int) -> int:
    """The row count a packed matmul of `m` rows runs at. oneDNN builds a kernel per shape the
    first time it sees it (~0.5 ms each); rounding the rows up — to a multiple of 8 up to 64,
    then of an eighth of the power of two below — keeps that to eight shapes per doubling, built
    once by FusedLlama.warm_up, for at most 7 more rows up to 64 and 12.5% more beyond."""
    step = 8 if m <= 64 else 1 << (m.bit_length() - 4)  # pragma: no mutate (at 64 and 65 both rules give a step of 8)
    return -(-m // step) * step


@dataclass(slots=True)
class Linear:
    weight: torch.Tensor
    bias: torch.Tensor | None
    packed: torch.Tensor | None  # pack_weight(weight); a copy in oneDNN's layout

    def __call__(self, x: torch.Tensor, packed: bool = True) -> torch.Tensor:
        if packed and self.packed is not None:
            m = x.shape[0]
            rows = rows_bucket(m)
            if rows != m:
                x = F.pad(x, (0, 0, 0, rows - m))
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")[:m]
        return F.linear(x, self.weight, self.bias)

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "Linear":
        return cls(weight, bias, pack_weight(weight))


@dataclass(slots=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: Linear
    o: Linear
    post_norm: torch.Tensor
    gate_up: Linear
    down: Linear
    window: int | None  # sliding window of this layer's attention, if it has one


class FusedLlama:
    """forward(ids [T], positions [T], meta, sample_rows [R]) → logits [R, vocab]."""

    # False: every matmul through F.linear (the measured comparison in bench.throughput)
    packed_linears = True

    def __init__(self, model: nn.Module):
        config = model.config
        inner = model.model
        attn = inner.layers[0].self_attn  # pragma: no mutate (every layer's attention has the same heads and scaling)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling  # pragma: no mutate (None: the attention's default, head_dim^-0.5, which every covered architecture uses)
        self.eps = config.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.norm = inner.norm.weight
        self.lm_head = Linear.of(model.lm_head.weight)
        self.layers = []
        self._warm: set[int] = set()  # row buckets whose matmul kernels oneDNN has built
        for layer in inner.layers:
            a, mlp = layer.self_attn, layer.mlp
            qkv, qkv_bias = _fuse(a.q_proj, a.k_proj, a.v_proj)
            gate_up, _ = _fuse(mlp.gate_proj, mlp.up_proj)
            # Qwen2 and Mistral name the window on the module or the config; Llama has none.
            window = getattr(a, "sliding_window", getattr(config, "sliding_window", None)) or None
            self.layers.append(_Layer(
                input_norm=layer.input_layernorm.weight, qkv=Linear.of(qkv, qkv_bias),
                o=Linear.of(a.o_proj.weight, a.o_proj.bias), post_norm=layer.post_attention_layernorm.weight,
                gate_up=Linear.of(gate_up), down=Linear.of(mlp.down_proj.weight), window=window,
            ))

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op, the same arithmetic as below in float32
            return F.rms_norm(x, weight.shape, weight, self.eps)
        # transformers' RMSNorm: in float32, scaled by the weight after casting back
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    @property
    def packing(self) -> bool:
        """Whether this forward's matmuls run on oneDNN's packed weights (CPU, float32)."""
        return self.packed_linears and self.lm_head.packed is not None

    @torch.inference_mode()
    def warm_up(self, max_tokens: int, max_rows: int) -> None:
        """Run every packed matmul once at each row bucket up to a step's size (every layer's
        matmuls have the same shapes, so the first layer's stand for all), so no step pays for
        oneDNN building a kernel. Once per process and size: later engines find them built."""
        if not self.packing:
            return
        layer = self.layers[0]
        todo = sorted({rows_bucket(m) for m in range(1, max_tokens + 1)} - self._warm)
        for rows in todo:
            for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
                lin(lin.weight.new_zeros(rows, lin.weight.shape[1]))
            if rows <= rows_bucket(max_rows):
                self.lm_head(self.lm_head.weight.new_zeros(rows, self.lm_head.weight.shape[1]))
            self._warm.add(rows)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, meta: StepMetadata,
                 sample_rows: torch.Tensor) -> torch.Tensor:
        real = ids.shape[0]
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        # Padded once to the packed matmuls' row bucket (token 0 at position 0): every op but the
        # attention treats rows alone, and the attention reads and writes only the real ones.
        t = rows_bucket(real) if self.packing else real
        if t != real:
            ids, positions = F.pad(ids, (0, t - real)), F.pad(positions, (0, t - real))
        x = F.embedding(ids, self.embed)
        cos, sin = self.rotary(x, positions[None])  # [1, T, D], once for every layer
        half = d // 2
        cos, sin = cos[0, :, None], torch.cat((-sin[0, :, None, :half], sin[0, :, None, half:]), dim=-1)  # [T, 1, D]
        rotated = (h + hkv) * d  # Q and K, side by side in each row of qkv
        packed = self.packing
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._rms(x, layer.input_norm), packed)
            # Rotary embedding on Q and K at once, in place: x·cos + rotate_half(x)·sin, where
            # rotate_half(x) = [-x2, x1] = roll(x, half)·[-1…, 1…] (the sign is in `sin`).
            qk = qkv[:, :rotated].view(t, h + hkv, d)
            torch.add(qk * cos, qk.roll(half, -1) * sin, out=qk)
            o = paged_attention(meta, i, qk[:real, :h], qkv[:real, h * d:].view(real, 2 * hkv, d).transpose(0, 1),
                                self.scaling, layer.window, pad_to=t)
            x = x + layer.o(o.view(t, h * d), packed)
            gate, up = layer.gate_up(self._rms(x, layer.post_norm), packed).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up, packed)
        x = self._rms(x.index_select(0, sample_rows), self.norm)
        return self.lm_head(x, packed)
