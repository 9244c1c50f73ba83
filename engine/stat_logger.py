"""The server log a learner greps in §6, as vLLM writes it.

V1 (the reference) writes one stats line every `interval_s` while there is work — and one more
after it stops — and nothing when it preempts: the counter vllm:num_preemptions_total is the
signal. V0 warned on the 1st preemption and every 50th after; that warning is kept as a labelled
option (`v0_preemption_warnings`) so the lesson can show the history next to the counter.

Lines go to Python logging (logger "engine.stats", so a server's console shows them) and into a
bounded buffer a page can read back (`since`).
"""
import logging
import time
from collections import deque
from dataclasses import dataclass

from engine.metrics import MetricsSnapshot

logger = logging.getLogger("engine.stats")

V0_PREEMPTION_WARNING = (
    "Sequence group %s is preempted by PreemptionMode.%s mode because there is not enough KV cache space. "
    "This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
    "provide more KV cache memory. total_num_cumulative_preemption=%d"
)
V0_WARN_EVERY = 50  # V0 printed the 1st, 51st, 101st … preemption


@dataclass(slots=True)
class LogEntry:
    time: float  # wall clock (time.time())
    level: str  # "INFO" | "WARNING"
    source: str  # the vLLM file that writes such a line
    text: str
    kind: str  # "stats" (V1) | "v0_preemption" (V0, history)

    def line(self) -> str:
        """vLLM's console layout: `INFO 12-01 15:08:25 [loggers.py] Engine 000: …`."""
        return f"{self.level} {time.strftime('%m-%d %H:%M:%S', time.localtime(self.time))} [{self.source}] {self.text}"

    def to_dict(self) -> dict:
        return {"time": self.time, "kind": self.kind, "line": self.line()}


class StatLogger:
    def __init__(self, interval_s: float = 10.0, engine_index: int = 0, v0_preemption_warnings: bool = False,
                 keep: int = 1000):
        self.interval_s = interval_s
        self.engine_index = engine_index
        self.v0_preemption_warnings = v0_preemption_warnings
        self.entries: deque[LogEntry] = deque(maxlen=keep)
        self._last_at = time.monotonic()
        self._last_prompt = self._last_generation = 0
        self._was_idle = True
        self._preemptions = 0

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - self._last_at >= self.interval_s

    def log_stats(self, snap: MetricsSnapshot, now: float | None = None) -> LogEntry | None:
        """V1's line with the throughput over the interval since the last call; an idle interval
        that follows an idle one is not written (V1 keeps an idle server's log quiet too)."""
        now = time.monotonic() if now is None else now
        span = max(now - self._last_at, 1e-6)
        prompt_tp = (snap.prompt_tokens_total - self._last_prompt) / span
        generation_tp = (snap.generation_tokens_total - self._last_generation) / span
        self._last_at, self._last_prompt, self._last_generation = now, snap.prompt_tokens_total, snap.generation_tokens_total
        idle = not (prompt_tp or generation_tp or snap.num_requests_running or snap.num_requests_waiting)
        if idle and self._was_idle:
            return None
        self._was_idle = idle
        return self._write("INFO", "loggers.py", snap.log_line(self.engine_index, prompt_tp, generation_tp), "stats")

    def on_preempted(self, preempted: list[dict]) -> None:
        """A step's preemptions ({request_id, mode}); written only with the V0 option on."""
        for item in preempted:
            self._preemptions += 1
            if self.v0_preemption_warnings and self._preemptions % V0_WARN_EVERY == 1:
                self._write("WARNING", "scheduler.py", V0_PREEMPTION_WARNING % (
                    item["request_id"], item["mode"].upper(), self._preemptions), "v0_preemption")

    def since(self, wall_time: float = 0.0) -> list[LogEntry]:
        return [entry for entry in list(self.entries) if entry.time >= wall_time]

    def _write(self, level: str, source: str, text: str, kind: str) -> LogEntry:
        entry = LogEntry(time.time(), level, source, text, kind)
        self.entries.append(entry)
        logger.log(logging.WARNING if level == "WARNING" else logging.INFO, text)
        return entry
