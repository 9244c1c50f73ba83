"""Per-request sampling parameters and the batched sampler.

The order is vLLM V1's (vllm/v1/sample/sampler.py): the raw logits give the logprobs a request
asks for; then logit_bias and min_tokens, then the repetition, frequency and presence penalties
(engine/logits_processors.py); greedy takes the argmax of that; the others are divided by their
temperature, cut by min_p, top-k and top-p, and drawn from.
"""
from dataclasses import dataclass, field, fields

import torch


class SamplingError(ValueError):
    """A parameter out of its range; `param` names it (the API's 400 says which)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


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
    min_p: float = 0.0  # drop tokens less likely than min_p × the likeliest one
    presence_penalty: float = 0.0  # minus this for every token the answer already holds
    frequency_penalty: float = 0.0  # minus this × how often the answer holds it
    repetition_penalty: float = 1.0  # HF/CTRL's: a seen token's (prompt or answer) logit ÷ this if positive, × if not
    min_tokens: int = 0  # EOS and stop_token_ids are masked, stop strings not checked, before this many
    logit_bias: dict[int, float] | None = None  # token id → added to its logit
    logprobs: int | None = None  # None: none; k: each generated token's logprob and the k likeliest
    prompt_logprobs: int | None = None  # the same for each prompt token (the first has none)

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise SamplingError(f"{name} must be in [-2, 2], got {getattr(self, name)}", name)
        if not self.repetition_penalty > 0:
            raise SamplingError(f"repetition_penalty must be > 0, got {self.repetition_penalty}", "repetition_penalty")
        if not 0.0 <= self.min_p <= 1.0:
            raise SamplingError(f"min_p must be in [0, 1], got {self.min_p}", "min_p")
        if not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise SamplingError(f"min_tokens must be an integer ≥ 0, got {self.min_tokens!r}", "min_tokens")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise SamplingError(f"{name} must be an integer ≥ 0, got {value!r}", name)
        if self.logit_bias:
            self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise SamplingError(f"max_tokens must be a positive integer, got {self.max_tokens!r}", "max_tokens")
        if self.temperature < 0:
            raise SamplingError(f"temperature must be ≥ 0, got {self.temperature}", "temperature")
        if not 0 < self.top_p <= 1:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        if self.top_k < 0:
            raise SamplingError(f"top_k must be ≥ 0, got {self.top_k}", "top_k")

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

    @property
    def penalised(self) -> bool:
        """Whether the logits need the request's history (engine/logits_processors.py)."""
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)


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
    if any(p.min_p for p in chosen):  # relative to the likeliest token, after temperature (vLLM's MinPLogitsProcessor)
        min_p = torch.tensor([p.min_p for p in chosen], device=dev)[:, None]
        probs = torch.softmax(x, dim=-1)
        x = x.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, float("-inf"))
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
