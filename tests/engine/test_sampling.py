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


def test_top_p_stops_at_the_smallest_set_that_reaches_it():
    """Tokens of 0.5, 0.25, 0.25: top_p 0.5 keeps the first alone (it holds 0.5 already, as in
    vLLM); a hair more needs the second too."""
    logits = torch.log(torch.tensor([[2.0, 1.0, 1.0]]))  # softmax: exactly 0.5, 0.25, 0.25
    gen = torch.Generator().manual_seed(0)
    assert {sample(logits, [SamplingParams(top_p=0.5)], [gen])[0] for _ in range(100)} == {0}
    assert {sample(logits, [SamplingParams(top_p=0.51)], [gen])[0] for _ in range(200)} == {0, 1}


def test_temperature_below_one_sharpens_and_above_one_flattens():
    logits = torch.tensor([[2.0, 0.0]])  # at temperature 1: 88% / 12%
    gen = torch.Generator().manual_seed(0)
    cold = [sample(logits, [SamplingParams(temperature=0.25)], [gen])[0] for _ in range(400)]
    hot = [sample(logits, [SamplingParams(temperature=4.0)], [gen])[0] for _ in range(400)]
    assert cold.count(0) >= 396  # softmax([8, 0]): 99.97%
    assert 200 <= hot.count(0) <= 300  # softmax([0.5, 0]): 62%


def test_parameters_out_of_range_are_refused_naming_the_parameter():
    import pytest

    from engine.sampling import SamplingError

    for bad, message in [(dict(max_tokens=0), "max_tokens must be a positive integer, got 0"),
                         (dict(max_tokens=-3), "max_tokens must be a positive integer"),
                         (dict(max_tokens=2.5), "max_tokens must be a positive integer, got 2.5"),
                         (dict(temperature=-0.1), "temperature must be ≥ 0, got -0.1"),
                         (dict(top_p=0.0), r"top_p must be in \(0, 1\], got 0.0"),
                         (dict(top_p=1.01), r"top_p must be in \(0, 1\], got 1.01"),
                         (dict(top_k=-1), "top_k must be ≥ 0, got -1")]:
        with pytest.raises(SamplingError, match=message):
            SamplingParams(**bad)
    edge = SamplingParams(max_tokens=1, temperature=0, top_p=1.0, top_k=0)  # the limits themselves are fine
    assert edge.max_tokens == 1 and edge.greedy
    assert SamplingParams(stop="。").stop == ["。"]  # one stop string is a list of one


def test_per_request_parameters_in_one_batch(tiny_llama):
    """Greedy, top-p and top-k requests share a step; each row is sampled under its own
    parameters (and generator), so each request gets exactly the tokens it gets alone, whichever
    request comes first in the batch."""
    p = prompts(1, seed=32)[0]
    mixed = [
        SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
        SamplingParams(temperature=1.3, top_p=0.9, seed=5, max_tokens=8, ignore_eos=True),
        SamplingParams(temperature=0.9, top_k=8, seed=6, max_tokens=10, ignore_eos=True),
    ]
    alone = [engine(tiny_llama).generate(p, sp)[0].token_ids for sp in mixed]
    assert [len(t) for t in alone] == [6, 8, 10]
    greedy = alone[0]
    assert alone[1][:6] != greedy and alone[2][:6] != greedy, "the sampled requests really sample"
    for order in ([0, 1, 2], [1, 2, 0], [2, 0, 1]):
        eng = engine(tiny_llama)
        for i in order:
            eng.add_request(p, mixed[i], request_id=f"r{i}")
        first = eng.step()
        assert {s.request_id for s in first.scheduled} == {"r0", "r1", "r2"}, "one batch"
        while eng.has_unfinished_requests():
            eng.step()
        assert [eng.output(f"r{i}").token_ids for i in range(3)] == alone, order


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


def test_one_batched_call_applies_each_rows_own_filters():
    """Four rows of the same logits, four parameter sets, sampled in one call: each row keeps
    exactly the tokens its own filters allow (top-k 2, top-p 0.5, none, greedy)."""
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]])).repeat(4, 1)
    params = [SamplingParams(top_k=2), SamplingParams(top_p=0.5), SamplingParams(), SamplingParams(temperature=0)]
    seen = [set() for _ in params]
    torch.manual_seed(0)
    for _ in range(300):
        for row, token in enumerate(sample(logits, params, [None] * 4)):
            seen[row].add(token)
    assert seen == [{0, 1}, {0, 1}, {0, 1, 2, 3}, {0}]
