"""A paged continuous-batching inference engine on PyTorch + transformers (imports nothing from Django).

    from engine import LLMEngine, EngineConfig, SamplingParams
    eng = LLMEngine(EngineConfig(block_size=16, num_blocks=512, max_num_seqs=32, max_num_batched_tokens=512))
    outs = eng.generate(["..."], SamplingParams(temperature=0.0, max_tokens=64))
"""
import importlib

# Resolved on first use (PEP 562), so `import engine.training.corpus` (the shipped system prompt,
# which the web process needs) does not pull in torch.
_EXPORTS = {
    "ConfigError": "engine.config", "EngineConfig": "engine.config",
    "EngineStalled": "engine.llm_engine", "LLMEngine": "engine.llm_engine", "RequestError": "engine.llm_engine",
    "RequestOutput": "engine.outputs",
    "SamplingError": "engine.sampling", "SamplingParams": "engine.sampling",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
