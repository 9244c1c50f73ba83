"""LTI 1.3 against a test LMS (platform.py: signed JWTs, its own JWKS over HTTP): OIDC login and
launch, the learner's class and placement, deep linking, and scores back by AGS — including a
send the LMS refuses, retried until it lands."""
import base64
import io
import json
import time
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from lti_tool.models import Key, LtiDeployment, LtiRegistration, LtiUser

from courseapp.instructor import services as instructor_services
from courseapp.instructor.models import Cohort, Membership
from courseapp.instructor.roles import is_instructor
from courseapp.lessons.models import Section
from courseapp.lti import services
from courseapp.lti.models import Passback, Placement
from courseapp.quizzes.models import Question
from tests.answers import right_form, wrong_form
from tests.courseapp.lti.platform import INSTRUCTOR, LEARNER, SCORE_SCOPE, Platform, with_params

SERVER = "http://testserver"


def registered_platform() -> Platform:
    """A test LMS, registered with the tool as an administrator would (lti_register)."""
    if not Key.objects.active().exists():  # a transactional test before this one emptied the tables
        Key.objects.generate()
    lms = Platform(tool_jwks=Key.objects.as_jwks())
    call_command("lti_register", "Test LMS", issuer=lms.iss, client_id=lms.client_id, auth_url=lms.auth_url,
                 token_url=lms.token_url, keyset_url=lms.keyset_url, deployment_id=[lms.deployment_id], stdout=io.StringIO())
    return lms


@pytest.fixture
def platform(db):
    lms = registered_platform()
    yield lms
    lms.close()


def login_redirect(client: Client, lms: Platform, user_id: str) -> str:
    """The LMS's login request to the tool; the tool's redirect to the LMS's auth URL."""
    registration = LtiRegistration.objects.get(issuer=lms.iss)
    login_url = lms.login_url(tool_login_url=SERVER + reverse("lti:login", args=[registration.uuid]),
                              launch_url=SERVER + reverse("lti:launch"), user_id=user_id)
    # lti1p3_new_window: what PyLTI1p3's cookie-check page adds once it found cookies allowed
    answer = client.get(with_params(login_url.removeprefix(SERVER), lti1p3_new_window="1"))
    assert answer.status_code == 302, answer.content[:300]
    return answer["Location"]


def launch_form(client: Client, lms: Platform, user_id: str, roles=(LEARNER,), **claims) -> dict:
    return lms.launch(login_redirect(client, lms, user_id), user_id=user_id, roles=list(roles), **claims)


def launch(client: Client, lms: Platform, user_id: str, roles=(LEARNER,), **claims):
    """The browser's part of a launch: the LMS's login request to the tool, the tool's redirect to
    the LMS, the LMS's signed form post back to the tool."""
    return client.post(reverse("lti:launch"), launch_form(client, lms, user_id, roles, **claims))


def section_questions(slug: str) -> list[Question]:
    section = Section.objects.get(lesson__number=21, slug=slug)
    return list(Question.objects.filter(lesson__number=21, anchor__in=section.anchors).order_by("order"))


def test_a_learner_launch_signs_in_joins_the_courses_class_and_opens_the_placed_section(platform):
    client = Client()
    answer = launch(client, platform, "stu-1", custom={"section": "s2"})
    section = Section.objects.get(lesson__number=21, slug="s2")
    assert answer.status_code == 302 and answer["Location"] == section.get_absolute_url()
    user = client.get(reverse("progress")).wsgi_request.user
    assert user.is_authenticated and user.first_name == "학생 stu-1" and not user.has_usable_password()
    membership = Membership.objects.get(learner__user=user)
    assert membership.via == Membership.Via.LTI and membership.cohort.name == "LLM 서빙 2026"
    placement = Placement.objects.get()
    assert placement.cohort == membership.cohort and placement.section == section
    assert placement.lineitem_url == platform.lineitem_url(1) and SCORE_SCOPE in placement.ags_scopes
    passback = Passback.objects.get()
    assert (passback.score_given, passback.score_maximum) == (0, len(section_questions("s2")))

    # The same person launching again is the same account in the same class, not a second one.
    again = Client()
    launch(again, platform, "stu-1", custom={"section": "s2"})
    assert again.get(reverse("progress")).wsgi_request.user == user
    assert Membership.objects.count() == 1 and Passback.objects.count() == 1


