"""Reads for the live demo."""
from courseapp.demo.models import DemoRun


def run_get(run_id) -> DemoRun | None:
    try:
        return DemoRun.objects.select_related("owner").filter(pk=run_id).first()
    except (ValueError, Exception):  # a malformed uuid is simply "no such run"
        return None


def run_last_frame(run: DemoRun) -> dict | None:
    """A finished run's final picture, from its trace."""
    if not run.trace:
        return None
    last = run.trace[-1]
    return {"type": "snapshot", "seq": 0, "run": str(run.id), "status": run.status, "paused": False,
            "speed": 1.0, "message": run.error, "lanes": last["lanes"]}


def can_control(run: DemoRun, *, learner_id, user) -> bool:
    """The owner drives a run; a class run is driven by staff."""
    if run.is_class:
        return bool(user is not None and getattr(user, "is_staff", False))
    return run.owner_id is not None and run.owner_id == learner_id


def learner_id_for(user, session) -> int | None:
    """The learner behind a websocket: the account's, else the guest's from the session."""
    from courseapp.learners.models import Learner

    if user is not None and user.is_authenticated:
        return Learner.objects.filter(user=user).values_list("pk", flat=True).first()
    return session.get("learner_id") if session is not None else None
