"""How real customers type: the generator's clean sentences, roughened.

A model trained on one grammar's tidy sentences learns that grammar, not the categories behind it
(issue #28: a kettle that will not power on answered as a missing part). `roughen` rewrites an
inquiry the way people actually type into a shop's chat box: words run together, particles
dropped, 반말 instead of 존댓말, common misspellings, English loanwords, doubled punctuation.
Each rewrite is drawn with the caller's `random.Random`, so the corpus stays reproducible.

Standard library only (the corpus module imports it and must stay importable without torch).
"""

from __future__ import annotations

import random
import re

# (as written, as typed): misspellings and contractions Korean speakers use in chat.
MISSPELLINGS = [
    ("안 돼요", "안되요"), ("안 돼", "안되"), ("됐어요", "됬어요"), ("됐는데", "됬는데"), ("했는데", "햇는데"),
    ("있어요", "있어여"), ("없어요", "업어요"), ("주세요", "주세여"), ("어떻게", "어케"), ("너무", "넘"),
    ("진짜", "진짜루"), ("그런데", "근데"), ("괜찮", "갠찮"), ("이렇게", "이케"), ("뭐", "머"),
    ("감사합니다", "감사해여"), ("안녕하세요", "안녕하세여"), ("합니다", "함다"), ("습니다", "습니당"),
    ("했어요", "했어용"), ("거예요", "거에요"), ("돼요", "되요"), ("왜", "왜케"), ("빨리", "빨랑"),
]
# Words people often write in English or as loanwords.
LOANWORDS = [
    ("취소", "캔슬"), ("주문", "오더"), ("확인", "체크"), ("오류", "에러"), ("적립금", "포인트"),
    ("비밀번호", "패스워드"), ("비밀번호", "비번"), ("배송 조회", "트래킹"), ("환불", "리펀드"),
    ("쿠폰", "쿠폰코드"), ("회원 등급", "멤버십 등급"),
    ("영수증", "리시트"), ("교환", "체인지"), ("휴대폰", "핸드폰"), ("앱", "어플"),
]
# Polite endings and their 반말 forms (longest first, so "해 주세요" wins over "주세요").
BANMAL = [
    ("알려 주세요", "알려줘"), ("알려주세요", "알려줘"), ("해 주세요", "해줘"), ("해주세요", "해줘"),
    ("보내 주세요", "보내줘"), ("바꿔 주세요", "바꿔줘"), ("부탁드립니다", "부탁해"), ("부탁드려요", "부탁해"),
    ("있나요?", "있어?"), ("되나요?", "돼?"), ("하나요?", "해?"), ("인가요?", "야?"), ("나요?", "나?"),
    ("었어요", "었어"), ("았어요", "았어"), ("했어요", "했어"), ("해요", "해"), ("어요", "어"), ("아요", "아"),
    ("습니다", "음"), ("입니다", "임"), ("예요", "야"), ("이에요", "이야"), ("세요", "셈"),
]
# A subject/object particle after a noun of 3+ syllables; never after a verb stem ("받을 수", "하는").
_PARTICLE = re.compile(r"(?<=[가-힣]{2})([가-힣])(이|가|을|를) ")
_VERB_STEMS = set("하되있없받쓰주보오먹찾넣알읽살갈올줄볼될할")
_ENDINGS = ["??", "...", " ㅠㅠ", "ㅠ", "!!", " ㅡㅡ", "ㅜㅜ", ";;", " ㅎㅎ", "~"]


_PAIRS = {"이": "가", "가": "이", "을": "를", "를": "을", "은": "는", "는": "은", "과": "와", "와": "과"}


def _batchim(syllable: str) -> bool:
    return "가" <= syllable <= "힣" and (ord(syllable) - 0xAC00) % 28 != 0


def _swap(text: str, pairs: list[tuple[str, str]], rng: random.Random, p: float) -> str:
    for a, b in pairs:
        if a in text and rng.random() < p:
            # The particle after the new word follows its last syllable (쿠폰이 → 쿠폰코드가).
            def fix(m: re.Match, b: str = b) -> str:
                particle = m.group(1) or ""
                if particle and (particle in "이을은과") != _batchim(b[-1]) and "가" <= b[-1] <= "힣":
                    particle = _PAIRS[particle]
                return b + particle
            text = re.sub(re.escape(a) + r"(?:(이|가|을|를|은|는|과|와)(?![가-힣]))?", fix, text)
    return text


def _drop_particles(text: str, rng: random.Random, p: float) -> str:
    def drop(m: re.Match) -> str:
        if m.group(1) in _VERB_STEMS or rng.random() >= p:
            return m.group(0)
        return m.group(1) + " "
    return _PARTICLE.sub(drop, text)


def _squash_spaces(text: str, rng: random.Random, p: float) -> str:
    return "".join(ch for ch in text if ch != " " or rng.random() >= p)


def roughen(text: str, rng: random.Random, level: float = 1.0) -> str:
    """`text` as someone might type it; `level` scales how much (0: unchanged)."""
    if level <= 0:
        return text
    if rng.random() < 0.35 * level:
        text = _swap(text, BANMAL, rng, 0.8)
    if rng.random() < 0.35 * level:
        text = _swap(text, MISSPELLINGS, rng, 0.5)
    if rng.random() < 0.2 * level:
        text = _swap(text, LOANWORDS, rng, 0.4)
    if rng.random() < 0.25 * level:
        text = _drop_particles(text, rng, 0.6)
    if rng.random() < 0.2 * level:
        text = _squash_spaces(text, rng, rng.uniform(0.3, 1.0))
    if rng.random() < 0.15 * level:
        text = text.replace(".", "")
    if rng.random() < 0.2 * level:
        text = text.rstrip(".!?") + rng.choice(_ENDINGS)
    return text
