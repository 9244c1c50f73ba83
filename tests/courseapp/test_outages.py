"""What keeps pages and loops alive while Redis or PostgreSQL is away: the session store that
falls back to the database, the log that says an outage once, the loops' backoff."""
import logging

import pytest
from django.core.cache.backends.locmem import LocMemCache

from courseapp import session_store
from courseapp.outages import Outage, QuietRepeats


class RedisAway(LocMemCache):
    """A cache whose every call fails, as Django's Redis cache does while Redis is down."""

    def __init__(self):
        super().__init__("away", {})

    def _fail(self, *args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    get = set = add = delete = has_key = get_many = set_many = touch = _fail

    def __contains__(self, key):
        self._fail()


@pytest.mark.django_db
def test_sessions_are_saved_and_read_from_the_database_while_the_cache_is_away(monkeypatch):
    store = session_store.SessionStore()
    monkeypatch.setattr(store, "_cache", RedisAway())
    store["learner_id"] = 7
    store.save()  # the database has it; the cache's failure is logged, not raised
    again = session_store.SessionStore(session_key=store.session_key)
    monkeypatch.setattr(again, "_cache", RedisAway())
    assert again["learner_id"] == 7
    assert again.exists(store.session_key)


@pytest.mark.django_db
def test_a_session_read_once_the_cache_is_back_is_cached_again():
    store = session_store.SessionStore()
    store["learner_id"] = 9
    store.save()
    store._cache.delete(store.cache_key)  # Redis restarted: empty
    again = session_store.SessionStore(session_key=store.session_key)
    assert again["learner_id"] == 9
    assert again._cache.get(again.cache_key) == {"learner_id": 9}


def test_an_outage_is_logged_once_as_it_begins_and_once_as_it_ends(caplog):
    outage = Outage("reaper", logging.getLogger("tests.outage"))
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        pauses = [outage.failed(ConnectionError("refused")) for _ in range(10)]
        assert outage.answered() is True
        assert outage.answered() is False
    assert len(caplog.records) == 2
    assert "unreachable" in caplog.records[0].getMessage() and "reachable again" in caplog.records[1].getMessage()
    assert pauses == sorted(pauses) and pauses[0] < 1 and pauses[-1] == 5.0  # growing, then capped


def test_a_burst_of_failures_logs_its_first_line_without_a_traceback():
    quiet = QuietRepeats(every_s=60)
    try:
        raise ConnectionError("Connection refused")
    except ConnectionError:
        import sys

        records = [logging.LogRecord("courseapp.cache", logging.ERROR, __file__, 1, "Exception ignored", None, sys.exc_info())
                   for _ in range(50)]
    passed = [r for r in records if quiet.filter(r)]
    assert len(passed) == 1
    assert passed[0].exc_info is None and "ConnectionError: Connection refused" in passed[0].getMessage()
