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
    """Each tick is a decision: a right tick earns 1/k (k = options in the key), a wrong tick
    takes 1/k back, never below 0. Ticking nothing, or everything, earns nothing, unlike counting
    unticked options as right decisions (which gave an empty answer 60% on a 2-of-5 item).
    A key with no answers is all or nothing: tick none."""
    answer = set(key["answer"])
    chosen = set(response["choices"])
    hits, false = len(chosen & answer), len(chosen - answer)
    detail = {"hits": hits, "false": false, "missed": len(answer) - hits, "picked": len(chosen)}
    if not answer:
        return Grade(0.0 if chosen else 1.0, detail)
    return Grade(max(0.0, (hits - false) / len(answer)), detail)


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
    if key.get("rubric"):
        return grade_rubric(key["rubric"], response)
    given = normalise_text(response["text"])
    if not given:
        return Grade(0.0)
    if any(given == normalise_text(a) for a in key["answers"]):
        return Grade(1.0)
    if any(re.search(p, given) for p in key.get("patterns", [])):
        return Grade(1.0)
    return Grade(0.0)


def grade_rubric(rubric: list, response: dict) -> Grade:
    """An answer in the learner's own words, checked for each idea of the rubric by keywords
    (patterns on the normalised text). Credit = ideas found / ideas; the feedback names the
    ideas found and missing, and the model answer is shown at the reveal. An idea's
    `contradicted_by` patterns catch an answer that states its opposite: that answer gets 0. A
    keyword check, not understanding: the card says so."""
    given = normalise_text(response["text"])
    # An answer that says the opposite of an idea ("한 건도 빨라진다") holds the misconception the
    # question is about: no credit, whatever else it names.
    against = [any(re.search(p, given) for p in idea.get("contradicted_by", [])) for idea in rubric]
    found = [not no and any(re.search(p, given) for p in idea["patterns"]) for idea, no in zip(rubric, against)]
    ideas = [{"label": idea["label"], "found": ok, "contradicted": no} for idea, ok, no in zip(rubric, found, against)]
    return Grade(0.0 if any(against) else sum(found) / len(rubric), {"ideas": ideas})


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
    return Grade(kept / len(order), {"in_order": kept, "total": len(order)})


def grade_matching(key: dict, response: dict) -> Grade:
    pairs = key["pairs"]
    right = sum(response["pairs"].get(left) == r for left, r in pairs.items())
    return Grade(right / len(pairs), {"pairs_right": right, "total": len(pairs)})


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
