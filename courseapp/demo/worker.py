"""The engine worker's life in scaled mode: what a `celery -A courseapp worker -Q engine` process
does besides running its tasks (courseapp/demo/tasks.py).

- It refuses to start without a real broker (REDIS_URL), a shared database (DATABASE_URL) and
  the flags that let it live through a Redis restart: without them it would listen on an
  in-memory broker no web process reaches, or write runs into a SQLite file of its own, and
  every run would quietly wait until it failed.
- As it starts it loads the model in the background, so the first run does not wait for it (a
  run that comes meanwhile waits in "starting"), and once ready it reaps runs every few seconds
  (services.runs_reap): runs nobody watches, queued runs no worker took and runs of a worker that
  died end even when no web page is open; LTI passbacks whose sender died mid-send go out again.
- On a warm shutdown (SIGTERM, Ctrl-C) it stops its open runs, saying "its engine worker shut
  down", so it exits in seconds instead of waiting for a learner's run to end.
"""
import logging
import os
import threading
import time

from celery.signals import celeryd_init, worker_init, worker_ready, worker_shutting_down

from courseapp.outages import Outage

logger = logging.getLogger("courseapp.demo")

REAP_EVERY_S = 5.0
shutting_down = threading.Event()
model_ready = threading.Event()  # the model is in memory: a run starts without waiting for it
_sessions: dict = {}  # run id → RunSession, the runs this worker is serving
_lock = threading.Lock()


WORKER_FLAGS = ("--without-gossip", "--without-mingle")


def configuration_problems(environ, broker_url: str, options: dict) -> list[str]:
    problems = []
    if not environ.get("REDIS_URL") or str(broker_url).startswith("memory://"):
        problems.append("REDIS_URL is not set: the worker would wait on an in-memory broker that no web process can reach.")
    if not environ.get("DATABASE_URL"):
        problems.append("DATABASE_URL is not set: the worker would record runs in a SQLite file of its own, "
                        "not in the database the web process reads.")
    if not options.get("without_gossip"):
        problems.append("start it with --without-gossip --without-mingle: with gossip on, a Redis restart "
                        "while a run is open stops the worker for good (settings: CELERY_WORKER_ENABLE_REMOTE_CONTROL).")
    return problems


@celeryd_init.connect
def _refuse_misconfigured(sender=None, conf=None, options=None, **_kwargs):
    problems = configuration_problems(os.environ, conf.broker_url if conf is not None else "", options or {})
    if problems:
        raise SystemExit("The engine worker will not start:\n  " + "\n  ".join(problems)
                         + "\nSee the README, Scaled mode, for the command and the variables each process needs.")


@worker_init.connect
def _warm_up(sender=None, **_kwargs):
    threading.Thread(target=_load_model, name="engine-warm-up", daemon=True).start()


@worker_ready.connect
def _start_reaping(sender=None, **_kwargs):
    threading.Thread(target=_reap, name="demo-reaper", daemon=True).start()
    name = getattr(sender, "hostname", None) or "engine"
    seats = getattr(getattr(sender, "controller", None), "concurrency", None) or 1
    threading.Thread(target=_announce, args=(name, seats), name="worker-registry", daemon=True).start()


def _announce(name: str, seats: int) -> None:
    """This worker is up (courseapp/demo/registry.py), every few seconds until it shuts down."""
    from courseapp.demo import registry

    outage = Outage("engine worker: registry", logger)
    while not shutting_down.is_set():
        try:
            with _lock:
                busy = len(_sessions)
            registry.announce(name, seats=seats, busy=busy, model_ready=model_ready.is_set())
            outage.answered()
        except Exception as exc:  # Redis away: announced again once it is back
            outage.failed(exc)
        shutting_down.wait(registry.ANNOUNCE_EVERY_S)


def _load_model() -> None:
    from courseapp.demo.host import shared_model

    began = time.monotonic()
    try:
        shared_model()
    except Exception:  # each run will try again and fail with the reason
        logger.exception("engine worker: loading the model failed")
        return
    model_ready.set()
    logger.info("engine worker: model loaded in %.1f s", time.monotonic() - began)


def _reap() -> None:
    from django.db import close_old_connections

    from courseapp.demo import services
    from courseapp.lti import delivery as lti_delivery

    outage = Outage("engine worker: reaper's database", logger)
    while not shutting_down.wait(REAP_EVERY_S):
        # Before the round and outside its try: a connection PostgreSQL dropped is replaced here,
        # so one restart cannot break every round after it.
        close_old_connections()
        try:
            ended = services.runs_reap()
            if ended:
                logger.info("engine worker: reaped %s", ", ".join(ended))
            resent = lti_delivery.resend_stalled()
            if resent:
                logger.info("engine worker: LTI passbacks %s sent again (their sender stopped)", resent)
            outage.answered()
        except Exception as exc:  # a database blip: next round
            outage.failed(exc)


@worker_shutting_down.connect
def _stop_open_runs(sig=None, how=None, exitcode=None, **_kwargs):
    """Runs in the signal handler on the main thread: only set a flag and queue stop commands
    (no logging, no database). Each run's task then ends it and writes why; the worker exits
    once they have (SIGTERM, a warm shutdown). The threads pool cannot kill a task, so a cold
    shutdown (SIGQUIT) and Celery's soft shutdown do not apply."""
    shutting_down.set()
    for session in list(_sessions.values()):
        session.command({"type": "stop", "reason": "worker_shutdown", "status": "stopped"})


def serving(run_id: str, session) -> None:
    with _lock:
        _sessions[run_id] = session
    if shutting_down.is_set():  # taken as the worker began to stop
        session.command({"type": "stop", "reason": "worker_shutdown", "status": "stopped"})


def served(run_id: str) -> None:
    with _lock:
        _sessions.pop(run_id, None)
