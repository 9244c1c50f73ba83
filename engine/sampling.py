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
    """One next token per row of logits [R, V], each row under its own request's parameters.

    Batched: the sampled rows are scaled, filtered and normalised together; only the draw is
    per row for a request with its own seed, so it gets the tokens it would get alone."""
    logits = logits.float()
    out = logits.argmax(dim=-1).tolist()  # pragma: no mutate (dim=+1 is the same axis of [R, V])
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if not rows:
        return out
    chosen = [params[i] for i in rows]
    dev, vocab = logits.device, logits.shape[-1]
    x = logits[rows] / torch.tensor([p.temperature for p in chosen], device=dev)[:, None]
    if any(p.top_k for p in chosen):
        k = torch.tensor([min(p.top_k, vocab) if p.top_k else vocab for p in chosen], device=dev)
        kth = x.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
        x = x.masked_fill(x < kth, float("-inf"))  # pragma: no mutate ("-INF" is -inf too)
    if any(p.top_p < 1.0 for p in chosen):  # pragma: no mutate (with top_p = 1 the filter below drops nothing)
        top_p = torch.tensor([p.top_p for p in chosen], device=dev)[:, None]
        sorted_x, order = x.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays): a
        # token goes once the more likely ones before it hold top_p, as vLLM's sampler does;
        # rows at top_p = 1 keep everything (float rounding could otherwise reach 1.0 early)
        drop = (probs.cumsum(-1) - probs >= top_p) & (top_p < 1.0)
        x = x.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), float("-inf"))  # pragma: no mutate
    probs = torch.softmax(x, dim=-1)
    shared = [j for j, i in enumerate(rows) if generators[i] is None]
    if shared:  # requests without a seed draw together from the process's generator
        for j, token in zip(shared, torch.multinomial(probs[shared], 1).view(-1).tolist()):
            out[rows[j]] = token
    for j, i in enumerate(rows):
        if generators[i] is not None:
            out[i] = int(torch.multinomial(probs[j], 1, generator=generators[i]).item())
    return out
