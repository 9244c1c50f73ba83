"""Item analysis of a class's answers, as Moodle's quiz statistics compute it — pure functions
over plain numbers, so the figures can be checked by hand (tests/courseapp/instructor).

For each question, over the learners who answered it (their first attempts by default):

- facility: the mean score (0–1): how easy it was;
- discrimination index: the mean score of the top 27% of those learners by total score minus
  that of the bottom 27% (the classic upper–lower index; groups of ⌈0.27·n⌉);
- point-biserial: the correlation of the question's score with the rest of the test (the total
  without this question), so a question does not correlate with itself;
- flags: "easy" (facility > 0.9), "hard" (< 0.2), "negative" (the index < 0: stronger learners
  did worse), "few" (n < 5: the figures are shown but say little), "none" (no answers).

A learner's total is the sum of their scores over every question of the lesson (unanswered: 0).
"""
import math
from dataclasses import dataclass, field

GROUP = 0.27
TOO_EASY, TOO_HARD, FEW = 0.9, 0.2, 5


@dataclass
class ItemStats:
    question_id: int
    n: int
    facility: float | None
    discrimination: float | None
    point_biserial: float | None
    flags: list = field(default_factory=list)


def _mean(values) -> float:
    return sum(values) / len(values)


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """None when either side does not vary (the correlation is undefined)."""
    if len(xs) < 2:
        return None
    mx, my = _mean(xs), _mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if sxx < 1e-9 or syy < 1e-9:  # 2.9 − 0.9 is 1.9999999999999998: float noise is no variance
        return None
    return sxy / math.sqrt(sxx * syy)


def item_stats(question_id: int, scores: dict[int, dict[int, float]]) -> ItemStats:
    """`scores`: learner → question → score (one attempt per question: first or latest)."""
    answered = [(learner, mine[question_id]) for learner, mine in scores.items() if question_id in mine]
    n = len(answered)
    if n == 0:
        return ItemStats(question_id, 0, None, None, None, ["none"])
    item = [score for _, score in answered]
    totals = [sum(scores[learner].values()) for learner, _ in answered]
    facility = _mean(item)
    ranked = sorted(zip(totals, item), key=lambda pair: pair[0])
    size = math.ceil(GROUP * n)
    discrimination = _mean([s for _, s in ranked[-size:]]) - _mean([s for _, s in ranked[:size]]) if n >= 2 else None
    rest = [total - score for total, score in zip(totals, item)]
    point_biserial = pearson(item, rest)
    flags = []
    if facility > TOO_EASY:
        flags.append("easy")
    if facility < TOO_HARD:
        flags.append("hard")
    if discrimination is not None and discrimination < 0:
        flags.append("negative")
    if n < FEW:
        flags.append("few")
    return ItemStats(question_id, n, facility, discrimination, point_biserial, flags)
