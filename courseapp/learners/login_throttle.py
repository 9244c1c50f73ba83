"""Failed logins per client address, whatever the username. django-axes locks one (username,
address) pair after 5 failures, which never slows one password tried on many usernames; this
counts every real failure from an address (not the tries axes already refused) and, past
LOGIN_FAILURES_PER_ADDRESS (a class behind one network makes typos too: the limit is high),
refuses to authenticate anyone from it until the window ends. It is the first authentication
backend, so the admin's login is covered too; the login page says why before a form is read."""
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django_ratelimit.core import get_usage

GROUP = "login-failures"


def _usage(request, *, increment: bool) -> dict | None:
    return get_usage(request, group=GROUP, key="ip", rate=settings.LOGIN_FAILURES_PER_ADDRESS, increment=increment)


def throttled(request) -> int:
    """Seconds until this address may try again (0: it may now)."""
    usage = _usage(request, increment=False) if request is not None else None
    return max(1, usage["time_left"]) if usage and usage["count"] >= usage["limit"] else 0  # the limit's failures are used up


def count_failure(sender, credentials=None, request=None, **kwargs) -> None:
    """user_login_failed: a wrong password (not a refusal of ours or axes')."""
    if request is not None and not getattr(request, "axes_locked_out", False) and not getattr(request, "address_throttled", False):
        _usage(request, increment=True)


class AddressThrottleBackend:
    """Refuses or passes on; never signs anyone in (so it has no get_user, like axes' backend:
    force_login and the session pick the backend that does)."""

    def authenticate(self, request, **credentials):
        if request is not None and throttled(request):
            request.address_throttled = True
            raise PermissionDenied  # authenticate() stops here: no other backend is asked
        return None
