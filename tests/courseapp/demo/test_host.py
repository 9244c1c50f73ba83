"""The demo's host (courseapp/demo/host.py) on its own, with the shipped model and small specs: what
a RunSession does with its script and each command, how it ends, and what EmbeddedHost keeps. No
database: a session never touches it (its host reports through callbacks)."""
import os
import threading
import time
from datetime import datetime, timezone as dt_timezone

import pytest

from courseapp.demo import frames, host, traces
from courseapp.demo.host import EmbeddedHost, RunSession
from tests.courseapp.demo.watcher import Watcher
from tests.e2e.conftest import wait_until

CONFIG = dict(block_size=16, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=256, enable_prefix_caching=True,
              preemption_mode="recompute", scheduling="continuous", max_model_len=512)
# A bound on waiting for a thread, not a timing: every wait below ends far sooner. The mutation
# run (tests/mutation.py) sets it lower: a mutant that stops a run would hold each worker a minute.
HANG_GUARD_S = float(os.environ.get("HANG_GUARD_S", "60"))


def make_spec(**extra) -> dict:
    return {"lanes": [{"name": "a", "label": "Lane A", "config": dict(CONFIG)}], "step_delay": 0, **extra}


def wait_for(condition, what: str):
    wait_until(condition, timeout=HANG_GUARD_S, what=what)


def in_thread(session: RunSession) -> threading.Thread:
    thread = threading.Thread(target=session.run, daemon=True)
    thread.start()
    return thread


def started(spec: dict) -> tuple[RunSession, Watcher, threading.Thread]:
    """A session running in a thread, its engines built."""
    watcher = Watcher()
    session = RunSession("run-1", spec, publish=watcher)
    thread = in_thread(session)
    wait_for(session.has_started, "the engines were built")
    return session, watcher, thread


def ended(session: RunSession, thread: threading.Thread) -> None:
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        session.command({"type": "stop"})  # let the thread go, then say so
        pytest.fail("the run did not end")


def run_through(session: RunSession) -> None:
    """Run a session to its end in a thread: a run that never ends fails the test instead of hanging it."""
    ended(session, in_thread(session))


def loop_rounds(session: RunSession, n: int = 3) -> None:
    """Wait until the session's loop has come round n more times."""
    for _ in range(n):
        before = session.last_tick
        wait_for(lambda: session.last_tick != before, "the loop came round")


@pytest.fixture
def every_step_a_frame(monkeypatch):
    monkeypatch.setattr(frames, "MAX_FPS", float("inf"))


# --- a scripted run --------------------------------------------------------------------------------

def test_a_scripted_run_serves_every_request_on_its_lanes_when_it_arrives_then_ends_finished(every_step_a_frame):
    long_question = "배송이 언제 오나요? " * 20
    spec = make_spec(
        lanes=[{"name": "a", "label": "Lane A", "config": dict(CONFIG)},
               {"name": "b", "config": {**CONFIG, "enable_prefix_caching": False}}],
        requests=[{"at": 3, "user": "늦게 온 질문", "max_tokens": 4, "ignore_eos": True},
                  {"at": 0, "user": long_question, "system": "친절하게", "max_tokens": 5, "ignore_eos": True}],
        lane_requests={"b": [{"at": 1, "prompt": "hello there", "max_tokens": 3, "ignore_eos": True, "key": "mine"}]},
    )
    watcher = Watcher()
    session = RunSession("run-1", spec, publish=watcher)
    run_through(session)

    last = watcher.frames[-1]
    assert (last["status"], last["reason"]) == ("finished", "")
    assert session.end() == {"status": "finished", "reason": ""}
    a, b = ({lane["name"]: lane for lane in last["lanes"]}[name] for name in ("a", "b"))
    assert (a["label"], b["label"]) == ("Lane A", "b")  # a lane without a label shows its name
    # sorted by arrival: the request due at step 0 is the first one each lane saw
    assert [r["id"] for r in a["requests"]] == ["s1", "s0"]
    assert [r["id"] for r in b["requests"]] == ["s1", "mine", "s0"]  # its own request, under its own key
    chat = session.lanes[0].engine.encode_chat([{"role": "system", "content": "친절하게"}, {"role": "user", "content": long_question}])
    first = {r["id"]: r for r in a["requests"]}["s1"]
    assert first["prompt_tokens"] == len(chat) and first["max_tokens"] == 5 and first["output_tokens"] == 5
    assert first["prompt"] == long_question[:120] and first["owner"] == ""
    mine = {r["id"]: r for r in b["requests"]}["mine"]
    assert mine["prompt_tokens"] == len(session.lanes[1].engine.tokenizer.encode("hello there"))
    assert all(r["status"] == "finished" for lane in (a, b) for r in lane["requests"])
    # each arrived at its step: before it, its timeline is blank
    assert a["timeline"]["s0"].startswith("   ") and a["timeline"]["s0"][3] != " "
    assert b["timeline"]["mine"][0] == " " and b["timeline"]["mine"][1] != " "
    assert len(session.trace) == a["step"]  # one trace frame per engine step
    assert last["scene"] == ""  # a run that is no scene of the lesson (a scene's page shows its name)
    assert session.lanes[0].engine.requests["s1"].params.temperature == 0.0  # greedy unless the script says


