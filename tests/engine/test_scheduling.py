"""Scheduler behaviour the lesson describes: token budget, static vs continuous, prefix hits."""
import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from tests.engine.conftest import reference_generate
from tests.engine.test_parity import prompts


def engine_for(path, **kw):
    base = dict(model=path, block_size=4, num_blocks=128, max_num_seqs=4, max_num_batched_tokens=64)
    return LLMEngine(EngineConfig(**{**base, **kw}))


def run(engine):
    events = []
    while engine.has_unfinished_requests():
        events.append(engine.step())
        engine.pool.check(engine.block_tables())
        assert len(events) < 2000, "the engine stopped making progress"
    return events


def add_varied(engine, n=6):
    lengths = [3, 12, 5, 9, 4, 10, 6, 8][:n]
    for i, (p, m) in enumerate(zip(prompts(n, seed=9), lengths)):
        engine.add_request(p, SamplingParams(temperature=0, max_tokens=m, ignore_eos=True), request_id=f"q{i}")


def test_static_batching_takes_more_steps_than_continuous(tiny_llama):
    static, continuous = engine_for(tiny_llama, scheduling="static"), engine_for(tiny_llama)
    add_varied(static)
    add_varied(continuous)
    assert len(run(static)) > len(run(continuous))


def test_continuous_admits_a_waiting_request_the_step_after_another_finishes(tiny_llama):
    engine = engine_for(tiny_llama, max_num_seqs=2)
    add_varied(engine, 3)
    events = run(engine)
    first_finish = next(e.step for e in events if e.finished)
    admitted_q2 = next(e.step for e in events if "q2" in e.admitted)
    assert admitted_q2 == first_finish + 1


def test_static_admits_the_next_batch_only_when_the_whole_batch_is_done(tiny_llama):
    engine = engine_for(tiny_llama, max_num_seqs=2, scheduling="static")
    add_varied(engine, 3)
    events = run(engine)
    finishes = [e.step for e in events if e.finished]
    admitted_q2 = next(e.step for e in events if "q2" in e.admitted)
    assert admitted_q2 == finishes[1] + 1  # after both q0 and q1


def test_token_budget_and_seat_limit_hold_every_step(tiny_llama):
    engine = engine_for(tiny_llama, max_num_seqs=3, max_num_batched_tokens=16)
    add_varied(engine, 6)
    for event in run(engine):
        assert sum(s.prefill_tokens + s.decode_tokens for s in event.scheduled) <= 16
        assert len(event.running) <= 3


def test_same_long_system_prompt_reuses_full_blocks(tiny_llama):
    engine = engine_for(tiny_llama)
    system = prompts(1, length_range=(40, 40), seed=11)[0]
    engine.add_request(system + [7, 8, 9], SamplingParams(temperature=0, max_tokens=4), request_id="first")
    run(engine)
    engine.add_request(system + [10, 11], SamplingParams(temperature=0, max_tokens=4), request_id="second")
    events = run(engine)
    hit = events[0].prefix_hits[0]
    assert hit["request_id"] == "second" and hit["tokens"] == 40
    # only the rest was computed: 42 prompt tokens − 40 cached
    assert events[0].scheduled[0].prefill_tokens == 2
    snap = engine.metrics_snapshot()
    assert snap.prefix_cache_hits_total == 40 and snap.prefix_cache_queries_total == 43 + 42


def test_changing_the_first_token_gives_zero_hits(tiny_llama):
    engine = engine_for(tiny_llama)
    system = prompts(1, length_range=(40, 40), seed=11)[0]
    engine.add_request(system + [7], SamplingParams(temperature=0, max_tokens=2))
    run(engine)
    engine.add_request([system[0] % 200 + 1] + system[1:] + [7], SamplingParams(temperature=0, max_tokens=2), request_id="ts")
    events = run(engine)
    assert events[0].prefix_hits == []
    assert engine.output("ts").metrics.num_cached_tokens == 0


def test_shared_blocks_carry_a_ref_count_of_two(tiny_llama):
    engine = engine_for(tiny_llama)
    system = prompts(1, length_range=(16, 16), seed=12)[0]
    engine.add_request(system + [1, 2, 3], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), request_id="a")
    engine.step()
    engine.add_request(system + [4, 5], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), request_id="b")
    event = engine.step()
    shared = [b for b in event.blocks if b.ref_cnt == 2]
    assert len(shared) == 4 and all(set(b.owners) == {"a", "b"} for b in shared)


