"""What a launch must be before anything is stored or the session touched, on top of what
PyLTI1p3 checks (the signature against the LMS's JWKS, the issuer, the deployment):

- its id_token's payload is a JSON object whose claims have the types and sizes the spec and our
  tables allow (a number where a URL belongs is a clear 400, not a 500);
- it answers a login this site started, in this browser: the OIDC login leaves a ticket (state,
  nonce) here and a cookie with the state there; the launch must bring both, the token's nonce
  must be the ticket's, and the ticket is spent by the launch — a captured id_token + state
  cannot be posted again, from this browser or any other, and a nonce is never accepted twice;
- it carries `exp` (PyJWT checks an `exp` only when there is one)."""
import base64
import json
from datetime import timedelta
from typing import Annotated, Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError

from courseapp.lti.models import LaunchTicket

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
MAX_FORM_FIELD = 64 * 1024  # an id_token is a few KB


class Refused(Exception):
    """A launch refused; its message (translated) says why."""


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("NUL character")
    return text


def Text(max_length: int):  # noqa: N802 — a type, spelled like one
    return Annotated[StrictStr, Field(max_length=max_length), AfterValidator(_no_nul)]


class _Object(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Context(_Object):
    id: Text(255)
    title: Text(500) | None = None
    label: Text(255) | None = None
    type: list[Text(500)] = []


class _ResourceLink(_Object):
    id: Text(255)
    title: Text(500) | None = None
    description: Text(10_000) | None = None


class _Ags(_Object):
    lineitems: Text(200) | None = None  # django-lti keeps it in a URLField (200)
    lineitem: Text(500) | None = None
    scope: list[Text(500)] = []


class _Nrps(_Object):
    context_memberships_url: Text(200)


class _Claims(_Object):
    sub: Text(255) = Field(min_length=1)
    exp: StrictInt | StrictFloat
    nonce: Text(255)
    given_name: Text(500) | None = None
    family_name: Text(500) | None = None
    name: Text(500) | None = None
    email: Text(254) | None = None
    picture: Text(200) | None = None
    roles: list[Text(500)] = Field(default=[], alias=CLAIM + "roles")
    context: _Context | None = Field(default=None, alias=CLAIM + "context")
    resource_link: _ResourceLink | None = Field(default=None, alias=CLAIM + "resource_link")
    custom: dict[Text(255), Any] | None = Field(default=None, alias=CLAIM + "custom")
    ags: _Ags | None = Field(default=None, alias=AGS)
    nrps: _Nrps | None = Field(default=None, alias=NRPS)


def form_fields(post) -> tuple[str, str]:
    """The launch form's id_token and state, and the token's payload a JSON object (before
    PyLTI1p3, which assumes as much)."""
    id_token, state = post.get("id_token", ""), post.get("state", "")
    if not id_token or not state or len(id_token) > MAX_FORM_FIELD or len(state) > 255:
        raise Refused(_("The launch form must carry an id_token and a state."))
    parts = id_token.split(".")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (IndexError, ValueError):
        payload = None
    if len(parts) != 3 or not isinstance(payload, dict):
        raise Refused(_("The id_token is not a JWT whose payload is a JSON object."))
    return id_token, state


def ticket_for(request, state: str) -> LaunchTicket:
    """The login this launch answers: started here, in this browser, not yet used, not expired."""
    ticket = LaunchTicket.objects.filter(state=state, expires_at__gt=timezone.now()).first()
    if ticket is None or request.COOKIES.get(f"lti1p3-{state}") != state:
        raise Refused(_("This launch was not started in this browser, was already used or has expired. "
                        "Open the lesson again from the LMS."))
    return ticket


def claims_checked(body: dict) -> None:
    try:
        _Claims.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part).removeprefix(CLAIM) for part in first["loc"])
        raise Refused(_("The launch's claim %(claim)s is malformed: %(why)s") % {"claim": where, "why": first["msg"]})


def ticket_spend(ticket: LaunchTicket, body: dict) -> None:
    """The verified token answers the ticket's login; the ticket is used up (atomically: of two
    posts of one launch, one wins)."""
    if body.get("nonce") != ticket.nonce:
        raise Refused(_("The id_token answers another login (its nonce is not this launch's)."))
    if not LaunchTicket.objects.filter(pk=ticket.pk).delete()[0]:
        raise Refused(_("This launch was not started in this browser, was already used or has expired. "
                        "Open the lesson again from the LMS."))


def ticket_issue(*, state: str, nonce: str) -> None:
    """The OIDC login step: remember the login it started (and forget the expired ones)."""
    now = timezone.now()
    LaunchTicket.objects.filter(expires_at__lte=now).delete()
    LaunchTicket.objects.create(state=state, nonce=nonce, expires_at=now + timedelta(seconds=settings.LTI_LOGIN_TTL_S))
