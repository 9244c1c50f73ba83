"""A served engine in the engine process (courseapp/serving/engine_core.py over
courseapp/demo/engine_process.py), driven through the calls the API makes of it: the same tokens
as the engine in this process, refusals with their reason, an abort that ends the stream,
/metrics' figures, two engines side by side in one process, and an engine process that dies."""
import asyncio
import os
import signal

import pytest

from courseapp.demo.host import ServingEngine, ServingRefused
from courseapp.demo.engine_process import EngineProcess
from courseapp.serving.engine_core import ServedEngine
from tests.aio import run_in_fresh_loop
from tests.e2e.conftest import wait_until
from tests.scopes import module_unless_collecting_stats

# a stats line every 0.2 s of work, so the server log has lines within a short test
OPTIONS = {"num_blocks": 64, "max_num_seqs": 4, "max_num_batched_tokens": 256, "enable_prefix_caching": True,
           "log_interval_s": 0.2}
ASK = [{"role": "user", "content": "주문한 운동화가 아직 안 왔어요."}]
GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def process():
    process = EngineProcess(torch_threads=1)
    yield process
    process.shutdown()


@pytest.fixture(scope=module_unless_collecting_stats)  # tests/scopes.py: mutmut sees every test use it
def core(process):
    engine = ServedEngine(process, "site", OPTIONS).ensure_open()
    yield engine
    engine.stop()


async def answer(engine, request_id: str, max_tokens: int = 12, messages=ASK) -> tuple[list, object, int]:
    handle, prompt_tokens = await engine.open(messages=messages, prompt="", max_tokens=max_tokens, sampling=GREEDY,
                                              request_id=request_id)
    texts, final = [], None
    async for output in handle:
        texts.append(output.text)
        final = output
    return texts, final, prompt_tokens


def test_four_streams_at_once_get_the_tokens_the_engine_gives_in_this_process(core):
    async def four(engine):
        return await asyncio.gather(*(answer(engine, f"r{i}", 8 + 4 * i) for i in range(4)))

    here = ServingEngine(**OPTIONS)
    try:
        expected = run_in_fresh_loop(lambda: four(here))
    finally:
        here.stop()
    got = run_in_fresh_loop(lambda: four(core))
    for (texts, final, prompt_tokens), (want_texts, want, want_prompt) in zip(got, expected):
        assert final.token_ids == want.token_ids and final.text == want.text
        for seen in (texts, want_texts):  # outputs a busy reader had not taken may come merged (below)
            assert all(b.startswith(a) for a, b in zip(seen, seen[1:])), "the text only grows"
            assert seen[-1] == want.text
        assert prompt_tokens == want_prompt
        assert final.finished and final.finish_reason == "length"
        assert final.metrics.ttft is not None and final.metrics.num_cached_tokens >= 0  # for /metrics and usage
    snap = core.snapshot()
    assert snap.num_requests_running == 0 and snap.generation_tokens_total >= sum(8 + 4 * i for i in range(4))


def test_a_reader_that_falls_behind_gets_the_outputs_it_missed_merged_into_one(core):
    """As vLLM V1's RequestOutputCollector: what arrived while the caller was busy writing comes as
    one output (one SSE chunk of several tokens), not one per token queued behind it — and nothing
    of the text, the token ids or the finish is lost."""
    async def slow(engine, request_id):
        handle, _ = await engine.open(messages=ASK, prompt="", max_tokens=24, sampling=GREEDY, request_id=request_id)
        seen, final = [], None
        async for output in handle:
            seen.append((output.text, len(output.token_ids)))
            final = output
            await asyncio.sleep(0.05)  # a reader busy with each piece for longer than a step
        return seen, final

    async def quick(engine, request_id):
        texts, final, _ = await answer(engine, request_id, 24)
        return texts, final

    seen, final = run_in_fresh_loop(lambda: slow(core, "slow"))
    _texts, want = run_in_fresh_loop(lambda: quick(core, "quick"))
    assert final.finished and final.token_ids == want.token_ids and final.text == want.text
    assert len(seen) < 24, "tokens that queued up came together"
    assert any(b[1] - a[1] > 1 for a, b in zip(seen, seen[1:])), "one output carried several new tokens"
    assert all(b[0].startswith(a[0]) for a, b in zip(seen, seen[1:]))