def test_identical_prompt_still_recomputes_its_last_token(tiny_llama):
    engine = engine_for(tiny_llama)
    p = prompts(1, length_range=(16, 16), seed=13)[0]
    engine.add_request(p, SamplingParams(temperature=0, max_tokens=2))
    run(engine)
    engine.add_request(p, SamplingParams(temperature=0, max_tokens=2), request_id="again")
    events = run(engine)
    assert events[0].prefix_hits[0]["tokens"] == 12  # 3 of 4 full blocks: the 16th token is recomputed
    assert events[0].scheduled[0].prefill_tokens == 4


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_marks_and_victim_is_the_latest_admitted(tiny_llama, mode):
    engine = engine_for(tiny_llama, num_blocks=10, preemption_mode=mode, enable_prefix_caching=False)
    for i, p in enumerate(prompts(4, length_range=(10, 12), seed=14)):
        engine.add_request(p, SamplingParams(temperature=0, max_tokens=14, ignore_eos=True), request_id=f"v{i}")
    events = run(engine)
    preempted = [p for e in events for p in e.preempted]
    assert preempted and all(p["mode"] == mode for p in preempted)
    at = next(i for i, e in enumerate(events) if e.preempted)
    first, running_before = events[at], events[at - 1].running
    assert first.preempted[0]["request_id"] == running_before[-1]
    if mode == "swap":
        assert any(e.swapped_in for e in events)
    assert all(engine.output(f"v{i}").finished for i in range(4))


def test_max_length_reservation_fits_fewer_requests_than_paging(tiny_llama):
    """The lesson's §1.2 on the real engine: reserving max_model_len per request leaves most
    slots empty, so fewer requests run at once than with blocks taken as needed."""
    counts = {}
    for mode in ("max_len", "paged"):
        engine = engine_for(tiny_llama, num_blocks=64, max_num_seqs=8, max_model_len=64, kv_reservation=mode)
        add_varied(engine, 6)
        events = run(engine)
        counts[mode] = max(len(e.running) for e in events)
        if mode == "max_len":
            first = events[0]
            assert all(len(blocks) == 16 for blocks in first.block_tables.values())  # 64 tokens / 4 per block
            assert first.metrics["wasted_slots"] > 0.5 * sum(len(b) for b in first.block_tables.values()) * 4
    assert counts["max_len"] == 4 and counts["paged"] > counts["max_len"]


def add_tight(engine):
    """Four requests for a pool of 10 blocks: three are admitted, the fourth waits, and growing
    decodes force preemptions."""
    ps = prompts(4, length_range=(10, 12), seed=14)
    for i, p in enumerate(ps):
        engine.add_request(p, SamplingParams(temperature=0, max_tokens=14, ignore_eos=True), request_id=f"v{i}")
    return ps


def test_a_preempted_request_goes_back_to_the_front_of_the_waiting_queue(tiny_llama):
    """vLLM V1 puts a preempted request back at the head of the waiting queue: it resumes before
    requests that arrived after it and never started."""
    engine = engine_for(tiny_llama, num_blocks=10, preemption_mode="recompute", enable_prefix_caching=False)
    ps = add_tight(engine)
    events = run(engine)
    at = next(i for i, e in enumerate(events) if e.preempted)
    victim = events[at].preempted[0]["request_id"]
    assert "v3" in events[at - 1].waiting, "another request was already waiting when it was preempted"
    assert events[at].waiting[0] == victim
    admissions = [rid for e in events[at + 1:] for rid in e.admitted]
    assert admissions.index(victim) < admissions.index("v3"), "the preempted request is admitted first"
    for i, p in enumerate(ps):
        assert engine.output(f"v{i}").token_ids == reference_generate(tiny_llama, p, 14)


def test_swap_falls_back_to_recompute_when_the_swap_space_is_full(tiny_llama):
    """Swap space for one victim only: the next victim is recomputed instead (as vLLM did), and
    every request still ends with the tokens it gets alone."""
    engine = engine_for(tiny_llama, num_blocks=10, preemption_mode="swap", num_cpu_blocks=3, enable_prefix_caching=False)
    ps = add_tight(engine)
    events = run(engine)
    modes = [(p["request_id"], p["mode"]) for e in events for p in e.preempted]
    assert [m for _, m in modes][:2] == ["swap", "recompute"], modes
    fell_back = next(e for e in events if any(p["mode"] == "recompute" for p in e.preempted))
    assert fell_back.swapped, "the swap space was taken by the request swapped out before"
    assert any(e.swapped_in for e in events)
    for i, p in enumerate(ps):
        assert engine.output(f"v{i}").token_ids == reference_generate(tiny_llama, p, 14)
    assert len(engine.scheduler.cpu_blocks.free) == 3, "the swap space is all given back"
