"""Step events are JSON data that tell the whole story; metrics add up."""
import json

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.events import replay
from engine.metrics import LOG_LINE
from tests.engine.test_parity import prompts


def run_to_the_end(model, seed, max_tokens, picture=True):
    """Three requests stepped to the end: the engine and every step's event, as JSON data."""
    engine = LLMEngine(EngineConfig(model=model, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64))
    for i, p in enumerate(prompts(3, seed=seed)):
        engine.add_request(p, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), request_id=f"e{i}")
    trace = []
    while engine.has_unfinished_requests():
        trace.append(json.loads(engine.step(picture=picture).to_json()))
    return engine, trace


def test_events_are_json_and_replay_to_the_final_state(tiny_llama):
    engine, trace = run_to_the_end(tiny_llama, seed=51, max_tokens=5)
    steps = list(replay(list(reversed(trace))))
    assert [e["step"] for e in steps] == list(range(1, len(trace) + 1))
    first = steps[0]
    assert set(first["admitted"]) == {"e0", "e1", "e2"}
    assert all(b["owners"] for b in first["blocks"])
    assert {a["request_id"] for a in first["allocated"]} == {"e0", "e1", "e2"}
    tokens = {}
    for e in steps:
        for rid, t in e["new_tokens"].items():
            tokens.setdefault(rid, []).append(t)
    for rid in tokens:
        assert tokens[rid] == engine.output(rid).token_ids
    assert {f["request_id"] for e in steps for f in e["finished"]} == {"e0", "e1", "e2"}
    assert steps[-1]["running"] == [] and steps[-1]["waiting"] == []


def test_a_step_without_the_picture_tells_the_same_story_without_the_pool(tiny_llama):
    """step(picture=False), as a serving loop nobody watches runs it: the same schedule and
    tokens, no blocks, block tables or gauges."""
    (_, full), (_, bare) = (run_to_the_end(tiny_llama, seed=53, max_tokens=4, picture=p) for p in (True, False))
    assert len(full) == len(bare)
    assert all(f["block_tables"] for f in full[:-1])  # the last step finished everyone
    for f, b in zip(full, bare):
        assert f["blocks"] and f["metrics"]
        assert b["blocks"] == [] and b["block_tables"] == {} and b["metrics"] == {}
        for key in ("scheduled", "admitted", "allocated", "freed", "finished", "new_tokens", "running", "waiting"):
            assert f[key] == b[key], key


def test_metrics_snapshot_counts_and_log_line(tiny_llama):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64))
    ps = prompts(2, seed=52)
    outs = engine.generate(ps, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    snap = engine.metrics_snapshot()
    assert snap.prompt_tokens_total == sum(len(p) for p in ps)
    assert snap.generation_tokens_total == 12
    assert snap.requests_finished_total == 2 and snap.num_requests_running == 0
    assert snap.kv_blocks_used == 0 and snap.kv_cache_usage_perc == 0.0
    assert all(o.metrics.ttft is not None and o.metrics.ttft <= o.metrics.e2e for o in outs)
    line = snap.log_line()
    assert line.startswith("Engine 000: Avg prompt throughput:") and "GPU KV cache usage: 0.0%" in line
    assert "Running: 0 reqs, Waiting: 0 reqs" in line and "Preemption" not in line, "V1 logs no preemptions"
    assert line.count(",") == LOG_LINE.count(",")


def test_paged_waste_is_only_the_last_partial_block(tiny_llama):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64))
    for p in prompts(3, seed=53):
        engine.add_request(p, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    engine.step()
    engine.step()
    snap = engine.metrics_snapshot()
    assert snap.kv_tokens_allocated - snap.kv_tokens_used == snap.wasted_slots
    assert snap.wasted_slots <= 3 * (4 - 1), "at most one partly filled block per request"


def test_queue_time_is_the_wait_before_first_being_scheduled(tiny_llama):
    """vLLM's request_queue_time: arrival → first scheduled. With one seat, the second request
    waits the whole of the first; the first hardly waits at all."""
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=1, max_num_batched_tokens=64))
    a, b = prompts(2, seed=53)
    engine.add_request(a, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), request_id="first")
    engine.add_request(b, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), request_id="second")
    while engine.has_unfinished_requests():
        engine.step()
    first, second = engine.output("first").metrics, engine.output("second").metrics
    assert 0 <= first.queue_time <= first.ttft
    assert second.queue_time >= first.e2e - first.queue_time - 1e-3  # it waited while the first ran
    assert second.queue_time <= second.ttft


def test_prompt_tokens_count_the_whole_prompt_cached_tokens_included(tiny_llama):
    """vLLM V1 counts every prompt token once, at the request's first token, whether computed or
    found in the prefix cache: "prompt tokens/s" does not drop when the cache hits."""
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=4,
                                    max_num_batched_tokens=64, enable_prefix_caching=True))
    p = prompts(1, length_range=(30, 30), seed=53)[0]
    for _ in range(2):
        engine.generate(p, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    snap = engine.metrics_snapshot()
    assert snap.prefix_cache_hits_total >= 24
    assert snap.prompt_tokens_total == 2 * len(p)
