"""Grading rules, one pure function per question type.

Each takes the question's key (see loader) and a response already validated by
`responses.validate`, and returns a Grade with a score in [0, 1].
"""
import re
import unicodedata
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Grade:
    score: float
    detail: dict = field(default_factory=dict)  # counts for the feedback text

    @property
    def is_correct(self):
        return self.score >= 1.0


def grade_single(key: dict, response: dict) -> Grade:
    """All or nothing."""
    return Grade(1.0 if response["choice"] == key["answer"] else 0.0)


def grade_multi(key: dict, response: dict) -> Grade:
    """Each choice is a decision (checked or not); 1/n credit per right decision."""
    choices = key["choices"]
    answer = set(key["answer"])
    chosen = set(response["choices"])
    right = sum((c in chosen) == (c in answer) for c in choices)
    return Grade(right / len(choices), {"right": right, "total": len(choices)})


def grade_numeric(key: dict, response: dict) -> Grade:
    """Full credit within the tolerance, half within twice it. Borders are inclusive."""
    error = abs(response["value"] - key["answer"])
    tolerance = key.get("tolerance", 0)
    slack = 1e-9 * max(1.0, abs(key["answer"]))  # float noise must not cross a border
    if error <= tolerance + slack:
        score = 1.0
    elif error <= 2 * tolerance + slack and tolerance > 0:
        score = 0.5
    else:
        score = 0.0
    return Grade(score, {"close": score == 0.5})


def normalise_text(text: str) -> str:
    """Case, width, spacing and punctuation do not matter: '연속  배칭!' == '연속배칭' == 'Continuous-Batching'."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if not (ch.isspace() or unicodedata.category(ch)[0] in "PS"))


def grade_short(key: dict, response: dict) -> Grade:
    given = normalise_text(response["text"])
    if not given:
        return Grade(0.0)
    if any(given == normalise_text(a) for a in key["answers"]):
        return Grade(1.0)
    if any(re.search(p, given) for p in key.get("patterns", [])):
        return Grade(1.0)
    return Grade(0.0)


def lcs_length(a: list, b: list) -> int:
    """Length of the longest common subsequence (classic dynamic programme, O(len a · len b))."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def grade_ordering(key: dict, response: dict) -> Grade:
    """Credit = items already in a right relative order / all items."""
    order = key["order"]
    kept = lcs_length(response["order"], order)
    return Grade(kept / len(order), {"right": kept, "total": len(order)})


def grade_matching(key: dict, response: dict) -> Grade:
    pairs = key["pairs"]
    right = sum(response["pairs"].get(left) == r for left, r in pairs.items())
    return Grade(right / len(pairs), {"right": right, "total": len(pairs)})


GRADERS = {
    "single": grade_single,
    "multi": grade_multi,
    "numeric": grade_numeric,
    "short": grade_short,
    "ordering": grade_ordering,
    "matching": grade_matching,
}


def grade(question_type: str, key: dict, response: dict) -> Grade:
    return GRADERS[question_type](key, response)
