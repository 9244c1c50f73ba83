"""Writes for LTI: a launch becomes an account, a class membership and a placement; a changed
score becomes a passback; a passback is sent to the LMS by Assignment and Grade Services.

django-lti has already validated the launch (signature against the LMS's JWKS, nonce, state,
deployment) and stored the LMS's user, context and resource link before anything here runs."""
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from courseapp.instructor.models import Cohort, Membership
from courseapp.instructor.roles import instructors_group
from courseapp.learners.models import LTI_USERNAME_PREFIX, Learner
from courseapp.lessons.models import Lesson, Section
from courseapp.lti.models import Passback, Placement
from courseapp.lti.scoring import placement_score

log = logging.getLogger(__name__)

# The LMS roles that teach: they get the class's dashboard, and may place the lesson (deep linking).
TEACHING_ROLES = ("is_instructor", "is_administrator", "is_content_developer")


@dataclass(frozen=True)
class Arrival:
    user: object
    learner: Learner
    cohort: Cohort
    placement: Placement | None
    teaches: bool


def teaches(lti_launch) -> bool:
    membership = lti_launch.membership
    return any(getattr(membership, role) for role in TEACHING_ROLES)


def lesson_for(lti_launch) -> Lesson:
    custom = lti_launch.get_claim("https://purl.imsglobal.org/spec/lti/claim/custom") or {}
    lessons = Lesson.objects.filter(available=True).order_by("number")
    number = str(custom.get("lesson", "")).strip()
    lesson = lessons.filter(number=int(number)).first() if number.isdigit() else None
    return lesson or lessons.first()


def _section_for(lti_launch, lesson) -> Section | None:
    custom = lti_launch.get_claim("https://purl.imsglobal.org/spec/lti/claim/custom") or {}
    slug = str(custom.get("section", "")).strip()
    return Section.objects.filter(lesson=lesson, slug=slug).first() if slug else None


def _account_for(lti_user):
    """The LMS user's account here: made on their first launch and reached only through the
    LtiUser row (registration + `sub`, any length), never looked up by name — a local account
    someone signed up first under any name is never adopted. Its username is random and
    `lti-`-prefixed, a prefix local sign-up refuses."""
    from lti_tool.models import LtiUser

    lti_user = LtiUser.objects.select_for_update().get(pk=lti_user.pk)  # a course's first two launches race
    if lti_user.auth_user_id:
        return lti_user.auth_user
    user = get_user_model().objects.create_user(
        username=f"{LTI_USERNAME_PREFIX}{secrets.token_hex(12)}", password=None,  # signs in only through the LMS
        first_name=(lti_user.given_name or lti_user.name)[:150], last_name=lti_user.family_name[:150],
        email=lti_user.email)
    lti_user.auth_user = user
    lti_user.save(update_fields=["auth_user"])
    return user


def _cohort_for(context, lesson) -> Cohort:
    """The class an LMS course (context) is: made on the course's first launch."""
    from courseapp.lti.models import ContextCohort

    link = ContextCohort.objects.select_related("cohort").filter(context=context).first()
    if link is not None:
        return link.cohort
    name = (context.title or context.label or f"LMS {context.id_on_platform}")[:100]
    with transaction.atomic():
        cohort = Cohort.objects.create(name=name, lesson=lesson)
        try:
            with transaction.atomic():
                ContextCohort.objects.create(context=context, cohort=cohort)
        except IntegrityError:  # the course's first two launches raced: keep the other's class
            cohort.delete()
            return ContextCohort.objects.get(context=context).cohort
    return cohort


@transaction.atomic
def launch_arrive(*, lti_launch) -> Arrival:
    """A resource launch (django-lti stored the LMS's side): the account, its learner row, its
    class (instructors of the course teach it) and the placement with its gradebook column."""
    lesson = lesson_for(lti_launch)
    user = _account_for(lti_launch.user)
    lti_user = lti_launch.user
    learner, _ = Learner.objects.get_or_create(user=user)
    cohort = _cohort_for(lti_launch.context, lesson)
    teaching = teaches(lti_launch)
    if teaching:
        user.groups.add(instructors_group())
        cohort.instructors.add(user)
    else:
        Membership.objects.get_or_create(cohort=cohort, learner=learner, defaults={"via": Membership.Via.LTI})
    placement = None
    if lti_launch.is_resource_launch:
        ags = lti_launch.ags_claim or {}
        placement, _ = Placement.objects.update_or_create(
            resource_link=lti_launch.resource_link,
            defaults={"cohort": cohort, "section": _section_for(lti_launch, lesson),
                      "lineitem_url": ags.get("lineitem", "")[:500], "ags_scopes": list(ags.get("scope", []))})
        if not teaching and placement.lineitem_url:
            passback, created = Passback.objects.get_or_create(placement=placement, learner=learner,
                                                               defaults={"lti_user": lti_user})
            if not learner.lms_graded:
                learner.lms_graded = True
                learner.save(update_fields=["lms_graded"])
            if created and _rescore(passback):
                # Work done before this placement existed counts: the LMS hears of it now.
                transaction.on_commit(lambda: _dispatch([passback.pk]))
    return Arrival(user=user, learner=learner, cohort=cohort, placement=placement, teaches=teaching)


