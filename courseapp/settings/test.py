"""`make test`."""
import os

from .base import *  # noqa: F401,F403
from .base import BASE_DIR, SQLITE_OPTIONS

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
LOGGING = {"version": 1, "disable_existing_loggers": False}
DEMO_STEP_DELAY = 0.005
