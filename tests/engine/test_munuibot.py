"""The shipped default model, engine/models/munuibot-tiny, and the data generator behind it."""

import json
import unicodedata
from pathlib import Path

import pytest
import torch

from engine.training.corpus import (
    CATEGORIES,
    DEFAULT_SYSTEM_PROMPT,
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


def test_a_conversation_without_a_system_message_gets_the_default_system_turn(shipped):
    _, tok = shipped
    plain = tok.apply_chat_template([{"role": "user", "content": "배송이 언제 오나요?"}],
                                    add_generation_prompt=True, tokenize=False)
    assert plain == (f"<s><|system|>\n{DEFAULT_SYSTEM_PROMPT}<|end|>\n<|user|>\n배송이 언제 오나요?<|end|>\n"
                     "<|assistant|>\n")
    own = tok.apply_chat_template([{"role": "system", "content": "짧게 답해."}, {"role": "user", "content": "x"}],
                                  add_generation_prompt=True, tokenize=False)
    assert own == "<s><|system|>\n짧게 답해.<|end|>\n<|user|>\nx<|end|>\n<|assistant|>\n"  # one system turn, the sender's


# Written by hand for this test (not in the generator, not in bench/data): what a learner's
# first script sends — one user message, no system message.
PLAIN_INQUIRIES = [
    ("어제 시킨 원목 의자 언제쯤 받을 수 있을까요? 이번 주말에 손님이 와서요.", "배송"),
    ("비번을 다섯 번 틀렸더니 로그인이 막혔어요. 어떻게 풀어요?", "계정/로그인"),
]


@pytest.mark.parametrize("text, category", PLAIN_INQUIRIES)
def test_served_greedily_without_a_system_message_a_plain_inquiry_gets_the_three_line_answer(text, category):
    """Through the engine, as /v1 serves it: the answer ends by itself (`stop`), in the three
    lines, in the inquiry's category (issue #28: it used to run to max_tokens repeating a word)."""
    from engine import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(EngineConfig(num_blocks=64, max_num_seqs=1))
    out = engine.generate(engine.encode_chat([{"role": "user", "content": text}]),
                          SamplingParams(temperature=0, max_tokens=300))[0]
    lines = out.text.strip().split("\n")
    assert out.finish_reason == "stop", out.text
    assert [line[:4] for line in lines] == ["분류: ", "요약: ", "답변: "], out.text
    assert lines[0][4:] == category, out.text


def test_the_readmes_curl_example_gets_a_well_formed_answer_on_its_topic():
    """The README's own /v1/chat/completions example, body as written there, served greedily."""
    import re

    from engine import EngineConfig, LLMEngine, SamplingParams

    readme = (MODEL_DIR.parents[2] / "README.md").read_text(encoding="utf-8")
    body = json.loads(re.search(r"/v1/chat/completions .*?-d '(\{.*?\})'", readme, re.S).group(1))
    assert "system" not in [m["role"] for m in body["messages"]]  # what a learner's first call sends
    engine = LLMEngine(EngineConfig(num_blocks=64, max_num_seqs=1))
    out = engine.generate(engine.encode_chat(body["messages"]),
                          SamplingParams(temperature=body["temperature"], max_tokens=body["max_tokens"]))[0]
    assert out.finish_reason == "stop", out.text
    assert out.text.startswith("분류: 배송\n요약: ") and "\n답변: " in out.text, out.text
    summary = out.text.split("\n")[1]
    assert "도착" in summary or "지연" in summary, out.text  # the question asked: when it arrives, not a lost parcel
