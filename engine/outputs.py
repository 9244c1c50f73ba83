"""What the engine hands back for a request (vLLM's RequestOutput, trimmed)."""
from dataclasses import dataclass

from engine.request import Request, Status

FINISH_REASONS = {Status.FINISHED_STOPPED: "stop", Status.FINISHED_LENGTH: "length", Status.FINISHED_ABORTED: "abort"}


@dataclass(slots=True)
class RequestMetrics:
    arrival_time: float
    first_token_time: float | None
    finish_time: float | None
    queue_time: float | None  # seconds from arrival to first being scheduled
    ttft: float | None  # seconds from arrival to the first generated token
    e2e: float | None
    mean_itl: float | None  # mean gap between generated tokens
    num_cached_tokens: int  # prompt tokens served by the prefix cache
    num_preemptions: int


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    stop_reason: str | int | None
    metrics: RequestMetrics
    logprobs: list | None = None  # logits_processors.TokenLogprob per token, when asked (SamplingParams.logprobs)
    prompt_logprobs: list | None = None  # [None, TokenLogprob…] over the prompt, when asked

    @classmethod
    def of(cls, req: Request, text: str | None = None) -> "RequestOutput":
        gaps = [b - a for a, b in zip(req.token_times, req.token_times[1:])]
        return cls(
            request_id=req.request_id,
            prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids,  # the prompt never changes: shared, not copied per token
            token_ids=list(req.output_token_ids),
            text=req.text if text is None else text,
            finished=req.status.finished,
            finish_reason=FINISH_REASONS.get(req.status),
            stop_reason=req.stop_reason,
            metrics=RequestMetrics(
                arrival_time=req.arrival_time,
                first_token_time=req.first_token_time,
                finish_time=req.finish_time,
                queue_time=None if req.first_scheduled_time is None else req.first_scheduled_time - req.arrival_time,
                ttft=None if req.first_token_time is None else req.first_token_time - req.arrival_time,
                e2e=None if req.finish_time is None else req.finish_time - req.arrival_time,
                mean_itl=sum(gaps) / len(gaps) if gaps else None,
                num_cached_tokens=req.num_cached_tokens,
                num_preemptions=req.num_preemptions,
            ),
            logprobs=None if req.params.logprobs is None else list(req.logprobs),
            prompt_logprobs=None if req.params.prompt_logprobs is None else list(req.prompt_logprobs),
        )
