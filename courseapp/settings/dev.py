"""`make run`: one process, SQLite, no external service. DEBUG is off unless DEBUG=1."""
import os

from django.core.management.utils import get_random_secret_key

from .base import *  # noqa: F401,F403
from .base import BASE_DIR, CACHES, HTTP_WORKERS, limits_cache

CACHES["limits"] = limits_cache(HTTP_WORKERS, CACHES)

DEBUG = os.environ.get("DEBUG", "") in {"1", "true", "True", "yes"}


def _install_secret_key():
    """The key signs sessions and keys the self-check ids' HMACs, so `make run` must never use
    a key published in the repository: each install makes its own, kept in .secret-key."""
    path = BASE_DIR / ".secret-key"
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it a moment ago
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(get_random_secret_key() + "\n")
    return path.read_text().strip()


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _install_secret_key()

# `make run` collects static files first; WhiteNoise serves them compressed (gzip, brotli) under
# hashed names with far-future cache headers. With DEBUG=1, edits in static/ show at once.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_KEEP_ONLY_HASHED_FILES = True  # half the compressing; DEBUG=1 serves the originals from static/
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
