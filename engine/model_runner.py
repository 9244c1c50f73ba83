"""Loads the model once per process and runs one flattened forward per step.

Every scheduled token of every request goes into one flattened batch with explicit positions;
the paged attention (engine/attention.py) finds each request's K/V through the step metadata.
The forward is the engine's own for Llama-family models (engine/fused_llama.py), transformers'
for the rest.
"""
import copy
import logging
import threading
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import attention  # noqa: F401  (registers the attention implementation)
from engine import cpu_attention
from engine.config import ConfigError
from engine.attention import ATTN_IMPLEMENTATION, COMPILED_ATTN_IMPLEMENTATION, AttnGroup, StepMetadata
from engine.fused_llama import FusedLlama, supports
from engine.kv_cache import KVCache, KVShape, text_config
from engine.request import Request

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass(slots=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    shape: KVShape
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    eos_token_ids: frozenset[int]
    # the engine's own forward (engine/fused_llama.py) when the architecture has one; None →
    # transformers' forward with the paged attention plugged in
    fused: FusedLlama | None = None


_loaded: dict[tuple, LoadedModel] = {}
_load_lock = threading.Lock()


def pick_device(device: str | None, dtype: str | None) -> tuple[torch.device, torch.dtype]:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dtype is None:
        return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    return dev, _DTYPES[dtype]


def load_model(path: str, device: str | None = None, dtype: str | None = None) -> LoadedModel:
    """Load weights once per (path, device, dtype) in this process; engines share them."""
    dev, dt = pick_device(device, dtype)
    key = (str(path), str(dev), str(dt))
    with _load_lock:
        if key not in _loaded:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, local_files_only=True)
            has_tokenizer = any((Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True) if has_tokenizer else None
            _loaded[key] = wrap_model(model.to(dev).eval(), tokenizer)
        return _loaded[key]


def wrap_model(model, tokenizer=None) -> LoadedModel:
    """Adopt an already-built model (tests use tiny random ones). Its attention becomes paged."""
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    config = text_config(model.config)
    eos = getattr(model.generation_config, "eos_token_id", None) or getattr(config, "eos_token_id", None)
    eos_ids = frozenset(eos if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else []))
    param = next(model.parameters())
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        shape=KVShape.from_config(model.config),
        device=param.device,
        dtype=param.dtype,
        max_model_len=int(getattr(config, "max_position_embeddings", 2048)),
        eos_token_ids=eos_ids,
        fused=FusedLlama(model) if supports(model) else None,
    )


_compiled: "weakref.WeakKeyDictionary[torch.nn.Module, LoadedModel]" = weakref.WeakKeyDictionary()


def compiled(loaded: LoadedModel) -> LoadedModel:
    """The same model with each decoder layer, the final norm and the LM head compiled by
    torch.compile (inductor), made once per model and process (EngineConfig.compile).

    A copy of the weights of its own: engines on the eager path keep theirs untouched. Each layer
    compiles as two graphs, before and after the paged attention, which runs eagerly between them
    (its index math changes shape with every step); what a graph holds — RMSNorm, the Q/K/V and
    output projections, rotary embedding, the MLP — runs as fused kernels. Token counts vary per
    step, so shapes are dynamic (one compile serves every step size)."""
    with _load_lock:
        if loaded.model not in _compiled:
            model = copy.deepcopy(loaded.model)
            model.set_attn_implementation(COMPILED_ATTN_IMPLEMENTATION)
            layers = model.model.layers
            for module in (*layers, model.model.norm, model.lm_head):
                module.compile(dynamic=True)
            # The layers share one forward (and one resume function after the attention): dynamo
            # keeps a compiled entry per layer object, more than its default limit of 8 in a
            # model of more than a few layers, past which it would quietly run them eagerly.
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * len(layers) + 8)
            _compiled[loaded.model] = replace(loaded, model=model, fused=None)
        return _compiled[loaded.model]


_kernel_warned = False


