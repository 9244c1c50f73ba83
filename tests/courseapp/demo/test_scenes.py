"""Each lesson scene makes its point on the real engine: every preset's RunSession runs to its
end (no step delay) and its frames are read the way the page reads them."""
import logging
import re

import pytest

from courseapp.demo import frames, presets, services, traces
from courseapp.demo.host import RunSession
from tests.courseapp.demo.watcher import Watcher

_runs: dict[str, Watcher] = {}
_sessions: dict[str, RunSession] = {}
_engine_logs: dict[str, list[str]] = {}  # what the engine logged during each preset's run


class _Collect(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record):
        self.into.append(record.getMessage())


def frames_of(name: str) -> list[dict]:
    """Every frame a preset's run published (each preset runs once per test session), as a viewer
    applying the deltas drew it. No step delay and no frame coalescing: every step is a frame."""
    if name not in _runs:
        run(name)
    return _runs[name].frames


def run(name: str) -> tuple[Watcher, RunSession]:
    if name not in _runs:
        spec = services.run_spec(preset=name)
        spec["step_delay"] = 0
        session = RunSession(f"scene-{name}", spec, publish=None)
        watcher = session.publish = Watcher(session_of=lambda: session)
        engine_logger = logging.getLogger("engine")
        handler, level = _Collect(_engine_logs.setdefault(name, [])), engine_logger.level
        engine_logger.addHandler(handler)
        engine_logger.setLevel(logging.DEBUG)
        fps = frames.MAX_FPS
        frames.MAX_FPS = float("inf")  # every step due
        try:
            session.run()
        finally:
            frames.MAX_FPS = fps
            engine_logger.removeHandler(handler)
            engine_logger.setLevel(level)
        _runs[name], _sessions[name] = watcher, session
    return _runs[name], _sessions[name]


def lanes(name: str) -> dict[str, dict]:
    return {lane["name"]: lane for lane in frames_of(name)[-1]["lanes"]}


def summary(name: str) -> dict[str, dict]:
    return {lane["name"]: lane for lane in frames_of(name)[-1]["summary"]}


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_a_viewer_applying_deltas_has_at_every_step_exactly_the_picture_a_fresh_snapshot_shows(name):
    watcher, session = run(name)
    assert watcher.messages[0]["type"] == "snapshot"
    assert all(m["type"] == "delta" for m in watcher.messages[1:]), "after the first picture, only deltas"
    assert [m["seq"] for m in watcher.messages] == list(range(1, len(watcher.messages) + 1))
    assert len(watcher.messages) > session.builder.lanes[0].step  # a frame for every step
    assert watcher.mismatches == [], f"the picture drifted from the snapshot at frames {watcher.mismatches[:5]}"
    assert watcher.frames[-1] == {**session.stream.snapshot(), "type": "delta"}


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_deltas_are_small_and_the_replay_of_the_stored_trace_shows_what_the_viewers_saw(name):
    watcher, session = run(name)
    sizes = [len(traces.encode_text(m).encode()) for m in watcher.messages]
    assert sum(sizes[1:]) / len(sizes[1:]) <= 10 * 1024, "a delta is a few KB, not the picture again"
    assert sum(sizes[1:]) / len(sizes[1:]) < sizes[0] / 3
    live = [f["lanes"] for f in watcher.frames]
    stored = [f["lanes"] for f in traces.frames(session.trace.packed())]
    # Each stored step is a picture some viewer saw, in the same order, and replay ends on the last one.
    at = 0
    for picture in stored:
        at = live.index(picture, at)
    assert stored[-1] == live[-1]


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_scene_ends_with_its_figures_kept_for_the_end_screen(name):
    final = frames_of(name)[-1]
    assert final["status"] == "finished" and final["scene"] == name
    assert all(frame["summary"] is None for frame in frames_of(name)[:-1]), "the summary is the end screen's"
    for lane in final["summary"]:
        assert lane["steps"] > 0 and lane["tokens"] > 0
        assert lane["kv_peak"] > 0 and lane["kv_peak_blocks"] > 0  # the pool is empty now; its peak is not
        # The run's throughput: all its tokens over all its engine time (not the last step's rate).
        assert lane["tok_s"] == pytest.approx(lane["tokens"] / lane["engine_s"], rel=0.01)
    assert [lane["name"] for lane in final["summary"]] == [lane["name"] for lane in final["lanes"]]


