"""Which pages may open the demo's websockets: this site's own, port included.

Channels' AllowedHostsOriginValidator compares the Origin's host name with ALLOWED_HOSTS and
ignores its port, so a page served by anything else on the same machine (another port of
127.0.0.1) could open a learner's socket with their cookies. Here the Origin must be the origin
the browser connected to — the Host header, itself one of ALLOWED_HOSTS — or one listed in
CSRF_TRUSTED_ORIGINS (a proxy that rewrites Host)."""
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host

DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _netloc(scheme: str, host: str, port: str) -> str:
    return host if not port or DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"


def _trusted(origin: str) -> bool:
    """Listed in CSRF_TRUSTED_ORIGINS, read as Django's CSRF check reads it (`https://*.example.com`)."""
    scheme, netloc = urlsplit(origin).scheme, urlsplit(origin).netloc
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        parts = urlsplit(trusted.lower())
        if parts.scheme == scheme and (parts.netloc == netloc or (
                parts.netloc.startswith("*") and is_same_domain(netloc, parts.netloc[1:]))):
            return True
    return False


def same_origin(origin: str | None, host_header: str | None) -> bool:
    if not origin or not host_header:
        return False
    if _trusted(origin.lower()):
        return True
    try:
        parts = urlsplit(origin.lower())
        origin_netloc = _netloc(parts.scheme, parts.hostname or "", str(parts.port or ""))
    except ValueError:  # a port that is no number
        return False
    host, port = split_domain_port(host_header.lower())
    if not host or not validate_host(host, settings.ALLOWED_HOSTS):
        return False
    # A Host header without a port means the scheme's default: the origin must name none either.
    return parts.scheme in ("http", "https") and origin_netloc == _netloc(parts.scheme, host, port)


class SameOriginValidator:
    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
        if same_origin(headers.get("origin"), headers.get("host")):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
