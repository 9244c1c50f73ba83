"""Warming a Django process before it takes requests: each of a few pages is served once and its
answer dropped, so the first learner does not pay for loading the templates, the URL resolvers
and the lesson's outline (a cold process answered its first page ~0.35 s late). GETs write
nothing (a rule of this app), so warming leaves no trace; a failure is logged, never fatal."""
import logging

from courseapp.http_workers import call_wsgi

logger = logging.getLogger(__name__)


def warm(wsgi_app, paths) -> None:
    from django.conf import settings
    from django.db import close_old_connections

    host = next((h for h in settings.ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")), "localhost")
    for path in paths:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": host,
                   "SERVER_PORT": "80", "HTTP_HOST": host, "REMOTE_ADDR": "127.0.0.1", "SERVER_PROTOCOL": "HTTP/1.1",
                   "wsgi.url_scheme": "http", "wsgi.version": (1, 0), "wsgi.multithread": True,
                   "wsgi.multiprocess": True, "wsgi.run_once": False}
        try:
            status, _headers, _content = call_wsgi(wsgi_app, environ, b"")
            if not status.startswith(("200", "3")):
                logger.warning("Warming up: %s answered %s.", path, status)
        except Exception:
            logger.exception("Warming up: %s failed.", path)
    close_old_connections()
