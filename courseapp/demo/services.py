"""Writes for the live demo: starting runs, sending them commands, keeping their lifecycle."""
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from courseapp.demo import events, limits, presets
from courseapp.demo.models import DemoRun

logger = logging.getLogger("courseapp.demo")

STALE_AFTER = timedelta(seconds=10)  # no heartbeat for this long: the host is gone
UNWATCHED_AFTER = timedelta(seconds=60)  # no viewer for this long: the run ends
WATCHING_WITHIN = timedelta(seconds=25)  # a viewer's socket touches watched_at every 10 s
PROMPTS_PER_MINUTE = 6
JOIN_GUESSES, JOIN_GUESS_WINDOW = 10, 600  # wrong join codes per client address per 10 min
Status, Reason = DemoRun.Status, DemoRun.EndReason


class DemoRefused(ValueError):
    """A request the demo will not take (bad knobs, rate limit, not allowed)."""


@dataclass
class DemoBusy(Exception):
    """No place for another run now. `retry_at`: when one frees up (None: unknown); `expected`:
    that time is what the running scenes have lately taken, not only the latest it can be."""

    retry_at: datetime | None = None
    per_address: int | None = None  # set when it is this address's limit, not the server's
    expected: bool = False

    def retry_in(self) -> int | None:
        if self.retry_at is None:
            return None
        return max(1, int((self.retry_at - timezone.now()).total_seconds()) + 1)


class EnginesUnavailable(DemoBusy):
    """Scaled mode with Redis away (the broker and the channel layer): no run can reach a worker
    now. Nothing is written; the page that asked tries again."""


@dataclass
class Started:
    run: DemoRun
    replaced: list = field(default_factory=list)  # the learner's previous runs, now stopped


def _system_prompt() -> str:
    from engine.training.corpus import SYSTEM_PROMPT

    return SYSTEM_PROMPT


def _host_mode() -> str:
    return getattr(settings, "DEMO_HOST", "embedded")


def _retrying(write, *, what: str, attempts: int):
    """SQLite answers "database is locked" once a writer waited out the busy timeout, and a
    PostgreSQL restart leaves a connection that is dead; a heartbeat or a run's end must die of
    neither: drop a broken connection and try again after a growing pause."""
    for attempt in range(attempts):
        try:
            return write()
        except (OperationalError, InterfaceError):
            if attempt == attempts - 1:
                logger.warning("demo: %s failed %d times; giving up", what, attempts, exc_info=True)
                return None
            if not connection.in_atomic_block:  # a request's transaction is its own to end
                close_old_connections()  # a connection that failed and is unusable is closed; the next try opens one
            time.sleep(min(2.0, 0.05 * 2**attempt))


# --- starting ----------------------------------------------------------------------------------
def run_spec(*, preset: str = "", knobs: dict | None = None, paused: bool = False) -> dict:
    """What a run will do, validated; DemoRefused (with a sentence naming the limit) if not."""
    if preset:
        if preset not in presets.PRESETS:
            raise DemoRefused(_("unknown preset %(name)r; choose one of %(names)s") % {"name": preset[:40], "names": ", ".join(presets.PRESETS)})
        spec = presets.spec_for(preset, system_prompt=_system_prompt(), now=timezone.localtime())
    else:
        from courseapp.demo.host import min_prompt_tokens

        system = _system_prompt()
        try:
            spec = presets.custom_spec(knobs or {}, system_prompt=system,
                                       min_prompt_tokens=min_prompt_tokens(system, presets.SHORT_QUESTION))
        except ValueError as exc:
            raise DemoRefused(str(exc)) from None
    spec["step_delay"] = settings.DEMO_STEP_DELAY
    spec["start_paused"] = paused
    spec["paused_idle_s"] = settings.DEMO_PAUSED_IDLE_S
    return spec


TYPICAL_OF_LAST = 20  # finished runs of a scene that say how long it takes


