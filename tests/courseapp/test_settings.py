"""Where the settings put what every process answering requests must share."""
import os

from courseapp.settings.base import limits_cache, session_engine

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


def test_sessions_are_read_from_the_database_when_worker_processes_keep_their_own_memory():
    assert session_engine(2, LOCMEM) == "django.contrib.sessions.backends.db"
    assert session_engine(0, LOCMEM) == session_engine(2, REDIS) == "courseapp.session_store"
