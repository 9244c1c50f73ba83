"""One score to the LMS's gradebook by Assignment and Grade Services 2.0, through PyLTI1p3: an
OAuth2 access token (client credentials, signed with the tool's key), then a POST of the score to
the placement's line item."""
import requests
from django.conf import settings
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.exception import LtiServiceException
from pylti1p3.grade import Grade
from pylti1p3.service_connector import ServiceConnector


class _Session(requests.Session):
    """requests waits forever by default; an LMS that hangs must fail this try, not the sender."""

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", settings.LTI_HTTP_TIMEOUT_S)
        return super().request(*args, **kwargs)


class ScoreRefused(Exception):
    def __init__(self, error: LtiServiceException):
        response = error.response
        super().__init__(f"HTTP {response.status_code} from {response.url}: {response.text[:150]}")


def grade_of(passback) -> Grade:
    return (Grade()
            .set_user_id(passback.lti_user.sub)
            .set_score_given(passback.score_given)
            .set_score_maximum(passback.score_maximum)
            .set_timestamp(passback.scored_at.isoformat(timespec="milliseconds"))
            .set_activity_progress("Completed" if passback.completed else "InProgress")
            .set_grading_progress("FullyGraded"))


def post_score(passback) -> None:
    placement = passback.placement
    registration = placement.resource_link.context.deployment.registration.to_registration()
    service = AssignmentsGradesService(ServiceConnector(registration, requests_session=_Session()),
                                       {"scope": placement.ags_scopes, "lineitem": placement.lineitem_url})
    try:
        service.put_grade(grade_of(passback))
    except LtiServiceException as exc:
        raise ScoreRefused(exc) from exc
