"""The live view of a served engine (courseapp/demo/served_view.py): its real requests drawn as a
scene's, frames paced, and watching never holds the engine back."""
import threading
import time
from types import SimpleNamespace

import pytest

from courseapp.demo import served_view
from courseapp.demo.host import ServingEngine
from tests.courseapp.demo.watcher import Watcher

OPTIONS = {"num_blocks": 48, "max_num_seqs": 4, "max_num_batched_tokens": 128, "enable_prefix_caching": True, "log_interval_s": 60}
ASK = [{"role": "user", "content": "주문한 운동화가 아직 안 왔어요."}]


@pytest.fixture
def serving():
    engine = ServingEngine(**OPTIONS)
    yield engine
    engine.stop()


def wait_for(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def serve(engine, rid, max_tokens):
    ids, _ = engine.prepare(messages=ASK, max_tokens=max_tokens)
    return engine.submit(ids, {"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}, rid)


def test_the_view_draws_the_served_requests_with_their_blocks_tokens_and_timeline(serving):
    watcher = Watcher()
    serving.view_open(watcher)
    wait_for(lambda: watcher.frames, "the opening snapshot")
    assert watcher.frames[0]["lanes"][0]["requests"] == [] and watcher.frames[0]["scene"] == "served"
    handles = [serve(serving, f"api-{i}", 6 + 4 * i) for i in range(3)]
    finals = [h.result(timeout=60) for h in handles]
    wait_for(lambda: watcher.frames[-1]["lanes"][0]["stats"].get("tokens") == 6 + 10 + 14, "the last step drawn")
    lane = watcher.frames[-1]["lanes"][0]
    requests = {r["id"]: r for r in lane["requests"]}
    assert sorted(r["label"] for r in requests.values()) == ["A", "B", "C"]
    for i, final in enumerate(finals):
        r = requests[f"api-{i}"]
        assert r["output_tokens"] == len(final.token_ids) == 6 + 4 * i and r["status"] == "finished"
        assert r["prompt_tokens"] == len(final.prompt_token_ids) and "운동화" in r["prompt"]
        assert r["text"] == final.text  # decoded from the step events' own tokens
        assert lane["timeline"][f"api-{i}"].rstrip().endswith("F") and "P" in lane["timeline"][f"api-{i}"]
    # While they ran, the pool held their blocks (every step counted, drawn or not); once done they
    # stay as cached blocks for prefix hits.
    assert lane["stats"]["kv_peak_blocks"] >= 3 and lane["blocks"] and lane["stats"]["kv_blocks_used"] == 0
    assert serving.engine.requests == {}, "the engine forgets a request once its caller has the last output"
    serving.view_close()
    assert serving.view_snapshot() is None


def test_frames_are_paced_and_a_stuck_viewer_never_holds_the_engine_back(serving, monkeypatch):
    monkeypatch.setattr(served_view, "BUFFER_STEPS", 4)
    release, published = threading.Event(), []

    def stuck(message):  # the first frame blocks the view's thread until the engine is done
        published.append(message)
        release.wait(60)

    serving.view_open(stuck)
    wait_for(lambda: published, "the opening snapshot")
    started = time.monotonic()
    final = serve(serving, "long", 40).result(timeout=60)
    assert len(final.token_ids) == 40 and time.monotonic() - started < 30
    assert len(published) == 1, "no frame went out while the viewer was stuck"
    release.set()
    wait_for(lambda: serving._view.dropped > 0 and len(published) >= 2, "the view drops steps and goes on")
    assert published[-1]["type"] == "delta"
    serving.view_close()


def test_a_long_lived_engine_keeps_only_the_last_finished_requests_in_the_picture(serving, monkeypatch):
    monkeypatch.setattr(served_view, "KEEP_FINISHED", 3)
    watcher = Watcher()
    serving.view_open(watcher)
    for i in range(6):
        serve(serving, f"r{i}", 2).result(timeout=60)
    wait_for(lambda: "r5" in {r["id"] for r in watcher.frames[-1]["lanes"][0]["requests"]}
             and watcher.frames[-1]["lanes"][0]["requests"][-1]["status"] == "finished", "the sixth drawn")
    lane = watcher.frames[-1]["lanes"][0]
    assert [r["id"] for r in lane["requests"]] == ["r3", "r4", "r5"] and set(lane["timeline"]) == {"r3", "r4", "r5"}
    assert [r["label"] for r in lane["requests"]] == ["D", "E", "F"], "labels keep counting"
    serving.view_close()


def test_a_step_that_ran_without_the_pools_picture_is_skipped_not_fatal():
    """The step under way when the first viewer subscribes was scheduled without the picture."""
    import engine as eng

    bare = eng.LLMEngine(eng.EngineConfig(num_blocks=16, max_num_seqs=2, max_num_batched_tokens=64))
    view = served_view.ServedView(SimpleNamespace(loop=None, engine=bare), publish=lambda message: None)
    bare.add_request("hi", {"max_tokens": 2}, "bare")
    event = bare.step(picture=False).to_dict()
    assert event["metrics"] == {}
    view._apply(event)
    assert view.lane.requests == {} and not view.builder._dirty
    view._apply(bare.step(picture=True).to_dict())
    assert list(view.lane.requests) == ["bare"] and view.lane.stats["tokens"] == 1
