"""The answer key never reaches the browser before the learner submits (issue #2 §5), and no id
on a page names or hashes an authored id (issue #7)."""
import hashlib
import json

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

from courseapp.quizzes.models import Question
from tests.answers import shown_id, wrong_form


def every_page(client, lesson):
    urls = [reverse("home"), lesson.get_absolute_url(), reverse("lessons:glossary", args=[21]), reverse("progress")]
    urls += [s.get_absolute_url() for s in lesson.sections.all()]
    pages = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        pages[url] = response.content.decode()
    return pages


def key_leaks(q, html, *, choice_notes=True):
    """Strings whose presence would give this question's answer away. After a wrong answer the
    note on the chosen (wrong) option is feedback, not the key, so it may be checked separately."""
    leaks = [json.dumps(q.key), json.dumps(q.key, ensure_ascii=False)]
    if q.explanation:
        leaks.append(q.explanation[:40])
    if choice_notes:
        leaks += [text[:40] for text in q.choice_feedback.values()]
    return [s for s in leaks if s and s in html]


@pytest.mark.django_db
def test_no_page_contains_any_key_or_explanation(client, lesson):
    pages = every_page(client, lesson)
    questions = list(Question.objects.all())
    for url, html in pages.items():
        for q in questions:
            assert not key_leaks(q, html), (url, q.slug)
        for word in ('"tolerance"', '"pairs"', '"answers"', "data-verdict", 'class="reveal"'):
            assert word not in html, (url, word)


@pytest.mark.django_db
def test_every_card_starts_blank_and_shuffled(client, lesson):
    cards = {}
    for html in every_page(client, lesson).values():
        for card in BeautifulSoup(html, "html.parser").select("div.question[data-question]"):
            cards[card["data-question"]] = card
    assert set(cards) == set(Question.objects.values_list("slug", flat=True)), "every question is on some page"
    for q in Question.objects.all():
        card = cards[q.slug]
        assert not card.select("input[checked]"), q.slug
        assert not card.select("option[selected]"), q.slug
        for field in card.select("input[type=text]"):
            assert not field.get("value"), q.slug
        if q.type == "ordering":
            shown = [i["value"] for i in card.select("input[name=order]")]
            assert shown != [shown_id(q, "item", i) for i in q.key["order"]], q.slug


def authored_ids(q) -> set[str]:
    return {str(e["id"]) for group in ("choices", "items", "left", "right") for e in q.public.get(group, [])}


def unsalted_hashes(q) -> set[str]:
    """What the ids used to be: sha256 of slug/kind/id with no secret, which anyone can recompute."""
    kinds = ("choice", "item", "left", "right")
    return {hashlib.sha256(f"{q.slug}/{k}/{raw}".encode()).hexdigest() for k in kinds for raw in authored_ids(q)}


def card_ids(card) -> list[str]:
    """Every id a card hands the browser: option values, item ids, matching field names."""
    ids = [i["value"] for i in card.select("input[name=choice], input[name=order]")]
    ids += [li["data-id"] for li in card.select("[data-id]")]
    ids += [o["value"] for o in card.select("select option") if o.get("value")]
    ids += [s["name"].removeprefix("match-") for s in card.select("select[name^=match-]")]
    return ids


@pytest.mark.django_db
def test_no_id_on_any_page_is_an_authored_id_or_an_unsalted_hash(client, lesson):
    questions = {q.slug: q for q in Question.objects.all()}
    seen = 0
    for url, html in every_page(client, lesson).items():
        for q in questions.values():
            for h in unsalted_hashes(q):
                assert h[:10] not in html, (url, q.slug)
        for card in BeautifulSoup(html, "html.parser").select("div.question[data-question]"):
            q = questions[card["data-question"]]
            hashes, raw = unsalted_hashes(q), authored_ids(q)
            for shown in card_ids(card):
                seen += 1
                assert shown not in raw, (url, q.slug, shown)
                assert not any(h.startswith(shown) for h in hashes), (url, q.slug, shown)
    assert seen > 100  # the cards were really looked at


@pytest.mark.django_db
def test_a_first_wrong_answer_does_not_reveal_the_key(client):
    for q in Question.objects.all():
        response = client.post(
            reverse("quizzes:submit", args=[q.slug]), {**wrong_form(q), "nonce": f"n-{q.pk}"}, HTTP_HX_REQUEST="true"
        )
        html = response.content.decode()
        assert response.status_code == 200, q.slug
        assert 'class="reveal"' not in html, q.slug
        assert not key_leaks(q, html, choice_notes=False), q.slug
