"""Penalties, biases, min_tokens, min_p and logprobs, each against a computation written out here
from its definition (vLLM's and OpenAI's), and logprobs against a plain transformers forward."""
import math

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.logits_processors import process
from engine.request import Request
from engine.sampling import SamplingError, sample
from tests.engine.conftest import _reference_model
from tests.engine.test_parity import prompts


def engine(path, **kw):
    options = dict(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64) | kw
    return LLMEngine(EngineConfig(**options))


def _request(prompt, output, **params):
    req = Request("r", list(prompt), SamplingParams(**params))
    req.output_token_ids = list(output)
    return req


def test_penalties_match_their_definitions():
    torch.manual_seed(0)
    logits = torch.randn(1, 10) * 3
    prompt, output = [1, 2], [2, 3, 3, 3, 7]
    got = process(logits, [_request(prompt, output, repetition_penalty=1.7, frequency_penalty=0.4,
                                    presence_penalty=0.9)], frozenset())[0]
    want = logits[0].clone()
    for t in range(10):
        if t in prompt or t in output:  # repetition: prompt and answer
            want[t] = want[t] / 1.7 if want[t] > 0 else want[t] * 1.7
        count = output.count(t)  # frequency and presence: the answer only
        want[t] -= 0.4 * count + 0.9 * (count > 0)
    assert torch.allclose(got, want)
    assert got[1] != logits[0, 1] and got[0] == logits[0, 0]  # a prompt-only token: repetition only; an unseen one: nothing


def test_a_batch_that_asks_for_nothing_is_passed_through_untouched():
    logits = torch.randn(3, 10)
    assert process(logits, [_request([1], [2]) for _ in range(3)], frozenset({9})) is logits


def test_logit_bias_and_min_tokens():
    logits = torch.zeros(1, 6)
    biased = process(logits, [_request([1], [], logit_bias={"4": 5.0, 2: -100})], frozenset())[0]
    assert biased.tolist() == [0, 0, -100, 0, 5.0, 0]
    early = process(logits, [_request([1], [3], min_tokens=2, stop_token_ids=[1])], frozenset({5}))[0]
    assert early[5] == -math.inf and early[1] == -math.inf and early[0] == 0
    enough = process(logits, [_request([1], [3, 3], min_tokens=2, stop_token_ids=[1])], frozenset({5}))
    assert enough is logits


def test_a_bias_on_a_token_outside_the_vocabulary_is_refused(tiny_llama):
    from engine import RequestError

    with pytest.raises(RequestError, match="logit_bias names token ids outside the vocabulary") as caught:
        engine(tiny_llama).add_request([1, 2, 3], SamplingParams(logit_bias={256: 1.0}))
    assert caught.value.param == "logit_bias"  # the API's 400 names it


def test_min_p_drops_tokens_below_its_share_of_the_likeliest():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen = {sample(logits, [SamplingParams(min_p=0.5)], [gen])[0] for _ in range(300)}
    assert seen == {0, 1}  # 0.15 < 0.5 × 0.5


def test_out_of_range_values_are_refused_by_name():
    for bad, name in [(dict(presence_penalty=2.5), "presence_penalty"), (dict(frequency_penalty=-3), "frequency_penalty"),
                      (dict(repetition_penalty=0), "repetition_penalty"), (dict(min_p=1.5), "min_p"),
                      (dict(min_tokens=-1), "min_tokens"), (dict(logprobs=-1), "logprobs")]:
        with pytest.raises(SamplingError, match=name) as caught:
            SamplingParams(**bad)
        assert caught.value.param == name


def test_greedy_with_a_repetition_penalty_follows_the_penalised_argmax(tiny_llama):
    """Each greedy token is the argmax of the model's logits after the penalty, recomputed here
    from a transformers forward over the whole sequence so far."""
    p = prompts(1, seed=41)[0]
    out = engine(tiny_llama).generate(p, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True,
                                                          repetition_penalty=1.8, frequency_penalty=0.5))[0]
    model = _reference_model(tiny_llama)
    seq = list(p)
    for token in out.token_ids:
        with torch.inference_mode():
            row = model(torch.tensor([seq])).logits[0, -1].float()
        want = process(row[None], [_request(p, seq[len(p):], repetition_penalty=1.8, frequency_penalty=0.5)],
                       frozenset())[0].argmax().item()
        assert token == want
        seq.append(token)
    plain = engine(tiny_llama).generate(p, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]
    assert plain.token_ids != out.token_ids  # the penalty changed the answer


def test_min_tokens_holds_off_eos(tiny_llama):
    eng = engine(tiny_llama)
    eos = next(iter(eng.loaded.eos_token_ids))
    p = prompts(1, seed=42)[0]
    out = eng.generate(p, SamplingParams(temperature=0, max_tokens=8, min_tokens=5, logit_bias={eos: 50.0}))[0]
    assert len(out.token_ids) == 6 and eos not in out.token_ids[:5]
    assert out.token_ids[5] == eos and out.finish_reason == "stop"  # allowed again once five are out


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_logprobs_equal_a_transformers_forward(tiny_llama, prefix_caching):
    """Generated and prompt logprobs (top 3 and the token's rank) equal log_softmax of a plain
    forward over the final sequence, with the prompt split over several steps (a 16-token budget)
    and, with prefix caching on, a second request sharing the prompt's blocks."""
    p = prompts(1, length_range=(30, 30), seed=43)[0]
    eng = engine(tiny_llama, max_num_batched_tokens=16, enable_prefix_caching=prefix_caching)
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=6, ignore_eos=True, logprobs=3, prompt_logprobs=2)
    eng.generate(p, SamplingParams(temperature=0, max_tokens=2))  # fills the prefix cache when on
    out = eng.generate(p, params)[0]
    seq = p + out.token_ids
    with torch.inference_mode():
        lp = torch.log_softmax(_reference_model(tiny_llama)(torch.tensor([seq])).logits[0].float(), dim=-1)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(p)
    scored = [(pos, entry) for pos, entry in enumerate(out.prompt_logprobs) if entry is not None]
    scored += [(len(p) + i, entry) for i, entry in enumerate(out.logprobs)]
    assert len(out.logprobs) == 6
    for pos, entry in scored:
        row = lp[pos - 1]
        assert entry.token_id == seq[pos]
        assert entry.logprob == pytest.approx(row[seq[pos]].item(), abs=1e-4)
        assert entry.rank == int((row > row[seq[pos]]).sum()) + 1
        want = row.topk(3 if pos >= len(p) else 2)
        assert [t for t, _ in entry.top] == want.indices.tolist()
        assert [v for _, v in entry.top] == pytest.approx(want.values.tolist(), abs=1e-4)


def test_no_logprobs_unless_asked(tiny_llama):
    out = engine(tiny_llama).generate(prompts(1, seed=44)[0], SamplingParams(temperature=0, max_tokens=3))[0]
    assert out.logprobs is None and out.prompt_logprobs is None