def _rescore(passback: Passback) -> bool:
    """Recompute the passback's score from the learner's attempts; True when it changed (and
    now waits to be sent)."""
    score = placement_score(passback.placement, passback.learner_id)
    if score is None or (passback.scored_at is not None and (score.given, score.maximum, score.completed) ==
                         (passback.score_given, passback.score_maximum, passback.completed)):
        return False
    passback.score_given, passback.score_maximum, passback.completed = score.given, score.maximum, score.completed
    passback.scored_at = timezone.now()
    passback.status, passback.tries, passback.next_try_at, passback.last_error = Passback.Status.PENDING, 0, timezone.now(), ""
    passback.save()
    return True


def score_changed(*, learner_id: int) -> list[int]:
    """After a learner's attempt (or a regrade) is stored: the passbacks whose score it changed
    wait to be sent, and go. Returns their ids. (attempt_submit calls it only for learners marked
    `lms_graded` at their launch: nobody else pays for the lookup.)"""
    changed = []
    for passback in Passback.objects.filter(learner_id=learner_id).select_related("placement__section", "placement__cohort"):
        if _rescore(passback):
            changed.append(passback.pk)
    if changed:
        transaction.on_commit(lambda: _dispatch(changed))
    return changed


def _dispatch(passback_ids) -> None:
    from courseapp.lti import delivery

    delivery.send_soon(passback_ids)


def passback_retry(*, passback: Passback) -> None:
    """An instructor's "send again" on a passback that gave up (or is waiting)."""
    Passback.objects.filter(pk=passback.pk).exclude(status=Passback.Status.SENT).update(
        status=Passback.Status.PENDING, tries=0, next_try_at=timezone.now())
    transaction.on_commit(lambda: _dispatch([passback.pk]))


UNSENT = [Passback.Status.PENDING, Passback.Status.RETRYING, Passback.Status.SENDING]


def sending_lease() -> timedelta:
    """How long a claim holds a passback: a send is two HTTP calls (the LMS's token, the score),
    each cut off at LTI_HTTP_TIMEOUT_S. A claim older than that belongs to a sender that died
    mid-send (a restart, a killed worker), and the passback is due again."""
    return timedelta(seconds=4 * settings.LTI_HTTP_TIMEOUT_S + 30)


def passbacks_stalled(*, now=None) -> list[int]:
    """Unsent passbacks no sender holds any more: a claim past its lease (the sender died
    mid-send), or a due one left waiting a whole lease longer (its queued task was lost)."""
    now = now or timezone.now()
    return list(Passback.objects.filter(
        Q(status=Passback.Status.SENDING, next_try_at__lte=now)
        | Q(status__in=[Passback.Status.PENDING, Passback.Status.RETRYING], next_try_at__lte=now - sending_lease())
    ).values_list("pk", flat=True))


def _claim(passback_id: int) -> Passback | None:
    """Take a due passback for sending, atomically: two processes (or a retry and an
    instructor's click) never send one twice at the same moment."""
    now = timezone.now()
    taken = Passback.objects.filter(pk=passback_id, status__in=UNSENT, next_try_at__lte=now).update(
        status=Passback.Status.SENDING, next_try_at=now + sending_lease())
    if not taken:
        return None
    return Passback.objects.select_related("placement__resource_link__context__deployment__registration",
                                           "lti_user").get(pk=passback_id)


def passback_send(*, passback_id: int, post_score=None) -> float | None:
    """Send one due passback. Returns the delay after which to try it again, or None (sent, gave
    up, or not due). `post_score(passback)` does the HTTP part (ags.post_score by default)."""
    from courseapp.lti import ags

    passback = _claim(passback_id)
    if passback is None:
        return None
    scored_at = passback.scored_at
    try:
        (post_score or ags.post_score)(passback)
    except Exception as exc:  # any failure of the LMS or the network: kept, retried, shown
        passback.tries += 1
        passback.last_error = f"{type(exc).__name__}: {exc}"[:300]
        if passback.tries >= settings.LTI_PASSBACK_MAX_ATTEMPTS:
            passback.status, passback.next_try_at, delay = Passback.Status.FAILED, None, None
        else:
            delay = settings.LTI_PASSBACK_BACKOFF_S * 2 ** (passback.tries - 1)
            passback.status, passback.next_try_at = Passback.Status.RETRYING, timezone.now() + timedelta(seconds=delay)
        log.warning("LTI score passback %s failed (try %s): %s", passback.pk, passback.tries, passback.last_error)
        Passback.objects.filter(pk=passback.pk, status=Passback.Status.SENDING, scored_at=scored_at).update(
            status=passback.status, tries=passback.tries, last_error=passback.last_error, next_try_at=passback.next_try_at)
        return delay
    # A score that changed while this one was on its way stays pending: it goes next.
    Passback.objects.filter(pk=passback.pk, status=Passback.Status.SENDING, scored_at=scored_at).update(
        status=Passback.Status.SENT, tries=passback.tries + 1, sent_at=timezone.now(), last_error="", next_try_at=None)
    return None
