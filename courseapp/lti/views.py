"""LTI 1.3 endpoints an LMS calls (OIDC login, launch, deep-linking return), the registration page
an LMS administrator copies the tool's URLs from, and the class's passback status for instructors.

The LMS posts launches from its own site, so those views are CSRF-exempt: the signed id_token
(checked against the LMS's JWKS by django-lti / PyLTI1p3) is what proves who sent them."""
from urllib.parse import urlsplit

from django.contrib.auth import login
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from lti_tool.models import Key
from lti_tool.utils import get_launch_from_request
from lti_tool.views import LtiLaunchBaseView, OIDCLoginInitView
from pylti1p3.exception import LtiException, OIDCException

from courseapp.instructor.roles import is_instructor
from courseapp.instructor.views import cohort_or_404, instructor_required
from courseapp.lti import deep_linking, selectors, services
from courseapp.lti.models import Passback


def _refused(request, message: str):
    return render(request, "lti/refused.html", {"message": message}, status=400)


class OIDCLogin(OIDCLoginInitView):
    """Step 1 of a launch. PyLTI1p3's cookie check page carries its own inline script."""

    def get_oidc_response(self, request, registration_uuid, params):
        try:
            response = super().get_oidc_response(request, registration_uuid, params)
        except (LtiException, OIDCException) as exc:
            return _refused(request, str(exc))
        response._csp_exempt = True
        return response


@method_decorator(csrf_exempt, name="dispatch")
class Launch(LtiLaunchBaseView):
    """Step 2: the LMS posts the signed launch here."""

    def post(self, request, *args, **kwargs):
        try:
            return super().post(request, *args, **kwargs)
        except (LtiException, OIDCException) as exc:
            return _refused(request, _("The LMS's launch could not be verified: %(why)s") % {"why": exc})

    def handle_resource_launch(self, request, lti_launch):
        arrival = services.launch_arrive(lti_launch=lti_launch)
        login(request, arrival.user, backend="django.contrib.auth.backends.ModelBackend")
        if arrival.teaches:
            return redirect("instructor:cohort", cohort_id=arrival.cohort.pk)
        section = arrival.placement.section if arrival.placement else None
        return redirect(section or arrival.cohort.lesson)

    def handle_deep_linking_launch(self, request, lti_launch):
        if not services.teaches(lti_launch):
            return render(request, "403.html", {"message": _("Only the course's instructors can place the lesson.")},
                          status=403)
        return render(request, "lti/deep_link.html", {
            "launch_id": lti_launch.get_launch_id(), "choices": deep_linking.choices(lti_launch)})


@csrf_exempt  # inside the LMS's frame no cookie may come along: the launch id is the credential
@require_POST
def deep_link_return(request):
    try:
        lti_launch = get_launch_from_request(request, request.POST.get("launch_id", ""))
    except LtiException:
        return _refused(request, _("This placement has expired: start it again from the LMS."))
    if not lti_launch.is_deep_link_launch or not services.teaches(lti_launch):
        return _refused(request, _("This launch cannot place the lesson."))
    try:
        answer = deep_linking.answer(lti_launch, request.POST.getlist("section"),
                                     launch_url=request.build_absolute_uri(reverse("lti:launch")))
    except ValueError as exc:
        return _refused(request, str(exc))
    response = render(request, "lti/deep_link_return.html", {"answer": answer})
    target = urlsplit(answer.return_url)
    response._csp_update = {"form-action": [f"{target.scheme}://{target.netloc}"]}
    return response


@require_GET
def registration(request):
    """What an LMS administrator types into the LMS: the tool's URLs and its public keys."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not (request.user.is_staff or is_instructor(request.user)):
        return render(request, "403.html", {"message": _("This page is for instructors and administrators.")}, status=403)
    return render(request, "lti/registration.html", {
        "urls": selectors.tool_urls(request), "jwks": selectors.jwks_text(),
        "has_key": Key.objects.active().exists()})


@instructor_required
@require_GET
def cohort_passbacks(request, cohort_id):
    cohort = cohort_or_404(request, cohort_id)
    return render(request, "lti/passbacks.html", {"cohort": cohort, "passbacks": selectors.passbacks_of(cohort)})


@instructor_required
@require_POST
def passback_retry(request, cohort_id, passback_id):
    cohort = cohort_or_404(request, cohort_id)
    passback = get_object_or_404(Passback, pk=passback_id, placement__cohort=cohort)
    services.passback_retry(passback=passback)
    return redirect("lti:passbacks", cohort_id=cohort.pk)

