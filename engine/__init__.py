"""A paged continuous-batching inference engine on PyTorch + transformers (imports nothing from Django).

    from engine import LLMEngine, EngineConfig, SamplingParams
    eng = LLMEngine(EngineConfig(block_size=16, num_blocks=512, max_num_seqs=32, max_num_batched_tokens=512))
    outs = eng.generate(["..."], SamplingParams(temperature=0.0, max_tokens=64))
"""
from engine.config import ConfigError, EngineConfig
from engine.llm_engine import LLMEngine, RequestError
from engine.outputs import RequestOutput
from engine.sampling import SamplingError, SamplingParams

__all__ = ["ConfigError", "EngineConfig", "LLMEngine", "RequestError", "RequestOutput", "SamplingError", "SamplingParams"]
