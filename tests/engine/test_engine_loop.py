"""The thread-safe front: submit from threads and event loops, stream, abort, watch events."""
import threading

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.engine_loop import EngineLoop
from engine.stat_logger import StatLogger
from tests.aio import run_in_fresh_loop
from tests.engine.conftest import reference_generate
from tests.engine.test_parity import prompts


@pytest.fixture
def loop(tiny_llama):
    front = EngineLoop(LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=128, max_num_seqs=8, max_num_batched_tokens=64))).start()
    yield front
    front.stop()


def test_streams_tokens_from_many_threads_in_one_batch(loop, tiny_llama):
    ps = prompts(6, seed=41)
    results, errors = {}, []

    def client(i):
        try:
            seen = [out.token_ids for out in loop.submit(ps[i], SamplingParams(temperature=0, max_tokens=8), request_id=f"t{i}")]
            assert all(a == b[: len(a)] for a, b in zip(seen, seen[1:])), "each output extends the previous one"
            results[i] = seen[-1]
        except Exception as exc:  # surface assertion errors from threads
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    for i, p in enumerate(ps):
        assert results[i] == reference_generate(tiny_llama, p, 8)


def test_async_submit_and_stream(loop, tiny_llama):
    p = prompts(1, seed=42)[0]

    async def main():
        handle = await loop.submit_async(p, SamplingParams(temperature=0, max_tokens=6))
        return [out async for out in handle]

    outs = run_in_fresh_loop(main)
    assert outs[-1].finished and outs[-1].token_ids == reference_generate(tiny_llama, p, 6)


def test_an_async_reader_that_falls_behind_gets_the_latest_output_not_each_one_queued(loop, tiny_llama):
    """Outputs are cumulative: a reader busy for longer than a step takes the newest of those
    queued (vLLM V1's RequestOutputCollector), and the last is still the finished one."""
    import asyncio

    p = prompts(1, seed=43)[0]

    async def main():
        handle = await loop.submit_async(p, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
        seen = []
        async for out in handle:
            seen.append(len(out.token_ids))
            await asyncio.sleep(0.03)
        return seen, out

    seen, last = run_in_fresh_loop(main)
    assert last.finished and last.token_ids == reference_generate(tiny_llama, p, 30)
    assert len(seen) < 30 and seen == sorted(seen) and any(b - a > 1 for a, b in zip(seen, seen[1:]))


def test_an_abort_after_queued_outputs_still_ends_a_reader_that_fell_behind(loop):
    import asyncio

    async def main():
        handle = await loop.submit_async([5, 6, 7], SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))
        seen = 0
        async for out in handle:
            seen += 1
            if seen == 2:
                handle.abort()
            await asyncio.sleep(0.02)
        return out

    last = run_in_fresh_loop(lambda: asyncio.wait_for(main(), 20))
    assert last.finished and last.finish_reason == "abort"


def test_abort_from_another_thread_finishes_the_stream(loop):
    loop.pause()
    handle = loop.submit([5, 6, 7], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
    assert handle.abort()
    final = handle.result(timeout=5)
    assert final.finish_reason == "abort"
    loop.resume()


def test_pause_step_once_resume(loop):
    loop.pause()
    sub = loop.subscribe()
    handle = loop.submit([1, 2, 3, 4], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert sub.get(timeout=0.3) is None, "paused: no step runs"
    loop.step_once()
    event = sub.get(timeout=5)
    assert event.step >= 1
    assert event.blocks and event.block_tables, "a watched loop's events carry the pool's picture"
    assert sub.get(timeout=0.3) is None
    loop.resume()
    assert handle.result(timeout=10).finished


def test_slow_subscriber_gets_latest_events_and_never_blocks_the_loop(loop):
    """Drained right after the result, with no wait: the loop hands a step's event to the
    subscribers before that step's outputs to the callers (engine_loop._run), so the finishing
    step is already there. (Before that order was fixed, 5 runs in 150 under CPU load drained
    too early.)"""
    sub = loop.subscribe(maxsize=3)
    handle = loop.submit([1, 2, 3], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    final = handle.result(timeout=20)
    events = sub.drain()
    assert len(events) == 3 and sub.dropped > 0
    assert [f["request_id"] for f in events[-1].finished] == [final.request_id], "the newest event (the finish) is kept"


class HeldLog(StatLogger):
    """The server log, slow for once: its first look after the watched request finished waits
    until the test lets it go (a log write stuck on a slow disk)."""

    def __init__(self):
        super().__init__(interval_s=3600)
        self.hold_after = None  # () -> bool
        self.release = threading.Event()

    def due(self) -> bool:
        if self.hold_after is not None and self.hold_after():
            self.hold_after = None
            self.release.wait(10)
        return super().due()


def test_a_finished_output_never_reaches_the_caller_before_its_step_reached_the_subscribers(tiny_llama):
    """The same order made certain: whatever the loop does after a step (here the log is slow),
    the event was handed to the subscribers before the output to the caller."""
    log = HeldLog()
    front = EngineLoop(LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=16, max_num_seqs=2)), stat_logger=log).start()
    try:
        sub = front.subscribe()
        requests = front.engine.requests
        log.hold_after = lambda: "held" in requests and requests["held"].status.finished
        handle = front.submit([1, 2, 3], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), request_id="held")
        final = handle.result(timeout=20)
        seen = sub.drain()
        assert seen and [f["request_id"] for f in seen[-1].finished] == [final.request_id]
    finally:
        log.release.set()
        front.stop()


def test_bad_input_raises_in_the_caller(loop):
    from engine import SamplingError

    with pytest.raises(SamplingError):
        loop.submit([1, 2], {"max_tokens": 0})


def test_callers_get_the_lock_between_steps_while_the_engine_is_busy(loop):
    """A snapshot or a new request mid-burst is served between two steps, not after the engine
    goes idle (an event loop scraping /metrics waits for the snapshot: every stream would stall)."""
    first = loop.submit([1, 2, 3], SamplingParams(temperature=0, max_tokens=400, ignore_eos=True))
    outputs = iter(first)
    next(outputs)  # it is running
    snap = loop.snapshot()
    assert snap.num_requests_running == 1, "the snapshot was taken while the first request ran"
    second = loop.submit([4, 5, 6], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert second.result(timeout=30).finished
    assert not loop.engine.requests[first.request_id].status.finished, "the short request finished while the long one ran"
    first.abort()


class BrokenLog(StatLogger):
    """A server log whose write fails once there is work to log: outside the step itself, still
    inside the loop's thread (an idle loop's log line is skipped, so it fails after a step)."""

    def due(self, now=None):
        return True

    def log_stats(self, snap, now=None):
        if snap.num_requests_running or snap.num_requests_waiting:
            raise OSError("disk full")
        return None


@pytest.mark.parametrize("where", ["step", "log"])
def test_a_loop_that_fails_ends_its_requests_with_the_reason_and_refuses_new_ones(tiny_llama, monkeypatch, where):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=16, max_num_seqs=2))
    if where == "step":
        monkeypatch.setattr(engine, "step", lambda **kw: (_ for _ in ()).throw(OSError("disk full")))
    front = EngineLoop(engine, stat_logger=BrokenLog() if where == "log" else None).start()
    try:
        handle = front.submit([1, 2, 3], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), request_id="doomed")
        with pytest.raises(RuntimeError, match="the engine stopped: disk full"):
            handle.result(timeout=20)
        with pytest.raises(RuntimeError, match="the engine stopped: disk full"):  # not queued for nobody
            front.submit([1, 2], SamplingParams(max_tokens=1), request_id="late")
        assert "late" not in engine.requests
    finally:
        front.stop()
