"""The API's limit: a caller past it is told when to come back; other callers are not held up."""
import pytest

from courseapp.serving.asgi import RateLimit, _caller
from courseapp.serving.protocol import ApiError


def test_a_sliding_window_per_caller_with_the_wait_in_seconds():
    limit = RateLimit(3, 60)
    for t in (0, 10, 20):
        limit.check("a", now=t)
    with pytest.raises(ApiError) as caught:
        limit.check("a", now=30)
    assert (caught.value.status, caught.value.retry_after) == (429, 30)  # the call at t=0 leaves the window at 60
    assert caught.value.body()["error"]["type"] == "rate_limit_error"
    limit.check("b", now=30)  # someone else
    limit.check("a", now=60.5)  # the first call has left the window


def test_callers_are_told_apart_by_key_else_address():
    by_key = {"type": "http", "headers": [(b"authorization", b"Bearer one")], "client": ("10.0.0.1", 1)}
    other_key = {"type": "http", "headers": [(b"authorization", b"Bearer two")], "client": ("10.0.0.1", 2)}
    no_key = {"type": "http", "headers": [], "client": ("10.0.0.1", 3)}
    assert len({_caller(by_key), _caller(other_key), _caller(no_key)}) == 3
    assert "one" not in _caller(by_key)  # the key itself is not kept


def test_forgetting_quiet_callers_keeps_memory_bounded():
    limit = RateLimit(1, 10, max_callers=100)
    for i in range(1000):
        limit.check(f"c{i}", now=i * 1.0)
    assert len(limit.calls) <= 100 + 10
