"""Reads for lesson pages."""
import re
from dataclasses import dataclass

from django.shortcuts import get_object_or_404

from courseapp.lessons.models import Lesson


def lesson_get(*, number: int) -> Lesson:
    return get_object_or_404(Lesson.objects.select_related("course"), number=number, available=True)


def lesson_neighbours(*, lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after in the course, in one query (a course has a few dozen)."""
    siblings = list(Lesson.objects.filter(course_id=lesson.course_id).order_by("number"))
    prev = next((s for s in reversed(siblings) if s.number < lesson.number), None)
    nxt = next((s for s in siblings if s.number > lesson.number), None)
    return prev, nxt


_SUBHEADING = re.compile(r"^##\s+(.+?)\s*\{#([a-z0-9-]+)\}\s*$", re.M)


@dataclass(frozen=True, slots=True)
class Subsection:
    anchor: str
    title: str  # plain text, e.g. "2.1 정의"


def section_subsections(*, section) -> list[Subsection]:
    """The `## 2.1 … {#s2-1}` headings of a section, in order: its part of the table of contents."""
    return [Subsection(anchor, re.sub(r"[*_`]", "", title)) for title, anchor in _SUBHEADING.findall(section.body)]


@dataclass(frozen=True, slots=True)
class Position:
    number: int  # 1-based place of the section among the lesson's pages
    total: int
    read: int  # how many of them the learner has read


def section_position(*, sections, section, read: int) -> Position:
    number = next(i for i, s in enumerate(sections, 1) if s.pk == section.pk)
    return Position(number=number, total=len(sections), read=read)
