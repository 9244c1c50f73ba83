import hashlib

from django.core.cache import cache
from django.http import HttpResponse, HttpResponseBadRequest
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext as _
from django.utils.translation import get_language
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from courseapp.learners.order_seed import request_seed
from courseapp.learners.selectors import mastery_by_objective
from courseapp.learners.services import learner_get
from courseapp.lessons.outline import outline_for
from courseapp.lessons.rendering import code_stamp, markdown_inline, markdown_to_html
from courseapp.quizzes.models import Question
from courseapp.quizzes.presenting import opaque_id, shown
from courseapp.quizzes.responses import ResponseError, from_form, validate
from courseapp.quizzes.selectors import (
    anchor_label,
    anchor_url,
    attempt_history,
    card_url,
    attempts_count,
    latest_attempt,
    marked_options,
    new_nonce,
    questions_for_section,
    reveal_answer,
)
from courseapp.quizzes.services import attempt_submit


def feedback_context(*, question, attempt, tries: int, seed: str) -> dict | None:
    """What the learner sees after a submission. The key is revealed only once the answer is
    right or after a second try, so the first feedback points to the lesson, not the answer;
    with the key, every option is marked right or wrong in the order the learner's page shows."""
    if attempt is None:
        return None
    revealed = attempt.is_correct or tries >= 2
    if attempt.is_correct:
        verdict = "correct"
    elif attempt.score > 0:
        verdict = "partial"
    else:
        verdict = "wrong"
    return {
        "verdict": verdict,
        "percent": round(attempt.score * 100),
        "detail": attempt.feedback,
        "section_label": anchor_label(question.anchor),
        "section_url": anchor_url(question.lesson, question.anchor),
        "explanation": markdown_to_html(question.explanation) if question.explanation else "",
        "hint": question.hint,
        "reveal": reveal_answer(question).lines if revealed else None,
        "marks": marked_options(question, attempt.response, shown(question, seed)) if revealed else [],
        "type": question.type,
        "tries": tries,
    }


def _display(question, attempt, seed):
    """Options as this learner's page shows them, with their last answer filled in."""
    public = shown(question, seed)
    response = attempt.response if attempt else {}

    def oid(kind, raw_id):
        return opaque_id(question.slug, kind, raw_id)

    if question.type == "ordering":
        by_id = {i["id"]: i for i in public["items"]}
        order = [oid("item", i) for i in response.get("order", [])]
        if sorted(order) != sorted(by_id):  # no answer yet (or one from before the items changed)
            order = list(by_id)
        return {"items": [by_id[i] for i in order]}
    if question.type == "matching":
        pairs = {oid("left", left): oid("right", right) for left, right in response.get("pairs", {}).items() if right}
        return {"rows": [(left, pairs.get(left["id"], "")) for left in public["left"]], "right": public["right"]}
    if question.type in ("single", "multi"):
        chosen = {oid("choice", c) for c in [*response.get("choices", []), response.get("choice")] if c}
        return {"choices": [(c, c["id"] in chosen) for c in public["choices"]]}
    return {"value": response.get("value", response.get("text", ""))}


_LOOK_UP = object()
_CARD_STAMP = code_stamp("quizzes/partials")  # the last part of the key changes with SECRET_KEY (the ids)


def card_context(*, question, learner, seed, attempt=_LOOK_UP, tries: int | None = None) -> dict:
    """One card. A page of cards passes each one's `attempt` and `tries` (looked up together,
    see attempt_history); a single card looks its own up.

    Everything but the nonce (and the CSRF token) is the same until the learner answers again,
    so the card's markup is cached under `cache_key` (cards_html) and the parts below are only
    computed when the cache misses (lazily: only the template asks for them).
    """
    if attempt is _LOOK_UP:
        attempt = latest_attempt(learner=learner, question=question)
    if tries is None:
        tries = attempts_count(learner=learner, question=question)
    version = outline_for(question.lesson).version
    return {
        "q": question,
        "nonce": new_nonce(),
        "cache_key": f"{question.pk}/{version}/{seed}/{attempt.pk if attempt else 0}/{tries}/{get_language()}/{_CARD_STAMP}/{opaque_id('', 'cache', '')}",
        "prompt": SimpleLazyObject(lambda: markdown_inline(question.prompt)),
        "display": SimpleLazyObject(lambda: _display(question, attempt, seed)),
        "feedback": SimpleLazyObject(lambda: feedback_context(question=question, attempt=attempt, tries=tries, seed=seed)),
    }


