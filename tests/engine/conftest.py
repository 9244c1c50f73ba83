"""Tiny random-initialised checkpoints (Llama, Qwen2, Mistral) saved once per session, and
helpers for the oracle: greedy `model.generate` on an independent copy of the same weights."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

ARCHS = {
    "llama": lambda: LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=255,
    ),
    "qwen2": lambda: Qwen2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=255,
    ),
    "mistral": lambda: MistralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=512, eos_token_id=255, sliding_window=None,
    ),
}


def _save(tmp_path_factory, arch):
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(ARCHS[arch]())
    path = tmp_path_factory.mktemp(f"tiny-{arch}")
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    return {arch: _save(tmp_path_factory, arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_llama(tiny_models):
    return tiny_models["llama"]


def reference_generate(path: str, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The oracle: transformers' own greedy generate, on its own copy of the weights."""
    model = _reference_model(path)
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_new_tokens,
            do_sample=False, pad_token_id=0,
        )
    return out[0, len(prompt):].tolist()


_refs = {}


def _reference_model(path):
    if path not in _refs:
        _refs[path] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    return _refs[path]
