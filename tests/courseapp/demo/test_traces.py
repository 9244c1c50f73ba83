"""Traces: deltas that rebuild every frame exactly, and every preset's run stored in ≤ 1 MB."""

import pytest

from courseapp.demo import presets, services, traces
from courseapp.demo.host import RunSession
from tests.courseapp.demo.watcher import Watcher

MB = 1024 * 1024


def test_deltas_rebuild_every_frame():
    frames = [
        {"lanes": [{"step": 0, "timeline": {"A": ""}, "blocks": [[0, 1, 3, 0, ["A"]]], "queues": {"waiting": ["A"]}}]},
        {"lanes": [{"step": 1, "timeline": {"A": "P"}, "blocks": [[0, 1, 16, 0, ["A"]], [1, 1, 2, 0, ["A"]]], "queues": {"waiting": []}}]},
        {"lanes": [{"step": 2, "timeline": {"A": "PD", "B": " "}, "blocks": [[1, 1, 3, 0, ["A"]]], "queues": {"running": ["A"]}}]},
        {"lanes": [{"step": 3, "timeline": {"B": "W"}, "blocks": [], "queues": {"running": []}, "new": None}]},
    ]
    recorder = traces.TraceRecorder()
    for frame in frames:
        recorder.add(frame)
    assert traces.frames(recorder.packed()) == frames
    assert traces.last_frame(recorder.packed()) == frames[-1]


def test_a_growing_timeline_is_stored_as_what_it_gained():
    assert traces.diff({"A": "PDD"}, {"A": "PDDD"}) == [1, {"A": [3, "D"]}, []]


def test_frames_are_copied_when_recorded_not_shared_with_the_live_state():
    live = {"lanes": [{"timeline": {"A": "P"}}]}
    recorder = traces.TraceRecorder()
    recorder.add(live)
    live["lanes"][0]["timeline"]["A"] += "D"  # the engine's lane state changes in place
    recorder.add(live)
    assert [f["lanes"][0]["timeline"]["A"] for f in traces.frames(recorder.packed())] == ["P", "PD"]


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_preset_run_is_stored_in_at_most_a_megabyte(name, settings):
    spec = services.run_spec(preset=name)
    spec["step_delay"] = 0
    watcher = Watcher()
    session = RunSession(f"trace-{name}", spec, publish=watcher)
    session.run()
    packed = session.trace.packed()
    assert len(packed) <= MB
    stored = traces.frames(packed)
    assert len(stored) == len(session.trace) > 10
    final = watcher.frames[-1]["lanes"]
    assert stored[-1]["lanes"] == final  # the replay ends on the picture the run ended on
