"""Reads about a learner's progress: mastery per objective, sections read, where to resume."""
from dataclasses import dataclass

from courseapp.learners.models import Learner
from courseapp.lessons.outline import outline_for
from courseapp.lessons.rendering import code_stamp
from courseapp.quizzes.models import Attempt
from courseapp.quizzes.selectors import card_url, question_words


@dataclass(frozen=True, slots=True)
class Mastery:
    objective: object
    score: float  # 0 … 1: mean over the objective's questions of the latest attempt's score
    answered: int
    total: int

    @property
    def percent(self):
        return round(self.score * 100)


def latest_scores(learner: Learner | None, questions) -> dict[int, float]:
    """question id → score of the learner's most recent attempt at it."""
    if learner is None:
        return {}
    return scores_by_learner([learner.pk], questions, "latest").get(learner.pk, {})


def scores_by_learner(learner_ids, question_ids, basis: str) -> dict[int, dict[int, float]]:
    """learner → question → the score of their latest (or first) attempt at it, in one query. The
    learners' attempts are all read and the questions picked here: a few dozen rows each read faster
    than the ORM builds an IN clause of every question of the lesson."""
    wanted = set(question_ids)
    out: dict[int, dict[int, float]] = {}
    rows = Attempt.objects.filter(learner_id__in=list(learner_ids)).order_by("created_at", "pk").values_list(
        "learner_id", "question_id", "score")
    for learner_id, question_id, score in rows:
        if question_id not in wanted:
            continue
        seen = out.setdefault(learner_id, {})
        if basis == "latest" or question_id not in seen:
            seen[question_id] = score
    return out


_STAMP = code_stamp("lessons/partials", "learners/partials")


class Drawn(list):
    """A list a page draws, with `key`: what the drawing depends on, for `{% cache %}`. Pages
    built from the same outline and the same learner state share the cached markup."""

    key: str = ""


def mastery_by_objective(*, learner: Learner | None, lesson) -> list[Mastery]:
    outline = outline_for(lesson)
    grouped = outline.questions_by_objective()
    scores = latest_scores(learner, [q.pk for _, qs in grouped for q in qs])
    out = []
    for objective, questions in grouped:
        ids = [q.pk for q in questions]
        total = len(ids)
        answered = sum(1 for i in ids if i in scores)
        score = sum(scores.get(i, 0.0) for i in ids) / total if total else 0.0
        out.append(Mastery(objective=objective, score=score, answered=answered, total=total))
    drawn = Drawn(out)
    drawn.key = f"{_STAMP}/{outline.version}/" + ",".join(f"{m.percent}:{m.answered}" for m in out)
    return drawn


def sections_read(*, learner: Learner | None, lesson) -> set[int]:
    if learner is None:
        return set()
    return set(learner.reads.filter(section__lesson=lesson).values_list("section_id", flat=True))


def sections_with_read(*, learner: Learner | None, lesson) -> list[tuple]:
    """(section, read?) in lesson order: the table of contents with its check marks."""
    read = sections_read(learner=learner, lesson=lesson)
    outline = outline_for(lesson)
    drawn = Drawn((s, s.pk in read) for s in outline.sections)
    drawn.key = f"{_STAMP}/{outline.version}/" + ",".join(str(pk) for pk in sorted(read))
    return drawn


def resume_section(*, learner: Learner | None, lesson, read: set[int] | None = None):
    """Where to continue: the first unread section from the one last opened on (that one itself
    while it is unread), wrapping round to an earlier unread one; with everything read, the one
    last opened (else the first). A section read to its end is never where one "resumes".
    `read`: the ids of the sections read, when the caller has them already (one query less)."""
    sections = outline_for(lesson).sections
    if not sections:
        return None
    if read is None:
        read = sections_read(learner=learner, lesson=lesson)
    start = 0
    if learner is not None and learner.last_section_id:
        start = next((i for i, s in enumerate(sections) if s.pk == learner.last_section_id), 0)
    ordered = sections[start:] + sections[:start]
    return next((s for s in ordered if s.pk not in read), ordered[0])


@dataclass(frozen=True, slots=True)
class AnsweredQuestion:
    attempt: object  # the latest answer to it
    prompt: str  # the question's words, as plain text
    url: str  # its card on the page that carries it
    tries: int  # answers to it in all


def recent_attempts(*, learner: Learner | None, limit: int = 50) -> list[AnsweredQuestion]:
    """The questions the learner answered, most recently answered first, one row each: its
    latest answer and how many tries it took, with the question's text and a link to its card
    (not the slug a learner never sees). One pass through the lesson is ~80 answers to ~40
    questions; a row per answer buried the latest score under the earlier tries."""
    if learner is None:
        return []
    attempts = Attempt.objects.filter(learner=learner).select_related("question__lesson").order_by("-created_at", "-pk")
    latest, tries = {}, {}
    for a in attempts.iterator():
        tries[a.question_id] = tries.get(a.question_id, 0) + 1
        if a.question_id not in latest and len(latest) < limit:
            latest[a.question_id] = a
    return [AnsweredQuestion(attempt=a, prompt=question_words(a.question), url=card_url(a.question.lesson, a.question),
                             tries=tries[a.question_id]) for a in latest.values()]


@dataclass(frozen=True, slots=True)
class GuestWork:
    sections_read: int
    questions_answered: int


def guest_work(*, learner: Learner | None) -> GuestWork | None:
    """What a guest has done so far, to say on the sign-up and login pages that it carries over
    (None when there is nothing: no row yet, or an account's own learner)."""
    if learner is None or learner.user_id is not None:
        return None
    work = GuestWork(
        sections_read=learner.reads.count(),
        questions_answered=learner.attempts.values("question").distinct().count(),
    )
    return work if work.sections_read or work.questions_answered else None
