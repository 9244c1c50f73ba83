from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponseBadRequest
from django.template.loader import render_to_string
from django.utils.translation import gettext as _


def bad_request(request, exception=None):
    """400s that happen before a view runs (e.g. a body over DATA_UPLOAD_MAX_MEMORY_SIZE)."""
    if isinstance(exception, RequestDataTooBig):
        message = _("The submission is too large. Nothing was saved.")
    else:
        message = _("The request could not be understood. Nothing was saved.")
    template = "quizzes/partials/error.html" if getattr(request, "htmx", False) else "400.html"
    return HttpResponseBadRequest(render_to_string(template, {"message": message}, request=request))
