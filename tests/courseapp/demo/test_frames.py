"""Engine events → frames: the timeline codes, request state and the coalescing clock."""
from courseapp.demo.frames import MAX_FPS, FrameBuilder, LaneState


def event(step, **kw):
    base = dict(step=step, time=0.0, duration_ms=5.0, num_blocks=8, block_size=4, scheduled=[], admitted=[], finished=[],
                preempted=[], swapped_in=[], allocated=[], freed=[], prefix_hits=[], new_tokens={}, blocks=[],
                block_tables={}, waiting=[], running=[], swapped=[],
                metrics=dict(kv_cache_usage_perc=0.25, kv_blocks_used=2, kv_tokens_used=7, wasted_slots=1,
                             prefix_cache_hit_rate=0.0, num_preemptions_total=0, generation_throughput=0.0))
    base.update(kw)
    return base


def test_timeline_codes_follow_the_lesson_picture():
    lane = LaneState("x", "X", {"num_blocks": 8, "block_size": 4})
    lane.add_request("a")
    lane.add_request("b")
    lane.apply(event(1, scheduled=[{"request_id": "a", "prefill_tokens": 5, "decode_tokens": 0}], running=["a"], waiting=["b"]))
    lane.apply(event(2, scheduled=[{"request_id": "a", "prefill_tokens": 0, "decode_tokens": 1}], running=["a"], waiting=["b"],
                     new_tokens={"a": 7}))
    lane.apply(event(3, preempted=[{"request_id": "a", "mode": "recompute"}], waiting=["a", "b"]))
    lane.apply(event(4, scheduled=[{"request_id": "b", "prefill_tokens": 0, "decode_tokens": 1}], running=["b"], waiting=["a"],
                     finished=[{"request_id": "b", "reason": "finished_length"}], new_tokens={"b": 3}))
    assert lane.timeline == {"a": "PDXW", "b": "WWWF"}
    a = lane.to_dict()["requests"][0]
    assert a["label"] == "A" and a["preemptions"] == 1 and a["output_tokens"] == 1
    # The log names requests as the UI does (A, B…), as data the page words in its language.
    assert lane.log == [{"step": 3, "kind": "preempt", "req": "A", "mode": "recompute", "blocks": 0}]


def test_static_batching_keeps_a_finished_seat_idle_until_its_batch_ends():
    lane = LaneState("s", "S", {"num_blocks": 8, "block_size": 4, "scheduling": "static"})
    for rid in "ab":
        lane.add_request(rid)
    decode = lambda *rids: [{"request_id": r, "prefill_tokens": 0, "decode_tokens": 1} for r in rids]  # noqa: E731
    lane.apply(event(1, scheduled=decode("a", "b"), running=["a", "b"]))
    lane.apply(event(2, scheduled=decode("a", "b"), running=["b"], finished=[{"request_id": "a", "reason": "finished_length"}]))
    lane.apply(event(3, scheduled=decode("b"), running=["b"]))
    lane.apply(event(4, scheduled=decode("b"), finished=[{"request_id": "b", "reason": "finished_length"}]))
    lane.apply(event(5))
    assert lane.timeline == {"a": "DFII ", "b": "DDDF "}
    assert lane.stats["idle_slots"] == 2
    continuous = LaneState("c", "C", {"num_blocks": 8, "block_size": 4})
    continuous.add_request("a")
    continuous.apply(event(1, finished=[{"request_id": "a", "reason": "finished_length"}]))
    continuous.apply(event(2))
    assert continuous.timeline == {"a": "F "}


def test_throughput_is_the_runs_tokens_over_its_engine_time_and_the_end_keeps_the_peak():
    lane = LaneState("x", "X", {"num_blocks": 8, "block_size": 4})
    lane.add_request("a")
    lane.add_request("b")
    busy = dict(kv_cache_usage_perc=0.5, kv_blocks_used=4, kv_tokens_used=14, wasted_slots=2, prefix_cache_hit_rate=0.0,
                num_preemptions_total=0, generation_throughput=0.0)
    lane.apply(event(1, duration_ms=100.0, running=["a", "b"], new_tokens={"a": 1, "b": 2}, metrics=busy))
    lane.apply(event(2, duration_ms=300.0, running=["b"], new_tokens={"b": 3}, finished=[{"request_id": "a", "reason": "finished_length"}]))
    assert lane.stats["tok_s"] == 3 / 0.4  # three tokens in 0.4 s of engine time, not the last step's 1 / 0.3
    assert lane.stats["kv_peak"] == 50.0 and lane.stats["kv_usage"] == 25.0
    a, b = lane.requests["a"], lane.requests["b"]
    assert a["finish_reason"] == "finished_length" and a["tok_s"] == 1 / 0.4
    assert b["tok_s"] == 2 / 0.4


def test_a_request_arriving_later_is_blank_before_it_arrived():
    lane = LaneState("x", "X", {})
    lane.apply(event(1))
    lane.apply(event(2))
    lane.add_request("late")
    lane.apply(event(3, waiting=["late"]))
    assert lane.timeline["late"] == "  W"


def test_frames_are_coalesced():
    builder = FrameBuilder("run", [LaneState("x", "X", {})])
    assert not builder.due(now=1e9), "nothing changed: no frame"
    builder.touch()
    assert builder.due(now=1e9)
    first = builder.frame()
    builder.touch()
    assert not builder.due(now=builder._last_sent + 0.5 / MAX_FPS), "at most MAX_FPS frames a second"
    assert builder.due(now=builder._last_sent + 1.01 / MAX_FPS)
    assert builder.frame()["lanes"] == first["lanes"]
