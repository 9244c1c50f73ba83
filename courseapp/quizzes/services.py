"""Writes for self-checks: grading a submission into the attempt history."""
import secrets

from django.db import IntegrityError, transaction

from courseapp.lti import services as lti_services
from courseapp.quizzes import grading
from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.responses import validate

MAX_NONCE = 64


def attempt_submit(*, learner, question: Question, response: dict, nonce: str,
                   new_learner: bool = False) -> tuple[Attempt, bool]:
    """Validate, grade and store one attempt. Returns (attempt, created).

    The same nonce submitted twice to the same question (a double click, a retried request)
    returns the first attempt instead of counting again. A nonce is the learner's and the
    question's: replayed on another question it grades that one afresh and reveals nothing
    else. Raises responses.ResponseError for a bad response, before anything is written.

    `new_learner`: the learner was made in the caller's transaction, still open. Nobody else
    can see them yet, so they have no attempt to look the nonce up in and no parallel request
    to race: the attempt is written without a savepoint of its own (the grading API).
    """
    nonce = (nonce or "")[:MAX_NONCE]
    if new_learner and not transaction.get_connection().in_atomic_block:
        raise ValueError("new_learner=True needs the transaction that made the learner")
    if nonce and not new_learner:
        existing = Attempt.objects.filter(learner=learner, question=question, nonce=nonce).first()
        if existing is not None:
            return existing, False
    clean = validate(question, response)
    result = grading.grade(question.type, question.key, clean)
    feedback = dict(result.detail)
    if question.type == "single":
        note = question.choice_feedback.get(clean["choice"])
        if note and not result.is_correct:
            feedback["choice_note"] = note
    try:
        with transaction.atomic(savepoint=not new_learner):
            attempt = Attempt.objects.create(
                learner=learner,
                question=question,
                response=clean,
                score=result.score,
                feedback=feedback,
                nonce=nonce or secrets.token_urlsafe(16),
            )
            if learner.lms_graded:  # an LMS gradebook gets the new score
                lti_services.score_changed(learner_id=learner.pk)
    except IntegrityError:  # the same nonce raced in from a parallel request
        if new_learner:  # no savepoint to return to: the caller's transaction rolls back whole
            raise
        return Attempt.objects.get(learner=learner, question=question, nonce=nonce), False
    return attempt, True
