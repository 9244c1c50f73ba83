"""A guest's first writes sent together (two tabs, a double submit: no session yet) land on one
learner, found by the seed cookie they share; a stale guest row with that seed does not capture
a new visitor; an account's parallel first writes make one row, not an error."""
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from courseapp.learners.models import Learner
from courseapp.learners.order_seed import COOKIE
from courseapp.quizzes.models import Attempt, Question
from tests.answers import right_form
from tests.factories import LearnerFactory, UserFactory

HX = {"HTTP_HX_REQUEST": "true"}
SEED = "0123456789abcdef0123456789abcdef"


def first_visit_client() -> Client:
    """A browser that has seen a page (its seed cookie set) and written nothing (no session)."""
    client = Client()
    client.cookies[COOKIE] = SEED
    return client


def submit(client, q, nonce):
    return client.post(reverse("quizzes:submit", args=[q.slug]), {**right_form(q), "nonce": nonce}, **HX)


@pytest.mark.django_db
def test_first_answers_sent_together_from_one_browser_share_one_learner():
    q, other = Question.objects.order_by("order")[:2]
    # Each request left before the other's session came back: neither carries a session cookie.
    tabs = [first_visit_client() for _ in range(3)]
    for i, tab in enumerate(tabs):
        assert submit(tab, q if i != 1 else other, f"t{i}").status_code == 200
    guests = Learner.objects.filter(user__isnull=True)
    assert guests.count() == 1
    guest = guests.get()
    assert guest.seed == SEED and Attempt.objects.filter(learner=guest).count() == 3
    # whichever session the browser keeps, it finds all three answers
    for tab in tabs:
        assert tab.session["learner_id"] == guest.pk


@pytest.mark.django_db
def test_a_stale_guest_row_with_the_seed_does_not_capture_a_new_visitor():
    q = Question.objects.order_by("order").first()
    old = LearnerFactory(seed=SEED)
    Learner.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))
    client = first_visit_client()
    response = submit(client, q, "s1")
    assert response.status_code == 200
    mine = Learner.objects.get(pk=client.session["learner_id"])
    assert mine.pk != old.pk and mine.seed != SEED
    assert response.cookies[COOKIE].value == mine.seed, "the browser's option order follows its new row"
    assert not Attempt.objects.filter(learner=old).exists()


@pytest.mark.django_db
def test_an_accounts_row_made_by_a_parallel_request_is_used_not_an_error(monkeypatch):
    from courseapp.learners import services

    user = UserFactory()
    client = Client()
    client.force_login(user)
    q = Question.objects.order_by("order").first()
    made = LearnerFactory(user=user)
    real_filter = Learner.objects.filter
    calls = {"n": 0}

    def filter_missing_once(*args, **kwargs):  # the read happened before the other request's insert
        if kwargs.get("user") == user and calls["n"] == 0:
            calls["n"] += 1
            return real_filter(pk=-1)
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(services.Learner.objects, "filter", filter_missing_once)
    assert submit(client, q, "a1").status_code == 200
    assert calls["n"] == 1
    assert Learner.objects.filter(user=user).count() == 1
    assert Attempt.objects.filter(learner=made).count() == 1
