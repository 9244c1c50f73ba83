"""The answer key never reaches the browser before the learner submits (issue #2 §5), and no id
on a page names or hashes an authored id (issue #7)."""
import hashlib
import json
import re

import pytest
from bs4 import BeautifulSoup
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

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


# --- leaks smaller than a key dump: a class, a data attribute, a value -------------------------

# Attribute names and class words that would say which option is right (or what the answer is).
TELLING_ATTRIBUTE = re.compile(r"answer|expect|correct|solution|key|right|wrong|verdict|score|mark|reveal|truth", re.I)
TELLING_CLASS = {"right", "wrong", "correct", "incorrect", "answer", "key", "expected", "solution", "reveal", "marks",
                 "mark", "mark-right", "mark-wrong", "is-right", "is-correct", "choice-note", "explanation"}

# Attributes that hold a public name (the question's, its objective's, a field's) or the form's
# layout (size="10" is not the answer 10): the key's words are looked for in all the others.
PUBLIC = {"id", "data-question", "data-objective", "data-type", "action", "hx-post", "hx-target", "for",
          "aria-labelledby", "aria-describedby", "name", "hx-disabled-elt", "size", "rows", "maxlength"}


def cards_of(pages: dict[str, str]) -> dict[str, tuple[str, object]]:
    """slug → (url, card element), for every self-check card on every page."""
    cards = {}
    for url, html in pages.items():
        for card in BeautifulSoup(html, "html.parser").select("div.question[data-question]"):
            cards[card["data-question"]] = (url, card)
    return cards


def key_strings(q) -> list[str]:
    """The key's own words: typed answers, the model answer, a number as it would be written."""
    key = q.key
    words = [*key.get("answers", []), key.get("model_answer") or ""]
    if q.type == "numeric":
        value = key["answer"]
        words += [str(value), str(int(value)) if value == int(value) else ""]
    return [w for w in words if w]


@pytest.mark.django_db
def test_no_card_marks_its_answer_in_an_attribute_or_a_class(client, lesson):
    """Before an answer, a card's markup has no attribute or class that tells right from wrong
    (class="right", data-expected=…, data-answer=…) and no attribute carrying the key's values."""
    questions = {q.slug: q for q in Question.objects.all()}
    cards = cards_of(every_page(client, lesson))
    assert set(cards) == set(questions)
    for slug, (url, card) in cards.items():
        q = questions[slug]
        values = key_strings(q)
        for element in [card, *card.find_all(True)]:
            for name, value in element.attrs.items():
                assert not TELLING_ATTRIBUTE.search(name), (url, slug, element.name, name)
                if name == "class":
                    assert not TELLING_CLASS & set(value), (url, slug, value)
                if name in PUBLIC:  # a slug may be the answer's word ("preemption")
                    continue
                text = " ".join(value) if isinstance(value, list) else str(value)
                for word in values:
                    assert word != text and (len(word) < 3 or word not in text), (url, slug, name, word)


def other_key(q) -> dict:
    """A different valid key for the same question: another answer of the same shape."""
    key = dict(q.key)
    if q.type == "single":
        ids = [c["id"] for c in q.public["choices"]]
        key["answer"] = ids[(ids.index(key["answer"]) + 1) % len(ids)]
    elif q.type == "multi":
        key["answer"] = [c for c in key["choices"] if c not in key["answer"]]
    elif q.type == "numeric":
        key["answer"] = key["answer"] + 7
        key["tolerance"] = key["tolerance"] + 1
    elif q.type == "short":
        key["answers"] = ["전혀 다른 정답"]
        if key.get("model_answer"):
            key["model_answer"] = "전혀 다른 모범 답안"
    elif q.type == "ordering":
        key["order"] = key["order"][1:] + key["order"][:1]
    else:
        lefts = list(key["pairs"])
        rights = [key["pairs"][left] for left in lefts]
        key["pairs"] = dict(zip(lefts, rights[1:] + rights[:1]))
    assert key != q.key, q.slug
    return key


FRESH = [  # what is new on every page view: each card's nonce and the masked CSRF token
    (re.compile(r'(name="(?:nonce|csrfmiddlewaretoken)"[^>]*? value=")[^"]*"'), r'\1"'),
    (re.compile(r'("X-CSRFToken": ")[^"]*"'), r'\1"'),
]


def comparable(html: str) -> str:
    for pattern, blank in FRESH:
        html = pattern.sub(blank, html)
    return html


@pytest.mark.django_db
def test_no_page_depends_on_the_key(client, lesson):
    """Whatever the leak (a class on the right option, a data attribute, a value, an order), it
    changes with the key: every page a learner can open before answering is the same markup,
    byte for byte, when every question's key, explanation and option notes are swapped for others."""
    from courseapp.lessons.outline import outline_for, outline_forget

    before = every_page(client, lesson)
    other_key_of = {}
    for q in Question.objects.all():
        other_key_of[q.slug] = other_key(q)
        notes = {choice: f"다른 설명 {choice}" for choice in q.choice_feedback}
        Question.objects.filter(pk=q.pk).update(key=other_key_of[q.slug], explanation="다른 해설", choice_feedback=notes,
                                                updated_at=timezone.now())  # a new content version, as an edit makes
    cache.clear()  # and nothing rendered from the old rows is served again
    outline_forget()
    assert all(q.key == other_key_of[q.slug] for q in outline_for(lesson).questions), "the pages read the new keys"
    after = every_page(client, lesson)
    assert set(cards_of(before)) == set(other_key_of), "every question is on a page"
    assert {q.type for q in Question.objects.all()} == {"single", "multi", "numeric", "short", "ordering", "matching"}
    for url, html in before.items():
        assert comparable(html) == comparable(after[url]), url
