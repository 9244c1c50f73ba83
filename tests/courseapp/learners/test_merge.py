"""Guest → account merge loses nothing (issue #7 §8): every attempt, the guest's demo runs and lab reports."""
import pytest
from django.urls import reverse

from courseapp.demo.models import DemoRun
from courseapp.lab.models import LabRun
from courseapp.learners.models import Learner
from courseapp.learners.services import learner_merge_guest
from courseapp.quizzes.models import Attempt, Question
from tests.answers import right_form, wrong_form
from tests.factories import LearnerFactory, UserFactory

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.mark.django_db
def test_merge_keeps_every_attempt_even_one_whose_nonce_the_account_already_used():
    user = UserFactory()
    owned, guest = LearnerFactory(user=user), LearnerFactory()
    q, other = Question.objects.order_by("order")[:2]
    Attempt.objects.create(learner=owned, question=q, response={}, score=1.0, nonce="same")
    Attempt.objects.create(learner=guest, question=q, response={}, score=0.0, nonce="same")
    Attempt.objects.create(learner=guest, question=q, response={}, score=0.5, nonce="g2")
    Attempt.objects.create(learner=guest, question=other, response={}, score=1.0, nonce="same")

    merged = learner_merge_guest(guest_id=guest.pk, user=user)

    assert merged == owned
    assert sorted(owned.attempts.filter(question=q).values_list("score", flat=True)) == [0.0, 0.5, 1.0]
    assert owned.attempts.filter(question=other, nonce="same").exists()  # another question: no clash
    assert owned.attempts.filter(question=q, nonce="same").count() == 1  # the moved one got a fresh nonce
    assert not Learner.objects.filter(pk=guest.pk).exists()


@pytest.mark.django_db
def test_merge_moves_the_guests_demo_runs_to_the_account():
    user = UserFactory()
    owned, guest = LearnerFactory(user=user), LearnerFactory()
    running = DemoRun.objects.create(owner=guest, preset="paged", status=DemoRun.Status.RUNNING)
    finished = DemoRun.objects.create(owner=guest, preset="batching", status=DemoRun.Status.FINISHED)

    learner_merge_guest(guest_id=guest.pk, user=user)

    for run in (running, finished):
        run.refresh_from_db()
        assert run.owner == owned
    assert running.is_active


@pytest.mark.django_db
def test_logging_in_keeps_a_guest_answer_with_a_nonce_the_account_already_has(client):
    q = Question.objects.filter(type="single").first()
    user = UserFactory(username="hana")
    Attempt.objects.create(learner=LearnerFactory(user=user), question=q, response={}, score=1.0, nonce="n-1")
    client.post(reverse("quizzes:submit", args=[q.slug]), {**wrong_form(q), "nonce": "n-1"}, **HX)
    client.post(reverse("quizzes:submit", args=[q.slug]), {**right_form(q), "nonce": "n-2"}, **HX)

    client.post(reverse("login"), {"username": "hana", "password": "correct-horse-battery"})

    learner = Learner.objects.get(user=user)
    assert sorted(learner.attempts.values_list("score", flat=True)) == [0.0, 1.0, 1.0]
    assert not Learner.objects.filter(user__isnull=True).exists()


@pytest.mark.django_db
def test_a_guests_lab_reports_follow_them_into_the_account_they_log_in_to():
    """They were deleted with the guest row (CASCADE) when the account already had a learner."""
    user = UserFactory()
    owned = LearnerFactory(user=user)
    guest = LearnerFactory()
    run = LabRun.objects.create(learner=guest, status=LabRun.Status.FINISHED, knobs={"num_blocks": 512}, report={"x": 1})
    learner_merge_guest(guest_id=guest.pk, user=user)
    run.refresh_from_db()
    assert run.learner == owned and run.report == {"x": 1}
