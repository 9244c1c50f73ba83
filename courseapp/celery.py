"""Celery app. In the default single-process mode nothing starts a worker; the scaled mode
(REDIS_URL set) runs `celery -A courseapp worker -Q engine` per GPU host."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")

app = Celery("courseapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The engine worker's start checks, warm-up, reaper and shutdown (signal handlers; they only
# fire in a worker). Connected here, before the worker sends its first signal.
from courseapp.demo import worker as _engine_worker  # noqa: E402,F401
from courseapp.serving import tasks as _serving_tasks  # noqa: E402,F401  (not an app: autodiscover misses it)
