"""Rate limits (the demo's, the lab's, class joins, the grading API's tokens), counted in the
"limits" cache: this process's memory with one process, files shared by the server's HTTP worker
processes, or Redis when scaled (settings: CACHES).

A sliding window, approximated the usual way from two fixed windows: the previous window's
count, weighted by how much of it still lies within the last `window` seconds, plus the
current window's count. A single fixed window would let twice the limit through around its
boundary (12 prompts in 3 s against "6 a minute").
"""
import time

from django.core.cache import caches


def _cache():
    return caches["limits"]


def _keys(key: str, window: int, now: float) -> tuple[str, str, float]:
    index = int(now // window)
    return f"demo-rate:{key}:{index}", f"demo-rate:{key}:{index - 1}", (now % window) / window


def _estimate(key: str, window: int, now: float) -> tuple[str, float]:
    current, previous, elapsed = _keys(key, window, now)
    return current, _cache().get(previous, 0) * (1 - elapsed)


def hit(*, key: str, limit: int, window: int) -> bool:
    """Count one event if it keeps within `limit` per `window` seconds; False (and not
    counted) if it would go over."""
    current, earlier = _estimate(key, window, time.time())
    _cache().add(current, 0, timeout=2 * window)
    count = _cache().incr(current)
    if earlier + count > limit:
        _cache().decr(current)
        return False
    return True


def over(*, key: str, limit: int, window: int) -> bool:
    """Whether `limit` events already happened in the last `window` seconds (nothing counted)."""
    current, earlier = _estimate(key, window, time.time())
    return earlier + _cache().get(current, 0) >= limit


def add(*, key: str, window: int) -> None:
    """Count an event that is refused anyway (e.g. a wrong join code)."""
    current, _, _ = _keys(key, window, time.time())
    _cache().add(current, 0, timeout=2 * window)
    _cache().incr(current)
