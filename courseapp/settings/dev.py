"""`make run`: one process, SQLite, no external service."""
from .base import *  # noqa: F401,F403

DEBUG = True
WHITENOISE_USE_FINDERS = True  # serve static files straight from static/ without collectstatic
WHITENOISE_AUTOREFRESH = True
