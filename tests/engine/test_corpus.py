"""The widened 문의봇 data: hand-written phrasings, everyday noise, the 기타 category, the system
prompts a batch may share, and no training text copied from the evaluation set (issue #28)."""
import difflib
import json
import random
import re
from collections import Counter
from pathlib import Path

import torch

from engine.training import phrasings
from engine.training import train as T
from engine.training.corpus import (
    CATEGORIES,
    DEFAULT_SYSTEM_PROMPT,
    OTHER_SHARE,
    SHORT_SYSTEM_PROMPTS,
    SUBTYPES,
    SYSTEM_PROMPT,
    WRITTEN_SHARE,
    make_corpus,
)
from engine.training.noise import LOANWORDS, _swap, roughen
from engine.training.written import written_examples

EVAL = Path(__file__).resolve().parents[2] / "bench" / "data" / "inquiries_handwritten.jsonl"


def test_every_category_is_drawn_and_about_one_in_ten_is_other():
    corpus = make_corpus(3000, seed=3)
    counts = Counter(ex["category"] for ex in corpus)
    assert set(counts) == set(CATEGORIES)
    generated = [ex for ex in corpus if ex.get("source") != "written"]
    assert abs(sum(ex["category"] == "기타" for ex in generated) / len(generated) - OTHER_SHARE) < 0.02
    assert abs((len(corpus) - len(generated)) / len(corpus) - WRITTEN_SHARE) < 0.03
    for ex in corpus:
        assert ex["assistant"].startswith(f"분류: {ex['category']}\n요약: ")
    other = [ex for ex in corpus if ex["category"] == "기타" and "인사." not in ex["assistant"]]
    assert all("누리마켓" in ex["assistant"] or "1588-0000" in ex["assistant"] for ex in other)


def test_every_sub_type_is_also_asked_in_the_hand_written_phrasings():
    corpus = make_corpus(4000, seed=4)
    users = " ".join(ex["user"] for ex in corpus)
    for category, subs in SUBTYPES.items():
        for sub in subs:
            asks = phrasings.ASKS[(category, sub["key"])]
            assert len(asks) >= 10
            # At least one of them (the slot-free ones are comparable verbatim) shows up in the data.
            plain = [a for a in asks if "{" not in a and len(a) > 6]
            assert any(a in users for a in plain), (category, sub["key"])


def test_roughen_is_reproducible_and_level_zero_leaves_the_text_alone():
    text = "안녕하세요. 주문한 무선 이어폰이 아직 도착하지 않았어요. 언제 받을 수 있나요? 확인 부탁드립니다."
    assert roughen(text, random.Random(1), 0) == text
    a = [roughen(text, random.Random(i)) for i in range(40)]
    assert a == [roughen(text, random.Random(i)) for i in range(40)]
    assert len(set(a)) > 10  # many different ways to type it


def test_a_swapped_word_takes_the_particle_its_last_syllable_wants():
    rng = random.Random(0)
    assert _swap("쿠폰이 안 돼요. 적립금을 써요.", LOANWORDS, rng, 1.0) == "쿠폰코드가 안 돼요. 포인트를 써요."


def test_a_batch_shares_the_full_the_default_another_short_or_no_system_prompt():
    corpus = make_corpus(30, seed=2)
    from engine.training.tokenizer import train_tokenizer

    tok = train_tokenizer([SYSTEM_PROMPT, *SHORT_SYSTEM_PROMPTS] + [ex["user"] + ex["assistant"] for ex in corpus],
                          vocab_size=400)
    cfg = T.TrainConfig(seed=5)
    full = T.prefix_tensor(tok, SYSTEM_PROMPT)
    draw = T.prefix_mix(tok, cfg, full, SHORT_SYSTEM_PROMPTS)
    drawn = [tuple(draw()[0].tolist()) for _ in range(2000)]
    counts = Counter(drawn)
    default = tuple(T.prefix_tensor(tok, DEFAULT_SYSTEM_PROMPT)[0].tolist())
    bare = (tok.bos_token_id,)
    assert abs(counts[tuple(full[0].tolist())] / 2000 - cfg.prompt_mix[0]) < 0.04
    assert abs(counts[default] / 2000 - cfg.prompt_mix[1]) < 0.04
    assert abs(counts[bare] / 2000 - cfg.prompt_mix[3]) < 0.03
    assert len(counts) == 2 + len(SHORT_SYSTEM_PROMPTS)  # every other short prompt too
    again = T.prefix_mix(tok, cfg, full, SHORT_SYSTEM_PROMPTS)
    assert [tuple(again()[0].tolist()) for _ in range(50)] == drawn[:50]  # reproducible
    # A fixed system prompt (as the tests' tiny runs use) means every batch shares it.
    fixed = T.prefix_mix(tok, cfg, full, ())
    assert all(torch.equal(fixed(), full) for _ in range(5))


def test_the_written_examples_are_whole_answers_in_the_format_for_every_category():
    rows = written_examples()
    assert len(rows) >= 1500 and len({row["user"] for row in rows}) == len(rows)
    assert Counter(row["category"] for row in rows).keys() == set(CATEGORIES)
    drawn = [ex for ex in make_corpus(400, seed=9) if ex.get("source") == "written"]
    for ex in drawn:
        category, summary, answer = ex["assistant"].split("\n")
        assert category == f"분류: {ex['category']}" and summary.startswith("요약: ") and answer.startswith("답변: 고객님") or answer.startswith("답변: 안녕하세요")


def _norm(text: str) -> str:
    return re.sub(r"\{[^}]*\}|[\s\W_]", "", text)


def test_no_training_phrasing_is_a_near_copy_of_an_evaluation_inquiry():
    """bench.answer_quality measures inquiries the model never saw: a phrasing added to the
    generator that nearly copies one of them would inflate the score."""
    evals = [_norm(json.loads(line)["text"]) for line in EVAL.read_text(encoding="utf-8").splitlines()]
    pool = [s for v in phrasings.ASKS.values() for s in v] + phrasings.FILLERS
    pool += [a for a, _ in phrasings.OFF_TOPIC + phrasings.SHOP_OTHER]
    pool += [row["user"] for row in written_examples()]
    for text in pool:
        n = _norm(text)
        for e in evals:
            m = difflib.SequenceMatcher(None, n, e)
            assert m.real_quick_ratio() < 0.6 or m.quick_ratio() < 0.6 or m.ratio() < 0.6, (text, e)