def test_requests_due_at_the_same_step_join_in_the_order_the_scene_lists_them():
    spec = make_spec(preset="concurrency", requests=[{"at": 0, "user": "첫째", "max_tokens": 1}, {"at": 0, "user": "둘째", "max_tokens": 1}],
                     lane_requests={"a": [{"at": 0, "prompt": "셋째", "max_tokens": 1, "key": "third"}]})
    watcher = Watcher()
    run_through(RunSession("run-1", spec, publish=watcher))
    assert [r["id"] for r in watcher.frames[-1]["lanes"][0]["requests"]] == ["s0", "s1", "third"]
    assert watcher.frames[-1]["scene"] == "concurrency"


def test_time_passes_while_nothing_runs_until_the_next_scripted_arrival():
    spec = make_spec(requests=[{"at": 5, "user": "혼자 온 질문", "max_tokens": 2, "ignore_eos": True}])
    watcher = Watcher()
    run_through(RunSession("run-1", spec, publish=watcher))
    lane = watcher.frames[-1]["lanes"][0]
    assert lane["requests"][0]["status"] == "finished"
    assert lane["step"] == 2  # its prompt (which gives the first token), then one decode: the empty ticks before it were no steps


def test_each_block_shows_the_text_it_holds():
    spec = make_spec(requests=[{"at": 0, "user": "블록마다 어떤 글자가 들어가는지 보여 주세요. " * 3, "max_tokens": 20, "ignore_eos": True}])
    session = RunSession("run-1", spec, publish=Watcher())
    run_through(session)
    engine, state = session.lanes[0].engine, session.lanes[0].state
    ids, texts = engine.requests["s0"].all_token_ids, state.block_text["s0"]
    computed = state.requests["s0"]["prompt_tokens"] + 20 - 1  # the last token sampled is never fed back
    assert texts == [engine.tokenizer.decode(ids[i : min(i + 16, computed)]) for i in range(0, computed, 16)]
    assert len(texts) == -(-computed // 16)
    assert all(texts[:-1])  # every full block has text
    assert state.requests["s0"]["text"] == engine.output("s0").text  # the answer as it streams


def test_a_block_still_filling_shows_what_it_holds_after_each_step():
    """A prompt shorter than a block: its one block grows every step, and its text with it."""
    # a raw prompt: a chat turn alone (the template's default system turn) fills more than a block
    spec = make_spec(requests=[{"at": 0, "prompt": "네", "max_tokens": 4, "ignore_eos": True}])
    session = RunSession("run-1", spec, publish=Watcher())
    run_through(session)
    engine, state = session.lanes[0].engine, session.lanes[0].state
    ids = engine.requests["s0"].all_token_ids
    computed = state.requests["s0"]["prompt_tokens"] + 4 - 1
    assert computed <= 16 and state.block_text["s0"] == [engine.tokenizer.decode(ids[:computed])]


# --- commands --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "speed"), [(100, 8.0), (0.01, 0.125), ("2", 2.0), (None, 1.0)])
def test_speed_is_kept_between_an_eighth_and_eight_times_and_divides_the_pause_between_steps(value, speed, monkeypatch):
    spec = make_spec(requests=[{"at": 0, "user": "질문", "max_tokens": 3, "ignore_eos": True}], step_delay=0.04)
    watcher = Watcher()
    session = RunSession("run-1", spec, publish=watcher)
    slept, real_sleep = [], time.sleep

    def sleep(seconds):  # the run's own pauses are counted, not waited
        if threading.current_thread() is threading.main_thread():
            return real_sleep(seconds)
        slept.append(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    session.command({"type": "speed", "value": 4})
    session.command({"type": "speed"} if value is None else {"type": "speed", "value": value})  # none named: 1×
    run_through(session)
    assert watcher.frames[-1]["speed"] == speed
    assert session.step_delay == 0.04 and pytest.approx(0.04 / speed) in slept


@pytest.mark.parametrize(("cmd", "status", "reason", "message"), [
    ({"type": "stop"}, "stopped", "owner", ""),
    ({"type": "stop", "reason": "no_viewer"}, "expired", "no_viewer", ""),
    ({"type": "stop", "reason": "never_picked_up"}, "expired", "never_picked_up", ""),
    ({"type": "stop", "reason": "worker_lost", "status": "failed", "message": "its worker was lost"}, "failed", "worker_lost", "its worker was lost"),
    ({"type": "stop", "reason": "owner", "status": "finished"}, "stopped", "owner", ""),  # only an ending status is taken
    # the status the database now has wins over the one the reason suggests
    ({"type": "stop", "reason": "lifetime", "status": "stopped"}, "stopped", "lifetime", ""),
    ({"type": "stop", "reason": "owner", "status": "expired"}, "expired", "owner", ""),
])
def test_a_stop_ends_the_run_with_the_status_and_reason_it_carries(cmd, status, reason, message):
    spec = make_spec(open=True)
    session, watcher, thread = started(spec)
    session.command(cmd)
    ended(session, thread)
    last = watcher.frames[-1]
    assert (last["status"], last["reason"], last["message"]) == (status, reason, message)
    assert session.end() == {"status": status, "reason": reason}


def test_a_learners_prompts_join_an_open_run_under_their_own_keys_and_a_refused_one_says_why(every_step_a_frame):
    session, watcher, thread = started(make_spec(open=True, system="짧게 답하세요."))
    session.command({"type": "submit", "prompt": "첫 질문", "max_tokens": "3", "owner": "learner-7"})
    session.command({"type": "submit", "prompt": "못 받는 질문", "max_tokens": 0, "owner": "learner-7"})
    wait_for(lambda: watcher.frames and watcher.frames[-1]["message"], "the refusal was shown")
    assert "max_tokens" in watcher.frames[-1]["message"]
    session.command({"type": "submit", "prompt": "세 번째 질문", "max_tokens": 2, "owner": "learner-8"})
    wait_for(lambda: "u3" in session.lanes[0].state.requests and not watcher.frames[-1]["message"], "the third prompt joined")
    wait_for(lambda: not session.lanes[0].engine.has_unfinished_requests(), "both answered")
    session.command({"type": "stop"})
    ended(session, thread)
    requests = {r["id"]: r for r in watcher.frames[-1]["lanes"][0]["requests"]}
    assert set(requests) == {"u1", "u3"}  # the refused one took its number and joined nothing
    assert (requests["u1"]["owner"], requests["u1"]["max_tokens"]) == ("learner-7", 3)
    assert requests["u3"]["owner"] == "learner-8"
    chat = session.lanes[0].engine.encode_chat([{"role": "system", "content": "짧게 답하세요."}, {"role": "user", "content": "첫 질문"}])
    assert session.lanes[0].engine.requests["u1"].prompt_token_ids == chat  # the run's system prompt comes first
    assert requests["u1"]["prompt_tokens"] == len(chat)


def test_a_prompt_sent_with_no_length_may_run_to_64_tokens_and_a_run_with_no_system_prompt_sends_none(every_step_a_frame):
    session, watcher, thread = started(make_spec(open=True))
    session.command({"type": "submit", "prompt": "질문"})  # nobody named (a scripted prompt has no owner)
    wait_for(lambda: "u1" in session.lanes[0].state.requests, "the prompt joined")
    session.command({"type": "stop"})
    ended(session, thread)
    request = watcher.frames[-1]["lanes"][0]["requests"][0]
    chat = session.lanes[0].engine.encode_chat([{"role": "user", "content": "질문"}])
    assert (request["max_tokens"], request["prompt_tokens"], request["owner"]) == (64, len(chat), "")


def test_a_paused_run_steps_once_per_step_command_and_runs_again_on_resume(every_step_a_frame):
    spec = make_spec(start_paused=True, requests=[{"at": 0, "user": "한 걸음씩", "max_tokens": 6, "ignore_eos": True}])
    session, watcher, thread = started(spec)
    state = session.lanes[0].state
    loop_rounds(session)
    assert state.step == 0 and watcher.frames[-1]["paused"]
    session.command({"type": "step"})
    wait_for(lambda: state.step == 1, "one step")
    loop_rounds(session)
    assert state.step == 1  # one command, one step
    session.command({"type": "step"})
    wait_for(lambda: state.step == 2, "a second step")
    session.command({"type": "resume"})
    ended(session, thread)  # a scripted run ends when its script is done
    last = watcher.frames[-1]
    assert last["paused"] is False and last["status"] == "finished" and last["lanes"][0]["step"] > 2  # JSON false, not null


def test_pause_holds_a_running_run():
    spec = make_spec(open=True)
    session, watcher, thread = started(spec)
    session.command({"type": "pause"})
    session.command({"type": "submit", "prompt": "멈춘 동안 온 질문", "max_tokens": 4})
    wait_for(lambda: "u1" in session.lanes[0].state.requests, "the prompt joined")
    loop_rounds(session)
    assert session.lanes[0].state.step == 0
    session.command({"type": "stop"})
    ended(session, thread)
    assert watcher.frames[-1]["paused"] is True


# --- how a run ends by itself ----------------------------------------------------------------------

def test_a_paused_run_that_nobody_touches_expires_and_says_until_when():
    spec = make_spec(start_paused=True, paused_idle_s=1.0, requests=[{"at": 0, "user": "질문", "max_tokens": 2}])
    session, watcher, thread = started(spec)
    wait_for(lambda: session.idle_until() is not None, "an idle deadline")
    until = session.idle_until()
    now = datetime.now(dt_timezone.utc)
    assert 0 < (until - now).total_seconds() <= 1.0
    ended(session, thread)
    assert (watcher.frames[-1]["status"], watcher.frames[-1]["reason"]) == ("expired", "paused_idle")
    assert session.idle_until() is None  # ended: no deadline left


def test_a_command_puts_the_paused_runs_idle_deadline_back():
    spec = make_spec(start_paused=True, paused_idle_s=2.0, requests=[{"at": 0, "user": "질문", "max_tokens": 2}])
    session, _watcher, thread = started(spec)
    wait_for(lambda: session.idle_until() is not None, "an idle deadline")
    first = session.idle_until()
    time.sleep(0.3)
    session.command({"type": "speed", "value": 2})
    wait_for(lambda: session.idle_until() > first, "the deadline moved on")
    session.command({"type": "snapshot"})  # a viewer asking for the picture is not a person acting
    moved = session.idle_until()
    loop_rounds(session)
    assert abs((session.idle_until() - moved).total_seconds()) < 0.1
    session.command({"type": "stop"})
    ended(session, thread)


def test_an_open_run_with_nothing_to_do_closes_after_its_idle_limit(monkeypatch):
    monkeypatch.setattr(host, "IDLE_CLOSE_S", 0.3)
    session, watcher, thread = started(make_spec(open=True))
    ended(session, thread)
    assert (watcher.frames[-1]["status"], watcher.frames[-1]["reason"]) == ("expired", "idle")


def test_a_run_ends_at_its_lifetime_even_while_busy():
    spec = make_spec(max_run_s=0.3, step_delay=0.05,
                     requests=[{"at": 0, "user": "아주 긴 답을 주세요", "max_tokens": 400, "ignore_eos": True}])
    session, watcher, thread = started(spec)
    ended(session, thread)
    assert (watcher.frames[-1]["status"], watcher.frames[-1]["reason"]) == ("expired", "lifetime")
    assert session.lanes[0].engine.has_unfinished_requests()


# --- what the host reports -------------------------------------------------------------------------

def test_a_session_is_ticking_while_it_builds_and_while_its_loop_comes_round():
    session = RunSession("run-1", make_spec(), publish=Watcher())
    assert session.is_ticking() and not session.has_started()
    session.started, session.last_tick = True, time.monotonic() - host.TICKING_WITHIN_S - 1
    assert not session.is_ticking()  # started, and the loop has not come round lately: hung
    session.last_tick = time.monotonic() - host.TICKING_WITHIN_S + 1
    assert session.is_ticking()


def test_run_to_end_gives_the_trace_and_how_it_ended():
    spec = make_spec(requests=[{"at": 0, "user": "질문", "max_tokens": 2, "ignore_eos": True}])
    session, ends = RunSession("run-1", spec, publish=Watcher()), []
    thread = threading.Thread(target=lambda: ends.append(session.run_to_end(lambda: False)), daemon=True)
    thread.start()
    ended(session, thread)
    end = ends[0]
    assert (end["status"], end["reason"]) == ("finished", "") and end["trace"] == session.trace.packed()
    assert end["trace"] is not None and "error" not in end
    # what the replay page reads back: each step's lanes, the last one as the run ended
    assert traces.frames(end["trace"])[-1] == {"lanes": [lane.state.to_dict() for lane in session.lanes]}


def test_an_engine_failure_ends_the_run_with_its_reason_unless_the_host_is_shutting_down(monkeypatch, caplog):
    spec = make_spec(requests=[{"at": 0, "user": "질문", "max_tokens": 2}])

    def broken(self):
        raise RuntimeError("the pool is on fire")

    monkeypatch.setattr(RunSession, "_step_all", broken)
    with caplog.at_level("ERROR", logger="courseapp.demo"):
        end = RunSession("run-1", spec, publish=Watcher()).run_to_end(lambda: False)
    assert end == {"trace": None, "error": "RuntimeError: the pool is on fire"}
    # the server's log names the run and keeps the traceback, for whoever reads it after the class
    assert [(r.getMessage(), r.exc_info[0]) for r in caplog.records] == [("demo run run-1 failed", RuntimeError)]
    end = RunSession("run-2", spec, publish=Watcher()).run_to_end(lambda: True, "server_restart")
    assert end == {"trace": None, "status": "stopped", "reason": "server_restart"}
    end = RunSession("run-3", spec, publish=Watcher()).run_to_end(lambda: True)
    assert (end["status"], end["reason"]) == ("stopped", "shutdown")


# --- EmbeddedHost ----------------------------------------------------------------------------------

def test_the_embedded_host_runs_a_session_in_a_thread_takes_its_commands_and_forgets_it_when_it_ends(monkeypatch):
    import atexit

    at_exit = []
    monkeypatch.setattr(atexit, "register", at_exit.append)
    embedded, finished, published = EmbeddedHost(), [], []
    done = threading.Event()
    embedded.start("run-1", make_spec(open=True), publish=published.append, on_begin=lambda: True,
                   on_finish=lambda end: (finished.append(end), done.set()))
    thread = embedded.threads["run-1"]
    # its thread never holds the process open at exit (the host's shutdown, registered once, ends it)
    # (only the host's own registrations count: the first model load in a test process adds
    # libraries' own — tqdm's monitor thread, torch's extensions — to the same list)
    mine = [f for f in at_exit if getattr(f, "__self__", None) is embedded]
    assert thread.daemon and thread.name == "demo-run-run-1" and mine == [embedded.shutdown]
    wait_for(lambda: embedded.is_alive("run-1") and embedded.sessions["run-1"].has_started(), "the run started")
    assert embedded.is_ticking("run-1") and [run_id for run_id, _ in embedded.live()] == ["run-1"]
    assert embedded.latest_snapshot("run-1")[0] >= 1
    assert not embedded.command("other-run", {"type": "stop"}) and not embedded.is_ticking("other-run")
    assert embedded.command("run-1", {"type": "stop", "reason": "owner"})
    assert done.wait(HANG_GUARD_S)
    assert (finished[0]["status"], finished[0]["reason"]) == ("stopped", "owner")
    wait_for(lambda: not embedded.is_alive("run-1"), "the session left the host")
    assert embedded.live() == [] and embedded.threads == {}
    assert not embedded.command("run-1", {"type": "step"})  # gone
    assert published[0]["type"] == "snapshot" and published[-1]["type"] == "delta"  # a picture, then what changed
    assert published[0]["run"] == "run-1"  # the page drops a picture of another run
    gate = threading.Event()  # a second run, held before it begins: its thread's name, one exit hook
    embedded.start("0123456789abcdef", make_spec(), publish=published.append,
                   on_begin=lambda: gate.wait(HANG_GUARD_S) and False, on_finish=finished.append)
    mine = [f for f in at_exit if getattr(f, "__self__", None) is embedded]
    assert embedded.threads["0123456789abcdef"].name == "demo-run-01234567" and mine == [embedded.shutdown]
    gate.set()
    wait_for(lambda: not embedded.is_alive("0123456789abcdef"), "the second run left the host")


def test_a_run_that_ended_before_its_thread_began_is_not_run_or_reported():
    embedded, finished = EmbeddedHost(), []
    embedded.start("run-1", make_spec(requests=[{"at": 0, "user": "질문", "max_tokens": 2}]), publish=lambda m: None,
                   on_begin=lambda: False, on_finish=finished.append)
    wait_for(lambda: not embedded.is_alive("run-1"), "the session left the host")
    assert finished == []


def test_shutdown_stops_every_run_and_waits_for_it():
    embedded, finished, watchers = EmbeddedHost(), [], {"run-1": Watcher(), "run-2": Watcher()}
    for run_id, watcher in watchers.items():
        embedded.start(run_id, make_spec(open=True), publish=watcher, on_begin=lambda: True, on_finish=finished.append)
    wait_for(lambda: all(s.has_started() for _, s in embedded.live()), "both runs started")
    embedded.shutdown(timeout=HANG_GUARD_S)
    assert embedded.live() == []
    assert [(end["status"], end["reason"]) for end in finished] == [("stopped", "shutdown")] * 2
    # Each stopped by a stop command, so its viewers saw it end (a run that broke off shows no end).
    assert all((w.frames[-1]["status"], w.frames[-1]["reason"]) == ("stopped", "shutdown") for w in watchers.values())


def test_a_run_that_fails_while_the_host_shuts_down_is_stopped_by_the_shutdown_not_failed(monkeypatch):
    """At exit a run can fail on its way out (the model still loading as the interpreter
    finalises): that is the shutdown's doing and is recorded so, not as the run's error."""
    released, finished = threading.Event(), []

    def run_until_the_exit_breaks_it(self):
        released.wait(HANG_GUARD_S)
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(RunSession, "run", run_until_the_exit_breaks_it)
    embedded = EmbeddedHost()
    embedded.start("run-1", make_spec(open=True), publish=lambda m: None, on_begin=lambda: True, on_finish=finished.append)
    embedded.shutdown(timeout=0.1)  # the run is still inside its step: shutdown stops waiting for it
    assert finished == []  # shutdown returned within its timeout, the run not yet over
    released.set()
    wait_for(lambda: finished, "the run reported its end")
    assert (finished[0].get("status"), finished[0].get("reason"), finished[0].get("error")) == ("stopped", "shutdown", None)


# --- ServingEngine (the API's engine, in this process) ---------------------------------------------

@pytest.fixture  # per test: mutmut maps a function to the tests that called it, and a module's
def serving():  # fixture is built inside the first test only
    from courseapp.demo.host import ServingEngine

    engine = ServingEngine(num_blocks=32, max_num_seqs=2, max_num_batched_tokens=128, max_model_len=64)
    yield engine
    engine.stop()


def test_the_served_engine_leaves_the_answer_the_room_the_context_leaves_unless_asked_less(serving):
    ids, max_tokens = serving.prepare(prompt="hello")
    assert ids == serving.engine.tokenizer.encode("hello") and max_tokens == 64 - len(ids)
    assert serving.prepare(prompt="hello", max_tokens=64 - len(ids)) == (ids, 64 - len(ids))  # exactly full: taken
    messages = [{"role": "system", "content": "짧게"}, {"role": "user", "content": "안녕"}]  # fits 64 tokens
    ids, max_tokens = serving.prepare(messages=messages, max_tokens=3)
    assert ids == serving.engine.encode_chat(messages) and max_tokens == 3


def test_the_served_engine_refuses_what_the_context_cannot_hold_saying_by_how_much(serving):
    from courseapp.demo.host import ServingRefused

    n = len(serving.engine.tokenizer.encode("hello"))
    with pytest.raises(ServingRefused) as refused:
        serving.prepare(prompt="hello", max_tokens=64 - n + 1)
    assert str(refused.value) == (f"This model's maximum context length is 64 tokens. However, you requested 65 tokens "
                                  f"({n} in the prompt, {64 - n + 1} in the completion). Please reduce the length of "
                                  "the prompt or completion.")
    assert refused.value.param == "prompt"
    long_chat = [{"role": "user", "content": "긴 질문 " * 60}]
    with pytest.raises(ServingRefused) as refused:
        serving.prepare(messages=long_chat)  # no room left at all, even with no max_tokens named
    m = len(serving.engine.encode_chat(long_chat))
    assert f"you requested {m + 1} tokens ({m} in the messages, 1 in the completion)" in str(refused.value)
    assert "reduce the length of the messages" in str(refused.value) and refused.value.param == "messages"


def test_the_served_engine_streams_a_request_refuses_bad_sampling_and_aborts(serving):
    from courseapp.demo.host import ServingRefused

    ids, _ = serving.prepare(prompt="hello")
    outputs = list(serving.submit(ids, {"max_tokens": 3, "temperature": 0.0, "ignore_eos": True}, "r1"))
    assert outputs[-1].finished and len(outputs[-1].token_ids) == 3
    with pytest.raises(ServingRefused, match="temperature"):
        serving.submit(ids, {"max_tokens": 3, "temperature": -1.0}, "r2")
    assert not serving.abort("never-sent")
    handle = serving.submit(ids, {"max_tokens": 60, "temperature": 0.0, "ignore_eos": True}, "r3")
    assert serving.abort("r3")
    last = list(handle)[-1]
    assert last.finished and last.finish_reason == "abort" and len(last.token_ids) < 60
    assert serving.snapshot().generation_tokens_total >= 3
    assert all({"time", "kind", "line"} <= set(entry) for entry in serving.log_lines())


def test_the_served_engine_shares_the_processs_weights_and_logs_as_vllm_does(serving):
    """One copy of the weights per process, whatever serves: the API's engine and every demo lane;
    stats every 10 s (vLLM's default), V0's preemption warnings only when asked."""
    from courseapp.demo.host import ServingEngine

    assert serving.engine.loaded is host.shared_model()
    assert serving.stat_logger.interval_s == 10.0 and serving.stat_logger.v0_preemption_warnings is False
    v0 = ServingEngine(log_interval_s=0.001, v0_preemption_warnings=True, num_blocks=8, max_num_seqs=1,
                       max_num_batched_tokens=64, max_model_len=32)
    try:
        assert v0.stat_logger.interval_s == 0.001 and v0.stat_logger.v0_preemption_warnings is True
        assert v0.engine.loaded is host.shared_model()
        ids, _ = v0.prepare(prompt="hello")
        list(v0.submit(ids, {"max_tokens": 3, "temperature": 0.0, "ignore_eos": True}, "logged"))
        # the engine's own loop writes to this logger: V1's stats line, readable back from the page
        wait_for(lambda: v0.log_lines(), "a stats line")
        lines = v0.log_lines()
        assert lines[0]["kind"] == "stats" and "[loggers.py] Engine 000: Avg prompt throughput" in lines[0]["line"]
        assert v0.log_lines(since=lines[-1]["time"] + 1) == []
    finally:
        v0.stop()


def test_a_prompt_that_fills_the_context_is_refused_and_a_chat_the_engine_refuses_says_why(serving, monkeypatch):
    """Not one token of room left is no room: refused even with no max_tokens named; a chat the
    engine cannot encode (a model without a chat template: the shipped one has one, so the
    engine's refusal is played here) is refused with the engine's own reason."""
    import engine
    from courseapp.demo.host import ServingEngine, ServingRefused

    n = len(serving.engine.tokenizer.encode("hello"))
    full = ServingEngine(num_blocks=8, max_num_seqs=1, max_num_batched_tokens=64, max_model_len=n)
    one_left = ServingEngine(num_blocks=8, max_num_seqs=1, max_num_batched_tokens=64, max_model_len=n + 1)
    try:
        with pytest.raises(ServingRefused, match=f"you requested {n + 1} tokens"):
            full.prepare(prompt="hello")
        assert one_left.prepare(prompt="hello")[1] == 1  # one token of room is room for one
    finally:
        full.stop()
        one_left.stop()
    def no_template(messages, **kwargs):
        raise engine.RequestError("this model has no chat template: send a plain prompt")

    monkeypatch.setattr(serving.engine, "encode_chat", no_template)
    with pytest.raises(ServingRefused) as refused:
        serving.prepare(messages=[{"role": "user", "content": "x"}])
    assert str(refused.value) == "this model has no chat template: send a plain prompt"


def test_open_streams_to_an_event_loop_as_the_api_view_does(serving):
    import asyncio

    async def ask():
        handle, prompt_tokens = await serving.open(messages=None, prompt="hello", max_tokens=3,
                                                   sampling={"temperature": 0.0, "ignore_eos": True}, request_id="async-1")
        outputs = [out async for out in handle]
        return prompt_tokens, outputs

    async def chat():
        messages = [{"role": "system", "content": "짧게"}, {"role": "user", "content": "안녕"}]  # fits 64 tokens
        handle, prompt_tokens = await serving.open(messages=messages, prompt="", max_tokens=2,
                                                   sampling={"temperature": 0.0, "ignore_eos": True}, request_id="async-2")
        return prompt_tokens, [out async for out in handle], len(serving.engine.encode_chat(messages))

    prompt_tokens, outputs = asyncio.run(ask())
    assert prompt_tokens == len(serving.engine.tokenizer.encode("hello"))
    assert outputs[-1].finished and len(outputs[-1].token_ids) == 3
    assert {out.request_id for out in outputs} == {"async-1"}  # the API's id, which abort names
    prompt_tokens, outputs, chat_tokens = asyncio.run(chat())
    assert prompt_tokens == chat_tokens and outputs[-1].request_id == "async-2" and len(outputs[-1].token_ids) == 2


def test_a_sink_takes_the_outputs_in_the_engine_thread_as_the_scaled_workers_pipe_does(serving):
    class Collect:
        loop = None

        def __init__(self):
            self.items, self.threads = [], set()

        def put(self, item):
            self.items.append(item)
            self.threads.add(threading.current_thread().name)

    sink = Collect()
    ids, _ = serving.prepare(prompt="hello")
    serving.submit(ids, {"max_tokens": 2, "temperature": 0.0, "ignore_eos": True}, "piped", sink=sink)
    wait_for(lambda: len(sink.items) >= 2 and not hasattr(sink.items[-1], "token_ids"), "the end mark in the sink")
    outputs = sink.items[:-1]  # then the end mark, as a handle's queue gets it
    assert outputs[-1].finished and len(outputs[-1].token_ids) == 2 and {o.request_id for o in outputs} == {"piped"}
    assert threading.current_thread().name not in sink.threads


def test_the_engine_process_gets_the_torch_threads_the_settings_name(settings):
    settings.DEMO_ENGINE_PROCESS, settings.DEMO_ENGINE_THREADS = True, 3
    made = host._embedded_host()
    assert type(made).__name__ == "EngineProcess" and made.torch_threads == 3
    settings.DEMO_ENGINE_PROCESS = False
    assert isinstance(host._embedded_host(), EmbeddedHost)
