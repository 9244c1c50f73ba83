"""One request's state as the scheduler sees it (vLLM's `Request`)."""
import enum
import time
from dataclasses import dataclass, field

import torch

from engine.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED_STOPPED = "finished_stopped"  # EOS, a stop token or a stop string
    FINISHED_LENGTH = "finished_length"  # max_tokens or max_model_len
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self.name.startswith("FINISHED")


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt: str | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    status: Status = Status.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    # Tokens whose K/V are in the pool. No prefill/decode phases: each step computes
    # [num_computed_tokens, num_computed_tokens + n) under the token budget.
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)  # the block table: logical i → physical block_ids[i]
    num_hashed_blocks: int = 0  # leading full blocks already registered in the prefix cache
    block_hashes: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache at admission
    num_preemptions: int = 0
    admitted_seq: int = -1  # admission order; the latest admitted is the preemption victim
    first_scheduled_time: float | None = None  # admitted the first time (queue time = this − arrival)
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    text: str = ""
    detokenizer: object | None = None  # engine.detokenizer.IncrementalDetokenizer, made at the first read
    stop_reason: str | int | None = None
    generator: torch.Generator | None = None
    cpu_block_ids: list[int] = field(default_factory=list)  # where a swapped-out request's KV waits
    logprobs: list = field(default_factory=list)  # a TokenLogprob per output token, when params.logprobs asks
    prompt_logprobs: list = field(default_factory=list)  # [None, TokenLogprob per later prompt token] when asked

    @property
    def prompt_logprobs_pending(self) -> bool:
        """Whether prompt logprobs are asked for and not all computed yet (a recompute after
        preemption does not compute them again)."""
        return self.params.prompt_logprobs is not None and len(self.prompt_logprobs) < self.num_prompt_tokens

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_prompt_tokens
