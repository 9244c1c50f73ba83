"""Paged attention: one layer's attention for a whole step, called by the engine's own forward
(engine/fused_llama.py) and, for other architectures, registered with transformers'
AttentionInterface (step metadata arrives as the `paged_step` forward kwarg, so several engines,
each with its own pool, can share one set of weights).

It writes the step's K/V into the pool by slot mapping, then reads each request's K/V back
through its block table. Each layer's pool is [2 · kv_heads, slots, head_dim] (K heads, then V
heads; slot = block · block_size + offset). Decodes go to the C++ kernel when there is one
(engine/cpu_attention.py): each request's blocks are read in place. Otherwise, and for prompt
chunks, gathering whole blocks of R requests gives [2 · kv_heads, R, context, head_dim] with no
further copy, and SDPA takes that as batch = kv_heads, heads = requests: every request attends
its own context in one call. The requests of a step are attended in a few such groups (see
AttnGroup), whose index tensors and masks are made once per step and reused by every layer.
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from engine.cpu_attention import decode_attention

ATTN_IMPLEMENTATION = "engine_paged"


@dataclass(slots=True)
class AttnGroup:
    """Requests attended in one SDPA call: each one's new tokens padded to `q_len` queries and
    its context to `num_blocks` whole blocks (padding points at block 0 and is masked out)."""

    rows: int  # requests in the group
    q_len: int  # the longest run of new tokens among them (1 for a group of decodes)
    num_blocks: int  # the longest context among them, in blocks
    q_idx: torch.Tensor  # [rows · q_len] each padded query's token in the flattened step (padding → 0)
    q_pos: torch.Tensor  # [rows, q_len] each padded query's position in its sequence (padding → 0)
    blocks: torch.Tensor  # [2 · kv_heads · rows · num_blocks] rows of the pool viewed [2 · kv_heads · blocks, block]:
    # the block table rows (padded with block 0) once per K and V head, offset by head · num_blocks
    table: torch.Tensor  # [rows, num_blocks] the block tables themselves (for the decode kernel)
    out_idx: torch.Tensor  # [n] the real queries' tokens in the step, in padded order
    keep: torch.Tensor | None  # [n] where those sit among the rows · q_len padded ones (None: all real)


@dataclass(slots=True)
class StepMetadata:
    kv: object  # KVCache
    slot_mapping: torch.Tensor  # [T] where each new token's K/V goes
    groups: list[AttnGroup] = field(default_factory=list)
    positions: torch.Tensor | None = None  # [max context] 0, 1, 2, … shared by the masks
    dtype: torch.dtype = torch.float32  # the pool's, which the queries are cast to
    decode_kernel: object = None  # engine/cpu_attention.py's kernel, for groups of decodes; None → SDPA
    _masks: dict = field(default_factory=dict)  # built once per step, reused by every layer

    def mask(self, i: int, window: int | None, heads_per_kv: int) -> torch.Tensor:
        """[1, rows, heads_per_kv · q_len, context]: 0 where a query may look, -inf elsewhere.
        Causal (offset by what is cached), inside the sliding window if the layer has one. A
        padded query sits at position 0, so it sees one key and no row is all -inf."""
        key = (i, window, heads_per_kv)
        if key not in self._masks:
            g = self.groups[i]
            pos = self.positions[: g.num_blocks * self.kv.block_size]
            q_pos = g.q_pos[:, :, None]
            mask = pos <= q_pos  # [rows, q_len, context]
            if window:
                mask &= pos > q_pos - window
            if g.q_len > 1 and heads_per_kv > 1:  # the folded heads (see paged_attention)
                mask = mask[:, None].expand(-1, heads_per_kv, -1, -1).reshape(g.rows, heads_per_kv * g.q_len, -1)
            # Additive (0 / -inf) in the query's dtype: SDPA would otherwise convert a boolean
            # mask this same way in every layer.
            bias = torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
            self._masks[key] = bias[None]
        return self._masks[key]


def paged_attention(meta: StepMetadata, layer: int, q: torch.Tensor, kv: torch.Tensor,
                    scaling: float | None, window: int | None, pad_to: int | None = None) -> torch.Tensor:
    """One layer's attention for the whole step: q [T, H, D] and the step's kv [2 · Hkv, T, D]
    (K heads, then V heads; any strides) → [T, H, D], or [pad_to, H, D] with the rows past T zero
    (the caller's padding). Writes the step's K/V into the pool first, then attends group by group."""
    pool = meta.kv.kv[layer]  # [2 · Hkv, slots, D]
    pool.index_copy_(1, meta.slot_mapping, kv.to(pool.dtype))

    hkv, d = pool.shape[0] // 2, pool.shape[2]
    t, h = q.shape[0], q.shape[1]
    g = h // hkv  # query heads per KV head (grouped-query attention)
    # Gathering rows of a 2-D view copies whole blocks at memory speed (dim 1 of the 3-D pool is
    # ~3× slower on a CPU); AttnGroup.blocks already holds each K and V head's rows.
    blocks = pool.view(2 * hkv * meta.kv.num_blocks, -1)
    out = q.new_empty(pad_to or t, h, d)
    if pad_to and pad_to > t:
        out[t:].zero_()
    for i, grp in enumerate(meta.groups):
        rows, n = grp.rows, grp.q_len
        if n == 1 and meta.decode_kernel is not None:  # decodes: read the blocks in place
            decode_attention(meta.decode_kernel, q, out, grp.q_idx, pool, grp.table, grp.q_pos.view(rows),
                             meta.kv.block_size, scaling if scaling is not None else d ** -0.5, window)
            continue
        # The g query heads that share a KV head are folded into the query axis, so K/V are
        # never repeated: q [Hkv, rows, g · q_len, D] against k [Hkv, rows, context, D].
        qg = q.index_select(0, grp.q_idx).view(rows, n, hkv, g, d).permute(2, 0, 3, 1, 4).reshape(hkv, rows, g * n, d)
        kvg = blocks.index_select(0, grp.blocks).view(2 * hkv, rows, -1, d)
        o = F.scaled_dot_product_attention(qg.to(kvg.dtype), kvg[:hkv], kvg[hkv:], attn_mask=meta.mask(i, window, g),
                                           scale=scaling)
        o = o.view(hkv, rows, g, n, d).permute(1, 3, 0, 2, 4).reshape(rows * n, h, d)
        if grp.keep is not None:
            o = o.index_select(0, grp.keep)
        out.index_copy_(0, grp.out_idx, o.to(out.dtype))
    return out


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query [1, H, T, D], key/value [1, Hkv, T, D] →
    (output [1, T, H, D], None)."""
    out = paged_attention(kwargs["paged_step"], module.layer_idx, query[0].transpose(0, 1), torch.cat((key[0], value[0])),
                          scaling, kwargs.get("sliding_window") or None)
    return out[None], None


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
# The compiled path (EngineConfig.compile) runs each decoder layer compiled around this one call:
# its index math changes shape with every step's groups, so dynamo leaves it to run eagerly.
COMPILED_ATTN_IMPLEMENTATION = "engine_paged_compiled"
AttentionInterface.register(COMPILED_ATTN_IMPLEMENTATION, torch.compiler.disable(paged_attention_forward))