def test_an_instructor_launch_teaches_the_class_and_opens_its_dashboard(platform):
    client = Client()
    learner_client = Client()
    launch(learner_client, platform, "stu-1")
    answer = launch(client, platform, "prof-1", roles=(INSTRUCTOR,))
    user = client.get("/").wsgi_request.user
    cohort = Membership.objects.get().cohort
    assert answer["Location"] == reverse("instructor:cohort", args=[cohort.pk])
    assert is_instructor(user) and list(cohort.instructors.all()) == [user]
    assert not Membership.objects.filter(learner__user=user).exists()
    assert client.get(answer["Location"]).status_code == 200


def test_an_lms_user_never_gets_a_local_account_someone_registered_under_their_name(platform):
    from django.contrib.auth import get_user_model

    registration = LtiRegistration.objects.get(issuer=platform.iss)
    squatter = get_user_model().objects.create_user(f"lti-{registration.pk}-teacher-7", password="stranger-passphrase-1")
    professor = Client()
    launch(professor, platform, "teacher-7", roles=(INSTRUCTOR,))
    user = professor.get("/").wsgi_request.user
    assert user.is_authenticated and user.pk != squatter.pk and not user.has_usable_password()
    assert not is_instructor(squatter) and not squatter.taught_cohorts.exists()
    stranger = Client()
    stranger.post(reverse("login"), {"username": squatter.username, "password": "stranger-passphrase-1"})
    assert stranger.get("/").wsgi_request.user == squatter
    cohort = Cohort.objects.get()
    assert stranger.get(reverse("instructor:cohort", args=[cohort.pk])).status_code in (302, 403, 404)


def test_two_lms_users_whose_long_subs_share_a_prefix_are_two_accounts(platform):
    first, second = Client(), Client()
    launch(first, platform, "u" * 200 + "-1")
    launch(second, platform, "u" * 200 + "-2")
    one, two = (c.get("/").wsgi_request.user for c in (first, second))
    assert one.is_authenticated and two.is_authenticated and one.pk != two.pk
    assert Membership.objects.count() == 2


def test_launches_that_do_not_verify_are_refused_with_the_reason(platform):
    client = Client()
    registration = LtiRegistration.objects.get(issuer=platform.iss)
    login_url = platform.login_url(tool_login_url=SERVER + reverse("lti:login", args=[registration.uuid]),
                                   launch_url=SERVER + reverse("lti:launch"), user_id="stu-1")
    redirect = client.get(with_params(login_url.removeprefix(SERVER), lti1p3_new_window="1"))["Location"]
    form = platform.launch(redirect, user_id="stu-1", roles=[LEARNER])
    header, body, signature = form["id_token"].split(".")
    forged = {**form, "id_token": f"{header}.{body}.{signature[::-1]}"}
    answer = client.post(reverse("lti:launch"), forged)
    assert answer.status_code == 400 and "id_token" in answer.context["message"]  # the library's reason, shown
    assert not client.get("/").wsgi_request.user.is_authenticated
    assert not Membership.objects.exists()

    # A registration the tool does not know
    unknown = client.get(reverse("lti:login", args=["3f1c2b9a-0000-4000-8000-000000000000"]),
                         {"iss": platform.iss, "login_hint": "x", "target_link_uri": SERVER + "/lti/launch/",
                          "client_id": platform.client_id, "lti1p3_new_window": "1"})
    assert unknown.status_code == 400

    # A deployment the tool's administrator has not activated
    LtiDeployment.objects.update(is_active=False)
    refused = launch(Client(), platform, "stu-2")
    assert refused.status_code == 403 and not Membership.objects.exists()


def test_a_launch_is_answered_once_in_the_browser_that_started_it(platform):
    from django.contrib.auth import get_user_model

    client = Client()
    form = launch_form(client, platform, "stu-1")
    assert client.post(reverse("lti:launch"), form).status_code == 302
    client.post(reverse("logout"))
    # The same id_token + state again: from the same browser, and from one with no cookies.
    for replay in (client, Client()):
        answer = replay.post(reverse("lti:launch"), form)
        assert answer.status_code == 400 and "LMS" in answer.context["message"]
        assert not replay.get("/").wsgi_request.user.is_authenticated
    # A login started in one browser cannot be finished in another.
    started = launch_form(Client(), platform, "stu-2")
    elsewhere = Client()
    assert elsewhere.post(reverse("lti:launch"), started).status_code == 400
    assert not get_user_model().objects.filter(lti_users__sub="stu-2").exists()


