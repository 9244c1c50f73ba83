"""Who sends passbacks, and when: a Celery task on the engine queue when scaled (a retry is the
same task again, counted down), else one sender thread per process with a timetable. Either way
the database row is the truth (services._claim takes it atomically, for a lease), so a passback a
restart interrupted — even mid-send — is picked up by the next sender that starts, or in scaled
mode by the engine workers' sweep (resend_stalled)."""
import heapq
import threading
import time

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from courseapp.lti import services
from courseapp.lti.models import Passback


def send_soon(passback_ids) -> None:
    if settings.REDIS_URL:
        from courseapp.lti.tasks import passback

        for passback_id in passback_ids:
            passback.delay(passback_id)
    else:
        _sender().add(passback_ids, delay=0.0)


class _Sender:
    def __init__(self):
        self._due: list[tuple[float, int]] = []
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="lti-passback", daemon=True)
        self._thread.start()

    def add(self, passback_ids, delay: float) -> None:
        with self._wake:
            for passback_id in passback_ids:
                heapq.heappush(self._due, (time.monotonic() + delay, passback_id))
            self._wake.notify()

    def _run(self) -> None:
        try:
            self._resume_unsent()
        except Exception:  # the database was not ready: what is due now still goes; the rest on a retry
            services.log.exception("LTI passbacks left unsent earlier could not be read")
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(timeout=None if not self._due else self._due[0][0] - time.monotonic())
                _, passback_id = heapq.heappop(self._due)
            close_old_connections()
            try:
                delay = services.passback_send(passback_id=passback_id)
            except Exception:  # the database itself failed: try this one again later
                services.log.exception("LTI passback %s could not be sent", passback_id)
                delay = settings.LTI_PASSBACK_BACKOFF_S
            if delay is not None:
                self.add([passback_id], delay)

    def _resume_unsent(self) -> None:
        close_old_connections()
        now = timezone.now()
        # SENDING too: a claim this process held when it stopped is due again when its lease ends.
        for passback_id, next_try_at in Passback.objects.filter(status__in=services.UNSENT).values_list("pk", "next_try_at"):
            wait = max(0.0, (next_try_at - now).total_seconds()) if next_try_at else 0.0
            self.add([passback_id], wait)


def resend_stalled() -> list[int]:
    """Scaled mode's sweep (each engine worker's reaper calls it): passbacks whose sender died
    mid-send or whose queued task was lost go out again. Returns their ids."""
    stalled = services.passbacks_stalled()
    if stalled:
        send_soon(stalled)
    return stalled


_lock = threading.Lock()
_instance: _Sender | None = None


def _sender() -> _Sender:
    global _instance
    with _lock:
        if _instance is None:
            _instance = _Sender()
        return _instance
