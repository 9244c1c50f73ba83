"""The shipped munuibot-tiny served by the engine: Korean answers, parity, stop strings, prefix hits."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.config import DEFAULT_MODEL
from engine.training.corpus import SYSTEM_PROMPT

INQUIRIES = [
    "지난주에 주문한 운동화가 아직 안 왔어요. 언제 받을 수 있나요?",
    "환불 신청했는데 카드 취소가 언제 되는지 궁금합니다.",
]


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(EngineConfig(block_size=16, num_blocks=256, max_num_seqs=8, max_num_batched_tokens=512))


def chat(engine, text):
    return engine.encode_chat([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}])


def hangul_share(text):
    letters = [c for c in text if not c.isspace() and not c.isdigit()]
    return sum("가" <= c <= "힣" for c in letters) / max(1, len(letters))


def test_answers_a_korean_inquiry_in_the_trained_format(engine):
    out = engine.generate(chat(engine, INQUIRIES[0]), SamplingParams(temperature=0, max_tokens=120))[0]
    assert out.text.startswith("분류:")
    assert "요약:" in out.text
    assert hangul_share(out.text) > 0.6


def test_greedy_parity_with_generate_on_the_real_model(engine):
    prompts = [chat(engine, q) for q in INQUIRIES]
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=40))
    ref = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32, attn_implementation="sdpa").eval()
    for prompt, out in zip(prompts, outs):
        with torch.inference_mode():
            expected = ref.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False)[0, len(prompt):].tolist()
        assert out.token_ids == expected


def test_stop_string_cuts_the_text(engine):
    out = engine.generate(chat(engine, INQUIRIES[1]), SamplingParams(temperature=0, max_tokens=120, stop=["요약"]))[0]
    assert out.finish_reason == "stop" and out.stop_reason == "요약"
    assert "요약" not in out.text and out.text.startswith("분류:")


def test_the_shared_system_prompt_is_served_from_the_prefix_cache(engine):
    engine.generate(chat(engine, INQUIRIES[0]), SamplingParams(temperature=0, max_tokens=4))
    second = engine.generate(chat(engine, INQUIRIES[1]), SamplingParams(temperature=0, max_tokens=4))[0]
    assert second.metrics.num_cached_tokens >= 16 * (len(engine.tokenizer.encode(SYSTEM_PROMPT)) // 16 - 1)
