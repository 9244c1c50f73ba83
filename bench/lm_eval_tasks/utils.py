"""Prompts for the munuibot lm-eval tasks: the shipped model's own chat format, rendered from its
chat template (jinja2, which lm-eval has), so `local-completions` scores the raw prompt the chat
endpoint would build."""
import json
from functools import lru_cache
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "engine" / "models" / "munuibot-tiny"
CATEGORIES = ["배송", "환불/반품", "결제", "계정/로그인", "제품 불량", "교환", "쿠폰/적립금", "회원 등급", "배송지 변경",
              "영수증", "기타"]  # engine/training/corpus.py CATEGORIES


@lru_cache(maxsize=1)
def _template():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    config = json.loads((MODEL / "tokenizer_config.json").read_text(encoding="utf-8"))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(config["chat_template"]), config


def chat_prompt(doc: dict) -> str:
    """The inquiry as one user turn (the template adds the default system turn), up to the answer's
    first words: the model's next word is its category."""
    template, config = _template()
    text = template.render(messages=[{"role": "user", "content": doc["text"]}], add_generation_prompt=True,
                           bos_token=config["bos_token"], eos_token=config["eos_token"])
    return text + "분류:"


def category_index(doc: dict) -> int:
    return CATEGORIES.index(doc["category"])


def categories(doc: dict) -> list[str]:
    return CATEGORIES
