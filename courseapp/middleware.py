import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.urls import Resolver404, resolve
from django.utils import translation

log = logging.getLogger(__name__)


def api_error(status: int, code: str, message: str, details=None) -> JsonResponse:
    """The grading API's one error shape (courseapp/api/api.py), for the errors that arise
    outside its operations: no operation at the path, a method it does not take, a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE, a crash."""
    return JsonResponse({"error": {"code": code, "message": message, "details": details}}, status=status)


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
    no framing, a policy that lets nothing load. Every error under /api/v1/ is in the API's JSON
    shape, also those no operation answers (an unknown path, a method, a body too large, a
    crash). Anything else takes the usual way; so do the API's docs page and its schema
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
            response = api_error(404, "not_found", "No operation at this path: see /api/schema/.")
        else:
            request.resolver_match = match
            response = self._call(request, match)
        for header, value in (*self.HEADERS.items(), ("Content-Language", settings.LANGUAGE_CODE)):
            response.headers.setdefault(header, value)
        return response

    @staticmethod
    def _call(request, match):
        try:
            with translation.override(settings.LANGUAGE_CODE):
                response = match.func(request, *match.args, **match.kwargs)
        except RequestDataTooBig:
            return api_error(413, "body_too_large", f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.")
        except Exception:
            log.exception("grading API: %s %s", request.method, request.path)
            return api_error(500, "server_error", "The server failed on this request; nothing was stored.")
        if response.status_code == 405 and not response.get("Content-Type", "").startswith("application/json"):
            allowed = response.get("Allow", "")
            response = api_error(405, "method_not_allowed", f"This path takes {allowed or 'other methods'}.",
                                 details=[m.strip() for m in allowed.split(",") if m.strip()])
            response["Allow"] = allowed
        return response
