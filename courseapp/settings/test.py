"""`make test`."""
import os

from .base import *  # noqa: F401,F403
from .base import BASE_DIR, CACHES, SQLITE_OPTIONS, limits_cache

DEBUG = False
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, tests only
if not os.environ.get("DATABASE_URL"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "db.sqlite3",
            "OPTIONS": dict(SQLITE_OPTIONS),
            # Live-server (browser) tests need a file-backed test DB shared across threads.
            # TEST_DB_NAME lets two runs on one machine keep out of each other's way.
            "TEST": {"NAME": os.environ.get("TEST_DB_NAME") or BASE_DIR / ".test-db.sqlite3"},
        }
    }
# Requests in the test process unless a test asks for workers (a server it starts gets the default).
HTTP_WORKERS = int(os.environ.get("HTTP_WORKERS", "0"))
# With HTTP_WORKERS=0 this process answers its requests itself: rate counts in its memory, like
# the rest, and no counts folder is named in the environment, where every server a test starts,
# and each pytest-xdist process, would inherit it and share its counts (one process's
# cache.clear() between tests emptied another's mid-test); each server makes its own.
CACHES["limits"] = limits_cache(HTTP_WORKERS, CACHES)
LOGGING = {"version": 1, "disable_existing_loggers": False}
DEMO_STEP_DELAY = float(os.environ.get("DEMO_STEP_DELAY", "0.005"))  # a server a test starts may slow it
# Engine sessions as threads of the test process (tests reach into them); the engine-process
# host has tests of its own, and DEMO_ENGINE_PROCESS=1 in a server's environment turns it on.
DEMO_ENGINE_PROCESS = os.environ.get("DEMO_ENGINE_PROCESS", "0") == "1"
# Likewise the served engine (tests/e2e/test_serving.py starts its server with it on, as `make run`).
SERVING_ENGINE_PROCESS = os.environ.get("SERVING_ENGINE_PROCESS", "0") == "1"
