"""Reads for the live demo: runs, who is looking at one, and what they may do with it."""
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from courseapp.demo import traces
from courseapp.demo.models import DemoRun

JOINED_KEY = "demo_joined"  # session: {run id: the display name chosen when joining that class run}


def run_get(run_id) -> DemoRun | None:
    try:
        return DemoRun.objects.select_related("owner").filter(pk=run_id).first()
    except (ValueError, ValidationError):  # a malformed uuid is simply "no such run" (a database error is not)
        return None


def run_end_state(run_id) -> dict | None:
    """How a run ended, as its host's stop command says it ({status, reason, message}); None while
    it is active (or gone)."""
    row = DemoRun.objects.filter(pk=run_id).exclude(status__in=DemoRun.ACTIVE).values_list("status", "end_reason", "error").first()
    if row is None:
        return None
    status, reason, error = row
    return {"status": str(status), "reason": str(reason), "message": error}


@dataclass(frozen=True)
class Viewer:
    """Whoever is behind a request or a socket, as far as one run is concerned."""

    learner_id: int | None = None
    teaches: bool = False  # staff, or an instructor (courseapp/instructor/roles.py): drives class runs
    joined_as: str | None = None  # the display name they chose when joining this class run


def learner_id_of(*, user, session) -> int | None:
    """A socket's learner: the account's, else the guest's from the session (not on an event loop)."""
    from courseapp.learners.models import Learner

    if user is not None and user.is_authenticated:
        return Learner.objects.filter(user=user).values_list("pk", flat=True).first()
    return session.get("learner_id") if session is not None else None


def viewer_for(run: DemoRun, *, user, session) -> Viewer:
    joined = (session.get(JOINED_KEY) or {}) if session is not None else {}
    return Viewer(learner_id=learner_id_of(user=user, session=session), teaches=may_teach(user),
                  joined_as=joined.get(str(run.pk)))


def may_teach(user) -> bool:
    from courseapp.instructor.roles import is_instructor

    return bool(user is not None and user.is_authenticated and (user.is_staff or is_instructor(user)))


def can_control(run: DemoRun, viewer: Viewer) -> bool:
    """The owner drives their run; a class run is driven by staff and instructors."""
    if run.is_class:
        return viewer.teaches
    return run.owner_id is not None and run.owner_id == viewer.learner_id


def can_submit(run: DemoRun, viewer: Viewer) -> bool:
    """Prompts go into an open run from its owner, or, in a class run, from staff and from
    learners who joined it with its code. A learner (a session) is needed to be counted."""
    if not run.spec.get("open") or viewer.learner_id is None:
        return False
    if run.is_class:
        return viewer.teaches or viewer.joined_as is not None
    return run.owner_id == viewer.learner_id


def owner_label(run: DemoRun, viewer: Viewer) -> str:
    """How a prompt's sender is shown to everyone watching: never a username or an id."""
    if not run.is_class:
        return ""
    return viewer.joined_as or (_("instructor") if viewer.teaches else "")


def can_read_trace(run: DemoRun, viewer: Viewer) -> bool:
    """A preset scene holds no learner text: anyone may replay it. Otherwise only its owner."""
    if run.preset and not run.spec.get("open"):
        return True
    return run.owner_id is not None and run.owner_id == viewer.learner_id


def queue_place(run: DemoRun) -> tuple[int, int] | None:
    """(its place, how many wait) while a run waits for an engine host; None once one took it."""
    if run.status != DemoRun.Status.QUEUED:
        return None
    queued = DemoRun.objects.filter(status=DemoRun.Status.QUEUED)
    return queued.filter(created_at__lte=run.created_at).count(), queued.count()


def run_status(run: DemoRun) -> dict:
    """What a viewer's socket is told about a run between frames: its state, where it waits,
    which host has it, and why it ended."""
    message = {"type": "status", "run": str(run.id), "status": run.status, "reason": run.end_reason,
               "message": run.end_message, "host": run.host}
    place = queue_place(run)
    if place is not None:
        message["place"], message["waiting"] = place
        if run.host == "celery":  # scaled mode: is any worker up to take it, and how long it may wait
            from django.conf import settings

            from courseapp.demo import registry

            message["workers"] = len(registry.workers_up())
            waited = (timezone.now() - run.created_at).total_seconds()
            message["fails_in"] = max(0, int(settings.DEMO_PICKUP_WITHIN_S - waited))
    if run.status == DemoRun.Status.STARTING and run.started_at is not None:
        message["starting_for"] = max(0, int((timezone.now() - run.started_at).total_seconds()))
    return message


def run_last_frame(run: DemoRun) -> dict | None:
    """A finished run's final picture, from its trace."""
    last = traces.last_frame(run.trace_packed)
    if last is None:
        return None
    return {"type": "snapshot", "seq": 0, "run": str(run.id), "status": run.status, "reason": run.end_reason,
            "paused": False, "speed": 1.0, "message": run.end_message, "lanes": last["lanes"]}
