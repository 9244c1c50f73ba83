"""LTI 1.3 endpoints an LMS calls (OIDC login, launch, deep-linking return), the registration page
an LMS administrator copies the tool's URLs from, and the class's passback status for instructors.

The LMS posts launches from its own site, so those views are CSRF-exempt: the signed id_token
(checked against the LMS's JWKS by django-lti / PyLTI1p3) is what proves who sent them."""
from urllib.parse import parse_qsl, urlsplit

from django.conf import settings
from django.contrib.auth import login
from django.db import transaction
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from django_ratelimit.core import is_ratelimited
from lti_tool.constants import SESSION_KEY
from lti_tool.models import Key
from lti_tool.utils import DjangoToolConfig, get_launch_from_request, sync_data_from_launch
from lti_tool.views import LtiLaunchBaseView, OIDCLoginInitView
from pylti1p3.contrib.django import DjangoCacheDataStorage, DjangoOIDCLogin
from pylti1p3.exception import LtiException, OIDCException

from courseapp.instructor.roles import is_instructor
from courseapp.instructor.views import cohort_or_404, instructor_required
from courseapp.lti import deep_linking, launch_checks, selectors, services
from courseapp.lti.models import Passback


def _refused(request, message: str):
    return render(request, "lti/refused.html", {"message": message}, status=400)


class _TicketedLogin(DjangoOIDCLogin):
    """PyLTI1p3's login, which also leaves the ticket (state, nonce) its launch must answer."""

    def _prepare_redirect_url(self, launch_url):
        url = super()._prepare_redirect_url(launch_url)
        query = dict(parse_qsl(urlsplit(url).query))
        launch_checks.ticket_issue(state=query["state"], nonce=query["nonce"])
        return url


class OIDCLogin(OIDCLoginInitView):
    """Step 1 of a launch. PyLTI1p3's cookie check page carries its own inline script."""

    def get_oidc_response(self, request, registration_uuid, params):
        if is_ratelimited(request, group="lti-login", key="ip", rate=settings.LTI_LOGIN_RATE, increment=True):
            return render(request, "429.html", {"message": _("Too many LMS logins from your network just now. "
                                                             "Try again in a minute."), "hint": ""}, status=429)
        if params.get("target_link_uri") is None:
            return _refused(request, _("The LMS's login request has no target_link_uri."))
        login = _TicketedLogin(request, DjangoToolConfig(registration_uuid), launch_data_storage=DjangoCacheDataStorage())
        try:
            response = login.enable_check_cookies(self.main_msg, self.click_msg, self.loading_msg).redirect(
                self.get_redirect_url(params["target_link_uri"]))
        except (LtiException, OIDCException) as exc:
            return _refused(request, str(exc))
        response._csp_exempt = True
        return response


@method_decorator(csrf_exempt, name="dispatch")
class Launch(LtiLaunchBaseView):
    """Step 2: the LMS posts the signed launch here. Nothing is stored and the visitor's session is
    not touched until the launch has passed every check (launch_checks.py, then PyLTI1p3's)."""

    def post(self, request, *args, **kwargs):
        try:
            _id_token, state = launch_checks.form_fields(request.POST)
            ticket = launch_checks.ticket_for(request, state)
            lti_launch = get_launch_from_request(request)
            body = lti_launch.get_launch_data()
            launch_checks.claims_checked(body)
        except (LtiException, OIDCException) as exc:
            return _refused(request, _("The LMS's launch could not be verified: %(why)s") % {"why": exc})
        except launch_checks.Refused as exc:
            return _refused(request, str(exc))
        with transaction.atomic():
            try:
                launch_checks.ticket_spend(ticket, body)
            except launch_checks.Refused as exc:
                return _refused(request, str(exc))
            sync_data_from_launch(lti_launch, None)
            if not lti_launch.deployment.is_active:
                return self.handle_inactive_deployment(request, lti_launch)
            request.lti_launch = lti_launch
            if lti_launch.is_resource_launch:
                response = self.handle_resource_launch(request, lti_launch)
            elif lti_launch.is_deep_link_launch:
                response = self.handle_deep_linking_launch(request, lti_launch)
            else:
                return _refused(request, _("This kind of LTI launch is not supported here."))
        request.session[SESSION_KEY] = lti_launch.get_launch_id()
        return response

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

