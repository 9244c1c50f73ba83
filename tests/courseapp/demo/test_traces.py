"""Traces: deltas that rebuild every frame exactly, and every preset's run stored in ≤ 1 MB."""

import gzip

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


# Live frames: what a viewer that joins late, or fell behind, is given.

def test_a_stream_numbers_its_messages_and_a_late_viewer_gets_the_latest_picture_whole():
    stream = traces.FrameStream()
    assert stream.snapshot() is None and stream.snapshot_text() is None, "no frame yet: nothing to show"
    first = {"lanes": [{"step": 0, "name": "큐"}]}
    second = {"lanes": [{"step": 1, "name": "큐"}]}
    assert stream.encode(first, sent_at=1.5) == {**first, "type": "snapshot", "seq": 1, "sent_at": 1.5}
    delta = stream.encode(second, sent_at=2.5)
    assert delta == {"type": "delta", "seq": 2, "sent_at": 2.5, "d": traces.diff(first, second)}
    assert stream.snapshot() == {**second, "type": "snapshot", "seq": 2}
    seq, text = stream.snapshot_text()
    assert seq == 2 and text == '{"lanes":[{"step":1,"name":"큐"}],"type":"snapshot","seq":2}', "compact JSON, Korean as is"
    assert stream.snapshot_text()[1] is text, "made once per frame, however many viewers ask"
    stream.encode(first, sent_at=3.0)
    assert stream.snapshot_text() == (3, '{"lanes":[{"step":0,"name":"큐"}],"type":"snapshot","seq":3}')


def test_a_mirror_follows_the_stream_refuses_a_gap_and_is_repaired_by_a_snapshot():
    stream, mirror = traces.FrameStream(), traces.FrameMirror()
    assert mirror.snapshot_text() is None
    pictures = [{"step": n, "timeline": "P" + "D" * n} for n in range(4)]
    messages = [stream.encode(p, sent_at=float(n)) for n, p in enumerate(pictures)]
    assert mirror.apply(messages[0]) and mirror.apply(messages[1])
    assert mirror.state == pictures[1] and mirror.seq == 2
    assert mirror.snapshot_text() == (2, traces.encode_text({**pictures[1], "type": "snapshot", "seq": 2}))
    assert mirror.snapshot_text()[1] is mirror.snapshot_text()[1], "made once per frame, however many viewers ask"
    assert not mirror.apply(messages[3]), "seq 4 after 2: a gap"
    assert mirror.state is None and mirror.snapshot_text() is None
    assert not mirror.apply(messages[2]), "still broken: only a snapshot repairs it"
    assert not mirror.apply({"type": "hello", "seq": 3})
    assert mirror.apply(stream.snapshot())
    assert mirror.state == pictures[3] and mirror.seq == 4


def test_ended_pictures_keep_the_latest_runs_up_to_their_number():
    ended = traces.EndedPictures(kept=2)
    ended.keep("a", (5, "A"))
    ended.keep("b", None)  # a run that never drew a frame
    ended.keep("b", (1, "B"))
    ended.keep("a", (6, "A2"))  # a run kept again moves to its latest picture
    assert ended.get("a") == (6, "A2") and ended.get("b") == (1, "B")
    ended.keep("c", (9, "C"))
    assert [ended.get(r) for r in "abc"] == [(6, "A2"), None, (9, "C")], "the one kept longest ago goes"
    assert traces.EndedPictures().kept == 100


def test_a_recorder_keeps_its_first_frames_up_to_its_limit_as_the_smallest_deltas():
    recorder = traces.TraceRecorder(max_frames=3)
    assert len(recorder) == 0 and recorder.packed() is None
    pictures = [{"timeline": "P" + "D" * n} for n in range(5)]
    for n, picture in enumerate(pictures):
        recorder.add(picture)
        assert len(recorder) == min(n + 1, 3)
    assert recorder.deltas == [[1, {"timeline": [3, "D"]}, []]] * 2, "each step stored as what it gained"
    assert traces.frames(recorder.packed()) == pictures[:3]


def test_a_stored_trace_is_compact_reproducible_json_in_gzip():
    base, deltas = {"name": "선점", "blocks": [1, 2]}, [[1, {"name": [3, "!"]}, []]]
    packed = traces.pack(base, deltas)
    assert packed == traces.pack(base, deltas) and packed[4:8] == b"\0\0\0\0", "no time in the gzip header: same run, same bytes"
    body = gzip.decompress(packed)
    assert body == '{"v":1,"base":{"name":"선점","blocks":[1,2]},"deltas":[[1,{"name":[3,"!"]},[]]]}'.encode(), \
        "Korean as UTF-8, no spaces"
    assert traces.unpack(packed) == {"v": 1, "base": base, "deltas": deltas}
    assert traces.unpack(None) == traces.unpack(b"") == {"v": 1, "base": None, "deltas": []}, "what replay serves for a run without frames"
    assert traces.frames(None) == [] and traces.last_frame(None) is None


def test_a_delta_is_the_smallest_of_its_kinds():
    # a value of another type is sent whole
    assert traces.diff({"a": 1}, [1]) == [0, [1]] and traces.diff([1], {"a": 1}) == [0, {"a": 1}]
    assert traces.diff("ab", 5) == [0, 5] and traces.diff(5, "ab") == [0, "ab"]
    # a list item that changed a little is sent as its own delta
    assert traces.diff([{"a": 1, "b": 2}, 7], [{"a": 1, "b": 3}, 7]) == [2, 2, {"0": [1, {"b": [0, 3]}, []]}]
    # up to half the items and one more changed: item by item; more: the whole list
    old = list(range(6))
    four = [10, 11, 12, 13, 4, 5]
    five = [10, 11, 12, 13, 14, 5]
    assert traces.diff(old, four) == [2, 6, {str(i): [0, 10 + i] for i in range(4)}]
    assert traces.diff(old, five) == [0, five]


def test_a_timeline_shift_is_found_up_to_64_characters_keeping_at_least_one():
    assert traces.diff("abc", "cX") == [4, 2, "X"]
    assert traces.diff("abc", "XY") == [0, "XY"], "nothing of the old kept: sent whole"
    long = "".join(chr(0xAC00 + i) for i in range(100))  # 100 distinct syllables
    assert traces.diff(long, long[64:] + "끝") == [4, 64, "끝"]
    assert traces.diff(long, long[65:] + "끝") == [0, long[65:] + "끝"], "past 64: not searched"


def test_patch_forgets_a_key_already_gone_and_names_a_delta_it_does_not_know():
    assert traces.patch({"a": 1}, [1, {}, ["b"]]) == {"a": 1}
    with pytest.raises(ValueError, match=r"^unknown delta kind 9$"):
        traces.patch({}, [9])
