"""A lesson's structure (sections, objectives, questions, glossary), read once per content
version and kept in this process.

Every lesson page needs the table of contents, the objectives and their questions, and the
anchor each feedback links to; reading them row by row was most of a page view. One small
query tells the version: per table, how many rows and the latest `updated_at` (`load_content`
and admin edits touch it), so an edit shows on the next request. The rows kept here are shared
between requests: read them, never change them.
"""
import threading
from dataclasses import dataclass, field

from django.db import connection
from django.http import Http404

from courseapp.lessons.models import GlossaryTerm, Lesson, Objective, Section
from courseapp.quizzes.models import Question

_TABLES = (Section, Objective, GlossaryTerm, Question)
_VERSION_SQL = "SELECT l.id, l.updated_at, {parts} FROM {lesson} l WHERE l.number = %s AND l.available".format(
    parts=", ".join(
        f"(SELECT COUNT(*) FROM {m._meta.db_table} WHERE lesson_id = l.id), "
        f"(SELECT MAX(updated_at) FROM {m._meta.db_table} WHERE lesson_id = l.id)"
        for m in _TABLES
    ),
    lesson=Lesson._meta.db_table,
)


@dataclass(frozen=True, slots=True)
class Outline:
    version: str
    lesson: Lesson
    sections: tuple
    objectives: tuple
    questions: tuple  # in lesson order, each with .lesson and .objective set
    glossary: tuple
    anchor_pages: dict = field(default_factory=dict)  # anchor → URL of the page that carries it
    by_objective: tuple = ()  # (objective, [its questions]) in lesson order

    def section(self, slug: str) -> Section:
        for s in self.sections:
            if s.slug == slug:
                return s
        raise Http404("No such section.")

    def neighbours(self, section) -> tuple:
        i = next(i for i, s in enumerate(self.sections) if s.pk == section.pk)
        return (self.sections[i - 1] if i > 0 else None), (self.sections[i + 1] if i + 1 < len(self.sections) else None)

    def questions_for(self, section) -> list:
        anchors = set(section.anchors)
        return [q for q in self.questions if q.anchor in anchors]

    def questions_by_objective(self) -> tuple:
        return self.by_objective


_kept: dict[int, Outline] = {}
_lock = threading.Lock()


def _version(number: int) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(_VERSION_SQL, [number])
        row = cursor.fetchone()
    return None if row is None else "/".join(map(str, row))


def _build(number: int, version: str) -> Outline:
    lesson = Lesson.objects.select_related("course").get(number=number)
    sections = tuple(lesson.sections.all())
    objectives = tuple(lesson.objectives.all())
    by_objective = {o.pk: o for o in objectives}
    questions = tuple(lesson.questions.all())
    for q in questions:
        q.lesson, q.objective = lesson, by_objective[q.objective_id]
    for s in sections:
        s.lesson = lesson
    pages: dict[str, str] = {}
    for s in sections:
        for anchor in s.anchors:
            pages.setdefault(anchor, s.get_absolute_url())
    grouped = tuple((o, [q for q in questions if q.objective_id == o.pk]) for o in objectives)
    return Outline(version, lesson, sections, objectives, questions, tuple(lesson.glossary.all()), pages, grouped)


def outline_get(*, number: int) -> Outline:
    """The outline of an available lesson (Http404 otherwise), current as of this request."""
    version = _version(number)
    if version is None:
        raise Http404("No such lesson.")
    outline = _kept.get(number)
    if outline is None or outline.version != version:
        outline = _build(number, version)
        with _lock:
            _kept[number] = outline
    return outline


def outline_for(lesson: Lesson) -> Outline:
    """The outline a lesson row came from, without asking the database again when the row is
    the kept outline's own (a view that began with outline_get); else a fresh outline_get."""
    kept = _kept.get(lesson.number)
    if kept is not None and kept.lesson is lesson:
        return kept
    return outline_get(number=lesson.number)