def test_a_used_nonce_and_a_token_without_exp_are_refused(platform):
    client = Client()
    first = login_redirect(client, platform, "stu-1")
    used = dict(parse_qsl(urlsplit(first).query))["nonce"]
    assert client.post(reverse("lti:launch"), platform.launch(first, user_id="stu-1", roles=[LEARNER])).status_code == 302
    second = login_redirect(client, platform, "stu-1")
    reused = platform.launch(second.replace(dict(parse_qsl(urlsplit(second).query))["nonce"], used),
                             user_id="stu-1", roles=[LEARNER])
    assert client.post(reverse("lti:launch"), reused).status_code == 400

    form = launch_form(client, platform, "stu-3")
    no_exp = {**form, "id_token": platform.resign(form["id_token"], {"exp": None})}
    answer = client.post(reverse("lti:launch"), no_exp)
    assert answer.status_code == 400 and "exp" in answer.context["message"]
    assert not LtiUser.objects.filter(sub="stu-3").exists()


@pytest.mark.parametrize("claims", [
    {"https://purl.imsglobal.org/spec/lti-ags/claim/endpoint": {"lineitem": 7, "scope": [SCORE_SCOPE]}},
    {"https://purl.imsglobal.org/spec/lti/claim/context": "course-1"},
    {"https://purl.imsglobal.org/spec/lti/claim/roles": "Learner"},
    {"https://purl.imsglobal.org/spec/lti/claim/custom": ["section", "s2"]},
    {"sub": "x" * 256},
    {"given_name": "a\x00b"},
], ids=["lineitem-number", "context-string", "roles-string", "custom-list", "sub-too-long", "nul-in-name"])
def test_a_signed_launch_with_malformed_claims_is_a_400_that_stores_nothing(platform, claims):
    client = Client()
    form = launch_form(client, platform, "stu-1")
    answer = client.post(reverse("lti:launch"), {**form, "id_token": platform.resign(form["id_token"], claims)})
    assert answer.status_code == 400 and answer.context["message"]
    assert not LtiUser.objects.exists() and not Membership.objects.exists() and not Placement.objects.exists()


def test_an_unsigned_or_unfinished_launch_is_a_400_and_leaves_the_visitors_session_alone(platform):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("ana", password="a-long-passphrase-9")
    client = Client()
    client.post(reverse("login"), {"username": "ana", "password": "a-long-passphrase-9"})
    listed = base64.urlsafe_b64encode(json.dumps(["a", "list"]).encode()).decode().rstrip("=")
    for form in ({}, {"id_token": f"e30.{listed}.sig", "state": "state-x"}, {"id_token": "a.b", "state": "s"},
                 {"id_token": "e30.e30.sig", "state": "state-unknown"}):
        client.cookies["lti1p3-state-x"] = "state-x"
        answer = client.post(reverse("lti:launch"), form)
        assert answer.status_code == 400, form
        assert client.get("/").wsgi_request.user.username == "ana", "a refused launch logs nobody out"


