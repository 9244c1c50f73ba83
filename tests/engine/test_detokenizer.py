"""A request's text as its tokens arrive (engine/detokenizer.py): at every token it is what
decoding all the tokens so far gives, less a character still missing bytes; at the end exactly
the whole decode. The shipped model's byte-level tokenizer splits Hangul and emoji across tokens."""
import random

import pytest
from transformers import AutoTokenizer

from engine.config import DEFAULT_MODEL
from engine.detokenizer import IncrementalDetokenizer

TEXTS = [
    "분류: 배송\n요약: 지난주 주문한 운동화의 배송 지연 문의.\n답변: 고객님, 운동화는 내일 출고되어 1~2일 안에 도착할 예정입니다. 감사합니다.",
    "고객님 😀👍🏽 환불은 3~5일 걸려요 — café, naïve, 日本語 テキスト",
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(DEFAULT_MODEL)


def whole(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd")


@pytest.mark.parametrize("text", TEXTS)
def test_at_every_token_the_text_is_the_whole_decode_less_an_unfinished_character(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    if "😀" in text:
        assert any(tokenizer.decode(ids[:i]).endswith("\ufffd") for i in range(1, len(ids))), "a character spans tokens"
    detok, sent = IncrementalDetokenizer(tokenizer), ""
    for i in range(1, len(ids) + 1):
        now = detok.update(ids[:i])
        assert now == whole(tokenizer, ids[:i])
        assert now.startswith(sent)  # a stream never takes back what it sent
        sent = now
    assert detok.finish(ids) == text


def test_several_tokens_at_once_and_special_tokens_skipped(tokenizer):
    ids = tokenizer.encode(TEXTS[0], add_special_tokens=False)
    eos = tokenizer.eos_token_id
    ids = ids[:5] + [eos] + ids[5:] + [eos]
    detok = IncrementalDetokenizer(tokenizer)
    for upto in (3, 4, 9, 20, len(ids)):
        assert detok.update(ids[:upto]) == whole(tokenizer, ids[:upto])
    assert detok.finish(ids) == whole(tokenizer, ids)


def test_random_tokens_end_as_the_whole_decode(tokenizer):
    rng = random.Random(0)
    for _ in range(50):
        ids = [rng.randrange(len(tokenizer)) for _ in range(40)]
        detok = IncrementalDetokenizer(tokenizer)
        for i in range(1, len(ids) + 1):
            detok.update(ids[:i])
        assert detok.finish(ids) == whole(tokenizer, ids)
