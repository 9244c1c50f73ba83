"""Property-based: whatever a browser, a script or the grading API sends as a response to any of the
lesson's real questions, checking and grading it ends in a clear ResponseError or in a score in
[0, 1], never in another exception (a 500 for the learner, a lost try)."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from courseapp.quizzes.grading import grade, grade_multi, grade_ordering
from courseapp.quizzes.models import Question
from courseapp.quizzes.responses import ResponseError, validate

FIELDS = ["choice", "choices", "value", "text", "order", "pairs"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30))
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)), max_leaves=12)


def ids_of(question) -> list:
    public = question.public
    found = [item["id"] for group in ("choices", "items", "left", "right") for item in public.get(group, [])]
    return found or ["a"]


def responses_for(question):
    """Mostly near-valid shapes built from the question's own ids (where the bugs hide), and
    anything JSON can carry."""
    ids = ids_of(question)
    some_id = st.one_of(st.sampled_from(ids), json_like)
    near = st.fixed_dictionaries({}, optional={
        "choice": some_id,
        "choices": st.one_of(st.lists(some_id, max_size=6), json_like),
        "value": st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=20), json_like),
        "text": st.one_of(st.text(max_size=200), json_like),
        "order": st.one_of(st.permutations(ids).map(list), st.lists(some_id, max_size=8), json_like),
        "pairs": st.one_of(st.dictionaries(st.sampled_from(ids), some_id, max_size=6), json_like),
    })
    return st.one_of(near, json_like)


@pytest.mark.django_db
def test_any_response_to_any_question_is_graded_in_0_1_or_refused_clearly(lesson):
    questions = list(Question.objects.filter(lesson=lesson).order_by("order"))
    assert {q.type for q in questions} == {"single", "multi", "numeric", "short", "ordering", "matching"}

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data):
        question = data.draw(st.sampled_from(questions))
        response = data.draw(responses_for(question))
        try:
            clean = validate(question, response)
        except ResponseError as refused:
            assert str(refused)  # a message the learner can read
            return
        result = grade(question.type, question.key, clean)
        assert isinstance(result.score, float) and not math.isnan(result.score)
        assert 0.0 <= result.score <= 1.0, (question.slug, clean, result)
        assert validate(question, clean) == clean  # what is kept is itself a valid response

    check()


@given(answer=st.sets(st.sampled_from("abcdef")), chosen=st.sets(st.sampled_from("abcdef")))
def test_multi_credit_is_a_share_of_the_key_and_an_exact_match_is_full(answer, chosen):
    result = grade_multi({"answer": sorted(answer)}, {"choices": sorted(chosen)})
    assert 0.0 <= result.score <= 1.0
    assert (result.score == 1.0) == (chosen == answer)


@given(order=st.permutations(list("abcdefg")))
def test_ordering_credit_is_full_only_for_the_key_order(order):
    key = list("abcdefg")
    result = grade_ordering({"order": key}, {"order": order})
    assert 1 / len(key) <= result.score <= 1.0  # any single item is "in order" by itself
    assert (result.score == 1.0) == (order == key)
