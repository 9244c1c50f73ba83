"""Per-request sampling parameters and the batched sampler."""
from dataclasses import dataclass, field, fields

import torch


class SamplingError(ValueError):
    pass


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0  # 0 → greedy
    top_k: int = 0  # 0 → off
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise SamplingError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.temperature < 0:
            raise SamplingError(f"temperature must be ≥ 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SamplingError(f"top_k must be ≥ 0, got {self.top_k}")

    @classmethod
    def from_dict(cls, data: dict) -> "SamplingParams":
        """Build from user input, refusing unknown keys by name (a typo must not be ignored)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SamplingError(f"unknown sampling parameter(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """One next token per row of logits [R, V], each row under its own request's parameters."""
    logits = logits.float()
    out = []
    greedy = logits.argmax(dim=-1).tolist()  # pragma: no mutate (dim=+1 is the same axis of [R, V])
    for i, p in enumerate(params):
        if p.greedy:
            out.append(greedy[i])
            continue
        row = logits[i] / p.temperature
        if p.top_k:
            kth = torch.topk(row, min(p.top_k, row.numel())).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))  # pragma: no mutate ("-INF" is -inf too)
        if p.top_p < 1.0:  # pragma: no mutate (with top_p = 1 the filter below drops nothing)
            sorted_logits, order = torch.sort(row, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # keep the smallest prefix whose mass reaches top_p (the first token always stays): a
            # token goes once the more likely ones before it hold top_p, as vLLM's sampler does
            drop = probs.cumsum(-1) - probs >= p.top_p
            row = row.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))  # pragma: no mutate
        probs = torch.softmax(row, dim=-1)
        out.append(int(torch.multinomial(probs, 1, generator=generators[i]).item()))
    return out
