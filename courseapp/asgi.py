"""ASGI entry point: Daphne serves HTTP (Django on a few threads, see http_threads.py) and,
through Channels, the demo's websockets."""
import gc
import logging
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")
django_wsgi_app = get_wsgi_application()  # must run before anything imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from courseapp.http_threads import WsgiOnThreads  # noqa: E402
from courseapp.http_workers import WorkerPool  # noqa: E402
from courseapp.serving.asgi import ServingApp  # noqa: E402
from courseapp.ws_origin import SameOriginValidator  # noqa: E402
from courseapp.demo.routing import websocket_urlpatterns as demo_sockets  # noqa: E402
from courseapp.lab.routing import websocket_urlpatterns as lab_sockets  # noqa: E402

logging.getLogger("courseapp").info(
    "Demo engines: %s", f"Celery workers on the 'engine' queue (REDIS_URL {settings.REDIS_URL.split('@')[-1]})"
    if settings.DEMO_HOST == "celery" else "in this machine (no REDIS_URL: embedded mode)")
workers = None
if settings.HTTP_WORKERS:
    workers = WorkerPool(workers=settings.HTTP_WORKERS, paths=settings.HTTP_WORKER_PATHS,
                         settings_module=os.environ["DJANGO_SETTINGS_MODULE"], databases=settings.DATABASES)

# The pages this process answers itself (the workers warm their own): served once before Daphne
# listens, so the first learner's /demo/ does not wait for a cold process.
from courseapp.warm import warm  # noqa: E402

warm(django_wsgi_app, settings.HTTP_LOCAL_WARM_PATHS)

application = ProtocolTypeRouter(
    {
        "http": ServingApp(WsgiOnThreads(django_wsgi_app, threads=settings.HTTP_THREADS, workers=workers)),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(demo_sockets + lab_sockets))),
    }
)

# Everything built so far (Django, Twisted, the URLconf, templates…) lives as long as the server:
# moved out of the collector's reach, so the engine thread's many short-lived objects do not make
# every full collection walk it all again (serving 32 streams went ~15% faster).
gc.freeze()