def decode_kernel(backend: str, loaded: LoadedModel, block_size: int):
    """The C++ decode-attention kernel for EngineConfig.attention_backend, or None for SDPA.

    "cpu_paged" insists (ConfigError when it cannot run here); "auto" falls back to SDPA, saying
    why once per process."""
    global _kernel_warned
    if backend == "torch_sdpa":
        return None
    shape = loaded.shape
    heads = text_config(loaded.model.config).num_attention_heads
    if not cpu_attention.usable(loaded.device, loaded.dtype, heads, shape.num_kv_heads, shape.head_dim, block_size):
        if backend == "cpu_paged":
            raise ConfigError(f"attention_backend='cpu_paged' runs on the CPU in float32 with at most "
                              f"{cpu_attention.MAX_BLOCK}-token blocks; this engine has {loaded.device}, {loaded.dtype}, "
                              f"blocks of {block_size}")
        return None
    try:
        return cpu_attention.load()
    except cpu_attention.KernelUnavailable as exc:
        if backend == "cpu_paged":
            raise ConfigError(f"attention_backend='cpu_paged': {exc}") from exc
        if not _kernel_warned:
            _kernel_warned = True
            logger.warning("decode attention falls back to SDPA: %s", exc)
        return None


# A request with at most this many new tokens in a step goes to the decode kernel, one query per
# token, instead of gathering its whole context for SDPA (8 requests over a cached 608-token
# prefix: a first step of 9.8 ms of CPU became 4.4 ms, measured with the engine alone on one thread).
KERNEL_MAX_QUERIES = 16
PADDING_LIMIT = 1.3  # a group's padded attention work may be at most this multiple of its real work


def _groups(items: list[tuple[int, int]], max_groups: int) -> list[list[int]]:
    """Split requests, given as (new tokens, context length), into groups attended together.

    A group pads every member to its longest run of new tokens and its longest context, so a
    request joins the group before it only while the padded work stays within PADDING_LIMIT
    times the real work; each group costs a few calls per layer, so there are at most
    `max_groups`."""
    order = sorted(range(len(items)), key=items.__getitem__)
    groups: list[list[int]] = []
    real = longest_q = longest_ctx = 0
    for i in order:
        n, ctx = items[i]
        if groups:
            q, c = max(longest_q, n), max(longest_ctx, ctx)
            if len(groups) == max_groups or (len(groups[-1]) + 1) * q * c <= PADDING_LIMIT * (real + n * ctx):
                groups[-1].append(i)
                real, longest_q, longest_ctx = real + n * ctx, q, c
                continue
        groups.append([i])
        real, longest_q, longest_ctx = n * ctx, n, ctx
    return groups


def _tokens(req: Request, start: int, end: int) -> list[int]:
    """req.all_token_ids[start:end] without concatenating the whole history (a decode needs one)."""
    prompt = req.prompt_token_ids
    if start >= len(prompt):
        return req.output_token_ids[start - len(prompt): end - len(prompt)]
    if end <= len(prompt):
        return prompt[start:end]
    return prompt[start:] + req.output_token_ids[: end - len(prompt)]


