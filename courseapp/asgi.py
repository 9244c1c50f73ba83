"""ASGI entry point: Daphne serves HTTP (and, through Channels, websockets) from here."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")
django_asgi_app = get_asgi_application()  # must run before anything imports models

from channels.routing import ProtocolTypeRouter  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app})