def test_a_request_too_long_is_refused_with_the_limit_and_the_next_is_served(core):
    with pytest.raises(ServingRefused, match="maximum context length"):
        run_in_fresh_loop(lambda: answer(core, "too-long", max_tokens=core.max_model_len + 1))
    _texts, final, _ = run_in_fresh_loop(lambda: answer(core, "after", 4))
    assert len(final.token_ids) == 4


def test_an_abort_ends_the_stream_and_frees_the_blocks(core):
    async def start_then_abort():
        handle, _ = await core.open(messages=ASK, prompt="", max_tokens=400, sampling=GREEDY, request_id="gone")
        final = None
        async for output in handle:
            final = output
            if len(output.token_ids) >= 3:
                core.abort("gone")
        return final

    final = run_in_fresh_loop(lambda: start_then_abort())
    assert final.finish_reason == "abort" and len(final.token_ids) < 400
    assert core.snapshot().kv_cache_usage_perc == 0.0


def test_a_second_engine_in_the_same_process_has_its_own_pool_and_closes_alone(process, core):
    lab = ServedEngine(process, "lab-1", {**OPTIONS, "num_blocks": 32}).ensure_open()
    _texts, final, _ = run_in_fresh_loop(lambda: answer(lab, "same-id", 5))
    _texts, other, _ = run_in_fresh_loop(lambda: answer(core, "same-id", 5))  # the same request id elsewhere: no clash
    assert final.token_ids == other.token_ids and len(final.token_ids) == 5
    assert lab.snapshot().kv_cache_usage_perc == 0.0 and lab.snapshot().generation_tokens_total == 5
    lab.stop()
    _texts, after, _ = run_in_fresh_loop(lambda: answer(core, "after-close", 3))
    assert len(after.token_ids) == 3


def test_when_the_engine_process_dies_its_streams_fail_saying_so_and_the_next_request_starts_a_new_one():
    process = EngineProcess(torch_threads=1)
    engine = ServedEngine(process, "site", OPTIONS).ensure_open()
    try:
        first = process._proc.pid

        async def killed_mid_stream():
            handle, _ = await engine.open(messages=ASK, prompt="", max_tokens=400, sampling=GREEDY, request_id="k")
            async for output in handle:
                if len(output.token_ids) >= 2:
                    os.kill(first, signal.SIGKILL)

        with pytest.raises(RuntimeError, match=r"engine process stopped \(exit code -9\)"):
            run_in_fresh_loop(lambda: asyncio.wait_for(killed_mid_stream(), 60))
        _texts, final, _ = run_in_fresh_loop(lambda: answer(engine, "next", 3))
        assert len(final.token_ids) == 3 and process._proc.pid != first
    finally:
        engine.stop()
        process.shutdown()


def test_the_live_view_of_an_engine_in_the_process_gets_its_requests_frames(core):
    import threading
    import time

    from tests.courseapp.demo.watcher import Watcher

    watcher, lock = Watcher(), threading.Lock()

    def publish(message):  # the reader thread of the web process calls it
        with lock:
            watcher(message)

    assert core.view_open(publish)
    _texts, final, _ = run_in_fresh_loop(lambda: answer(core, "watched", 6))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            lane = watcher.frames[-1]["lanes"][0] if watcher.frames else None
        if lane and any(r["id"] == "watched" and r["status"] == "finished" for r in lane["requests"]):
            break
        time.sleep(0.05)
    drawn = next(r for r in lane["requests"] if r["id"] == "watched")
    assert drawn["output_tokens"] == 6 and drawn["text"] == final.text
    seq, text = core.view_snapshot()  # what a viewer that connects now is sent first
    assert seq == watcher.frames[-1]["seq"] and '"watched"' in text
    core.view_close()
    assert core.view_snapshot() is None