class ModelRunner:
    """Builds each step's metadata — token ids, positions, slot mapping, the sampled rows and
    every attention group's indices — as one Python list turned into one tensor, then runs the
    model once over the flattened step."""

    MAX_DECODE_GROUPS = 4
    MAX_PREFILL_GROUPS = 2

    def __init__(self, loaded: LoadedModel, kv: KVCache, decode_kernel=None, warm_up: tuple[int, int] | None = None):
        """warm_up: (tokens, requests) a step may hold at most; the packed matmuls' kernels for
        those sizes are built now rather than in the first steps that need them."""
        self.loaded = loaded
        self.kv = kv
        self.decode_kernel = decode_kernel  # see EngineConfig.attention_backend
        if loaded.fused is not None and warm_up is not None:
            loaded.fused.warm_up(*warm_up)
        self.block_size = kv.block_size
        self.device = loaded.device
        self._positions = torch.arange(kv.num_blocks * kv.block_size, device=self.device)
        self._head_rows = torch.arange(2 * kv.shape.num_kv_heads, device=self.device)[:, None] * kv.num_blocks

    @torch.inference_mode()
    def execute(self, batch: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor, list]:
        """Run one step. Returns the requests that reached their last token, the logits [R + P, V]
        of their last tokens and then of the prompt positions asked for, and those asks:
        (request, first position, count), in order after the R sampled rows."""
        meta, ids, positions, sample_reqs, rows, prompt_spans = self.prepare(batch)
        if self.loaded.fused is not None:
            return sample_reqs, self.loaded.fused(ids, positions, meta, rows), prompt_spans
        out = self.loaded.model(
            input_ids=ids[None], position_ids=positions[None], paged_step=meta, logits_to_keep=rows,
            use_cache=False,
        )
        return sample_reqs, out.logits[0], prompt_spans

    def prepare(self, batch: list[tuple[Request, int]]):
        """(StepMetadata, token ids [T], positions [T], requests to sample, the rows whose logits
        are kept: theirs, then the prompt positions whose logprobs are asked for, those asks)."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        spans = []  # (first token in the step, new tokens, context length, block table)
        sample_reqs, sample_idx = [], []
        prompt_spans, prompt_idx = [], []
        for req, n in batch:
            start, t = req.num_computed_tokens, len(ids)
            end = start + n
            ids += _tokens(req, start, end)
            positions += range(start, end)
            table = req.block_ids
            for b in range(start // bs, (end - 1) // bs + 1):  # slots, one run per block touched
                base = table[b] * bs - b * bs
                slots += range(base + max(start, b * bs), base + min(end, (b + 1) * bs))
            spans.append((t, n, end, table))
            if end == req.num_tokens:  # caught up: this step's last logits give the next token
                sample_reqs.append(req)
                sample_idx.append(t + n - 1)
            if req.prompt_logprobs_pending:  # position p's logits score prompt token p + 1
                first = max(start, len(req.prompt_logprobs) - 1)
                last = min(end, req.num_prompt_tokens - 1)
                if last > first:
                    prompt_spans.append((req, first, last - first))
                    prompt_idx += range(t + first - start, t + last - start)
        sample_idx += prompt_idx

        buf = ids + positions + slots + sample_idx
        kernel = self.decode_kernel is not None
        decodes, prefills = [], []
        for span in spans:
            t, n, end, table = span
            if n == 1:
                decodes.append(span)
            elif kernel and n <= KERNEL_MAX_QUERIES:
                # A few new tokens over a long context (a prompt whose prefix was cached, a chunk's
                # tail): each is a query of its own for the kernel, seeing the keys up to itself.
                decodes += [(t + k, 1, end - n + k + 1, table) for k in range(n)]
            else:
                prefills.append(span)
        layout = []  # per group: (rows, q_len, num_blocks, how many of the real queries)
        for members, cap in ((decodes, self.MAX_DECODE_GROUPS), (prefills, self.MAX_PREFILL_GROUPS)):
            if members is decodes and kernel:
                # the kernel reads each request's own blocks: nothing is padded, so one group
                split = [list(range(len(decodes)))] if decodes else []
            else:
                split = _groups([span[1:3] for span in members], cap)
            for group in split:
                rows = [members[j] for j in group]
                q_len = max(r[1] for r in rows)
                nb = -(-max(r[2] for r in rows) // bs)
                for t, n, end, table in rows:  # q_idx
                    buf += range(t, t + n)
                    buf += [0] * (q_len - n)
                for t, n, end, table in rows:  # q_pos
                    buf += range(end - n, end)
                    buf += [0] * (q_len - n)
                for t, n, end, table in rows:  # blocks
                    used = -(-end // bs)
                    buf += table[:used]
                    buf += [0] * (nb - used)
                for t, n, end, table in rows:  # out_idx
                    buf += range(t, t + n)
                real = sum(r[1] for r in rows)
                if q_len > 1:
                    for r, (t, n, end, table) in enumerate(rows):  # keep
                        buf += range(r * q_len, r * q_len + n)
                layout.append((len(rows), q_len, nb, real))

        flat = torch.tensor(buf, dtype=torch.long, device=self.device)  # the step's one host → device copy
        total = len(ids)
        ids_t, pos_t, slot_t, sample_t, rest = flat.split(
            [total, total, total, len(sample_idx), len(flat) - 3 * total - len(sample_idx)])
        meta = StepMetadata(kv=self.kv, slot_mapping=slot_t, positions=self._positions, dtype=self.kv.k[0].dtype,
                            decode_kernel=self.decode_kernel)
        at = 0
        for rows, q_len, nb, real in layout:
            sizes = [rows * q_len, rows * q_len, rows * nb, real, real if q_len > 1 else 0]
            q_idx, q_pos, blocks, out_idx, keep = rest[at: at + sum(sizes)].split(sizes)
            at += sum(sizes)
            meta.groups.append(AttnGroup(
                rows=rows, q_len=q_len, num_blocks=nb, q_idx=q_idx, q_pos=q_pos.view(rows, q_len),
                blocks=(self._head_rows + blocks).reshape(-1), table=blocks.view(rows, nb), out_idx=out_idx,
                keep=keep if q_len > 1 else None,
            ))
        return meta, ids_t, pos_t, sample_reqs, sample_t, prompt_spans
