"""Loads the model once per process and runs one flattened forward per step.

Every scheduled token of every request goes into a single [1, T] batch with explicit
position ids; paged_attention_forward finds each request's K/V through the step metadata.
"""
import threading
from pathlib import Path
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import attention  # noqa: F401  (registers the attention implementation)
from engine.attention import ATTN_IMPLEMENTATION, DecodeGroup, PrefillSpan, StepMetadata
from engine.kv_cache import KVCache, KVShape
from engine.request import Request

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
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
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
    )


def _buckets(lengths: list[int], max_groups: int = 4) -> list[list[int]]:
    """Split decode rows into groups whose context lengths are within 2× of each other, so
    padding to the longest wastes little; few groups, since each costs one call per layer."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    for row in order:
        if groups and (lengths[row] <= 2 * lengths[groups[-1][0]] or len(groups) == max_groups):
            groups[-1].append(row)
        else:
            groups.append([row])
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
    """Builds each step's metadata as a few tensors — the batch's block table, positions and
    rows in one `torch.tensor` each, every slot computed from them by index arithmetic — rather
    than per request; the model then runs once over the flattened step."""

    def __init__(self, loaded: LoadedModel, kv: KVCache):
        self.loaded = loaded
        self.kv = kv
        self.block_size = kv.block_size
        self.device = loaded.device
        self._offsets = torch.arange(self.block_size, device=self.device)

    @torch.inference_mode()
    def execute(self, batch: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """Run one step. Returns the requests that reached their last token and their logits [R, V]."""
        bs, dev = self.block_size, self.device
        ids, positions, rows = [], [], []
        decode_q, decode_rows, decode_lens = [], [], []
        prefill_rows = []  # (row, q_start, start, end)
        sample_reqs, sample_idx = [], []
        width = max(len(req.block_ids) for req, _ in batch)
        table = []
        t = 0
        for r, (req, n) in enumerate(batch):
            start = req.num_computed_tokens
            end = start + n
            ids.extend(_tokens(req, start, end))
            positions.extend(range(start, end))
            rows.extend([r] * n)
            table.append(req.block_ids + [0] * (width - len(req.block_ids)))
            if n == 1:
                decode_q.append(t)
                decode_rows.append(r)
                decode_lens.append(end)
            else:
                prefill_rows.append((r, t, start, end))
            if end == req.num_tokens:  # caught up: this step's last logits give the next token
                sample_reqs.append(req)
                sample_idx.append(t + n - 1)
            t += n

        table_t = torch.tensor(table, dtype=torch.long, device=dev)  # [R, blocks]
        pos_t = torch.tensor(positions, dtype=torch.long, device=dev)
        rows_t = torch.tensor(rows, dtype=torch.long, device=dev)
        slot_mapping = table_t[rows_t, pos_t // bs] * bs + pos_t % bs
        meta = StepMetadata(kv=self.kv, slot_mapping=slot_mapping)
        for r, q_start, start, end in prefill_rows:
            blocks = -(-end // bs)
            kv_slots = (table_t[r, :blocks, None] * bs + self._offsets).reshape(-1)[:end]
            meta.prefills.append(PrefillSpan(q_start, q_start + end - start, kv_slots, pos_t[q_start: q_start + end - start]))
        for group in _buckets(decode_lens):
            longest = max(decode_lens[i] for i in group)
            context = torch.arange(longest, device=dev)
            group_rows = torch.tensor([decode_rows[i] for i in group], dtype=torch.long, device=dev)
            # Slots past a request's length point at block 0: valid memory, masked out by decode_mask.
            slots = table_t[group_rows][:, context // bs] * bs + context % bs
            meta.decodes.append(DecodeGroup(
                q_idx=torch.tensor([decode_q[i] for i in group], device=dev), slots=slots,
                lens=torch.tensor([decode_lens[i] for i in group], device=dev)))

        out = self.loaded.model(
            input_ids=torch.tensor([ids], device=dev),
            position_ids=pos_t[None],
            paged_step=meta,
            logits_to_keep=torch.tensor(sample_idx, dtype=torch.long, device=dev),
            use_cache=False,
        )
        return sample_reqs, out.logits[0]