def test_a_client_gone_while_its_request_is_being_opened_frees_the_engine(core, monkeypatch):
    """Mutant (issue #34): the engine process not told to abort when the caller is cancelled
    before its open() returned (its blocks stay held for the whole answer). The engine's
    "accepted" is kept from reaching the caller, so the cancel lands while open() still waits,
    however fast the machine."""
    import time

    from courseapp.demo import engine_process

    monkeypatch.setattr(engine_process, "_resolve", lambda future, value: None)
    start = core.snapshot()
    sid = ("site", "gone-early")

    async def open_then_leave():
        task = asyncio.ensure_future(core.open(messages=ASK, prompt="", max_tokens=900, sampling=GREEDY,
                                               request_id="gone-early"))
        await asyncio.sleep(0)
        deadline = time.monotonic() + 60
        while (sid not in core.process.streams or sid in core.process.opening) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # sent, and taken by the engine (its "accepted" read, not delivered)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_in_fresh_loop(open_then_leave)
    monkeypatch.undo()
    # Every request the engine takes ends (an abort counts): wait for this one's end. A liveness
    # bound, not a timing: unaborted, it ends only when its 64-block pool is full (~950 tokens).
    deadline = time.monotonic() + 300
    while core.snapshot().requests_finished_total == start.requests_finished_total and time.monotonic() < deadline:
        time.sleep(0.05)
    snap = core.snapshot()
    assert snap.requests_finished_total == start.requests_finished_total + 1
    assert snap.num_requests_running == 0 and snap.kv_cache_usage_perc == 0.0
    assert snap.generation_tokens_total - start.generation_tokens_total < 100, "aborted, not run to its end"


def test_tokenize_detokenize_and_the_server_log_answer_as_the_engine_in_this_process_does(core):
    """/tokenize, /detokenize, logprobs' token strings and the server log, asked of the engine
    process: each call's arguments reach it (a prompt or a chat, with its flags; ids; a time)."""
    here = ServingEngine(**OPTIONS)
    try:
        for kwargs in ({"prompt": "배송 조회"}, {"prompt": "배송 조회", "add_special_tokens": False},
                       {"messages": ASK}, {"messages": ASK, "add_generation_prompt": False}):
            assert core.tokenize(**kwargs) == here.tokenize(**kwargs), kwargs
        ids = here.tokenize(prompt="배송 조회", add_special_tokens=False)
        assert core.detokenize(ids) == here.detokenize(ids) == "배송 조회"
        assert core.token_strings(ids) == here.token_strings(ids) and set(core.token_strings(ids)) == set(ids)
    finally:
        here.stop()
    core.check_health()
    run_in_fresh_loop(lambda: answer(core, "logged", 40))
    # the line comes at the next 0.2 s tick, which a short answer may finish before
    lines = wait_until(core.log_lines, 5, "a stats line in the server log")
    assert {"time", "kind", "line"} <= set(lines[-1])
    assert core.log_lines(since=lines[-1]["time"] + 1) == [], "only the lines written since the time asked"


def test_an_engine_not_opened_yet_reads_as_empty_without_loading_its_model(process):
    """A /metrics scrape or the lab's log before the first request: nothing, and no model loaded
    for it (a scrape must not start an engine)."""
    idle = ServedEngine(process, "never-opened", OPTIONS)
    assert idle.snapshot() is None and idle.log_lines() == []
    assert not idle._live() and idle.max_model_len == 0


def test_health_says_the_engine_is_shutting_down_once_its_process_is_stopping():
    """/health's 503 reason while the server stops: not a new engine process started for it."""
    stopping = EngineProcess(torch_threads=1)
    stopping.shutdown()  # never started: nothing to wait for
    with pytest.raises(RuntimeError, match=r"^the engine is shutting down$"):
        ServedEngine(stopping, "site", OPTIONS).check_health()
    assert stopping.generation == 0, "no process started"


class RecordingProcess:
    """Stands in for an EngineProcess: records what a served engine asks of it."""

    def __init__(self):
        self.calls, self.generation, self.stopped, self._running = [], 0, False, False

    def running(self):
        return self._running

    def ensure_running(self):
        if not self._running:
            self._running, self.generation = True, self.generation + 1

    def ask(self, what, key, *args, wait_s=None):
        self.calls.append((what, key, *args, wait_s))
        return 2048 if what == "engine_open" else None

    def view_close(self, key):
        self.calls.append(("view_close", key))


def test_opening_waits_for_the_model_to_load_and_stopping_closes_once_and_for_good():
    """An engine opens with the longer wait a model load needs, and knows its context length;
    stopped, it closes its viewers and its engine in the process once, and will not open again."""
    from courseapp.demo.engine_process import ANSWER_WITHIN_S, READY_WITHIN_S

    process = RecordingProcess()
    engine = ServedEngine(process, "lab-7", OPTIONS)
    assert engine.ensure_open() is engine and engine.max_model_len == 2048
    assert process.calls == [("engine_open", "lab-7", OPTIONS, READY_WITHIN_S)] and READY_WITHIN_S > ANSWER_WITHIN_S
    engine.ensure_open()
    assert len(process.calls) == 1, "opened once while its process lives"
    engine.stop()
    engine.stop()
    assert process.calls[1:] == [("view_close", "lab-7"), ("engine_close", "lab-7", ANSWER_WITHIN_S)]
    with pytest.raises(RuntimeError, match=r"^the engine is shutting down$"):
        engine.ensure_open()