# Stand-ins in a cached card's markup for what must be fresh on every page: the card's nonce and
# this visitor's CSRF token.
_NONCE, _CSRF = "\x00nonce\x00", "\x00csrf\x00"
CARD_SECONDS = 24 * 3600


def cards_html(request, cards: list[dict]) -> str:
    """The cards' markup, one cache round trip for the page: a card renders only when its
    learner's state for it changed (its key), then gets a fresh nonce and this request's CSRF
    token. (Including the card template once per card cost a selfcheck page of 46 cards 4 ms.)"""
    keys = ["card:" + hashlib.sha1(c["cache_key"].encode()).hexdigest() for c in cards]
    found = cache.get_many(keys)
    missing = {}
    for key, card in zip(keys, cards):
        if key not in found:
            found[key] = missing[key] = render_to_string(
                "quizzes/partials/card.html", {"c": {**card, "nonce": _NONCE}, "csrf_token": _CSRF})
    if missing:
        cache.set_many(missing, CARD_SECONDS)
    token = get_token(request)
    return "".join(found[key].replace(_NONCE, card["nonce"]).replace(_CSRF, token) for key, card in zip(keys, cards))


def _cards(questions, *, learner, seed) -> list[dict]:
    history = attempt_history(learner=learner, questions=questions)
    cards = []
    for q in questions:
        attempt, tries = history.get(q.pk, (None, 0))
        cards.append(card_context(question=q, learner=learner, seed=seed, attempt=attempt, tries=tries))
    return cards


def question_cards(request, *, learner, section) -> str:
    """The section's own self-check cards, as markup ("" when it has none)."""
    return cards_html(request, _cards(questions_for_section(section=section), learner=learner, seed=request_seed(request, learner)))


def selfcheck_html(request, *, learner, lesson) -> str:
    grouped = outline_for(lesson).questions_by_objective()
    cards = _cards([q for _, qs in grouped for q in qs], learner=learner, seed=request_seed(request, learner))
    groups, at = [], 0
    for objective, questions in grouped:
        groups.append({"objective": objective, "cards": cards_html(request, cards[at:at + len(questions)])})
        at += len(questions)
    return render_to_string("quizzes/selfcheck.html", {"groups": groups, "lesson": lesson}, request=request)


def _refused(request, message, question=None):
    """A submission that cannot be graded: the message goes into the card, nothing is stored.

    A plain form post gets a real 400. An htmx one gets a 200 swapped into the card's feedback
    area, because with DEBUG on django-htmx's debug script replaces the whole page with the
    body of any 400 (django_htmx/static/django_htmx/django-htmx.js, htmx:beforeOnLoad).
    """
    html = render_to_string("quizzes/partials/error.html", {"message": message, "q": question}, request=request)
    if not request.htmx:
        return HttpResponseBadRequest(html)
    response = reswap(HttpResponse(html), "innerHTML")
    return retarget(response, f"#fb-{question.slug}") if question is not None else response


@require_POST
def question_submit(request, slug):
    question = Question.objects.select_related("lesson", "objective").filter(slug=slug).first()
    if question is None:
        return _refused(request, _("There is no question “%(slug)s”.") % {"slug": slug[:60]})
    try:
        response = validate(question, from_form(question, request.POST))  # before a guest row is made
    except ResponseError as exc:
        return _refused(request, str(exc), question)
    learner = learner_get(request, create=True)
    attempt, _created = attempt_submit(
        learner=learner, question=question, response=response, nonce=request.POST.get("nonce", "")
    )
    if not request.htmx:  # plain form post (no JavaScript): back to the card, which shows the result
        return redirect(card_url(question.lesson, question))
    mastery = next(m for m in mastery_by_objective(learner=learner, lesson=question.lesson) if m.objective.pk == question.objective_id)
    context = card_context(question=question, learner=learner, seed=learner.seed, attempt=attempt)
    context["mastery_oob"] = mastery
    return render(request, "quizzes/partials/submit_result.html", context)
