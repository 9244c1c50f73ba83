"""Item analysis checked against figures worked out by hand on a class of four (A, B, C, D):

    question   A    B    C    D      (first attempts)
    filler    0.9  0.6  0.3  0.0     (a partly right multi)
    q1         1    1    0    0
    q3         0    0    1    1      ← the stronger learners got it wrong
    easy       1    1    1    1
    totals    2.9  2.6  2.3  2.0

Groups of ⌈0.27·4⌉ = 2. q3: bottom (D, C) 1.0, top (B, A) 0.0 → discrimination −1.0; rest
scores 2.9 2.6 1.3 1.0 against 0 0 1 1 → r = −1.6 / √2.65 = −0.9829. q1: +1.0, rest
1.9 1.6 2.3 2.0 → r = −0.4 / 0.5 = −0.8 (the rest holds q3). filler: 0.75 − 0.15 = 0.6; its rest is
2.0 for everyone → no correlation. easy: facility 1.0 → too easy."""
import math

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

from courseapp.instructor import selectors, services
from courseapp.instructor.models import Membership
from courseapp.instructor.statistics import item_stats, pearson
from courseapp.learners.models import Learner
from courseapp.quizzes.models import Attempt
from tests.factories import LessonFactory, ObjectiveFactory, make_question

CHOICES = [{"id": "a", "text": "가"}, {"id": "b", "text": "나"}, {"id": "c", "text": "다"}]
SCORES = {"filler": [0.9, 0.6, 0.3, 0.0], "q1": [1, 1, 0, 0], "q3": [0, 0, 1, 1], "easy": [1, 1, 1, 1]}


def by_hand() -> dict:
    return {learner: {q: SCORES[q][i] for q in SCORES} for i, learner in enumerate("ABCD")}


def test_figures_match_the_hand_worked_example():
    scores = by_hand()
    q3, q1, filler, easy = (item_stats(q, scores) for q in ("q3", "q1", "filler", "easy"))
    assert (q3.n, q3.facility, q3.discrimination) == (4, 0.5, -1.0)
    assert math.isclose(q3.point_biserial, -1.6 / math.sqrt(2.65), rel_tol=1e-9)
    assert q3.flags == ["negative", "few"]
    assert (q1.discrimination, round(q1.point_biserial, 9)) == (1.0, -0.8)
    assert math.isclose(filler.facility, 0.45) and math.isclose(filler.discrimination, 0.6) and filler.point_biserial is None
    assert easy.facility == 1.0 and easy.discrimination == 0 and "easy" in easy.flags
    assert item_stats("missing", scores).flags == ["none"]
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)


def test_facility_counts_those_who_answered_and_the_groups_are_27_percent():
    """Mutants (issue #34): facility over the whole class; upper/lower groups of 50%. A class of
    ten, eight of whom answered x (L0 and L1 did not):

        learner   L2   L3   L4   L5   L6   L7   L8   L9
        t        0.2  0.3  0.4  0.5  0.6  0.7  0.8  0.9
        x          0    0    1    0    1    1    1    1
        total    0.2  0.3  1.4  0.5  1.6  1.7  1.8  1.9

    facility 5/8 = 0.625 (not 5/10); groups of ⌈0.27·8⌉ = 3: bottom (L2, L3, L5) 0, top (L7, L8,
    L9) 1 → 1.0 (groups of 4 would give 1 − 0.25 = 0.75)."""
    x = {2: 0, 3: 0, 4: 1, 5: 0, 6: 1, 7: 1, 8: 1, 9: 1}
    scores = {f"L{i}": {"t": i / 10, **({"x": x[i]} if i in x else {})} for i in range(10)}
    stats = item_stats("x", scores)
    assert (stats.n, stats.facility, stats.discrimination) == (8, 0.625, 1.0)


@pytest.mark.django_db
def test_the_class_page_computes_them_from_first_attempts_with_the_options_chosen(client):
    lesson = LessonFactory()
    objective = ObjectiveFactory(lesson=lesson, order=1)
    questions = {slug: make_question(objective=objective, data={"id": slug, "type": "single", "choices": CHOICES, "answer": "a"})
                 for slug in SCORES}
    teacher, _ = services.instructor_make(username="kim")
    cohort = services.cohort_create(instructor=teacher, name="반", lesson=lesson)
    for i, name in enumerate("ABCD"):
        learner = Learner.objects.create()
        Membership.objects.create(cohort=cohort, learner=learner)
        for slug, scores in SCORES.items():
            choice = "a" if scores[i] == 1 else "b"
            Attempt.objects.create(learner=learner, question=questions[slug], response={"choice": choice}, score=scores[i], nonce=f"{name}{slug}")
            if slug == "q3":  # a later right answer must not change a first-try analysis
                Attempt.objects.create(learner=learner, question=questions[slug], response={"choice": "a"}, score=1.0, nonce=f"{name}{slug}2")
    rows = {row["slug"]: row for row in selectors.item_analysis(cohort, "first")}
    assert rows["q3"]["discrimination"] == -1.0 and "negative" in rows["q3"]["flags"]
    assert [(o["count"], o["key"]) for o in rows["q1"]["options"]] == [(2, True), (2, False), (0, False)]
    latest = {row["slug"]: row for row in selectors.item_analysis(cohort, "latest")}
    assert latest["q3"]["facility"] == 1.0

    client.force_login(teacher)
    page = client.get(reverse("instructor:items", args=[cohort.pk])).content.decode()
    assert 'data-question="q3"' in page and "-1.00" in page
    # Questions by their words and section, not slugs; the unanswered ones apart (issue #33).
    soup = BeautifulSoup(page, "html.parser")
    head = soup.select_one('table.items tr[data-question="q3"] th')
    assert questions["q3"].prompt.split()[0] in head.get_text() and "§" in head.get_text() and "§s" not in head.get_text()
    assert head.find("a")["href"].endswith("#q-q3")
    assert not soup.select("details.unanswered")  # everyone answered everything
    unanswered = make_question(objective=objective, data={"id": "q9", "type": "single", "choices": CHOICES, "answer": "a"})
    client.post(reverse("instructor:items", args=[cohort.pk]))
    soup = BeautifulSoup(client.get(reverse("instructor:items", args=[cohort.pk])).content, "html.parser")
    assert not soup.select('table.items tr[data-question="q9"]')
    assert soup.select_one("details.unanswered")["data-unanswered"] == "1"
    assert soup.select_one('details.unanswered li[data-question="q9"]') and unanswered.slug == "q9"
    kept = services.item_analysis_kept(cohort_id=cohort.pk, basis="first")
    again = client.post(reverse("instructor:items", args=[cohort.pk]))
    assert again.status_code == 302 and services.item_analysis_kept(cohort_id=cohort.pk, basis="first")["computed_at"] >= kept["computed_at"]


def test_the_flags_hold_at_their_limits():
    """Facility of exactly 0.2 is not "hard" and of exactly 0.9 not "easy"; five answers are not "few"."""
    at_hard = item_stats(1, {n: {1: 1.0 if n == 0 else 0.0} for n in range(5)})  # 1 of 5
    at_easy = item_stats(1, {n: {1: 0.0 if n == 0 else 1.0} for n in range(10)})  # 9 of 10
    assert at_hard.facility == 0.2 and "hard" not in at_hard.flags
    assert at_easy.facility == 0.9 and "easy" not in at_easy.flags
    assert item_stats(1, {n: {1: 0.0} for n in range(5)}).flags == ["hard"]
    assert item_stats(1, {n: {1: 1.0} for n in range(4)}).flags == ["easy", "few"]
