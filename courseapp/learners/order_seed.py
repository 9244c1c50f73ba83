"""The seed that decides the order a learner sees each question's options in.

A learner row keeps its own seed. A visitor without one (page views write nothing) gets the
seed from a cookie, set on the response the first time; their first write copies it into the
new row, so the options do not move after the first answer.
"""
import re

from django.conf import settings

from courseapp.learners.models import new_seed

COOKIE = "order_seed"
_VALID = re.compile(r"^[0-9a-f]{32}$")


def request_seed(request, learner=None) -> str:
    if learner is not None and learner.seed:
        return learner.seed
    seed = getattr(request, "_order_seed", None) or request.COOKIES.get(COOKIE, "")
    if not _VALID.match(seed):
        seed = new_seed()
        request._order_seed_to_set = seed
    request._order_seed = seed
    return seed


class OrderSeedCookieMiddleware:
    """Sets the cookie when a request drew a new seed (a cookie, not a database row)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        seed = getattr(request, "_order_seed_to_set", None)
        if seed:
            response.set_cookie(
                COOKIE,
                seed,
                max_age=settings.SESSION_COOKIE_AGE,
                secure=settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        return response
