"""attempt_submit on its own (quizzes/services.py): what one call writes, and the edges the page
and the API lean on — nonces, the wrong choice's note, the race on one nonce, and the rule that
only the grading API may skip the nonce lookup."""
import pytest
from django.db import transaction

from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.services import MAX_NONCE, attempt_submit
from tests.answers import api_response
from tests.factories import LearnerFactory

pytestmark = pytest.mark.django_db


def single_with_a_note() -> tuple[Question, str]:
    for q in Question.objects.filter(type="single").order_by("order"):
        wrong = [c for c in q.choice_feedback if c != q.key["answer"]]
        if wrong:
            return q, wrong[0]
    pytest.skip("the lesson has no single-choice question with a note on a wrong option")


def test_a_wrong_choice_with_a_note_gets_it_and_a_right_one_gets_none():
    learner = LearnerFactory()
    q, wrong = single_with_a_note()
    attempt, _ = attempt_submit(learner=learner, question=q, response={"choice": wrong}, nonce="w")
    assert attempt.score == 0 and attempt.feedback["choice_note"] == q.choice_feedback[wrong]
    right, _ = attempt_submit(learner=learner, question=q, response={"choice": q.key["answer"]}, nonce="r")
    assert right.score == 1 and "choice_note" not in right.feedback


def test_a_long_nonce_is_cut_to_its_limit_and_still_counts_once():
    learner = LearnerFactory()
    q = Question.objects.filter(type="numeric").order_by("order").first()
    long_nonce = "n" * (MAX_NONCE + 40)
    first, created = attempt_submit(learner=learner, question=q, response={"value": -1}, nonce=long_nonce)
    assert created and first.nonce == "n" * MAX_NONCE
    again, created = attempt_submit(learner=learner, question=q, response={"value": -1}, nonce=long_nonce)
    assert (again.pk, created) == (first.pk, False)


def test_without_a_nonce_every_submission_counts_under_a_fresh_one():
    learner = LearnerFactory()
    q = Question.objects.filter(type="numeric").order_by("order").first()
    a, _ = attempt_submit(learner=learner, question=q, response={"value": -1}, nonce="")
    b, _ = attempt_submit(learner=learner, question=q, response={"value": -1}, nonce="")
    assert a.pk != b.pk and a.nonce != b.nonce and len(a.nonce) >= 16
    assert Attempt.objects.filter(learner=learner, question=q).count() == 2


def test_a_parallel_submission_of_the_same_nonce_returns_the_first_attempt(monkeypatch):
    """Both requests looked the nonce up before either wrote: the second insert hits the unique
    constraint and returns the attempt the first one wrote, inside its own savepoint."""
    learner = LearnerFactory()
    q = Question.objects.filter(type="numeric").order_by("order").first()
    first, _ = attempt_submit(learner=learner, question=q, response={"value": q.key["answer"]}, nonce="same")
    real_filter = Attempt.objects.filter
    monkeypatch.setattr(Attempt.objects, "filter", lambda **kw: real_filter(pk__in=[]) if "nonce" in kw else real_filter(**kw))
    with transaction.atomic():  # the caller's transaction goes on after the clash
        again, created = attempt_submit(learner=learner, question=q, response={"value": -1}, nonce="same")
        assert (again.pk, created) == (first.pk, False) and again.score == 1
        assert Attempt.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # outside any transaction, as a view would be without one
def test_skipping_the_nonce_lookup_needs_the_callers_transaction(settings):
    learner = LearnerFactory()
    q = Question.objects.filter(type="numeric").order_by("order").first()
    with pytest.raises(ValueError, match="new_learner=True needs the transaction that made the learner"):
        attempt_submit(learner=learner, question=q, response=api_response(q, right=True), nonce="x", new_learner=True)
    assert not Attempt.objects.exists()
    with transaction.atomic():
        attempt, created = attempt_submit(learner=learner, question=q, response={"value": q.key["answer"]}, nonce="x",
                                          new_learner=True)
    assert created and attempt.score == 1
