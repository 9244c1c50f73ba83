"""Writes for the live demo: starting runs, sending them commands, recording their end."""
import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from courseapp.demo import events, presets
from courseapp.demo.models import DemoRun

logger = logging.getLogger("courseapp.demo")
STALE_AFTER = timedelta(seconds=6)  # no heartbeat for this long: the host is gone


class DemoBusy(Exception):
    """Too many runs at once on this server."""


class DemoRefused(ValueError):
    """A request the demo will not take (bad knobs, rate limit, not allowed)."""


def _system_prompt() -> str:
    from engine.training.corpus import SYSTEM_PROMPT

    return SYSTEM_PROMPT


def _host_mode() -> str:
    return getattr(settings, "DEMO_HOST", "embedded")


def run_start(*, owner, preset: str = "", knobs: dict | None = None, is_class: bool = False, paused: bool = False) -> DemoRun:
    """Create a run and start it. One active run per learner: their previous one is stopped."""
    if preset:
        if preset not in presets.PRESETS:
            raise DemoRefused(_("unknown preset %(name)r; choose one of %(names)s") % {"name": preset, "names": ", ".join(presets.PRESETS)})
        spec = presets.spec_for(preset, system_prompt=_system_prompt(), now=timezone.localtime())
    else:
        spec = presets.custom_spec(knobs or {}, system_prompt=_system_prompt())
    spec["step_delay"] = settings.DEMO_STEP_DELAY
    spec["start_paused"] = paused
    with transaction.atomic():
        if owner is not None:
            for old in DemoRun.objects.select_for_update().filter(owner=owner, status__in=["queued", "running"], is_class=False):
                run_command(run=old, cmd={"type": "stop"})
        active = DemoRun.objects.filter(status__in=["queued", "running"]).exclude(owner=owner).count()
        if active >= settings.DEMO_MAX_ACTIVE_RUNS:
            raise DemoBusy()
        run = DemoRun.objects.create(owner=owner, preset=preset, is_class=is_class, spec=spec,
                                     status=DemoRun.Status.RUNNING, host=_host_mode(), heartbeat_at=timezone.now())
    transaction.on_commit(lambda: _launch(run))
    return run


def _launch(run: DemoRun) -> None:
    run_id = str(run.id)
    if _host_mode() == "celery":
        from courseapp.demo.tasks import run_demo

        run_demo.apply_async(args=[run_id], queue="engine")
        return
    from courseapp.demo.host import embedded

    embedded.start(
        run_id,
        run.spec,
        publish=lambda frame: events.publish(run_id, frame),
        on_heartbeat=lambda: run_heartbeat(run_id=run_id),
        on_finish=lambda trace, error: run_finish(run_id=run_id, trace=trace, error=error),
    )


def run_heartbeat(*, run_id: str, host: str | None = None) -> None:
    fields = {"heartbeat_at": timezone.now()}
    if host:
        fields["host"] = host
    DemoRun.objects.filter(pk=run_id, status=DemoRun.Status.RUNNING).update(**fields)


def run_finish(*, run_id: str, trace: list, error: str | None) -> None:
    status = DemoRun.Status.FAILED if error else DemoRun.Status.FINISHED
    DemoRun.objects.filter(pk=run_id, status=DemoRun.Status.RUNNING).update(
        status=status, error=error or "", trace=trace, finished_at=timezone.now()
    )
    if error:
        events.publish(run_id, {"type": "error", "status": "failed", "message": error})


def run_fail_if_stale(*, run: DemoRun) -> bool:
    """The watchdog: a running run whose host stopped beating is marked failed (once)."""
    if run.status != DemoRun.Status.RUNNING or run.heartbeat_at is None:
        return False
    if timezone.now() - run.heartbeat_at < STALE_AFTER:
        return False
    updated = DemoRun.objects.filter(pk=run.pk, status=DemoRun.Status.RUNNING).update(
        status=DemoRun.Status.FAILED, error=_("the engine worker stopped responding"), finished_at=timezone.now()
    )
    return bool(updated)


def run_command(*, run: DemoRun, cmd: dict) -> bool:
    """Hand a command to wherever the run lives."""
    if _host_mode() == "celery":
        from asgiref.sync import async_to_sync

        async_to_sync(events.send_command)(str(run.id), cmd)
        return True
    from courseapp.demo.host import embedded

    return embedded.command(str(run.id), cmd)


def rate_limit(*, key: str, limit: int, per_seconds: int) -> None:
    """A fixed window counter in the cache; raises DemoRefused past the limit."""
    bucket = f"demo-rate:{key}:{int(timezone.now().timestamp()) // per_seconds}"
    if cache.add(bucket, 1, per_seconds):
        return
    if cache.incr(bucket) > limit:
        raise DemoRefused(_("too many requests: at most %(limit)d per %(seconds)d s") % {"limit": limit, "seconds": per_seconds})