def test_static_batching_draws_idle_slots_and_both_lanes_batch_four_without_prefix_caching():
    by_lane = lanes("static-vs-continuous")
    static, continuous = by_lane["static"], by_lane["continuous"]
    assert not static["config"]["enable_prefix_caching"] and not continuous["config"]["enable_prefix_caching"]
    rows = [static["timeline"][r["id"]] for r in static["requests"]]
    assert [row[0] for row in rows] == ["P"] * 4 + ["W"] * 3, "A–D start together as one batch of 4"
    for row in rows[:4]:  # a member that finished early holds its seat, idle, until the batch ends
        done = row.index("F")
        batch_end = max(r.index("F") for r in rows[:4])
        assert row[done + 1 : batch_end + 1] == "I" * (batch_end - done)
    second = [row.index("P") for row in rows[4:]]
    assert len(set(second)) == 1 and second[0] > max(r.index("F") for r in rows[:4]), "E–G wait for the whole first batch"
    assert all("I" not in continuous["timeline"][r["id"]] for r in continuous["requests"])
    s = summary("static-vs-continuous")
    assert s["static"]["idle_slots"] > 0 and s["continuous"]["idle_slots"] == 0
    assert s["static"]["steps"] > s["continuous"]["steps"]
    assert all(r["cached_tokens"] == 0 for lane in by_lane.values() for r in lane["requests"])


def test_reservation_fits_three_and_paged_blocks_run_all_six_without_preemption():
    s = summary("reservation")
    assert s["reserve"]["peak_running"] == 3 and s["paged"]["peak_running"] == 6
    assert s["paged"]["preemptions"] == 0 and s["reserve"]["preemptions"] == 0
    assert s["paged"]["steps"] < s["reserve"]["steps"]
    assert s["paged"]["tokens"] == s["reserve"]["tokens"]


def test_concurrency_shows_each_request_no_faster_but_the_server_much_faster():
    s = summary("concurrency")
    one, eight = s["one"], s["eight"]
    assert eight["tokens"] == 8 * one["tokens"]
    assert all(r["tok_s"] > 0 for r in eight["requests"]), "every request has its own speed"
    assert one["req_tok_s"] == pytest.approx(one["tok_s"], rel=0.05), "alone, the request is the whole server"
    assert eight["req_tok_s"] < eight["tok_s"] / 4, "one request gets a fraction of the server's total"
    assert eight["tok_s"] > 2 * one["tok_s"]


def test_prefix_caching_compares_with_a_caching_off_lane_and_shows_the_timestamp():
    by_lane = lanes("prefix-caching")
    assert set(by_lane) == {"cache", "nocache"}
    assert by_lane["cache"]["config"]["enable_prefix_caching"] and not by_lane["nocache"]["config"]["enable_prefix_caching"]
    cached = {lane: {r["label"]: r["cached_tokens"] for r in by_lane[lane]["requests"]} for lane in by_lane}
    assert cached["cache"]["B"] > 0 and cached["nocache"]["B"] == 0
    assert cached["cache"]["C"] == cached["cache"]["D"] == 0
    s = summary("prefix-caching")
    assert s["cache"]["prompt_computed"] < s["nocache"]["prompt_computed"]
    first = {r["label"]: r["first_block"] for r in s["cache"]["requests"]}
    assert re.search(r"\[\d\d:\d\d:\d\d\]", first["C"]) and re.search(r"\[\d\d:\d\d:\d\d\]", first["D"]), "the clock is in block 0"
    assert first["C"] != first["D"] and first["A"] == first["B"]
    hits = [e for e in by_lane["cache"]["log"] if e["kind"] == "hit"]
    assert [(e["req"], e["tokens"]) for e in hits] == [("B", cached["cache"]["B"])]  # the marked moment on the timeline


def test_preemption_log_uses_the_uis_request_names_and_says_recompute():
    lane = lanes("preemption")["small"]
    names = {r["label"] for r in lane["requests"]}
    preempts = [e for e in lane["log"] if e["kind"] == "preempt"]
    returns = [e for e in lane["log"] if e["kind"] == "recompute"]
    assert preempts and returns
    assert {e["req"] for e in lane["log"]} <= names
    assert all(e["mode"] == "recompute" and e["blocks"] > 0 for e in preempts)
    assert {e["req"] for e in returns} == {e["req"] for e in preempts}, "every preempted request comes back"
    for e in preempts:  # the timeline's ✕ is at the logged step, in the logged request's row
        rid = next(r["id"] for r in lane["requests"] if r["label"] == e["req"])
        assert lane["timeline"][rid][e["step"] - 1] == "X"
    assert sum(r["preemptions"] for r in lane["requests"]) == lane["stats"]["preemptions"] == len(preempts)
    # Like vLLM V1, the engine logs nothing when it preempts (V0's "Sequence group … is preempted").
    assert not [m for m in _engine_logs["preemption"] if "preempt" in m.lower()]
