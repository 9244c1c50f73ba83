"""The shipped default model, engine/models/munuibot-tiny, and the data generator behind it."""

import json
import unicodedata
from pathlib import Path

import pytest
import torch

from engine.training.corpus import (
    CATEGORIES,
    LONG_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    make_corpus,
)

MODEL_DIR = Path(__file__).resolve().parents[2] / "engine" / "models" / "munuibot-tiny"

# Written by hand: a new inquiry, not one the generator produces.
NEW_INQUIRY = ("안녕하세요. 지난달 말에 주문한 전기포트가 아직도 안 왔어요. "
               "어머니 생신 선물이라 주말 전에는 받아야 하는데 언제쯤 도착할까요?")


@pytest.fixture(scope="module")
def shipped():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        tok = AutoTokenizer.from_pretrained(MODEL_DIR, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, local_files_only=True)
    model.eval()
    return model, tok


def _hangul_share(text: str) -> float:
    letters = [ch for ch in text if ch.isalpha()]
    hangul = [ch for ch in letters if "가" <= ch <= "힣" or unicodedata.name(ch, "").startswith("HANGUL")]
    return len(hangul) / max(1, len(letters))


def test_shipped_files_and_size():
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "training_log.json"):
        assert (MODEL_DIR / name).is_file(), name
    assert (MODEL_DIR / "model.safetensors").stat().st_size <= 20 * 1000 * 1000
    config = json.loads((MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    assert config["max_position_embeddings"] == 2048 and config["tie_word_embeddings"] is True
    assert "auto_map" not in config  # no remote code
    assert "chat_template" in json.loads((MODEL_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    gen = json.loads((MODEL_DIR / "generation_config.json").read_text(encoding="utf-8"))
    assert gen["eos_token_id"] == config["eos_token_id"] and gen["max_new_tokens"] >= 300


def test_new_inquiry_gets_a_korean_answer_in_the_format(shipped):
    model, tok = shipped
    log = json.loads((MODEL_DIR / "training_log.json").read_text(encoding="utf-8"))
    trained_users = {ex["user"] for ex in make_corpus(log["examples"], seed=log["seed"])}
    assert NEW_INQUIRY not in trained_users

    msgs = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": NEW_INQUIRY}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=80)
    answer = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)

    assert answer.startswith("분류:"), answer
    assert "요약:" in answer, answer
    assert answer.split("\n")[0].removeprefix("분류:").strip() in CATEGORIES, answer
    assert _hangul_share(answer) >= 0.8, answer
    assert sum("가" <= ch <= "힣" for ch in answer) >= 30, answer


def test_corpus_is_deterministic_for_a_seed():
    a, b, c = make_corpus(60, seed=11), make_corpus(60, seed=11), make_corpus(60, seed=12)
    assert a == b
    assert a != c
    assert all(set(ex) >= {"system", "user", "assistant"} for ex in a)
    assert all(ex["system"] == SYSTEM_PROMPT for ex in a)
    for ex in a:
        lines = ex["assistant"].split("\n")
        assert lines[0].startswith("분류: ") and lines[0][4:] in CATEGORIES
        assert lines[1].startswith("요약: ") and lines[2].startswith("답변: ")
    assert len({ex["user"] for ex in make_corpus(500, seed=0)}) > 450  # varied, few repeats


def test_answer_lengths_span_40_to_300_tokens(shipped):
    _, tok = shipped
    lengths = sorted(len(tok(ex["assistant"] + tok.eos_token)["input_ids"]) for ex in make_corpus(600, seed=5))
    assert lengths[0] >= 25 and lengths[-1] <= 340
    assert lengths[len(lengths) // 20] <= 50  # the shortest 5 % are about 40 tokens
    assert lengths[-1] >= 250  # the longest are close to 300
    assert 60 <= lengths[len(lengths) // 2] <= 160


def test_system_prompt_sizes(shipped):
    _, tok = shipped
    short = len(tok(SYSTEM_PROMPT)["input_ids"])
    long = len(tok(LONG_SYSTEM_PROMPT)["input_ids"])
    assert 200 <= short <= 700  # a few hundred tokens
    assert 1300 <= long <= 1700  # about 1,500
    assert LONG_SYSTEM_PROMPT.startswith(SYSTEM_PROMPT)
