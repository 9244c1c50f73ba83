"""Deep linking: an instructor placing the lesson in their LMS course picks the whole lesson or
sections; each becomes an LTI resource link whose launches open it, with a gradebook column
(line item) worth its number of questions when it has any."""
from dataclasses import dataclass

from django.utils.translation import gettext as _
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.lineitem import LineItem

from courseapp.lessons.models import Section
from courseapp.lti.services import lesson_for
from courseapp.quizzes.models import Question

DL_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
WHOLE_LESSON = ""


@dataclass(frozen=True)
class Choice:
    value: str  # a section's slug, or "" for the whole lesson
    title: str
    questions: int


@dataclass(frozen=True)
class Answer:
    return_url: str
    jwt: str
    titles: list[str]


def choices(lti_launch) -> list[Choice]:
    lesson = lesson_for(lti_launch)
    anchors = list(Question.objects.filter(lesson=lesson).values_list("anchor", flat=True))
    out = [Choice(WHOLE_LESSON, str(lesson), len(anchors))]
    for section in Section.objects.filter(lesson=lesson).order_by("order"):
        mine = set(section.anchors)
        out.append(Choice(section.slug, str(section), sum(anchor in mine for anchor in anchors)))
    return out


def answer(lti_launch, chosen: list[str], *, launch_url: str) -> Answer:
    settings = lti_launch.get_claim(DL_SETTINGS) or {}
    by_value = {choice.value: choice for choice in choices(lti_launch)}
    picked = [by_value[value] for value in dict.fromkeys(chosen) if value in by_value]
    if not picked:
        raise ValueError(_("Pick the lesson or at least one section."))
    if len(picked) > 1 and settings.get("accept_multiple") is False:
        raise ValueError(_("This LMS takes one item at a time: pick one."))
    resources = []
    for choice in picked:
        resource = DeepLinkResource().set_url(launch_url).set_title(choice.title).set_custom_params(
            {"section": choice.value} if choice.value else {})
        if choice.questions:
            resource.set_lineitem(LineItem().set_score_maximum(choice.questions).set_label(choice.title)
                                  .set_resource_id(choice.value or "lesson"))
        resources.append(resource)
    deep_link = lti_launch.get_message_launch().get_deep_link()
    return Answer(return_url=settings["deep_link_return_url"], jwt=deep_link.get_response_jwt(resources),
                  titles=[choice.title for choice in picked])