def _typical_seconds(presets: set[str]) -> dict[str, float]:
    """How long each preset scene has lately taken from start to end: the median of its last
    finished runs (a scene lasts 20–70 s; its run's bound is its 15-minute lifetime)."""
    typical = {}
    for preset in presets:
        spans = sorted((f - s).total_seconds() for s, f in DemoRun.objects.filter(
            preset=preset, status=Status.FINISHED, started_at__isnull=False, finished_at__isnull=False,
        ).order_by("-finished_at").values_list("started_at", "finished_at")[:TYPICAL_OF_LAST])
        if spans:
            typical[preset] = spans[len(spans) // 2]
    return typical


def _soonest_end(runs) -> tuple[datetime | None, bool]:
    """When the first of these runs should end, and whether that is an estimate: a preset scene
    ends about as long after its start as its last runs took; any run ends at its lifetime or
    idle limit at the latest."""
    now = timezone.now()
    typical = _typical_seconds({run.preset for run in runs if run.preset and not run.spec.get("open")})
    ends = []
    for run in runs:
        bound = min((t for t in (run.expires_at, run.idle_until) if t is not None), default=None)
        if run.preset in typical and not run.spec.get("open"):
            guess = max(now, (run.started_at or now) + timedelta(seconds=typical[run.preset]))
            if bound is None or guess < bound:
                ends.append((guess, True))
                continue
        if bound is not None:
            ends.append((bound, False))
    return min(ends, default=(None, False))


def _ended_here(run: DemoRun) -> bool:
    """Its session here has ended and its end is being written: the learner saw it finish and
    opened the next scene at once. It is not "replaced"."""
    if run.host != "embedded" or run.status != Status.RUNNING:
        return False
    from courseapp.demo.host import embedded

    fresh = run.heartbeat_at is not None and timezone.now() - run.heartbeat_at < STALE_AFTER
    return fresh and not embedded.is_alive(str(run.pk))


def _check_address(runs_here, owner) -> None:
    """DemoBusy when this client address has its share of runs going. A class member's share is
    the class limit (a school's room is one NAT address); everyone else shares the small one,
    counting only runs of learners in no class, so a room's runs do not shut out a guest and a
    flood of guests does not shut out the room."""
    from courseapp.instructor.models import Membership

    in_class = Membership.objects.filter(cohort__archived=False)
    if owner is not None and in_class.filter(learner=owner).exists():
        limit = settings.DEMO_MAX_RUNS_PER_CLASS_ADDRESS
    else:
        limit = settings.DEMO_MAX_RUNS_PER_ADDRESS
        runs_here = runs_here.exclude(owner__in=in_class.values("learner"))
    mine = list(runs_here.only("expires_at", "idle_until", "preset", "spec", "started_at"))
    if len(mine) >= limit:
        retry_at, expected = _soonest_end(mine)
        raise DemoBusy(retry_at, per_address=limit, expected=expected)


def run_start(*, owner, spec: dict, client_addr: str | None = None, is_class: bool = False) -> Started:
    """Create a run and launch it. One active run per learner: their previous one is stopped
    (and says so). The server's cap counts runs someone is watching; each client address has
    a cap of its own. DemoBusy when there is no place."""
    if _host_mode() == "celery" and not events.engines_reachable():
        raise EnginesUnavailable()
    now = timezone.now()
    with transaction.atomic():
        limits.serialise_starts(74021)
        previous = []
        if owner is not None and not is_class:
            previous = [r for r in DemoRun.objects.select_for_update().filter(owner=owner, status__in=DemoRun.ACTIVE, is_class=False)
                        if not _ended_here(r)]
        others = DemoRun.objects.filter(status__in=DemoRun.ACTIVE).exclude(pk__in=[r.pk for r in previous])
        watched = list(others.filter(watched_at__gte=now - WATCHING_WITHIN).only(
            "expires_at", "idle_until", "preset", "spec", "started_at"))
        if len(watched) >= settings.DEMO_MAX_ACTIVE_RUNS:
            retry_at, expected = _soonest_end(watched)
            raise DemoBusy(retry_at, expected=expected)
        if client_addr and not is_class:
            _check_address(others.filter(client_addr=client_addr, is_class=False), owner)
        # The run's own loop ends it at its lifetime too: a worker's threads pool enforces no time limit.
        spec = {**spec, "max_run_s": None if is_class else settings.DEMO_MAX_RUN_S}
        run = DemoRun.objects.create(
            owner=owner, preset=spec.get("preset", ""), is_class=is_class, spec=spec, status=Status.QUEUED,
            host=_host_mode(), client_addr=client_addr, watched_at=now,  # the page that started it connects next
            expires_at=None if is_class else now + timedelta(seconds=settings.DEMO_MAX_RUN_S),
        )
        if previous:
            DemoRun.objects.filter(pk__in=[r.pk for r in previous], status__in=DemoRun.ACTIVE).update(
                status=Status.STOPPED, end_reason=Reason.REPLACED, replaced_by=run, finished_at=now)
            for old in previous:
                transaction.on_commit(lambda old=old: run_command(run=old, cmd={"type": "stop", "reason": Reason.REPLACED.value}))
    transaction.on_commit(lambda: _launch(run))
    return Started(run, previous)


def _launch(run: DemoRun) -> None:
    from courseapp.demo import keeper

    keeper.ensure_started()  # whoever hosts the run, this process reaps it if nobody opens it
    run_id = str(run.id)
    if _host_mode() == "celery":
        from courseapp.demo.tasks import run_demo

        try:
            run_demo.apply_async(args=[run_id], queue="engine")
        except Exception as exc:  # Redis went away since the check: no row stays behind in the learner's name
            logger.warning("demo run %s not sent to a worker (%s); removed", run_id, exc)
            DemoRun.objects.filter(pk=run.pk, status=Status.QUEUED).delete()
            raise EnginesUnavailable() from exc
        return
    from courseapp.demo.host import embedded

    embedded.start(
        run_id,
        run.spec,
        publish=lambda message: events.publish(run_id, message),
        on_begin=lambda: run_begin(run_id=run_id, host="embedded"),
        on_finish=lambda end: run_finish(run_id=run_id, **end),
    )


# --- the host reports --------------------------------------------------------------------------
def run_begin(*, run_id: str, host: str) -> bool:
    """A host took the run: queued → starting (its engine is being built). False if it ended
    meanwhile (e.g. failed in the queue): then the host drops it."""
    now = timezone.now()
    updated = _retrying(lambda: DemoRun.objects.filter(pk=run_id, status=Status.QUEUED).update(
        status=Status.STARTING, host=host, started_at=now, heartbeat_at=now), what="run begin", attempts=6)
    return bool(updated)


def run_heartbeat(*, run_id: str, host: str | None = None, idle_until: datetime | None = None,
                  running: bool = True) -> bool | None:
    """The host is alive; `running`: the run's engine is built and its loop goes round (starting →
    running). False when the run has ended meanwhile (from outside: its owner, the reaper), None
    when the database could not be reached. Never raises: a missed heartbeat is repaired by the
    next one."""
    fields = {"heartbeat_at": timezone.now(), "idle_until": idle_until}
    if host:
        fields["host"] = host
    if running:
        fields["status"] = Status.RUNNING
    updated = _retrying(lambda: DemoRun.objects.filter(pk=run_id, status__in=(Status.STARTING, Status.RUNNING)).update(**fields),
                        what="heartbeat", attempts=3)
    return None if updated is None else bool(updated)


def run_finish(*, run_id: str, trace: bytes | None, error: str | None = None,
               status: str = Status.FINISHED, reason: str = "") -> None:
    """Record a run's end and keep its trace (also when it was stopped or expired from outside)."""
    final = Status.FAILED if error else status
    if error and not reason:
        reason = Reason.ENGINE_ERROR

    # A run that finished while the learner was opening the next scene did finish (the stop
    # reached a session that had already ended).
    still_open = Q(status__in=DemoRun.ACTIVE)
    if final == Status.FINISHED:
        still_open |= Q(status=Status.STOPPED, end_reason=Reason.REPLACED)

    def write():
        with transaction.atomic():
            DemoRun.objects.filter(pk=run_id).update(trace_packed=trace)
            DemoRun.objects.filter(still_open, pk=run_id).update(
                status=final, end_reason=reason, error=error or "", finished_at=timezone.now())

    _retrying(write, what="run finish", attempts=8)
    if error:
        events.publish(run_id, {"type": "error", "status": "failed", "message": error})


# --- ending ------------------------------------------------------------------------------------
def run_end(*, run: DemoRun, status: str, reason: str, error: str = "") -> bool:
    """End an active run from outside its host (once) and tell the host to stop, with the same
    status and reason, so its last frame says what the database says."""
    updated = DemoRun.objects.filter(pk=run.pk, status__in=DemoRun.ACTIVE).update(
        status=status, end_reason=reason, error=error, finished_at=timezone.now())
    if updated:
        try:
            run_command(run=run, cmd={"type": "stop", "reason": str(reason), "status": str(status), "message": error})
        except Exception as exc:  # Redis away: the worker reads the end from the database at its next heartbeat
            logger.warning("demo run %s: the stop could not be sent (%s); its worker finds it in the database", run.pk, exc)
    return bool(updated)


def _on_worker(run: DemoRun) -> bool:
    """Hosted (or to be hosted) by a Celery worker: its host is the worker's name (`-n`), or
    "celery" while it waits for one."""
    if run.host == "embedded":
        return False
    return bool(run.host) or _host_mode() == "celery"


def _host_ticking_here(run: DemoRun) -> bool:
    if run.host != "embedded":
        return False
    from courseapp.demo.host import embedded

    return embedded.is_ticking(str(run.pk))


def run_fail_if_stale(*, run: DemoRun) -> bool:
    """A started run whose host stopped beating is marked failed (once), saying so. A run this
    very process hosts is alive whatever the database says (its heartbeat may wait on a lock)."""
    if run.status not in (Status.STARTING, Status.RUNNING) or run.heartbeat_at is None:
        return False
    if timezone.now() - run.heartbeat_at < STALE_AFTER or _host_ticking_here(run):
        return False
    seconds = int(STALE_AFTER.total_seconds())
    if _on_worker(run):
        error = _("its engine worker %(host)s was lost: no sign of life for %(s)d s") % {"host": run.host, "s": seconds}
    else:
        error = _("the engine stopped responding: no sign of life for %(s)d s") % {"s": seconds}
    return run_end(run=run, status=Status.FAILED, reason=Reason.WORKER_LOST, error=error)


def runs_reap() -> list[str]:
    """End what nobody watches, what no worker took or could not start, what outlived its time,
    and what stopped beating. Called every few seconds by every web process's keeper and every
    engine worker; safe to run in several processes at once (each end is written once)."""
    now = timezone.now()
    active = DemoRun.objects.filter(status__in=DemoRun.ACTIVE)
    pickup, start = settings.DEMO_PICKUP_WITHIN_S, settings.DEMO_START_WITHIN_S
    ended = []

    def end(run, status, reason, error=""):
        if run_end(run=run, status=status, reason=reason, error=error):
            ended.append(str(run.pk))

    for run in active.filter(watched_at__lt=now - UNWATCHED_AFTER):
        end(run, Status.EXPIRED, Reason.NO_VIEWER)
    for run in active.filter(status=Status.QUEUED, created_at__lt=now - timedelta(seconds=pickup)):
        end(run, Status.FAILED, Reason.NO_WORKER, _("no engine worker took it within %(s)d s") % {"s": pickup})
    for run in active.filter(status=Status.STARTING, started_at__lt=now - timedelta(seconds=start)):
        end(run, Status.FAILED, Reason.START_TIMEOUT,
            _("the engine on %(host)s did not start within %(s)d s") % {"host": run.host, "s": start})
    for run in active.filter(expires_at__lt=now):
        end(run, Status.EXPIRED, Reason.LIFETIME)
    for run in active.filter(status__in=(Status.STARTING, Status.RUNNING), heartbeat_at__lt=now - STALE_AFTER):
        if run_fail_if_stale(run=run):
            ended.append(str(run.pk))
    return ended


def run_watched(*, run_id: str) -> None:
    """A viewer's socket is open (on connect, then every few seconds)."""
    _retrying(lambda: DemoRun.objects.filter(pk=run_id, status__in=DemoRun.ACTIVE).update(watched_at=timezone.now()),
              what="viewer mark", attempts=2)


# --- commands ----------------------------------------------------------------------------------
def run_command(*, run: DemoRun, cmd: dict) -> bool:
    """Hand a command to wherever the run lives."""
    if _on_worker(run):
        from asgiref.sync import async_to_sync

        async_to_sync(events.send_command)(str(run.id), cmd)
        return True
    from courseapp.demo.host import embedded

    return embedded.command(str(run.id), cmd)


def prompt_allow(*, learner_id: int) -> None:
    """A learner may send PROMPTS_PER_MINUTE prompts in any 60 s; DemoRefused past that."""
    if not limits.hit(key=f"prompt:{learner_id}", limit=PROMPTS_PER_MINUTE, window=60):
        raise DemoRefused(_("too many prompts: at most %(limit)d a minute; wait a little and send again") % {"limit": PROMPTS_PER_MINUTE})


# --- class runs --------------------------------------------------------------------------------
def class_join(*, code: str, client_addr: str | None) -> DemoRun:
    """The open class run with this code. Wrong guesses are counted per client address: past
    JOIN_GUESSES in JOIN_GUESS_WINDOW seconds every try is refused, right or wrong."""
    key = f"join:{client_addr or 'unknown'}"
    if limits.over(key=key, limit=JOIN_GUESSES, window=JOIN_GUESS_WINDOW):
        raise DemoBusy(timezone.now() + timedelta(seconds=JOIN_GUESS_WINDOW))
    normalised = "".join(ch for ch in code.upper() if ch.isalnum())
    run = DemoRun.objects.filter(join_code=normalised, is_class=True, status__in=DemoRun.ACTIVE).first() if normalised else None
    if run is None:
        limits.add(key=key, window=JOIN_GUESS_WINDOW)
        raise DemoRefused(_("No open class run has the code “%(code)s”.") % {"code": normalised[:12]})
    return run
