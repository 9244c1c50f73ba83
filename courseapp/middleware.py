from django.conf import settings
from django.urls import Resolver404, resolve
from django.utils import translation


class KoreanByDefaultMiddleware:
    """Drop Accept-Language so LocaleMiddleware falls back to LANGUAGE_CODE ("ko").

    The learners are Korean but many browsers (and every headless one) announce English;
    only an explicit choice through `set_language` (the language cookie) switches the UI.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.META.pop("HTTP_ACCEPT_LANGUAGE", None)
        return self.get_response(request)


class ApiStraightThroughMiddleware:
    """The grading API's operations (`/api/v1/…`) go straight to their view.

    They are JSON for other systems, authenticated by a Bearer token on every call (courseapp/api):
    none of the page machinery after this middleware means anything to them — sessions and the
    login, CSRF (no cookie authenticates them, so there is nothing to forge), the language
    cookie, messages, the login throttle (axes), htmx, the pages' CSP, the order-seed cookie —
    and running it all took 8 % of a graded submission's time in its worker. So this middleware (right
    after SecurityMiddleware, whose headers they keep: nosniff, HSTS and the HTTPS redirect when
    deployed) resolves such a path and calls its view itself, with the site's language active
    (as LocaleMiddleware would choose without a cookie), and adds the headers a JSON API wants:
    no framing, a policy that lets nothing load. Anything else, and a path under /api/v1/ that
    matches no operation, takes the usual way; so do the API's docs page and its schema
    (`/api/docs/`, `/api/schema/`), which are pages.
    """

    PREFIX = "/api/v1/"
    HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path_info.startswith(self.PREFIX):
            return self.get_response(request)
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return self.get_response(request)
        request.resolver_match = match
        with translation.override(settings.LANGUAGE_CODE):
            response = match.func(request, *match.args, **match.kwargs)
        for header, value in (*self.HEADERS.items(), ("Content-Language", settings.LANGUAGE_CODE)):
            response.headers.setdefault(header, value)
        return response