class AnsweringProcess(RecordingProcess):
    """Answers each request it is sent with `answer` (what the engine process would put on the
    stream), as the engine process's reader thread does."""

    def __init__(self, answer):
        super().__init__()
        import threading

        self.answer, self.lock, self.streams, self.opening = answer, threading.Lock(), {}, {}
        self._running, self.generation = True, 1

    def send(self, message):
        self.calls.append(message)
        if message[0] == "open":
            stream = self.opening[(message[1], message[2])]
            stream.accepted.set_result(self.answer)

    forget = EngineProcess.forget  # the real one: it reads only the maps above


def test_a_refused_or_failed_open_says_why_and_leaves_nothing_behind():
    """A request the engine refuses reaches the client as its reason and parameter (a 400); one the
    engine failed on, as a 500 with the engine's words; neither keeps a stream in the process."""
    from courseapp.serving.protocol import ApiError

    async def ask(engine):
        return await engine.open(messages=ASK, prompt="", max_tokens=5, sampling=GREEDY, request_id="r1")

    for answer in (("refused", "the prompt is 3000 tokens; this model's context is 2048", "messages"),
                   ("failed", "CUDA out of memory")):
        process = AnsweringProcess(answer)
        engine = ServedEngine(process, "site", OPTIONS)
        engine._generation = 1  # opened in this process
        with pytest.raises((ServingRefused, ApiError)) as caught:
            run_in_fresh_loop(lambda: ask(engine))
        if answer[0] == "refused":
            assert isinstance(caught.value, ServingRefused) and str(caught.value) == answer[1]
            assert caught.value.param == "messages"
        else:
            assert (caught.value.status, caught.value.body()["error"]) == (500, {
                "message": "The engine failed: CUDA out of memory", "type": "internal_server_error", "param": None,
                "code": None})
        assert process.streams == {} and process.opening == {}, "nothing left for a request that never ran"


def test_a_streams_outputs_grow_its_text_logprobs_and_metrics_as_the_engine_sends_them():
    """What the engine process sends per step, applied to the client's output: pieces appended,
    text replaced whole when it did not grow (a stop string cut it), token ids and logprobs
    accumulated, the prompt's logprobs and the metrics taken when they come; an error raises."""
    from courseapp.demo.engine_process import Stream
    from courseapp.serving.engine_core import _Handle

    async def read(items):
        stream = Stream(asyncio.get_running_loop())
        for item in items:
            stream.items.put_nowait(item)
        return [(o.text, list(o.token_ids), o.logprobs, o.prompt_logprobs, o.finished) async for o in _Handle(stream)]

    lp = [(3, -0.1, 1, [])], [(4, -0.2, 1, [])]
    seen = run_in_fresh_loop(lambda: read([
        ("r", True, "배송", [3], False, None, None, lp[0], [None, "p"]),
        ("r", True, " 언제\n", [4], False, None, None, lp[1], None),
        ("r", False, "배송 언제", [], True, "stop", {"ttft": 0.1, "e2e": 0.5}, None, None)]))
    # the reader was not behind here only if it took each item before the next came; merged or not,
    # the last output is the whole
    text, ids, logprobs, prompt_logprobs, finished = seen[-1]
    assert (text, ids, finished) == ("배송 언제", [3, 4], True)
    assert logprobs == lp[0] + lp[1] and prompt_logprobs == [None, "p"]
    with pytest.raises(RuntimeError, match=r"^the engine process failed: the model crashed$"):
        run_in_fresh_loop(lambda: read([("r", "error", "the model crashed")]))

    async def one_by_one():
        stream = Stream(asyncio.get_running_loop())
        handle, outs = _Handle(stream), []
        stream.items.put_nowait(("r", True, "가", [1], False, None, None, None, None))
        async for o in handle:
            outs.append((o.text, o.finish_reason, getattr(o.metrics, "e2e", None)))
            if not o.finished:
                stream.items.put_nowait(("r", True, "나", [2], True, "length", {"e2e": 0.3}, None, None))
        return outs

    assert run_in_fresh_loop(one_by_one) == [("가", None, None), ("가나", "length", 0.3)]
