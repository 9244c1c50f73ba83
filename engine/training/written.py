"""Whole examples written by hand: a customer's message, its label, a summary and the bot's reply.

The generator (`corpus.py`) states every problem in its own grammar, and the phrasings in
`phrasings.py` are still slotted into its sentences; a model trained on them alone answers
messages that grammar never produced by their surface ("운동화 250 샀는데 발볼이 좁아서 255로
바꿔주세요" read as 기타). The examples in `data/written_examples.jsonl` were written whole, by
helpers that saw only the category rules and the shop's policy (not the generator, not the
evaluation sets), in six styles: very short 반말 and slang, polite multi-sentence 문어체, stories
whose intent is indirect, English words and newer service words (새벽배송, 통관, 2단계 인증),
messages on the border between two categories, and many voices (older customers, dialect, writing
for someone else). Every message within a similarity ratio of 0.6 of an evaluation inquiry was
removed (`tests/engine/test_corpus.py` holds that).

Standard library only, like `corpus.py`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("data") / "written_examples.jsonl"


@lru_cache(maxsize=1)
def written_examples() -> tuple[dict[str, str], ...]:
    """Each: {category, user, summary, answer}, in the file's order."""
    rows = []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return tuple(rows)
