"""How a long-lived loop lives through a broken connection (Redis restarted, a PostgreSQL backend
killed): it waits a growing pause and tries again, and says so in one line when the outage
begins and one when it ends — not a traceback a round for as long as it lasts."""
import logging
import time

FIRST_PAUSE_S = 0.25
LONGEST_PAUSE_S = 5.0


class Outage:
    """One loop's view of the service it depends on. `failed(exc)` after a round that could not
    reach it (returns the pause before the next try); `answered()` after one that did."""

    def __init__(self, what: str, logger: logging.Logger):
        self.what, self.logger = what, logger
        self.since: float | None = None  # monotonic time of the first failure of this outage
        self.failures = 0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> float:
        if self.since is None:
            self.since = time.monotonic()
            self.logger.warning("%s: unreachable (%s: %s); retrying", self.what, type(exc).__name__, exc)
        self.failures += 1
        return min(LONGEST_PAUSE_S, FIRST_PAUSE_S * 2 ** min(self.failures - 1, 5))

    def answered(self) -> bool:
        """True when this ends an outage (the caller may have something to catch up on)."""
        if self.since is None:
            return False
        self.logger.warning("%s: reachable again after %.1f s", self.what, time.monotonic() - self.since)
        self.since, self.failures = None, 0
        return True


class QuietRepeats(logging.Filter):
    """For a logger that reports every call that failed (django-redis with its ignored exceptions
    logged): the first record of a burst passes, without its traceback; the rest of the burst, up
    to `every_s` seconds, is dropped. The log then says that Redis is away, once a minute, not a
    traceback per cache call."""

    def __init__(self, every_s: float = 60.0):
        super().__init__()
        self.every_s, self.last = every_s, float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return False
        self.last = now
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {type(record.exc_info[1]).__name__}: {record.exc_info[1]} (repeats for a minute are not logged)"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True
