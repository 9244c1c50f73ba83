"""Reads for self-checks: what a question card shows, before and after a submission."""
import secrets
from dataclasses import dataclass

from django.utils.html import strip_tags

from courseapp.lessons.outline import outline_for
from courseapp.lessons.rendering import markdown_inline
from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.presenting import raw_ids


def new_nonce() -> str:
    return secrets.token_urlsafe(16)




def anchor_label(anchor: str) -> str:
    """s3-3 → §3.3, appendix-a → 부록 A."""
    if anchor.startswith("appendix-"):
        return f"부록 {anchor.removeprefix('appendix-').upper()}"
    return "§" + anchor.removeprefix("s").replace("-", ".")


def question_words(question) -> str:
    """The question's words as plain text (its prompt is Markdown), for pages that name it."""
    return strip_tags(markdown_inline(question.prompt)).strip()


def card_url(lesson, question) -> str:
    """The question's card on the page that carries it (not the slug a learner never sees)."""
    page = outline_for(lesson).anchor_pages.get(question.anchor) or lesson.get_absolute_url()
    return f"{page}#q-{question.slug}"


def anchor_url(lesson, anchor: str) -> str:
    page = outline_for(lesson).anchor_pages.get(anchor)
    if page is None:
        return lesson.get_absolute_url()
    return f"{page}#{anchor}"


@dataclass(frozen=True, slots=True)
class Reveal:
    """The right answer in words, shown once it can no longer spoil the question."""

    lines: list


def reveal_answer(question: Question) -> Reveal:
    key, public = question.key, question.public

    def text(group):  # per group: authored ids may repeat across groups (left "1", right "1")
        return {entry["id"]: entry["text"] for entry in public.get(group, [])}

    if question.type == "single":
        return Reveal([text("choices")[key["answer"]]])
    if question.type == "multi":
        choices = text("choices")
        return Reveal([choices[c] for c in key["choices"] if c in key["answer"]] or ["(없음)"])
    if question.type == "numeric":
        value = key["answer"]
        shown = int(value) if value == int(value) else value
        return Reveal([f"{shown} {public.get('unit', '')}".strip()])
    if question.type == "short" and key.get("model_answer"):
        return Reveal([key["model_answer"]])
    if question.type == "short":
        return Reveal([" / ".join(key["answers"][:3])])
    if question.type == "ordering":
        items = text("items")
        return Reveal([items[i] for i in key["order"]])
    left, right = text("left"), text("right")
    return Reveal([f"{left[a]} → {right[b]}" for a, b in key["pairs"].items()])


@dataclass(frozen=True, slots=True)
class Mark:
    """One option (or row, or position) after the reveal: was it right, did the learner pick it."""

    text: str
    right: bool
    chosen: bool = False
    note: str = ""  # why a wrong option is wrong, or what belongs in this row / place


def marked_options(question: Question, response: dict, shown_public: dict) -> list[Mark]:
    """Every option of a choice, matching or ordering question, marked right or wrong against
    the key, in the order this learner's page shows them (`shown_public`, from presenting.shown
    with the learner's seed)."""
    key, public = question.key, question.public
    if question.type in ("single", "multi"):
        answer = {key["answer"]} if question.type == "single" else set(key["answer"])
        chosen = set(response.get("choices", [])) | {response.get("choice")}
        authored = raw_ids(question, "choices")
        marks = []
        for shown_choice in shown_public["choices"]:
            raw = authored[shown_choice["id"]]
            note = question.choice_feedback.get(raw, "") if raw not in answer else ""
            marks.append(Mark(shown_choice["text"], raw in answer, raw in chosen, note))
        return marks
    if question.type == "matching":
        left = {e["id"]: e["text"] for e in public["left"]}
        right = {e["id"]: e["text"] for e in public["right"]}
        given = response.get("pairs", {})
        return [
            Mark(f"{left[lft]} → {right.get(given.get(lft), '—')}", given.get(lft) == rgt, True,
                 "" if given.get(lft) == rgt else right[rgt])
            for lft, rgt in key["pairs"].items()
        ]
    if question.type == "ordering":
        items = {e["id"]: e["text"] for e in public["items"]}
        place = {item: n for n, item in enumerate(key["order"], start=1)}
        return [
            Mark(items[item], place[item] == n, True, "" if place[item] == n else str(place[item]))
            for n, item in enumerate(response.get("order", []), start=1)
        ]
    return []


def attempts_count(*, learner, question) -> int:
    if learner is None:
        return 0
    return Attempt.objects.filter(learner=learner, question=question).count()


def latest_attempt(*, learner, question) -> Attempt | None:
    if learner is None:
        return None
    return Attempt.objects.filter(learner=learner, question=question).order_by("-created_at", "-pk").first()


def attempt_history(*, learner, questions) -> dict[int, tuple[Attempt, int]]:
    """question id → (latest attempt, number of attempts), in one query for a page of cards."""
    if learner is None or not questions:
        return {}
    out: dict[int, tuple[Attempt, int]] = {}
    for attempt in Attempt.objects.filter(learner=learner, question__in=questions).order_by("created_at", "pk"):
        out[attempt.question_id] = (attempt, out.get(attempt.question_id, (None, 0))[1] + 1)
    return out


def questions_for_section(*, section):
    return outline_for(section.lesson).questions_for(section)
