"""Reads for instructors: their classes, a class's roster × objectives mastery, one learner's
attempts. Every read is scoped: an instructor reaches only classes they teach, and a learner
only through a class they belong to."""
from dataclasses import dataclass

from courseapp.chart_frame import ChartFrame
from courseapp.instructor.models import Cohort, Membership
from courseapp.learners.selectors import scores_by_learner
from courseapp.lessons.outline import outline_for
from courseapp.quizzes.models import Attempt
from courseapp.quizzes.selectors import anchor_label, card_url, question_words

BASES = ("latest", "first")  # which attempt at each question counts: the most recent, or the first try


def cohorts_taught(user) -> list[Cohort]:
    if user.is_superuser:
        return list(Cohort.objects.select_related("lesson"))
    return list(user.taught_cohorts.select_related("lesson"))


def cohort_for(user, cohort_id) -> Cohort | None:
    """The class if this user teaches it, else None (as good as missing)."""
    cohorts = Cohort.objects.select_related("lesson").filter(pk=cohort_id)
    if not user.is_superuser:
        cohorts = cohorts.filter(instructors=user)
    return cohorts.first()


def member(cohort: Cohort, learner_id) -> Membership | None:
    return cohort.memberships.select_related("learner__user").filter(learner_id=learner_id).first()


@dataclass(frozen=True, slots=True)
class Cell:
    score: float | None  # 0 … 1 over the objective's questions; None: none answered
    answered: int
    total: int

    @property
    def percent(self) -> int | None:
        return None if self.score is None else round(self.score * 100)

    @property
    def band(self) -> str:
        """For the heat map's colour (the cell also says its number)."""
        if self.score is None:
            return "none"
        return ("low", "mid", "high", "top")[min(3, int(self.score * 4))]


@dataclass(frozen=True, slots=True)
class RosterRow:
    membership: Membership
    cells: list  # one Cell per objective, in the lesson's order
    answered: int  # questions answered at least once


def roster(cohort: Cohort, basis: str = "latest") -> tuple[list, list[RosterRow]]:
    """(the lesson's objectives, one row per member): mastery per objective as the mean over its
    questions, an unanswered question counting 0 once any of the objective's is answered."""
    grouped = outline_for(cohort.lesson).questions_by_objective()
    memberships = list(cohort.memberships.select_related("learner__user"))
    scores = scores_by_learner([m.learner_id for m in memberships], [q.pk for _, qs in grouped for q in qs], basis)
    rows = []
    for m in memberships:
        mine = scores.get(m.learner_id, {})
        cells = []
        for _objective, questions in grouped:
            answered = [mine[q.pk] for q in questions if q.pk in mine]
            cells.append(Cell(sum(answered) / len(questions) if answered else None, len(answered), len(questions)))
        rows.append(RosterRow(m, cells, len(mine)))
    return [objective for objective, _ in grouped], rows


def learner_attempts(cohort: Cohort, learner_id) -> list[Attempt]:
    return list(Attempt.objects.filter(learner_id=learner_id, question__objective__lesson=cohort.lesson)
                .select_related("question", "question__objective").order_by("-created_at", "-pk"))


def attempts_by_learner(learner_ids, question_ids, basis: str) -> dict[int, dict[int, Attempt]]:
    """learner → question → their first (or latest) attempt at it, in one query."""
    wanted = set(question_ids)
    out: dict[int, dict[int, Attempt]] = {}
    for attempt in Attempt.objects.filter(learner_id__in=list(learner_ids), question_id__in=wanted).order_by("created_at", "pk") \
            .only("learner_id", "question_id", "score", "response"):
        seen = out.setdefault(attempt.learner_id, {})
        if basis == "latest" or attempt.question_id not in seen:
            seen[attempt.question_id] = attempt
    return out


def item_analysis(cohort: Cohort, basis: str = "first") -> list[dict]:
    """One row per question of the lesson: its statistics (statistics.item_stats) and how the
    class's answers spread over its options (which wrong options drew people)."""
    from courseapp.instructor.statistics import item_stats

    outline = outline_for(cohort.lesson)
    questions = list(outline.questions)
    learners = list(cohort.memberships.values_list("learner_id", flat=True))
    attempts = attempts_by_learner(learners, [q.pk for q in questions], basis)
    scores = {learner: {q: a.score for q, a in mine.items()} for learner, mine in attempts.items()}
    rows = []
    for question in questions:
        stats = item_stats(question.pk, scores)
        rows.append({"question_id": question.pk, "slug": question.slug, "type": question.type, "anchor": question.anchor,
                     "n": stats.n, "facility": stats.facility, "discrimination": stats.discrimination,
                     "point_biserial": stats.point_biserial, "flags": stats.flags,
                     "options": _spread(question, [mine[question.pk].response for mine in attempts.values() if question.pk in mine])})
    return rows


@dataclass(frozen=True, slots=True)
class QuestionName:
    prompt: str  # the question's words, as plain text
    section: str  # "§3.3", as the feedback cites it
    url: str  # its card on the page that carries it


def question_names(lesson) -> dict[int, QuestionName]:
    """What an instructor's pages call each question of the lesson: its words and section, not
    the slug a content author gave it."""
    return {q.pk: QuestionName(prompt=question_words(q), section=anchor_label(q.anchor), url=card_url(lesson, q))
            for q in outline_for(lesson).questions}


