"""Counters and latency samples with vLLM's names, a snapshot at any time, and the periodic log line."""
import time
from collections import deque
from dataclasses import dataclass

# vLLM V1's periodic stats line (vllm/v1/metrics/loggers.py, LoggingStatLogger), word for word.
LOG_LINE = (
    "Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
    "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%"
)


@dataclass(slots=True)
class MetricsSnapshot:
    num_requests_running: int
    num_requests_waiting: int
    num_requests_swapped: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_blocks_cached: int  # unowned but kept for prefix hits
    kv_tokens_allocated: int  # slots in used blocks
    kv_tokens_used: int  # slots holding a token
    kv_cache_usage_perc: float  # 0–1, used blocks / all blocks (vLLM's gauge)
    wasted_slots: int  # allocated but empty (only each request's last block, with paging)
    prefix_cache_queries_total: int  # tokens
    prefix_cache_hits_total: int  # tokens
    num_preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    requests_finished_total: int
    prompt_throughput: float  # tokens/s over the recent window
    generation_throughput: float

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits_total / self.prefix_cache_queries_total if self.prefix_cache_queries_total else 0.0

    def log_line(self, engine_index: int = 0, prompt_throughput: float | None = None,
                 generation_throughput: float | None = None) -> str:
        """V1's line; the throughputs default to the recent window's (a logger passes its interval's)."""
        return LOG_LINE % (
            engine_index,
            self.prompt_throughput if prompt_throughput is None else prompt_throughput,
            self.generation_throughput if generation_throughput is None else generation_throughput,
            self.num_requests_running,
            self.num_requests_waiting,
            100 * self.kv_cache_usage_perc,
            100 * self.prefix_cache_hit_rate,
        )


class EngineMetrics:
    """Running totals plus recent per-request latencies (bounded, for histograms)."""

    def __init__(self, window_s: float = 10.0, keep: int = 10_000):
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_finished_total = 0
        self.ttft = deque(maxlen=keep)
        self.itl = deque(maxlen=keep)
        self.e2e = deque(maxlen=keep)
        self.window_s = window_s
        self._recent: deque[tuple[float, int, int]] = deque()  # (time, prompt tokens, generated tokens)
        self._recent_prompt = self._recent_generated = 0  # their sums, kept as steps come and go

    def on_step(self, prompt_tokens: int, generated_tokens: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.prompt_tokens_total += prompt_tokens
        self.generation_tokens_total += generated_tokens
        self._recent.append((now, prompt_tokens, generated_tokens))
        self._recent_prompt += prompt_tokens
        self._recent_generated += generated_tokens
        while self._recent and self._recent[0][0] < now - self.window_s:
            _, prompt, generated = self._recent.popleft()
            self._recent_prompt -= prompt
            self._recent_generated -= generated

    def on_finish(self, req) -> None:
        self.requests_finished_total += 1
        if req.first_token_time is not None:
            self.ttft.append(req.first_token_time - req.arrival_time)
            self.e2e.append(req.finish_time - req.arrival_time)
            times = req.token_times
            self.itl.extend(b - a for a, b in zip(times, times[1:]))

    def throughput(self, now: float | None = None) -> tuple[float, float]:
        now = time.monotonic() if now is None else now
        if not self._recent:
            return 0.0, 0.0
        span = max(now - self._recent[0][0], 1e-3)
        return self._recent_prompt / span, self._recent_generated / span
