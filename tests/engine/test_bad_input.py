"""Bad input raises a clear error naming the limit, before any work, and the engine keeps serving."""
import pytest

from engine import ConfigError, EngineConfig, LLMEngine, RequestError, SamplingError, SamplingParams
from tests.engine.test_parity import GREEDY, prompts
from tests.engine.conftest import reference_generate


@pytest.fixture
def busy_engine(tiny_llama):
    """An engine with a request already in flight: bad input must not disturb it."""
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=4, max_num_batched_tokens=64))
    engine.add_request(prompts(1, seed=21)[0], GREEDY, request_id="good")
    engine.step()
    return engine


def finish_and_check_good(engine, path):
    while engine.has_unfinished_requests():
        engine.step()
    good = engine.requests["good"]
    assert engine.output("good").token_ids == reference_generate(path, good.prompt_token_ids, GREEDY.max_tokens)


def test_prompt_longer_than_the_context(busy_engine, tiny_llama):
    with pytest.raises(RequestError, match=r"max_model_len\) is 512"):
        busy_engine.add_request([1] * 600, GREEDY)
    finish_and_check_good(busy_engine, tiny_llama)


def test_prompt_longer_than_the_whole_pool(busy_engine, tiny_llama):
    with pytest.raises(RequestError, match=r"32 blocks × 4 = 128 tokens"):
        busy_engine.add_request([1] * 200, GREEDY)
    finish_and_check_good(busy_engine, tiny_llama)


@pytest.mark.parametrize("value", [0, -3, 2.5])
def test_non_positive_max_tokens(busy_engine, tiny_llama, value):
    with pytest.raises(SamplingError, match="max_tokens must be a positive integer"):
        busy_engine.add_request([1, 2, 3], {"max_tokens": value})
    finish_and_check_good(busy_engine, tiny_llama)


def test_unknown_sampling_key_is_named(busy_engine, tiny_llama):
    with pytest.raises(SamplingError, match="unknown sampling parameter\\(s\\): temprature"):
        busy_engine.add_request([1, 2, 3], {"temprature": 0.5})
    finish_and_check_good(busy_engine, tiny_llama)


def test_empty_prompt(busy_engine):
    with pytest.raises(RequestError, match="empty"):
        busy_engine.add_request([], GREEDY)


def test_missing_model_folder():
    with pytest.raises(ConfigError, match="model folder not found: /nowhere/model"):
        EngineConfig(model="/nowhere/model")


def test_pool_too_small_for_max_num_seqs(tiny_llama):
    with pytest.raises(ConfigError, match="8 blocks, fewer than max_num_seqs=16"):
        LLMEngine(EngineConfig(model=tiny_llama, num_blocks=8, max_num_seqs=16))


@pytest.mark.parametrize(
    "kw,match",
    [({"preemption_mode": "drop"}, "preemption_mode"), ({"scheduling": "eager"}, "scheduling"), ({"block_size": 0}, "block_size")],
)
def test_bad_config_values_are_named(tiny_llama, kw, match):
    with pytest.raises(ConfigError, match=match):
        EngineConfig(model=tiny_llama, **kw)


def test_bad_sampling_values():
    with pytest.raises(SamplingError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(SamplingError, match="top_p"):
        SamplingParams(top_p=0)


def test_a_step_that_can_do_nothing_raises_instead_of_spinning(tiny_llama):
    """A scheduler that schedules and preempts nothing while requests wait would leave the engine
    stepping forever at full CPU; the engine says so instead, and the caller ends the run."""
    from engine import EngineStalled
    from engine.scheduler import SchedulerOutput

    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=16, max_num_seqs=4))
    engine.add_request([1, 2, 3], GREEDY)
    engine.scheduler.schedule = SchedulerOutput  # stands in for a broken scheduler: an empty step
    with pytest.raises(EngineStalled, match=r"step 1 scheduled nothing: 0 running, 1 waiting, 0 swapped, 16 free blocks"):
        engine.step()
