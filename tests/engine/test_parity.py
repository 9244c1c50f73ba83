"""Greedy outputs are token-identical to transformers' `model.generate`, request by request,
under every scheduling situation the engine has (the oracle for correctness)."""
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, MistralConfig

from engine import EngineConfig, LLMEngine, SamplingParams
from tests.engine.conftest import reference_generate

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def prompts(n, length_range=(5, 40), seed=0, vocab=250):
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(rng.randint(*length_range))] for _ in range(n)]


def run_checked(engine: LLMEngine, arrivals: dict[int, list[tuple[str, list[int]]]], max_steps=2000):
    """Step the engine, adding requests at the given steps; check the pool after every step."""
    step = 0
    while step in arrivals or engine.has_unfinished_requests() or any(s > step for s in arrivals):
        for rid, prompt in arrivals.get(step, []):
            engine.add_request(prompt, GREEDY, request_id=rid)
        if engine.has_unfinished_requests():
            engine.step()
            engine.pool.check(engine.block_tables())
        step += 1
        assert step < max_steps
    assert engine.pool.num_used_blocks == 0, "every block is free or cached at the end"


def assert_parity(engine, path, ids_prompts):
    for rid, prompt in ids_prompts:
        out = engine.output(rid)
        assert out.finished
        assert out.token_ids == reference_generate(path, prompt, GREEDY.max_tokens), rid


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_staggered_arrivals_match_generate(tiny_models, arch):
    path = tiny_models[arch]
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=128, max_num_seqs=4, max_num_batched_tokens=64))
    ps = [(f"r{i}", p) for i, p in enumerate(prompts(6, seed=1))]
    arrivals = {0: ps[:2], 3: ps[2:3], 4: ps[3:5], 9: ps[5:]}
    run_checked(engine, arrivals)
    assert_parity(engine, path, ps)


def test_chunked_prefill_mixes_with_decodes(tiny_llama):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=128, max_num_seqs=4, max_num_batched_tokens=10))
    ps = [(f"c{i}", p) for i, p in enumerate(prompts(4, length_range=(20, 45), seed=2))]
    mixed = []
    step = 0
    for rid, prompt in ps:
        engine.add_request(prompt, GREEDY, request_id=rid)
    while engine.has_unfinished_requests():
        event = engine.step()
        engine.pool.check(engine.block_tables())
        kinds = {(s.prefill_tokens > 0, s.decode_tokens > 0) for s in event.scheduled}
        if (True, False) in kinds and (False, True) in kinds:
            mixed.append(event.step)
        assert sum(s.prefill_tokens + s.decode_tokens for s in event.scheduled) <= 10
        step += 1
    assert mixed, "some step carried a prompt chunk and a decode together"
    assert_parity(engine, tiny_llama, ps)


def test_prefix_cache_hits_keep_outputs_identical(tiny_llama):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=128, max_num_seqs=4, max_num_batched_tokens=64))
    system = prompts(1, length_range=(33, 33), seed=3)[0]
    a, b = system + [5, 6, 7], system + [8, 9]
    run_checked(engine, {0: [("a", a)], 2: [("b", b)]})
    assert engine.output("b").metrics.num_cached_tokens == 32
    assert_parity(engine, tiny_llama, [("a", a), ("b", b)])


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_keeps_outputs_identical(tiny_llama, mode, caplog):
    # 14 blocks of 4 tokens: four requests of ~20 tokens + 12 generated cannot all stay.
    engine = LLMEngine(
        EngineConfig(model=tiny_llama, block_size=4, num_blocks=14, max_num_seqs=4, max_num_batched_tokens=64,
                     preemption_mode=mode, enable_prefix_caching=False)
    )
    ps = [(f"p{i}", p) for i, p in enumerate(prompts(4, length_range=(14, 20), seed=4))]
    with caplog.at_level("DEBUG", logger="engine"):
        run_checked(engine, {0: ps})
    assert engine.scheduler.num_preemptions > 0  # what /metrics reports as num_preemptions_total
    assert "preempt" not in caplog.text.lower(), "like vLLM V1, a preemption is counted, not logged"
    assert_parity(engine, tiny_llama, ps)


def test_abort_frees_blocks_and_spares_the_others(tiny_llama):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64))
    ps = [(f"x{i}", p) for i, p in enumerate(prompts(3, seed=5))]
    for rid, p in ps:
        engine.add_request(p, GREEDY, request_id=rid)
    for _ in range(3):
        engine.step()
    used_before = engine.pool.num_used_blocks
    assert engine.abort_request("x1")
    assert engine.pool.num_used_blocks < used_before, "an aborted request returns its blocks at once"
    engine.pool.check(engine.block_tables())
    while engine.has_unfinished_requests():
        engine.step()
        engine.pool.check(engine.block_tables())
    assert engine.output("x1").finish_reason == "abort"
    assert_parity(engine, tiny_llama, [ps[0], ps[2]])


def test_sliding_window_matches_generate(tmp_path):
    """Mistral with a window shorter than the prompts: each query sees only the last 8 keys."""
    torch.manual_seed(7)
    config = MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                           eos_token_id=255, sliding_window=8)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    engine = LLMEngine(EngineConfig(model=str(tmp_path), block_size=4, num_blocks=128, max_num_seqs=4, max_num_batched_tokens=16))
    ps = [(f"w{i}", p) for i, p in enumerate(prompts(4, length_range=(12, 30), seed=6))]
    run_checked(engine, {0: ps[:2], 2: ps[2:]})
    assert_parity(engine, str(tmp_path), ps)


def test_one_step_with_many_attention_groups_matches_generate(tiny_llama):
    """Decodes of very different context lengths and several prompt chunks in the same steps
    are attended in separate padded groups; the padding must never leak into an output."""
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=256, max_num_seqs=12, max_num_batched_tokens=96))
    lengths = [(3, 3), (9, 9), (20, 20), (45, 45), (90, 90), (150, 150)]
    ps = [(f"g{i}", prompts(1, length_range=r, seed=10 + i)[0]) for i, r in enumerate(lengths)]
    late = [(f"h{i}", p) for i, p in enumerate(prompts(4, length_range=(30, 70), seed=9))]
    groups_seen = set()
    original = engine.runner.prepare

    def counting(batch):
        prepared = original(batch)
        groups_seen.add(len(prepared[0].groups))
        return prepared

    engine.runner.prepare = counting
    run_checked(engine, {0: ps, 8: late[:2], 9: late[2:]})
    assert max(groups_seen) >= 3, groups_seen
    assert_parity(engine, tiny_llama, ps + late)
