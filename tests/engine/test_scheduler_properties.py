"""Property-based: whatever the arrival pattern, pool size (as long as the largest request fits in it
alone), seat limit, token budget, block size, prefix caching and preemption mode, every request
finishes with exactly the tokens transformers' greedy `generate` gives it alone, and the pool's
books balance after every step."""
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, LLMEngine, SamplingParams
from tests.engine.conftest import reference_generate

# A few shared starts, so some prompts share whole blocks (prefix-cache hits) and some do not.
STARTS = [[7, 8, 9, 10, 11, 12, 13, 14], [7, 8, 9, 10, 200, 201], [99]]


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 6))
    requests = []
    for i in range(n):
        start = draw(st.sampled_from(STARTS + [[]]))
        tail = draw(st.lists(st.integers(1, 250), min_size=0 if start else 1, max_size=16))
        requests.append({"id": f"q{i}", "prompt": start + tail, "max_tokens": draw(st.integers(1, 10)),
                         "arrives": draw(st.integers(0, 4))})
    block_size = draw(st.sampled_from([2, 4]))
    largest = max(math.ceil((len(r["prompt"]) + r["max_tokens"]) / block_size) for r in requests)
    seats = draw(st.integers(1, 4))  # the engine refuses fewer blocks than seats (each needs one)
    config = dict(block_size=block_size, num_blocks=max(largest, seats) + draw(st.integers(0, 3)), max_num_seqs=seats,
                  max_num_batched_tokens=draw(st.integers(4, 48)), enable_prefix_caching=draw(st.booleans()), preemption_mode=draw(st.sampled_from(["recompute", "swap"])))
    return requests, config


def test_every_request_gets_the_tokens_it_would_get_alone(tiny_llama):
    alone: dict[tuple, list[int]] = {}
    seen = {"preempted": 0, "swapped": 0, "hits": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(workload=workloads())
    def check(workload):
        requests, config = workload
        engine = LLMEngine(EngineConfig(model=tiny_llama, **config))
        step, pending = 0, sorted(requests, key=lambda r: r["arrives"])
        while pending or engine.has_unfinished_requests():
            while pending and pending[0]["arrives"] <= step:
                r = pending.pop(0)
                engine.add_request(r["prompt"], SamplingParams(temperature=0, max_tokens=r["max_tokens"]),
                                   request_id=r["id"])
            if engine.has_unfinished_requests():
                engine.step()
                engine.pool.check(engine.block_tables())
                sched = engine.scheduler  # a swapped request keeps its seat: never more than max_num_seqs
                assert len(sched.running) + len(sched.swapped) <= config["max_num_seqs"]
            step += 1
            assert step < 2000, "the engine stopped making progress"
        assert engine.pool.num_used_blocks == 0
        seen["preempted"] += engine.scheduler.num_preemptions > 0
        seen["swapped"] += config["preemption_mode"] == "swap" and engine.scheduler.num_preemptions > 0
        seen["hits"] += engine.scheduler.prefix_hits > 0
        for r in requests:
            key = (tuple(r["prompt"]), r["max_tokens"])
            if key not in alone:
                alone[key] = reference_generate(tiny_llama, r["prompt"], r["max_tokens"])
            out = engine.output(r["id"])
            assert out.finished and out.token_ids == alone[key], (r, config)

    check()
    # The examples reach what the property is about: preemption both ways, and prefix-cache hits.
    assert min(seen.values()) >= 2, seen
