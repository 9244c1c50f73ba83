from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.translation import gettext as _
from django.utils.translation import ngettext


def bad_request(request, exception=None):
    """400s that happen before a view runs (e.g. a body over DATA_UPLOAD_MAX_MEMORY_SIZE)."""
    if isinstance(exception, RequestDataTooBig):
        message = _("The submission is too large. Nothing was saved.")
    else:
        message = _("The request could not be understood. Nothing was saved.")
    template = "quizzes/partials/error.html" if getattr(request, "htmx", False) else "400.html"
    return HttpResponseBadRequest(render_to_string(template, {"message": message}, request=request))


def locked_out(request, original_response=None, credentials=None):
    """django-axes' lockout answer (AXES_LOCKOUT_CALLABLE): a page saying why and for how long."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    message = ngettext(
        "Too many failed logins for this username from your network. Try again in %(minutes)d minute.",
        "Too many failed logins for this username from your network. Try again in %(minutes)d minutes.",
        minutes,
    ) % {"minutes": minutes}
    hint = _("If you cannot wait, ask the course administrator to unlock your account.")
    return render(request, "429.html", {"message": message, "hint": hint}, status=429)


def too_many_signups(request):
    return render(
        request,
        "429.html",
        {"message": _("Too many sign-ups from your network just now. Try again in a minute."), "hint": ""},
        status=429,
    )


def too_many_failed_logins(request, wait_s: int):
    """Too many failed logins from this address, over every username (learners/login_throttle.py)."""
    minutes = max(1, -(-wait_s // 60))
    message = ngettext(
        "Too many failed logins from your network. Try again in %(minutes)d minute.",
        "Too many failed logins from your network. Try again in %(minutes)d minutes.",
        minutes,
    ) % {"minutes": minutes}
    response = render(request, "429.html", {"message": message, "hint": _(
        "If you cannot wait, ask the course administrator to unlock your account.")}, status=429)
    response["Retry-After"] = str(wait_s)
    return response
