"""The engine's own forward for Llama-family decoders (Llama, Qwen2, Mistral), as vLLM runs its
own model code rather than transformers' modules.

Same weights, same arithmetic as transformers' forward, with less around it: Q, K and V come
from one matmul and the MLP's gate and up from another (the fused weights are made once; the
model's own projections become views of them, so nothing is stored twice); rotary cos/sin are
computed once per step for every layer; there is no per-layer mask building, cache object or
output dataclass; only the rows that are sampled reach the final norm and the LM head. The
paged attention is engine/attention.py's, the same one transformers' modules call.

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
    if getattr(model.config, "mlp_bias", False) or model.config.hidden_act not in ("silu", "swish"):
        return False
    return all(layer.mlp.act_fn is not None for layer in model.model.layers)


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


@dataclass(slots=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    window: int | None  # sliding window of this layer's attention, if it has one


class FusedLlama:
    """forward(ids [T], positions [T], meta, sample_rows [R]) → logits [R, vocab]."""

    def __init__(self, model: nn.Module):
        config = model.config
        inner = model.model
        attn = inner.layers[0].self_attn
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.eps = config.rms_norm_eps
        self.hidden = config.hidden_size
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = []
        for layer in inner.layers:
            a, mlp = layer.self_attn, layer.mlp
            qkv, qkv_bias = _fuse(a.q_proj, a.k_proj, a.v_proj)
            gate_up, _ = _fuse(mlp.gate_proj, mlp.up_proj)
            # Qwen2 and Mistral name the window on the module or the config; Llama has none.
            window = getattr(a, "sliding_window", getattr(config, "sliding_window", None)) or None
            self.layers.append(_Layer(
                input_norm=layer.input_layernorm.weight, qkv=qkv, qkv_bias=qkv_bias,
                o=a.o_proj.weight, o_bias=a.o_proj.bias, post_norm=layer.post_attention_layernorm.weight,
                gate_up=gate_up, down=mlp.down_proj.weight, window=window,
            ))

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op, the same arithmetic as below in float32
            return F.rms_norm(x, weight.shape, weight, self.eps)
        # transformers' RMSNorm: in float32, scaled by the weight after casting back
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, meta: StepMetadata,
                 sample_rows: torch.Tensor) -> torch.Tensor:
        t = ids.shape[0]
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)
        cos, sin = self.rotary(x, positions[None])  # [1, T, D], once for every layer
        half = d // 2
        cos, sin = cos[0, :, None], torch.cat((-sin[0, :, None, :half], sin[0, :, None, half:]), dim=-1)  # [T, 1, D]
        rotated = (h + hkv) * d  # Q and K, side by side in each row of qkv
        for i, layer in enumerate(self.layers):
            qkv = F.linear(self._rms(x, layer.input_norm), layer.qkv, layer.qkv_bias)
            # Rotary embedding on Q and K at once, in place: x·cos + rotate_half(x)·sin, where
            # rotate_half(x) = [-x2, x1] = roll(x, half)·[-1…, 1…] (the sign is in `sin`).
            qk = qkv[:, :rotated].view(t, h + hkv, d)
            torch.add(qk * cos, qk.roll(half, -1) * sin, out=qk)
            o = paged_attention(meta, i, qk[:, :h], qkv[:, h * d:].view(t, 2 * hkv, d).transpose(0, 1),
                                self.scaling, layer.window)
            x = x + F.linear(o.view(t, h * d), layer.o, layer.o_bias)
            gate, up = F.linear(self._rms(x, layer.post_norm), layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        x = self._rms(x.index_select(0, sample_rows), self.norm)
        return F.linear(x, self.lm_head)
