"""The served model's tokenizer without torch: how many tokens a chat prompt takes, and the
encode/decode that scaled mode's web process answers /tokenize and /detokenize with.

The web process checks a learner's knobs before a run starts ("the pool must hold the smallest
prompt"), and `transformers` imports torch (seconds and ~300 MB) the moment its tokenizer is
imported. The model directory carries all that counting needs: `tokenizer.json` for the
`tokenizers` library and the chat template in `tokenizer_config.json`, rendered with jinja2 the
way transformers renders it (sandboxed, trim_blocks, lstrip_blocks), then encoded without added
special tokens (the template writes them). tests/engine/test_chat_prompt.py compares the two.
"""
import json
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=4)
def _load(model_dir: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    config = json.loads((Path(model_dir) / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(config["chat_template"])
    return template, Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")), config


def chat_prompt_ids(model_dir, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    template, tokenizer, config = _load(str(model_dir))
    text = template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                           bos_token=config.get("bos_token", ""), eos_token=config.get("eos_token", ""))
    return tokenizer.encode(text, add_special_tokens=False).ids


def encode(model_dir, text: str, add_special_tokens: bool = True) -> list[int]:
    return _load(str(model_dir))[1].encode(text, add_special_tokens=add_special_tokens).ids


def decode(model_dir, ids: list[int], skip_special_tokens: bool = False) -> str:
    return _load(str(model_dir))[1].decode(ids, skip_special_tokens=skip_special_tokens)


def vocab_size(model_dir) -> int:
    return _load(str(model_dir))[1].get_vocab_size(with_added_tokens=True)
