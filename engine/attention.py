"""Paged attention, registered with transformers' AttentionInterface.

The model's own attention modules project Q/K/V and apply rotary embeddings; this function
then writes the step's K/V into the pool by slot mapping and reads each request's K/V back
through its block table. Step metadata arrives as the `paged_step` forward kwarg, so several
engines (each with its own pool) can share one set of weights.
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "engine_paged"


@dataclass(slots=True)
class PrefillSpan:
    """One request with more than one new token this step (a prompt chunk, or a recompute)."""

    q_start: int  # its tokens' range in the flattened step
    q_end: int
    kv_slots: torch.Tensor  # [context_len] slots of every token so far, in order
    q_positions: torch.Tensor  # [q_len] absolute positions of its new tokens


@dataclass(slots=True)
class DecodeGroup:
    """Single-token (decode) queries of similar context length, attended in one SDPA call."""

    q_idx: torch.Tensor  # [Rd] their indices in the flattened step
    slots: torch.Tensor  # [Rd, max_len] context slots, padded
    lens: torch.Tensor  # [Rd] context length (incl. the new token)


@dataclass(slots=True)
class StepMetadata:
    kv: object  # KVCache
    slot_mapping: torch.Tensor  # [T] where each new token's K/V goes
    decodes: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillSpan] = field(default_factory=list)
    _masks: dict = field(default_factory=dict)  # built once per step, reused by every layer

    def decode_mask(self, g: int, window: int | None) -> torch.Tensor:
        key = ("decode", g, window)
        if key not in self._masks:
            group = self.decodes[g]
            pos = torch.arange(group.slots.shape[1], device=group.slots.device)
            q_pos = (group.lens - 1)[:, None]
            mask = pos[None, :] <= q_pos
            if window:
                mask &= pos[None, :] > q_pos - window
            self._masks[key] = mask[:, None, None, :]  # [Rd, 1, 1, max_len]
        return self._masks[key]

    def prefill_mask(self, i: int, window: int | None, groups: int = 1) -> torch.Tensor:
        """Causal mask for span i, its rows tiled `groups` times for folded GQA heads (see _sdpa)."""
        key = (i, window, groups)
        if key not in self._masks:
            span = self.prefills[i]
            pos = torch.arange(span.kv_slots.shape[0], device=span.kv_slots.device)
            mask = pos[None, :] <= span.q_positions[:, None]  # causal, offset by what is cached
            if window:
                mask &= pos[None, :] > span.q_positions[:, None] - window
            self._masks[key] = mask.repeat(groups, 1)[None, None]  # [1, 1, groups·q_len, context_len]
        return self._masks[key]


def _gather(pool: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """pool [S, Hkv, D] at slots [R, L] → [R, L, Hkv, D]."""
    return pool.index_select(0, slots.reshape(-1)).view(*slots.shape, *pool.shape[1:])


def _sdpa(q, k, v, mask, scaling, groups):
    """Grouped-query attention without copying K/V: the `groups` query heads that share a KV
    head are folded into the query-length axis (q [B, H, n, D] → [B, Hkv, groups·n, D])."""
    if groups == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    b, h, n, d = q.shape
    folded = q.reshape(b, h // groups, groups * n, d)
    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask, scale=scaling)
    return out.reshape(b, h, n, d)


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query [1, H, T, D], key/value [1, Hkv, T, D] → (output [1, T, H, D], None)."""
    meta: StepMetadata = kwargs["paged_step"]
    layer = module.layer_idx
    k_pool, v_pool = meta.kv.k[layer], meta.kv.v[layer]
    # index_copy_/index_select rather than tensor[idx]: several times faster for these gathers.
    k_pool.index_copy_(0, meta.slot_mapping, key[0].transpose(0, 1).to(k_pool.dtype))
    v_pool.index_copy_(0, meta.slot_mapping, value[0].transpose(0, 1).to(v_pool.dtype))

    q = query[0]  # [H, T, D]
    groups = q.shape[0] // k_pool.shape[1]
    window = kwargs.get("sliding_window") or None
    out = torch.empty_like(q)
    for g, group in enumerate(meta.decodes):
        qd = q[:, group.q_idx].transpose(0, 1)[:, :, None]  # [Rd, H, 1, D]
        kd = _gather(k_pool, group.slots).permute(0, 2, 1, 3)  # [Rd, Hkv, max_len, D]
        vd = _gather(v_pool, group.slots).permute(0, 2, 1, 3)
        o = _sdpa(qd, kd, vd, meta.decode_mask(g, window), scaling, groups)  # [Rd, H, 1, D]
        out[:, group.q_idx] = o[:, :, 0].transpose(0, 1).to(out.dtype)
    for i, span in enumerate(meta.prefills):
        qp = q[None, :, span.q_start : span.q_end]  # [1, H, n, D]
        kp = k_pool.index_select(0, span.kv_slots).transpose(0, 1)[None]  # [1, Hkv, L, D]
        vp = v_pool.index_select(0, span.kv_slots).transpose(0, 1)[None]
        o = _sdpa(qp, kp, vp, meta.prefill_mask(i, window, groups), scaling, groups)
        out[:, span.q_start : span.q_end] = o[0].to(out.dtype)
    return out.transpose(0, 1)[None].contiguous(), None


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
