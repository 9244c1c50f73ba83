"""Reads for LTI pages: the tool's URLs and keys as an LMS administrator copies them, and a class's
passbacks as its instructors check them."""
import json

from django.urls import reverse
from lti_tool.models import Key, LtiRegistration

from courseapp.lti.models import Passback


def tool_urls(request) -> dict:
    """The tool's URLs, and each registered platform (with its deployments) beside its own login URL."""
    absolute = request.build_absolute_uri
    return {
        "launch": absolute(reverse("lti:launch")),
        "jwks": absolute(reverse("lti:jwks")),
        "logins": [(registration, absolute(reverse("lti:login", args=[registration.uuid])))
                   for registration in LtiRegistration.objects.prefetch_related("deployments").order_by("name")],
        "login_pattern": absolute(reverse("lti:login", args=["00000000-0000-0000-0000-000000000000"])).replace(
            "00000000-0000-0000-0000-000000000000", "<registration-uuid>"),
    }


def jwks_text() -> str:
    return json.dumps(Key.objects.as_jwks(), indent=2)


def passbacks_of(cohort) -> list[Passback]:
    return list(Passback.objects.filter(placement__cohort=cohort)
                .select_related("learner__user", "placement__section", "placement__resource_link")
                .order_by("learner__user__last_name", "learner__user__first_name", "learner_id", "placement_id"))
