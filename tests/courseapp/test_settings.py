"""Where the settings put what every process answering requests must share."""
import os

from django.conf import settings

from courseapp.settings.base import limits_cache

LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REDIS = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}}


def test_rate_counts_live_where_every_answering_process_sees_them(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSEAPP_LIMITS_DIR", raising=False)
    # one process answers everything: its memory; scaled: Redis, whatever the workers
    assert limits_cache(0, LOCMEM) == LOCMEM["default"]
    assert limits_cache(4, REDIS) == REDIS["default"] and limits_cache(0, REDIS) == REDIS["default"]
    assert "COURSEAPP_LIMITS_DIR" not in os.environ  # no folder made for nothing
    # worker processes with per-process memory: files in one folder, named for the workers to inherit
    monkeypatch.setenv("COURSEAPP_LIMITS_DIR", str(tmp_path))
    shared = limits_cache(2, LOCMEM)
    assert shared["BACKEND"].endswith("FileBasedCache") and shared["LOCATION"] == str(tmp_path)


def test_the_counts_folder_a_process_makes_is_removed_when_it_exits_and_only_by_it(monkeypatch, tmp_path):
    import atexit

    exits = []
    monkeypatch.setattr(atexit, "register", lambda f, *a, **k: exits.append((f, a, k)))
    monkeypatch.delenv("COURSEAPP_LIMITS_DIR", raising=False)
    made = limits_cache(2, LOCMEM)["LOCATION"]
    assert os.path.isdir(made) and os.environ["COURSEAPP_LIMITS_DIR"] == made
    (f, args, kwargs), = exits
    f(*args, **kwargs)  # what exit will do
    assert not os.path.exists(made)
    monkeypatch.setenv("COURSEAPP_LIMITS_DIR", str(tmp_path))  # a worker: its parent's folder
    assert limits_cache(2, LOCMEM)["LOCATION"] == str(tmp_path) and len(exits) == 1


def test_sessions_are_kept_in_the_cache_every_answering_process_sees():
    """Its limits_cache: a logout answered by one process ends the session for all of them."""
    assert settings.SESSION_ENGINE == "courseapp.session_store"
    assert settings.SESSION_CACHE_ALIAS == "limits" and "limits" in settings.CACHES
