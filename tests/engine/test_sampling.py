"""Sampling options: per-request parameters, seeds, top-k/top-p, stop conditions."""
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.sampling import sample
from tests.engine.test_parity import prompts


def engine(path):
    return LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64))


def test_same_seed_same_tokens_different_seed_different_tokens(tiny_llama):
    p = prompts(1, seed=31)[0]
    params = dict(temperature=1.5, max_tokens=16, ignore_eos=True)
    a = engine(tiny_llama).generate(p, SamplingParams(seed=7, **params))[0].token_ids
    b = engine(tiny_llama).generate(p, SamplingParams(seed=7, **params))[0].token_ids
    c = engine(tiny_llama).generate(p, SamplingParams(seed=8, **params))[0].token_ids
    assert a == b and a != c


def test_top_k_one_is_greedy():
    logits = torch.tensor([[0.1, 3.0, 0.2, 2.9]])
    gen = torch.Generator().manual_seed(0)
    assert all(sample(logits, [SamplingParams(temperature=1.0, top_k=1)], [gen]) == [1] for _ in range(20))


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen = {sample(logits, [SamplingParams(temperature=1.0, top_p=0.7)], [gen])[0] for _ in range(200)}
    assert seen == {0, 1}


def test_per_request_parameters_in_one_batch(tiny_llama):
    eng = engine(tiny_llama)
    p = prompts(1, seed=32)[0]
    greedy, hot = eng.generate([p, p], [SamplingParams(temperature=0, max_tokens=5), SamplingParams(temperature=0, max_tokens=9)])
    assert len(greedy.token_ids) <= 5 and len(hot.token_ids) <= 9
    assert hot.token_ids[: len(greedy.token_ids)] == greedy.token_ids


def test_stop_token_ids_and_length(tiny_llama):
    eng = engine(tiny_llama)
    p = prompts(1, seed=33)[0]
    free = eng.generate(p, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 10
    stop_at = free.token_ids[3]
    first = free.token_ids.index(stop_at)
    stopped = engine(tiny_llama).generate(p, SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop_at]))[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop_at
    assert stopped.token_ids == free.token_ids[: first + 1]


def test_eos_stops_unless_ignored(tiny_llama):
    eng = engine(tiny_llama)
    eos = next(iter(eng.loaded.eos_token_ids))
    # A random model rarely samples EOS by itself, so the stop rule is checked directly.
    req = eng.requests[eng.add_request([1, 2, 3], SamplingParams(max_tokens=5))]
    assert eng._check_stop(req, eos).value == "finished_stopped"
    req2 = eng.requests[eng.add_request([1, 2, 3], SamplingParams(max_tokens=5, ignore_eos=True))]
    req2.output_token_ids.append(eos)
    assert eng._check_stop(req2, eos) is None
