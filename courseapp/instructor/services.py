"""Writes for classes: make one, join one (by code), make an instructor."""
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from courseapp.instructor.models import AuditEntry, Cohort, Membership, Regrade, RegradeChange
from courseapp.instructor.roles import instructors_group
from courseapp.lti import services as lti_services


class JoinRefused(ValueError):
    """The message says why (unknown code, archived class)."""


def cohort_create(*, instructor, name: str, lesson) -> Cohort:
    name = " ".join(name.split())[:100]
    if not name:
        raise ValueError(_("Give the class a name."))
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # invisible, and PostgreSQL cannot store a NUL
        raise ValueError(_("A class name cannot hold control characters."))
    with transaction.atomic():
        cohort = Cohort.objects.create(name=name, lesson=lesson)
        cohort.instructors.add(instructor)
        audit(user=instructor, action=AuditEntry.Action.CLASS_CREATED, cohort=cohort, detail=name)
    return cohort


MAX_MEMBER_NAME = 40


def member_name(raw: str) -> str:
    """A name a learner gives on joining, tidied; JoinRefused if it cannot be shown as typed."""
    name = " ".join((raw or "").split())
    if len(name) > MAX_MEMBER_NAME:
        raise JoinRefused(_("A name may be at most %(n)d characters.") % {"n": MAX_MEMBER_NAME})
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # invisible, and PostgreSQL cannot store a NUL
        raise JoinRefused(_("A name cannot hold control characters."))
    return name


def cohort_join(*, learner, code: str, via: str = Membership.Via.CODE, display_name: str = "") -> tuple[Cohort, bool]:
    """(the class, whether this joined it just now). Codes are read case-insensitively. A
    `display_name` (already checked) names the learner to the instructor; joining again with
    another name renames them."""
    code = "".join(code.split()).upper()
    cohort = Cohort.objects.filter(join_code=code).first()
    if cohort is None:
        raise JoinRefused(_("No class has the code %(code)s.") % {"code": code[:16]})
    if cohort.archived:
        raise JoinRefused(_("The class %(name)s is closed to new members.") % {"name": cohort.name})
    try:
        with transaction.atomic():
            membership, created = Membership.objects.get_or_create(
                cohort=cohort, learner=learner, defaults={"via": via, "display_name": display_name})
            if display_name and membership.display_name != display_name:
                Membership.objects.filter(pk=membership.pk).update(display_name=display_name)
    except IntegrityError:  # joined at the same moment from another tab
        created = False
    return cohort, created


class NameTaken(Exception):
    """The name belongs to an account that does not teach: promoting it needs the caller's word."""


def instructor_make(*, username: str, password: str | None = None, email: str = "", promote: bool = False):
    """An account in the instructors group. Returns (user, created). An existing account that
    already teaches is kept (a new password replaces its own); one that does not is promoted only
    with `promote` — otherwise whoever registered the name first (a learner, anyone) would become
    an instructor with the password they chose. Raises NameTaken."""
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username, defaults={"email": email})
    if not created and not promote and not user.groups.filter(pk=instructors_group().pk).exists():
        raise NameTaken(username)
    if password:
        user.set_password(password)
        user.save()
    elif created:
        user.set_unusable_password()
        user.save()
    user.groups.add(instructors_group())
    return user, created


ANALYSIS_KEY = "item-analysis:{}:{}"
ANALYSIS_KEEP_S = 24 * 3600


def item_analysis_refresh(*, cohort_id: int, basis: str = "first") -> dict:
    """Compute the class's item analysis and keep it with the time it was computed (the page
    shows "computed at"; a big class's is computed by an engine worker in scaled mode)."""
    from django.core.cache import cache
    from django.utils import timezone

    from courseapp.instructor.selectors import item_analysis

    cohort = Cohort.objects.select_related("lesson").get(pk=cohort_id)
    result = {"computed_at": timezone.now().isoformat(), "basis": basis, "rows": item_analysis(cohort, basis)}
    cache.set(ANALYSIS_KEY.format(cohort_id, basis), result, ANALYSIS_KEEP_S)
    return result


def item_analysis_kept(*, cohort_id: int, basis: str) -> dict | None:
    from django.core.cache import cache

    return cache.get(ANALYSIS_KEY.format(cohort_id, basis))


@dataclass(frozen=True)
class Change:
    attempt: object
    old: float
    new: float
    feedback: dict


def regrade_plan(*, cohort: Cohort, question) -> list[Change]:
    """The dry run: every attempt of this class's learners at the question whose score under the
    question's current key differs from the one it has. Changes nothing."""
    from courseapp.quizzes import grading
    from courseapp.quizzes.models import Attempt

    changes = []
    attempts = Attempt.objects.filter(question=question, learner__memberships__cohort=cohort).select_related("learner__user")
    for attempt in attempts.order_by("created_at", "pk"):
        result = grading.grade(question.type, question.key, attempt.response)
        if abs(result.score - attempt.score) > 1e-9:
            changes.append(Change(attempt, attempt.score, result.score, dict(result.detail)))
    return changes


def regrade_apply(*, cohort: Cohort, question, by) -> Regrade:
    """Apply the dry run's changes, and keep the record: the one place an attempt's score is
    rewritten (the old score stays in RegradeChange)."""
    from courseapp.quizzes.models import Attempt

    with transaction.atomic():
        changes = regrade_plan(cohort=cohort, question=question)
        regrade = Regrade.objects.create(cohort=cohort, question=question, by=by, key=question.key)
        for change in changes:
            Attempt.objects.filter(pk=change.attempt.pk).update(score=change.new, feedback=change.feedback)
        RegradeChange.objects.bulk_create(
            RegradeChange(regrade=regrade, attempt=c.attempt, old_score=c.old, new_score=c.new) for c in changes)
        audit(user=by, action=AuditEntry.Action.REGRADED, cohort=cohort, detail=f"{question.slug}: {len(changes)} scores")
        for learner_id in {c.attempt.learner_id for c in changes}:  # an LMS gradebook hears of it too
            lti_services.score_changed(learner_id=learner_id)
    return regrade


def audit(*, user, action: str, cohort=None, detail: str = "") -> None:
    AuditEntry.objects.create(user=user if getattr(user, "is_authenticated", False) else None, action=action,
                              cohort=cohort, detail=detail[:200])
