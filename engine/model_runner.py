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


class ModelRunner:
    def __init__(self, loaded: LoadedModel, kv: KVCache):
        self.loaded = loaded
        self.kv = kv
        self.block_size = kv.block_size
        self.device = loaded.device

    def _context_slots(self, req: Request, length: int) -> torch.Tensor:
        blocks = torch.tensor(req.block_ids, dtype=torch.long, device=self.device)
        slots = blocks[:, None] * self.block_size + torch.arange(self.block_size, device=self.device)
        return slots.reshape(-1)[:length]

    def _decode_group(self, decode_q, decode_slots, decode_lens, rows) -> DecodeGroup:
        width = max(decode_lens[r] for r in rows)
        padded = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for i, r in enumerate(rows):
            padded[i, : decode_slots[r].numel()] = decode_slots[r]
        return DecodeGroup(
            q_idx=torch.tensor([decode_q[r] for r in rows], device=self.device),
            slots=padded,
            lens=torch.tensor([decode_lens[r] for r in rows], device=self.device),
        )

    @torch.inference_mode()
    def execute(self, batch: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """Run one step. Returns the requests that reached their last token and their logits [R, V]."""
        ids, positions, slot_lists = [], [], []
        decode_q, decode_slots, decode_lens = [], [], []
        prefills, sample_reqs, sample_idx = [], [], []
        t = 0
        for req, n in batch:
            start = req.num_computed_tokens
            end = start + n
            tokens = req.all_token_ids[start:end]
            slots = self._context_slots(req, end)
            ids.extend(tokens)
            positions.extend(range(start, end))
            slot_lists.append(slots[start:end])
            if n == 1:
                decode_q.append(t)
                decode_slots.append(slots)
                decode_lens.append(end)
            else:
                q_pos = torch.arange(start, end, device=self.device)
                prefills.append(PrefillSpan(t, t + n, slots, q_pos))
            if end == req.num_tokens:  # caught up: this step's last logits give the next token
                sample_reqs.append(req)
                sample_idx.append(t + n - 1)
            t += n

        meta = StepMetadata(kv=self.kv, slot_mapping=torch.cat(slot_lists), prefills=prefills)
        meta.decodes = [self._decode_group(decode_q, decode_slots, decode_lens, rows) for rows in _buckets(decode_lens)]

        out = self.loaded.model(
            input_ids=torch.tensor([ids], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            paged_step=meta,
            logits_to_keep=torch.tensor(sample_idx, dtype=torch.long, device=self.device),
            use_cache=False,
        )
        return sample_reqs, out.logits[0]
