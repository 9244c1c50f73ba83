"""The compiled path (EngineConfig.compile): each decoder layer compiled by torch.compile around
the paged attention gives the same greedy tokens as transformers' `model.generate`, under the
same scheduling situations as the eager path (staggered arrivals, prompt chunks beside decodes,
preemption), and leaves the eager engines' weights alone."""
import pytest

from engine import ConfigError, EngineConfig, LLMEngine
from engine.attention import ATTN_IMPLEMENTATION, COMPILED_ATTN_IMPLEMENTATION
from tests.engine.test_parity import assert_parity, prompts, run_checked


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_the_compiled_path_matches_generate_through_chunks_and_preemption(tiny_models, arch):
    path = tiny_models[arch]
    # 16 tokens a step: prompts of 12–30 tokens go in chunks beside decodes; 18 blocks of 4 for
    # five requests of up to 42 tokens: some are preempted and computed again.
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=18, max_num_seqs=4, max_num_batched_tokens=16,
                                    compile=True))
    ps = [(f"c{i}", p) for i, p in enumerate(prompts(5, length_range=(12, 30), seed=8))]
    run_checked(engine, {0: ps[:2], 2: ps[2:4], 5: ps[4:]})
    assert engine.scheduler.num_preemptions > 0
    assert_parity(engine, path, ps)


def test_the_compiled_path_runs_compiled_layers_on_a_copy_of_the_weights(tiny_llama):
    eager = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2))
    fast = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2, compile=True))
    assert fast.loaded.model is not eager.loaded.model
    assert all(layer._compiled_call_impl is not None for layer in fast.loaded.model.model.layers)
    assert all(layer._compiled_call_impl is None for layer in eager.loaded.model.model.layers)
    assert fast.loaded.model.config._attn_implementation == COMPILED_ATTN_IMPLEMENTATION
    assert eager.loaded.model.config._attn_implementation == ATTN_IMPLEMENTATION
    again = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2, compile=True))
    assert again.loaded.model is fast.loaded.model  # compiled once per process


def test_compile_without_a_cpp_compiler_is_refused_before_any_work(tiny_llama, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"compile=True needs a C\+\+ compiler"):
        EngineConfig(model=tiny_llama, compile=True)
    EngineConfig(model=tiny_llama)  # the eager path needs none
