"""Reads for self-checks: what a question card shows, before and after a submission."""
import secrets
from dataclasses import dataclass

from courseapp.quizzes.models import Attempt, Question


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


def section_for_anchor(lesson, anchor: str):
    for section in lesson.sections.all():
        if anchor in section.anchors:
            return section
    return None


def anchor_label(anchor: str) -> str:
    """s3-3 → §3.3, appendix-a → 부록 A."""
    if anchor.startswith("appendix-"):
        return f"부록 {anchor.removeprefix('appendix-').upper()}"
    return "§" + anchor.removeprefix("s").replace("-", ".")


def anchor_url(lesson, anchor: str) -> str:
    section = section_for_anchor(lesson, anchor)
    if section is None:
        return lesson.get_absolute_url()
    return f"{section.get_absolute_url()}#{anchor}"


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
    if question.type == "short":
        return Reveal([" / ".join(key["answers"][:3])])
    if question.type == "ordering":
        items = text("items")
        return Reveal([items[i] for i in key["order"]])
    left, right = text("left"), text("right")
    return Reveal([f"{left[a]} → {right[b]}" for a, b in key["pairs"].items()])


def attempts_count(*, learner, question) -> int:
    if learner is None:
        return 0
    return Attempt.objects.filter(learner=learner, question=question).count()


def latest_attempt(*, learner, question) -> Attempt | None:
    if learner is None:
        return None
    return Attempt.objects.filter(learner=learner, question=question).order_by("-created_at", "-pk").first()


def questions_for_section(*, section):
    anchors = set(section.anchors)
    return [q for q in section.lesson.questions.select_related("objective") if q.anchor in anchors]
