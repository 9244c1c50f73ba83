"""Sessions kept in the database with a copy in the shared cache, as Django's cached_db, except
that the cache being away (Redis restarting) costs speed, not the page: every cache call is
tried once and its failure is logged in one line, and the database answers instead. Django's own
cached_db lets a failed cache write after a database read, `exists` and `delete` raise, so
while Redis is down every page with a session answers 500 (issue #31)."""
import logging

from django.contrib.sessions.backends import cached_db

logger = logging.getLogger("courseapp.sessions")


def _cache_failed(what: str, exc: Exception) -> None:
    logger.warning("session cache: %s failed (%s: %s); the database answers", what, type(exc).__name__, exc)


class SessionStore(cached_db.SessionStore):
    def load(self):
        try:
            data = self._cache.get(self.cache_key)
        except Exception as exc:
            _cache_failed("read", exc)
            return self._load_from_db(cache_it=False)
        return data if data is not None else self._load_from_db(cache_it=True)

    def _load_from_db(self, *, cache_it: bool) -> dict:
        row = self._get_session_from_db()
        if not row:
            return {}
        data = self.decode(row.session_data)
        if cache_it:
            try:
                self._cache.set(self.cache_key, data, self.get_expiry_age(expiry=row.expire_date))
            except Exception as exc:
                _cache_failed("write", exc)
        return data

    def exists(self, session_key):
        try:
            if session_key and (self.cache_key_prefix + session_key) in self._cache:
                return True
        except Exception as exc:
            _cache_failed("lookup", exc)
        return cached_db.DBStore.exists(self, session_key)

    def save(self, must_create=False):
        cached_db.DBStore.save(self, must_create)
        try:
            self._cache.set(self.cache_key, self._session, self.get_expiry_age())
        except Exception as exc:
            _cache_failed("write", exc)

    def delete(self, session_key=None):
        cached_db.DBStore.delete(self, session_key)
        if session_key is None:
            if self.session_key is None:
                return
            session_key = self.session_key
        try:
            self._cache.delete(self.cache_key_prefix + session_key)
        except Exception as exc:
            # A logout during the outage: the stale copy must not outlive it once Redis is back.
            _cache_failed("delete", exc)
            raise
