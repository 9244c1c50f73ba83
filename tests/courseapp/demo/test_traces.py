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


def _kept(codes: str, keep: int) -> str:
    return codes[-keep:]  # what frames.LaneState keeps of a timeline (MAX_TIMELINE)


def test_a_timeline_past_its_kept_length_is_a_shift_and_rebuilds_exactly():
    """Issue #34: the kind-4 delta (drop from the front, append) had no test; a mutant that lost
    one character per shift went unnoticed. The timeline of a long run keeps its last characters."""
    codes = "PPPDDDDWWDDXWWPPDDDDDDDDFFF" * 3
    keep = 20
    old = _kept(codes[:40], keep)
    for step in range(41, len(codes) + 1):
        new = _kept(codes[:step], keep)
        delta = traces.diff({"A": old}, {"A": new})
        assert delta[1]["A"][0] == 4 and delta[1]["A"][1] == 1 and delta[1]["A"][2] == new[-1:]
        assert traces.patch({"A": old}, delta) == {"A": new}
        old = new
    two_steps = traces.diff("abcdefgh", "cdefghXY")
    assert two_steps == [4, 2, "XY"] and traces.patch("abcdefgh", two_steps) == "cdefghXY"


def test_the_browser_applies_a_shift_as_the_server_made_it():
    """static/js/demo.js's patch(), run by Node on deltas made here, gives the same strings."""
    import json
    import re
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    source = (Path(__file__).resolve().parents[3] / "static" / "js" / "demo.js").read_text(encoding="utf-8")
    patch_js = re.search(r"\n  function patch\(value, delta\) \{.*?\n  \}\n", source, re.S).group(0)
    cases = [("abcdefgh", "cdefghXY"), ("PPDDDW", "PDDDWD"), ({"A": "xyz", "B": [1, 2]}, {"A": "yzQ", "B": [1, 2, 3]})]
    payload = [[old, traces.diff(old, new)] for old, new in cases]
    script = patch_js + f"\nconsole.log(JSON.stringify({json.dumps(payload)}.map(([v, d]) => patch(v, d))));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=30, check=True).stdout
    assert json.loads(out) == [new for _old, new in cases]


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