def test_scores_go_back_by_ags_and_a_refused_send_is_retried_until_it_lands(platform, settings):
    settings.LTI_PASSBACK_BACKOFF_S = 0  # retries are due at once; the sender thread's timing has its own test
    client = Client()
    launch(client, platform, "stu-1", custom={"section": "s2"})
    passback = Passback.objects.get()
    questions = section_questions("s2")
    assert len(questions) >= 2
    first, *rest = questions

    client.post(reverse("quizzes:submit", args=[first.slug]), {**right_form(first), "nonce": "a1"})
    passback.refresh_from_db()
    assert passback.status == Passback.Status.PENDING and passback.score_given == 1

    platform.fail_scores = 1
    assert services.passback_send(passback_id=passback.pk) == 0  # failed: try again after the backoff
    passback.refresh_from_db()
    assert passback.status == Passback.Status.RETRYING and passback.tries == 1 and "503" in passback.last_error
    assert platform.scores == []
    assert services.passback_send(passback_id=passback.pk) is None
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and passback.tries == 2 and passback.last_error == ""
    score = platform.scores[-1]
    assert score["path"] == "/lineitems/1/lineitem/scores"
    assert score["userId"] == "stu-1" and score["scoreGiven"] == 1 and score["scoreMaximum"] == len(questions)
    assert score["activityProgress"] == "InProgress" and score["gradingProgress"] == "FullyGraded"
    assert score["timestamp"].startswith(passback.scored_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert platform.score_headers[-1]["Content-Type"] == "application/vnd.ims.lis.v1.score+json"
    assert services.passback_send(passback_id=passback.pk) is None and len(platform.scores) == 1  # sent once

    for question in rest:
        client.post(reverse("quizzes:submit", args=[question.slug]), {**wrong_form(question), "nonce": f"w-{question.pk}"})
    services.passback_send(passback_id=passback.pk)
    final = platform.scores[-1]
    assert final["activityProgress"] == "Completed" and final["scoreGiven"] < len(questions)


def test_a_send_that_keeps_failing_gives_up_and_the_instructor_can_send_it_again(platform, settings):
    settings.LTI_PASSBACK_BACKOFF_S = 0
    settings.LTI_PASSBACK_MAX_ATTEMPTS = 2
    client = Client()
    launch(client, platform, "stu-1")
    passback = Passback.objects.get()
    platform.fail_scores = 2
    services.passback_send(passback_id=passback.pk)
    assert services.passback_send(passback_id=passback.pk) is None  # gave up
    passback.refresh_from_db()
    assert passback.status == Passback.Status.FAILED and passback.tries == 2

    teacher = Client()
    launch(teacher, platform, "prof-1", roles=(INSTRUCTOR,))
    cohort = passback.placement.cohort
    page = teacher.get(reverse("lti:passbacks", args=[cohort.pk])).content.decode()
    assert "503" in page and "학생 stu-1" in page
    other = Client()
    other.force_login(instructor_services.instructor_make(username="other-prof")[0])
    assert other.post(reverse("lti:passback-retry", args=[cohort.pk, passback.pk])).status_code == 404
    assert other.get(reverse("lti:passbacks", args=[cohort.pk])).status_code == 404
    assert client.get(reverse("lti:passbacks", args=[cohort.pk])).status_code == 403  # the learner

    teacher.post(reverse("lti:passback-retry", args=[cohort.pk, passback.pk]))
    passback.refresh_from_db()
    assert passback.status == Passback.Status.PENDING and passback.tries == 0
    assert services.passback_send(passback_id=passback.pk) is None
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and platform.scores[-1]["userId"] == "stu-1"


def test_a_passback_whose_sender_died_mid_send_goes_out_again_after_its_lease(platform, settings, monkeypatch):
    """A sender claims a passback and dies before the LMS answers (a restart, a killed worker):
    the row says "being sent" with nobody sending it. Once the claim's lease ends, the sweep and
    the next sender take it again; before that, nobody sends it twice."""
    from datetime import timedelta

    from django.utils import timezone

    from courseapp.lti import delivery

    client = Client()
    launch(client, platform, "stu-1", custom={"section": "s2"})
    question = section_questions("s2")[0]
    client.post(reverse("quizzes:submit", args=[question.slug]), {**right_form(question), "nonce": "a1"})
    passback = Passback.objects.get()

    def dies(_passback):
        raise SystemExit  # the process ends here: no failure is written

    with pytest.raises(SystemExit):
        services.passback_send(passback_id=passback.pk, post_score=dies)
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENDING and platform.scores == []
    assert services.passback_send(passback_id=passback.pk) is None and platform.scores == []  # still held
    assert services.passbacks_stalled() == []

    later = timezone.now() + services.sending_lease() + timedelta(seconds=1)
    assert services.passbacks_stalled(now=later) == [passback.pk]
    Passback.objects.filter(pk=passback.pk).update(next_try_at=timezone.now() - timedelta(seconds=1))  # the lease ended
    resent = []
    monkeypatch.setattr(delivery, "send_soon", resent.extend)  # the sweep hands it to a sender
    assert delivery.resend_stalled() == [passback.pk] and resent == [passback.pk]
    assert services.passback_send(passback_id=passback.pk) is None
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and platform.scores[-1]["scoreGiven"] == 1


def test_a_regrade_sends_the_changed_score(platform):
    client = Client()
    launch(client, platform, "stu-1", custom={"section": "s2"})
    question = next(q for q in section_questions("s2") if q.type == "single")
    client.post(reverse("quizzes:submit", args=[question.slug]), {**wrong_form(question), "nonce": "a1"})
    chosen = client.get("/").wsgi_request.user.learner.attempts.get().response["choice"]
    passback = Passback.objects.get()
    Passback.objects.filter(pk=passback.pk).update(status=Passback.Status.SENT)
    question.key = {**question.key, "answer": chosen}  # the key was wrong: the learner's answer was right
    question.save()
    instructor_services.regrade_apply(cohort=passback.placement.cohort, question=question, by=None)
    passback.refresh_from_db()
    assert passback.status == Passback.Status.PENDING and passback.score_given == 1


def test_deep_linking_places_a_section_with_a_gradebook_column(platform):
    client = Client()
    chooser = launch(client, platform, "prof-1", roles=(INSTRUCTOR,), lineitem=None,
                     deep_link_return=platform.iss + "/deep-link-return")
    assert chooser.status_code == 200
    page = chooser.content.decode()
    assert 'value="s2"' in page and "21차시" in page
    launch_id = chooser.context["launch_id"]
    # No cookie comes along inside the LMS's frame: the launch id in the form is enough.
    answer = Client().post(reverse("lti:deep-link"), {"launch_id": launch_id, "section": ["s2"]})
    assert answer.status_code == 200
    assert answer.context["answer"].return_url == platform.iss + "/deep-link-return"
    assert f"form-action 'self' {platform.iss}" in answer["Content-Security-Policy"]
    message = platform.decode_tool_jwt(answer.context["answer"].jwt)
    assert message["https://purl.imsglobal.org/spec/lti/claim/message_type"] == "LtiDeepLinkingResponse"
    [item] = message["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["type"] == "ltiResourceLink" and item["url"] == SERVER + reverse("lti:launch")
    assert item["custom"] == {"section": "s2"} and item["lineItem"]["scoreMaximum"] == len(section_questions("s2"))

    # Nothing picked, or a learner's launch id: refused with the reason.
    assert client.post(reverse("lti:deep-link"), {"launch_id": launch_id}).status_code == 400
    learner = Client()
    learner_launch = launch(learner, platform, "stu-1", deep_link_return=platform.iss + "/deep-link-return")
    assert learner_launch.status_code == 403
    assert Client().post(reverse("lti:deep-link"), {"launch_id": "made-up", "section": ["s2"]}).status_code == 400


def test_the_registration_page_shows_the_tools_urls_and_keys_to_instructors(platform):
    anonymous = Client().get(reverse("lti:registration"))
    assert anonymous.status_code == 302
    learner = Client()
    launch(learner, platform, "stu-1")
    assert learner.get(reverse("lti:registration")).status_code == 403
    teacher = Client()
    teacher.force_login(instructor_services.instructor_make(username="prof")[0])
    page = teacher.get(reverse("lti:registration")).content.decode()
    registration = LtiRegistration.objects.get()
    assert SERVER + reverse("lti:launch") in page and SERVER + reverse("lti:jwks") in page
    assert SERVER + reverse("lti:login", args=[registration.uuid]) in page
    # the pattern an LMS asks for, with a placeholder where each registration's id goes
    login_pattern = SERVER + reverse("lti:login", args=["00000000-0000-0000-0000-000000000000"])
    assert login_pattern.replace("00000000-0000-0000-0000-000000000000", "&lt;registration-uuid&gt;") in page
    assert Key.objects.as_jwks()["keys"][0]["kid"] in page
    assert Client().get(reverse("lti:jwks")).json() == Key.objects.as_jwks()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_sender_delivers_after_the_answer_commits_and_retries_on_its_own(settings):
    settings.LTI_PASSBACK_BACKOFF_S = 0.2
    lms = registered_platform()
    try:
        lms.fail_scores = 2  # the first two score posts (whichever they are) fail
        client = Client()
        launch(client, lms, "stu-9", custom={"section": "s2"})
        question = section_questions("s2")[0]
        client.post(reverse("quizzes:submit", args=[question.slug]), {**right_form(question), "nonce": "a1"})
        deadline = time.monotonic() + 20
        # The LMS records the score before the sender writes "sent": wait for both.
        while time.monotonic() < deadline and not (any(s["scoreGiven"] == 1 for s in lms.scores)
                                                   and Passback.objects.filter(status=Passback.Status.SENT).exists()):
            time.sleep(0.05)
        passback = Passback.objects.get()
        assert any(s["scoreGiven"] == 1 for s in lms.scores), (passback.status, passback.last_error)
        assert passback.status == Passback.Status.SENT and lms.fail_scores == 0
    finally:
        lms.close()


def test_scaled_mode_sends_by_celery_task_and_counts_a_retry_down(platform, settings, monkeypatch):
    """With Redis, passbacks go to the engine workers as task lti.passback; a failed try queues the
    same task again after the backoff (the broker is stood in for: what is queued is recorded)."""
    from courseapp.lti import delivery, tasks

    settings.REDIS_URL = "redis://127.0.0.1:6379/15"
    settings.LTI_PASSBACK_BACKOFF_S = 0
    queued = []
    monkeypatch.setattr(tasks.passback, "delay", lambda *args: queued.append(("now", args)))
    monkeypatch.setattr(tasks.passback, "apply_async", lambda args, countdown: queued.append((countdown, args)))
    launch(Client(), platform, "stu-1")
    passback = Passback.objects.get()
    delivery.send_soon([passback.pk])
    assert queued == [("now", (passback.pk,))]
    platform.fail_scores = 1
    tasks.passback(passback.pk)
    assert queued[-1] == (0, (passback.pk,))  # retried by the broker after BACKOFF·2⁰
    tasks.passback(passback.pk)
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and platform.scores[-1]["userId"] == "stu-1"


# --- issue #34: promises no test held ------------------------------------------------------------
ADMINISTRATOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Administrator"
CONTENT_DEVELOPER = "http://purl.imsglobal.org/vocab/lis/v2/membership#ContentDeveloper"


@pytest.mark.parametrize("role", [ADMINISTRATOR, CONTENT_DEVELOPER])
def test_lms_administrators_and_content_developers_teach_too(platform, role):
    """Mutant: TEACHING_ROLES reduced to instructors."""
    client = Client()
    launch(Client(), platform, "stu-1")
    answer = launch(client, platform, "staff-1", roles=(role,))
    cohort = Membership.objects.get().cohort
    assert answer["Location"] == reverse("instructor:cohort", args=[cohort.pk])
    assert is_instructor(client.get("/").wsgi_request.user)


def _pending_passback(client, lms, user_id="stu-1") -> Passback:
    launch(client, lms, user_id, custom={"section": "s2"})
    question = section_questions("s2")[0]
    client.post(reverse("quizzes:submit", args=[question.slug]), {**right_form(question), "nonce": f"n-{user_id}"})
    return Passback.objects.get()


def test_each_failed_send_waits_twice_as_long_as_the_one_before(platform, settings):
    """Mutant: no exponential backoff (the LMS that is down gets hammered at a fixed rate)."""
    settings.LTI_PASSBACK_BACKOFF_S, settings.LTI_PASSBACK_MAX_ATTEMPTS = 3, 10
    passback = _pending_passback(Client(), platform)
    platform.fail_scores = 4
    delays = []
    for _ in range(4):
        Passback.objects.filter(pk=passback.pk).update(next_try_at=timezone.now())  # due now
        delays.append(services.passback_send(passback_id=passback.pk))
    assert delays == [3, 6, 12, 24]


def test_a_score_that_changed_while_the_old_one_was_on_its_way_is_sent_next(platform):
    """Mutant: the send marked SENT although a newer score arrived meanwhile (the LMS would keep the
    old one). Killed when the SENT update drops its status condition. Dropping only scored_at is not
    caught here (the new score also sets the row back to pending); it matters when a second sender
    has claimed the newer score meanwhile (docs/testing.md)."""
    client = Client()
    passback = _pending_passback(client, platform)
    questions = section_questions("s2")

    def post_and_answer_again(pb):  # the learner answers another question while the LMS call is under way
        client.post(reverse("quizzes:submit", args=[questions[1].slug]), {**right_form(questions[1]), "nonce": "during"})
        from courseapp.lti import ags

        ags.post_score(pb)

    assert services.passback_send(passback_id=passback.pk, post_score=post_and_answer_again) is None
    passback.refresh_from_db()
    assert passback.status != Passback.Status.SENT and passback.score_given == 2, "the newer score is still to go"
    Passback.objects.filter(pk=passback.pk).update(next_try_at=timezone.now())
    services.passback_send(passback_id=passback.pk)
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and platform.scores[-1]["scoreGiven"] == 2


@pytest.mark.django_db(transaction=True)
def test_the_embedded_sender_resumes_what_was_left_unsent_when_it_starts(settings):
    """Mutant: the embedded sender not resuming unsent passbacks at start (a restart would lose them)."""
    from courseapp.lti import delivery

    lms = registered_platform()
    try:
        passback = _pending_passback(Client(), lms)
        deadline = time.monotonic() + 20  # the process's sender sends it; then it is left unsent as after a crash
        while time.monotonic() < deadline and not Passback.objects.filter(status=Passback.Status.SENT).exists():
            time.sleep(0.05)
        Passback.objects.filter(pk=passback.pk).update(status=Passback.Status.PENDING, next_try_at=timezone.now())
        before = len(lms.scores)
        sender = delivery._Sender()  # a new process's sender: nothing is added to it by hand
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not Passback.objects.filter(pk=passback.pk, status=Passback.Status.SENT).exists():
            time.sleep(0.05)
        assert Passback.objects.get(pk=passback.pk).status == Passback.Status.SENT and len(lms.scores) == before + 1
        assert sender._thread.daemon
    finally:
        lms.close()


@pytest.mark.parametrize("context, name", [
    (("course-2", "LLM 서빙 2026", "LLM101"), "LLM 서빙 2026"),
    (("course-3", "", "LLM101"), "LLM101"),
    (("course-4", "", ""), "LMS course-4"),
])
def test_a_courses_class_is_named_by_its_title_else_its_label_else_its_id(platform, context, name):
    launch(Client(), platform, "stu-1", context=context)
    assert list(Cohort.objects.values_list("name", flat=True)) == [name]


def test_send_again_leaves_a_sent_passback_alone(platform):
    """Mutant: "send again" sets a passback that was sent back to pending (sent twice)."""
    teacher = Client()
    passback = _pending_passback(Client(), platform)
    assert services.passback_send(passback_id=passback.pk) is None
    launch(teacher, platform, "prof-1", roles=(INSTRUCTOR,))
    teacher.post(reverse("lti:passback-retry", args=[passback.placement.cohort_id, passback.pk]))
    passback.refresh_from_db()
    assert passback.status == Passback.Status.SENT and passback.tries == 1 and len(platform.scores) == 1


def test_a_sent_or_failed_passback_is_never_stalled_whatever_its_times_say(platform):
    """Mutant: the sweep takes any row with an old next_try_at, sent ones too (a score sent again
    on every sweep)."""
    passback = _pending_passback(Client(), platform)
    long_ago = timezone.now() - 10 * services.sending_lease()
    for status in (Passback.Status.SENT, Passback.Status.FAILED):
        Passback.objects.filter(pk=passback.pk).update(status=status, next_try_at=long_ago)
        assert services.passbacks_stalled() == []
    Passback.objects.filter(pk=passback.pk).update(status=Passback.Status.PENDING)
    assert services.passbacks_stalled() == [passback.pk]


def test_a_send_that_fails_after_a_newer_score_was_claimed_leaves_that_claim_alone(platform):
    """Mutant: the failure is written over the row whatever score it now holds. A learner answers
    while a send is on its way and a second sender claims the newer score; the first send then
    fails: the second's claim stands (still sending, no try counted against it)."""
    client = Client()
    passback = _pending_passback(client, platform)
    question = section_questions("s2")[1]

    def newer_score_claimed_then_fail(_pb):
        client.post(reverse("quizzes:submit", args=[question.slug]), {**right_form(question), "nonce": "during"})
        assert services._claim(passback.pk) is not None  # the second sender takes the newer score
        raise ConnectionError("the LMS went away")

    services.passback_send(passback_id=passback.pk, post_score=newer_score_claimed_then_fail)
    passback.refresh_from_db()
    assert (passback.status, passback.tries, passback.score_given, passback.last_error) == (
        Passback.Status.SENDING, 0, 2, "")


def test_an_instructor_sees_the_grades_of_their_own_class_only_in_name_order(platform):
    """Mutants: another class's passbacks listed; the list in no order (it is by name, not by
    who launched first)."""
    from courseapp.lti import selectors

    for user_id, context in (("stu-b", ("course-1", "LLM 서빙 2026")), ("stu-a", ("course-1", "LLM 서빙 2026")),
                             ("stu-x", ("course-2", "다른 과목"))):
        launch(Client(), platform, user_id, context=context, resource_link=f"link-{context[0]}")
    mine = Cohort.objects.get(name="LLM 서빙 2026")
    listed = selectors.passbacks_of(mine)
    assert [p.learner.user.first_name for p in listed] == ["학생 stu-a", "학생 stu-b"]
