"""Which engine workers are up (scaled mode), from their own word: each worker announces itself
every ANNOUNCE_EVERY_S in the shared cache (Redis), its entry lasting GONE_AFTER_S. So "no engine
worker is running" is said within seconds — to a learner whose run waits in the queue and to an
API client — instead of after the pickup deadline, and a dead worker drops out by itself.

Only the cache is used: a worker that cannot reach Redis cannot take runs either."""
import time

from django.core.cache import cache

ANNOUNCE_EVERY_S = 2.0
GONE_AFTER_S = 7  # three announcements missed
_NAMES_KEY = "engine-workers"
_ENTRY_KEY = "engine-worker:{}"


def announce(name: str, *, seats: int, busy: int, model_ready: bool) -> None:
    """A worker is up: `seats` runs at once, `busy` of them taken."""
    cache.set(_ENTRY_KEY.format(name), {"name": name, "seats": seats, "busy": busy, "model_ready": model_ready,
                                        "at": time.time()}, GONE_AFTER_S)
    names = cache.get(_NAMES_KEY) or []
    if name not in names:  # a race between two new workers is repaired at the next announcement
        cache.set(_NAMES_KEY, [*names, name][-64:], None)


def names() -> list[str]:
    """Every worker that ever announced itself here (some may be gone: their entries expired)."""
    return cache.get(_NAMES_KEY) or []


def workers_up() -> list[dict]:
    """The workers heard from in the last GONE_AFTER_S seconds (an empty list while Redis is away)."""
    keys = [_ENTRY_KEY.format(name) for name in names()]
    found = cache.get_many(keys)
    return [found[key] for key in keys if key in found]
