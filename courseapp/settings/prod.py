"""Deployed behind an HTTPS reverse proxy; every secret and host name comes from the environment.

Required: DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS (comma-separated host names).
Optional: DJANGO_CSRF_TRUSTED_ORIGINS (comma-separated https://… origins; default: https:// plus
each allowed host), DJANGO_HSTS_SECONDS (default one year), DATABASE_URL, REDIS_URL.
"""
import os

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F401,F403
from .base import CACHES, HTTP_WORKERS, limits_cache

CACHES["limits"] = limits_cache(HTTP_WORKERS, CACHES)


def _required(name):
    value = os.environ.get(name, "").strip()
    if not value:
        raise ImproperlyConfigured(f"Set {name} in the environment (see README, 'Deployment').")
    return value


def _list(value):
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = False
SECRET_KEY = _required("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = _list(_required("DJANGO_ALLOWED_HOSTS"))
# The proxy terminates TLS and forwards plain HTTP: trust its X-Forwarded-Proto (the proxy must
# set or overwrite it) so Django knows the request was HTTPS, for CSRF's origin check and redirects.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = _list(os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "")) or [
    f"https://{'*' if host.startswith('.') else ''}{host}" for host in ALLOWED_HOSTS if host != "*"
]
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
LANGUAGE_COOKIE_SECURE = True

# `collectstatic` (part of the documented start) writes hashed, pre-compressed copies that
# WhiteNoise serves with far-future cache headers.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_KEEP_ONLY_HASHED_FILES = True
