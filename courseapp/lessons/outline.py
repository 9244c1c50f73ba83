"""A lesson's structure (sections, objectives, questions, glossary), read once per content
version and kept in this process.

Every lesson page needs the table of contents, the objectives and their questions, and the
anchor each feedback links to; reading them row by row was most of a page view. One small
query tells the version: per table, how many rows and the latest `updated_at` (`load_content`
and admin edits touch it). The rows kept here are shared between requests: read them, never
change them.

Asking for the version on every request was a tenth of the web process's time under a class's
load, so a process asks at most once per `OUTLINE_RECHECK_SECONDS` (1 s): an edit saved in this
process (the admin, `load_content` in a test) shows on the next request, because saving a
content row bumps `_generation`; one saved by another process (`manage.py load_content` while
the server runs, another web process) shows within that second.
"""
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.db.models.signals import post_delete, post_save
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
_checked: dict[int, tuple[float, int]] = {}  # lesson number → (when its version was last asked, _generation then)
_generation = 0
_lock = threading.Lock()


def outline_forget(**_signal) -> None:
    """Ask the database again on the next request (a content row was saved or deleted here)."""
    global _generation
    with _lock:
        _generation += 1


for _model in (Lesson, *_TABLES):
    post_save.connect(outline_forget, sender=_model, dispatch_uid=f"outline-{_model.__name__}-save")
    post_delete.connect(outline_forget, sender=_model, dispatch_uid=f"outline-{_model.__name__}-delete")


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
    """The outline of an available lesson (Http404 otherwise): current as of this request for
    edits made in this process, as of the last second for edits made elsewhere."""
    outline, (asked, generation) = _kept.get(number), _checked.get(number, (0.0, -1))
    now = time.monotonic()
    if outline is not None and generation == _generation and now - asked < settings.OUTLINE_RECHECK_SECONDS:
        return outline
    generation = _generation  # before asking: a save during the query leaves the next request asking again
    version = _version(number)
    if version is None:
        raise Http404("No such lesson.")
    if outline is None or outline.version != version:
        outline = _build(number, version)
    with _lock:
        _kept[number], _checked[number] = outline, (now, generation)
    return outline


def outline_for(lesson: Lesson) -> Outline:
    """The outline a lesson row came from, without asking the database again when the row is
    the kept outline's own (a view that began with outline_get); else a fresh outline_get."""
    kept = _kept.get(lesson.number)
    if kept is not None and kept.lesson is lesson:
        return kept
    return outline_get(number=lesson.number)
