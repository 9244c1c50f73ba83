"""ASGI entry point: Daphne serves HTTP and, through Channels, the demo's websockets."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")
django_asgi_app = get_asgi_application()  # must run before anything imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from courseapp.concurrency import HttpConcurrencyLimit  # noqa: E402
from courseapp.demo.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": HttpConcurrencyLimit(django_asgi_app, settings.HTTP_MAX_CONCURRENCY),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
