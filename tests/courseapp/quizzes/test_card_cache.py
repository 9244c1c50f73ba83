"""Cards are cached until the learner answers again: a cached card still gets a fresh nonce
and CSRF token, and an answer shows on the next page view at once."""
import re

import pytest
from bs4 import BeautifulSoup

from courseapp.quizzes.models import Question
from tests.answers import right_form, wrong_form


def _card(client, q):
    page = BeautifulSoup(client.get(f"/lessons/21/{q.anchor.split('-')[0]}/").content, "html.parser")
    return page.find(id=f"q-{q.slug}")


@pytest.mark.django_db
def test_a_cached_card_still_gets_a_fresh_nonce_and_csrf_token(client):
    q = Question.objects.filter(type="single", anchor__startswith="s2").first()
    first, second = _card(client, q), _card(client, q)
    nonces = [c.find("input", attrs={"name": "nonce"})["value"] for c in (first, second)]
    assert nonces[0] != nonces[1]
    for card in (first, second):
        assert card.find("input", attrs={"name": "csrfmiddlewaretoken"}) is not None
        assert len(card.select("input[name=choice]")) == len(q.public["choices"])


@pytest.mark.django_db
def test_each_answer_shows_on_the_next_page_view(client):
    q = Question.objects.filter(type="single", anchor__startswith="s2").first()
    assert _card(client, q).select_one("[data-verdict]") is None
    client.post(f"/questions/{q.slug}/submit/", {**wrong_form(q), "nonce": "n1"})
    card = _card(client, q)
    assert card.select_one("[data-verdict]")["data-verdict"] == "wrong"
    assert card.select_one(".reveal") is None
    assert card.select_one("input[name=choice][checked]")["value"] == wrong_form(q)["choice"]
    client.post(f"/questions/{q.slug}/submit/", {**wrong_form(q), "nonce": "n2"})
    assert _card(client, q).select_one(".reveal") is not None  # the key shows after a second try
    client.post(f"/questions/{q.slug}/submit/", {**right_form(q), "nonce": "n3"})
    card = _card(client, q)
    assert card.select_one("[data-verdict]")["data-verdict"] == "correct"
    assert card.select_one("input[name=choice][checked]")["value"] == right_form(q)["choice"]


@pytest.mark.django_db
def test_a_question_edit_shows_on_cached_cards(client):
    q = Question.objects.filter(type="single", anchor__startswith="s2").first()
    _card(client, q)
    q.prompt = "완전히 새로 쓴 질문입니다"
    q.save()
    assert re.search("완전히 새로 쓴 질문입니다", str(_card(client, q)))


@pytest.mark.django_db
def test_a_card_cached_for_one_visitor_carries_the_next_visitors_own_csrf_token(client, monkeypatch):
    """The cached markup holds stand-ins, never a token: each visitor's form posts with their own."""
    from django.test import Client

    from courseapp.learners.order_seed import COOKIE
    from courseapp.quizzes import views

    q = Question.objects.filter(type="single", anchor__startswith="s2").first()
    _card(client, q)  # fills the cache
    other = Client(enforce_csrf_checks=True)
    other.cookies[COOKIE] = client.cookies[COOKIE].value  # the same option order: the same cached card
    renders = []
    real = views.render_to_string
    monkeypatch.setattr(views, "render_to_string", lambda name, ctx, **kw: renders.append(ctx) or real(name, ctx, **kw))
    card = _card(other, q)
    assert not [c for c in renders if "c" in c and c["c"]["q"].pk == q.pk], "the card was rendered again"
    token = card.find("input", attrs={"name": "csrfmiddlewaretoken"})["value"]
    nonce = card.find("input", attrs={"name": "nonce"})["value"]
    assert "\x00" not in str(card)
    response = other.post(f"/questions/{q.slug}/submit/", {**wrong_form(q), "nonce": nonce, "csrfmiddlewaretoken": token})
    assert response.status_code == 302  # accepted (a plain form post goes back to the card), not 403