def _spread(question, responses: list[dict]) -> list[dict]:
    """Options chosen (single, multi): each option's count and whether it is in the key."""
    if question.type not in ("single", "multi"):
        return []
    key = question.key["answer"]
    key = {key} if isinstance(key, str) else set(key)
    counts = {choice["id"]: 0 for choice in question.public.get("choices", [])}
    for response in responses:
        chosen = [response.get("choice")] if question.type == "single" else response.get("choices", [])
        for choice in chosen:
            if choice in counts:
                counts[choice] += 1
    return [{"text": c["text"], "count": counts[c["id"]], "key": c["id"] in key} for c in question.public.get("choices", [])]


def _name(membership: Membership) -> str:
    return membership.name


def gradebook_rows(cohort: Cohort) -> list[list]:
    """Header, then per learner: each objective's mastery (latest attempts, 0–1) and the mean."""
    objectives, rows = roster(cohort, "latest")
    out = [["learner_id", "learner", *[f"objective {o.order}: {o.slug}" for o in objectives], "mean"]]
    for row in rows:
        values = [c.score or 0.0 for c in row.cells]
        out.append([row.membership.learner_id, _name(row.membership), *[round(v, 4) for v in values],
                    round(sum(values) / len(values), 4) if values else 0.0])
    return out


def score_rows(cohort: Cohort) -> list[list]:
    """Header, then per learner and question answered: first score, latest score, attempts."""
    questions = {q.pk: q for q in outline_for(cohort.lesson).questions}
    memberships = list(cohort.memberships.select_related("learner__user"))
    history: dict[tuple[int, int], list[float]] = {}
    for learner_id, question_id, score in Attempt.objects.filter(
            learner_id__in=[m.learner_id for m in memberships], question_id__in=list(questions)).order_by("created_at", "pk") \
            .values_list("learner_id", "question_id", "score"):
        history.setdefault((learner_id, question_id), []).append(score)
    out = [["learner_id", "learner", "question", "objective", "first_score", "latest_score", "attempts"]]
    for m in memberships:
        for question in questions.values():
            scores = history.get((m.learner_id, question.pk))
            if scores:
                out.append([m.learner_id, _name(m), question.slug, question.objective.slug, scores[0], scores[-1], len(scores)])
    return out


MAX_DAYS = 60


@dataclass
class ProgressDay:
    day: object  # a date
    attempts: int
    learners: int  # who answered something that day
    mastery: list  # per objective: the class's mean mastery at the end of the day (0–1)


def progress_by_day(cohort: Cohort) -> tuple[list, list[ProgressDay]]:
    """(objectives, one entry per day from the first attempt to today, at most MAX_DAYS): how
    many answered, and each objective's mastery over the class (latest attempts as of that day,
    unanswered questions 0, every member counted)."""
    from datetime import timedelta

    from django.utils import timezone

    grouped = outline_for(cohort.lesson).questions_by_objective()
    objective_of = {q.pk: i for i, (_o, qs) in enumerate(grouped) for q in qs}
    sizes = [len(qs) for _o, qs in grouped]
    members = list(cohort.memberships.values_list("learner_id", flat=True))
    attempts = list(Attempt.objects.filter(learner_id__in=members, question_id__in=list(objective_of))
                    .order_by("created_at", "pk").values_list("learner_id", "question_id", "score", "created_at"))
    if not attempts or not members:
        return [o for o, _ in grouped], []
    today = timezone.localdate()
    first = max(timezone.localtime(attempts[0][3]).date(), today - timedelta(days=MAX_DAYS - 1))
    latest: dict[tuple[int, int], float] = {}
    days, i = [], 0
    day = timezone.localtime(attempts[0][3]).date()
    while day <= today:
        active, count = set(), 0
        while i < len(attempts) and timezone.localtime(attempts[i][3]).date() <= day:
            learner, question, score, _when = attempts[i]
            latest[(learner, question)] = score
            active.add(learner)
            count += 1
            i += 1
        if day >= first:
            sums = [0.0] * len(grouped)
            for (_learner, question), score in latest.items():
                sums[objective_of[question]] += score
            mastery = [sums[k] / (sizes[k] * len(members)) if sizes[k] else 0.0 for k in range(len(grouped))]
            days.append(ProgressDay(day, count, len(active), mastery))
        day += timedelta(days=1)
    return [o for o, _ in grouped], days


@dataclass
class ProgressChart(ChartFrame):
    bars: list  # (x, y, w, h, label)
    lines: list  # (objective order, points)
    x_labels: list  # (x, label)
    max_attempts: int


def progress_chart(days: list[ProgressDay], width: int = 720, height: int = 260) -> ProgressChart | None:
    """Attempts per day as bars (left axis) and each objective's mastery as a line (right axis, 0–1)."""
    if not days:
        return None
    left, right, top, bottom = 40, width - 44, 12, height - 30
    step = (right - left) / len(days)
    top_count = max(1, max(d.attempts for d in days))
    bars, lines = [], []
    for k, d in enumerate(days):
        h = (bottom - top) * d.attempts / top_count
        bars.append((round(left + k * step + step * 0.15, 1), round(bottom - h, 1), round(step * 0.7, 1), round(h, 1), d.attempts))
    for j in range(len(days[0].mastery)):
        points = " ".join(f"{left + (k + 0.5) * step:.1f},{bottom - (bottom - top) * d.mastery[j]:.1f}" for k, d in enumerate(days))
        lines.append((j + 1, points))
    every = max(1, len(days) // 8)
    x_labels = [(round(left + (k + 0.5) * step, 1), d.day.strftime("%m-%d")) for k, d in enumerate(days) if k % every == 0]
    return ProgressChart(width, height, left, right, top, bottom, bars, lines, x_labels, top_count)
