"""One thread per web process that keeps the demo's books, apart from the engine threads:

- heartbeats for the runs this process hosts (embedded mode), so a database write that waits
  on a lock never holds up an engine step;
- the reaper (services.runs_reap): ends what nobody watches, what no worker picked up, what
  outlived its time and what stopped beating, whoever hosts it.

It starts with the first run or viewer (viewers call ensure_started every few seconds, so a run
started while it was retiring is looked after again at once) and stops once no run is active.
"""
import logging
import threading
import time

from django.db import close_old_connections, connections

from courseapp.outages import Outage

logger = logging.getLogger("courseapp.demo")

BEAT_EVERY_S = 1.0
REAP_EVERY_S = 5.0

_lock = threading.Lock()
_thread: threading.Thread | None = None
_stopping = threading.Event()


def ensure_started() -> None:
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="demo-keeper", daemon=True)
            _thread.start()


def stop(timeout: float = 5.0) -> None:
    """Stop the thread now (tests: it must not outlive the database it was started against)."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
    if thread is not None:
        _stopping.set()
        thread.join(timeout)
        _stopping.clear()


def beat() -> None:
    """A heartbeat for every run whose loop is still coming round."""
    from courseapp.demo import services
    from courseapp.demo.host import embedded

    for run_id, session in embedded.live():
        if session.is_ticking():
            services.run_heartbeat(run_id=run_id, idle_until=session.idle_until(), running=session.has_started())


def _retire(embedded) -> bool:
    """Stop, unless a run started meanwhile (checked under the lock ensure_started takes)."""
    global _thread
    with _lock:
        if embedded.live():
            return False
        _thread = None
        return True


def _loop() -> None:
    from courseapp.demo import services
    from courseapp.demo.host import embedded
    from courseapp.demo.models import DemoRun

    last_reap = time.monotonic()
    outage = Outage("demo keeper: database", logger)
    try:
        while not _stopping.wait(BEAT_EVERY_S):
            close_old_connections()  # before the round: a connection PostgreSQL dropped is replaced
            try:
                beat()
                if time.monotonic() - last_reap >= REAP_EVERY_S:
                    last_reap = time.monotonic()
                    services.runs_reap()
                    if not DemoRun.objects.filter(status__in=DemoRun.ACTIVE).exists() and _retire(embedded):
                        return
                outage.answered()
            except Exception as exc:  # e.g. the database is busy or restarting: next round
                outage.failed(exc)
    finally:
        connections.close_all()
