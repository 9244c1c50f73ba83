"""Classes and roles: who may see a class's dashboard, what the heat map says (checked by hand on
a small class), joining by code, and making an instructor."""
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from courseapp.instructor import selectors, services
from courseapp.instructor.models import Cohort, Membership
from courseapp.instructor.roles import is_instructor
from courseapp.learners.models import Learner
from courseapp.quizzes.models import Attempt
from tests.factories import LessonFactory, ObjectiveFactory, UserFactory, make_question

pytestmark = pytest.mark.django_db
MC = {"type": "single", "choices": [{"id": "a", "text": "가"}, {"id": "b", "text": "나"}], "answer": "a"}


@pytest.fixture
def small_class():
    """Two objectives: q1, q2 under the first, q3 under the second; two learners."""
    lesson = LessonFactory()
    first, second = ObjectiveFactory(lesson=lesson, order=1), ObjectiveFactory(lesson=lesson, order=2)
    q1, q2 = make_question(objective=first, data={"id": "q1", **MC}), make_question(objective=first, data={"id": "q2", **MC})
    q3 = make_question(objective=second, data={"id": "q3", **MC})
    teacher = services.instructor_make(username="teacher", password="correct-horse-battery")[0]
    cohort = services.cohort_create(instructor=teacher, name="  월요일   오전반 ", lesson=lesson)
    ana, ben = Learner.objects.create(user=UserFactory(username="ana")), Learner.objects.create(user=UserFactory(username="ben"))
    for learner in (ana, ben):
        Membership.objects.create(cohort=cohort, learner=learner)
    for learner, question, score in ((ana, q1, 0.0), (ana, q1, 1.0), (ana, q2, 1.0), (ben, q3, 0.5), (ben, q3, 0.0)):
        Attempt.objects.create(learner=learner, question=question, response={"choice": "a" if score == 1 else "b"}, score=score,
                               nonce=f"n{Attempt.objects.count()}")
    return cohort, teacher, ana, ben


def cells(cohort, basis):
    _objectives, rows = selectors.roster(cohort, basis)
    return {str(row.membership.learner): [c.percent for c in row.cells] for row in rows}


def test_the_heat_map_is_each_objectives_mean_latest_or_first(small_class):
    cohort, *_ = small_class
    assert cohort.name == "월요일 오전반"
    assert cells(cohort, "latest") == {"ana": [100, None], "ben": [None, 0]}
    assert cells(cohort, "first") == {"ana": [50, None], "ben": [None, 50]}
    _objectives, rows = selectors.roster(cohort, "latest")
    assert [r.answered for r in rows] == [2, 1]


def login(username):
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def test_only_the_classes_instructors_see_its_dashboard_and_learners(small_class):
    cohort, teacher, ana, _ben = small_class
    dashboard = reverse("instructor:cohort", args=[cohort.pk])
    drill = reverse("instructor:learner", args=[cohort.pk, ana.pk])
    page = login("teacher").get(dashboard).content.decode()
    assert "ana" in page and "100%" in page and cohort.join_code in page
    assert "q1" in login("teacher").get(drill).content.decode()

    assert Client().get(dashboard).status_code == 302, "anonymous: to the login page"
    assert login("ana").get(dashboard).status_code == 403, "a learner is no instructor"
    assert login("ana").get(reverse("instructor:index")).status_code == 403
    services.instructor_make(username="other", password="correct-horse-battery")
    other = login("other")
    assert other.get(reverse("instructor:index")).status_code == 200
    assert other.get(dashboard).status_code == 404 and other.get(drill).status_code == 404, "not their class"
    stranger = Learner.objects.create()
    assert login("teacher").get(reverse("instructor:learner", args=[cohort.pk, stranger.pk])).status_code == 404, \
        "a learner outside the class is not reachable through it"


def test_first_try_basis_is_a_partial_for_htmx(small_class):
    cohort, *_ = small_class
    response = login("teacher").get(reverse("instructor:cohort", args=[cohort.pk]), {"basis": "first"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html and "50%" in html and 'href="?basis=first"' in html


def test_joining_writes_only_on_post_and_names_a_wrong_code(small_class, client):
    cohort, *_ = small_class
    page = client.get(reverse("instructor:join-code", args=[cohort.join_code])).content.decode()
    assert f'value="{cohort.join_code}"' in page and Learner.objects.count() == 2
    bad = client.post(reverse("instructor:join"), {"code": "NOPE1234", "display_name": "김하늘"})
    assert bad.status_code == 400 and "NOPE1234" in bad.content.decode()
    # A guest names themself: the instructor would otherwise see "guest #14" (issue #33).
    nameless = client.post(reverse("instructor:join"), {"code": cohort.join_code})
    assert nameless.status_code == 400 and cohort.memberships.count() == 2
    for hostile in ("a\x00b", "x" * 41):
        assert client.post(reverse("instructor:join"), {"code": cohort.join_code, "display_name": hostile}).status_code == 400
    assert cohort.memberships.count() == 2
    joined = client.post(reverse("instructor:join"), {"code": cohort.join_code.lower(), "display_name": "  김하늘 "})
    assert joined.status_code == 200 and cohort.name in joined.content.decode()
    assert cohort.memberships.count() == 3
    client.post(reverse("instructor:join"), {"code": cohort.join_code, "display_name": "김하늘"})
    assert cohort.memberships.count() == 3, "joining twice is one membership"
    dashboard = login("teacher").get(reverse("instructor:cohort", args=[cohort.pk])).content.decode()
    assert "김하늘" in dashboard and "guest #" not in dashboard
    Cohort.objects.filter(pk=cohort.pk).update(archived=True)
    assert Client().post(reverse("instructor:join"), {"code": cohort.join_code, "display_name": "x"}).status_code == 400


def test_guessing_codes_is_limited_per_address(client, settings):
    for _ in range(10):
        client.post(reverse("instructor:join"), {"code": "WRONG123"})
    assert client.post(reverse("instructor:join"), {"code": "WRONG123"}).status_code == 429


def test_create_instructor_makes_an_account_with_the_role():
    out = io.StringIO()
    call_command("create_instructor", "kim", "--password", "correct-horse-battery", stdout=out)
    from django.contrib.auth import get_user_model

    kim = get_user_model().objects.get(username="kim")
    assert is_instructor(kim) and kim.check_password("correct-horse-battery") and "/teach/" in out.getvalue()
    learner = UserFactory()
    assert not is_instructor(learner)
    # Whoever signed up under the name first does not become an instructor by it.
    with pytest.raises(CommandError, match="--promote"):
        call_command("create_instructor", learner.username, stdout=io.StringIO())
    assert not is_instructor(get_user_model().objects.get(pk=learner.pk))
    call_command("create_instructor", learner.username, "--promote", stdout=io.StringIO())
    learner = get_user_model().objects.get(pk=learner.pk)
    assert is_instructor(learner) and learner.check_password("correct-horse-battery"), "an existing account keeps its password"
    call_command("create_instructor", "kim", "--password", "another-long-passphrase", stdout=io.StringIO())
    assert get_user_model().objects.get(username="kim").check_password("another-long-passphrase"), "an instructor's new password"


def test_csv_exports_hold_the_classs_scores_for_its_instructors_only(small_class):
    cohort, *_ = small_class
    import csv as csv_module

    teacher = login("teacher")
    book = list(csv_module.reader(io.StringIO(teacher.get(reverse("instructor:export", args=[cohort.pk, "gradebook"]))
                                              .content.decode("utf-8-sig"))))
    assert book[0][-1] == "mean" and [r[1] for r in book[1:]] == ["ana", "ben"]
    assert book[1][2:] == ["1.0", "0.0", "0.5"], "ana: objective 1 all right, objective 2 unanswered"
    scores = list(csv_module.reader(io.StringIO(teacher.get(reverse("instructor:export", args=[cohort.pk, "scores"]))
                                                .content.decode("utf-8-sig"))))
    ana_q1 = next(row for row in scores[1:] if row[1] == "ana" and row[2] == "q1")
    assert [ana_q1[i] for i in (4, 5, 6)] == ["0.0", "1.0", "2"], "first try wrong, then right: two attempts"
    assert len(scores) == 1 + 3, "one row per learner and question answered"
    assert login("ana").get(reverse("instructor:export", args=[cohort.pk, "scores"])).status_code == 403
    assert teacher.get(reverse("instructor:export", args=[cohort.pk, "other"])).status_code == 404


def test_regrade_dry_run_changes_nothing_and_apply_changes_exactly_the_affected_with_a_record(small_class):
    from courseapp.instructor.models import Regrade
    from courseapp.quizzes.models import Question

    cohort, teacher, ana, ben = small_class
    q1 = Question.objects.get(slug="q1")
    outsider = Learner.objects.create()  # answered q1 but is in no class of this instructor
    Attempt.objects.create(learner=outsider, question=q1, response={"choice": "a"}, score=1.0, nonce="out")
    for learner, choice in ((ana, "a"), (ben, "b")):
        Attempt.objects.create(learner=learner, question=q1, response={"choice": choice}, score=1.0 if choice == "a" else 0.0, nonce=f"c{choice}")
    Question.objects.filter(pk=q1.pk).update(key={**q1.key, "answer": "b"})  # the key is corrected: b was right
    before = dict(Attempt.objects.values_list("pk", "score"))

    client = login("teacher")
    listing = client.get(reverse("instructor:regrades", args=[cohort.pk])).content.decode()
    # An instructor made by create_instructor cannot open the admin: the page must not send them there (issue #33).
    assert "/admin/" not in listing and "admin" not in listing.split("<h2>")[0].split("<h1>")[1]
    dry = client.get(reverse("instructor:regrade", args=[cohort.pk, "q1"])).content.decode()
    assert dict(Attempt.objects.values_list("pk", "score")) == before, "a dry run writes nothing"
    assert "ana" in dry and "ben" in dry
    assert client.post(reverse("instructor:regrade", args=[cohort.pk, "q1"])).status_code == 302
    after = dict(Attempt.objects.values_list("pk", "score"))
    changed = {pk for pk in before if before[pk] != after[pk]}
    regrade = Regrade.objects.get()
    assert changed == {c.attempt_id for c in regrade.changes.all()} and regrade.by == teacher and regrade.key["answer"] == "b"
    assert Attempt.objects.get(nonce="out").score == 1.0, "another class's attempt is not this instructor's to regrade"
    assert Attempt.objects.get(nonce="cb").score == 1.0 and Attempt.objects.get(nonce="ca").score == 0.0
    assert "q1" not in client.get(reverse("instructor:regrades", args=[cohort.pk])).content.decode().split("<h2>")[1]


def test_an_instructor_opens_and_drives_the_class_demo_a_learner_may_not(small_class, monkeypatch):
    from courseapp.demo import selectors as demo_selectors, services as demo_services
    from courseapp.demo.models import DemoRun

    monkeypatch.setattr(demo_services, "_launch", lambda run: None)  # no engine thread in this test
    cohort, *_ = small_class
    assert login("ana").post(reverse("demo:class-create")).status_code == 403
    assert Client().post(reverse("demo:class-create")).status_code == 403
    assert DemoRun.objects.count() == 0
    opened = login("teacher").post(reverse("demo:class-create"))
    run = DemoRun.objects.get()
    assert opened.status_code == 302 and run.is_class
    # The class sees whose run it is (issue #33: every class run was titled "내 실험 / 내 엔진").
    page = login("ana").get(reverse("demo:run", args=[run.pk])).content.decode()
    assert "teacher 님의 수업 실험" in page and "내 실험" not in page
    assert run.spec["lanes"][0]["label"] == "수업 엔진"
    from django.contrib.auth import get_user_model

    teacher = get_user_model().objects.get(username="teacher")
    assert demo_selectors.can_control(run, demo_selectors.viewer_for(run, user=teacher, session=None))
    ana = get_user_model().objects.get(username="ana")
    assert not demo_selectors.can_control(run, demo_selectors.viewer_for(run, user=ana, session=None))
    assert 'action="/demo/class/"' in login("teacher").get(reverse("instructor:cohort", args=[cohort.pk])).content.decode()


def test_progress_by_day_counts_answers_and_mastery_as_of_each_day(small_class):
    from datetime import timedelta

    from django.utils import timezone

    cohort, teacher, ana, ben = small_class
    Attempt.objects.filter(learner=ben).update(created_at=timezone.now() - timedelta(days=2))
    _objectives, days = selectors.progress_by_day(cohort)
    assert len(days) == 3 and [d.attempts for d in days] == [2, 0, 3] and [d.learners for d in days] == [1, 0, 1]
    # Day 1: ben's latest q3 answer is 0 → objective 2 at 0; the last day: ana's q1, q2 right → objective 1 at 2 / (2·2).
    assert days[0].mastery == [0.0, 0.0] and days[-1].mastery == [0.5, 0.0]
    page = login("teacher").get(reverse("instructor:progress", args=[cohort.pk])).content.decode()
    assert "<polyline" in page and "50%" in page


def test_instructor_actions_are_audited(small_class):
    from courseapp.instructor.models import AuditEntry

    cohort, teacher, *_ = small_class
    client = login("teacher")
    client.get(reverse("instructor:export", args=[cohort.pk, "scores"]))
    client.post(reverse("instructor:items", args=[cohort.pk]))
    actions = list(AuditEntry.objects.order_by("at", "pk").values_list("action", "user__username", "cohort_id"))
    assert actions == [("class_created", "teacher", cohort.pk), ("exported", "teacher", cohort.pk),
                       ("items_computed", "teacher", cohort.pk)]


@pytest.mark.django_db
def test_a_class_name_with_control_characters_is_refused_and_nothing_is_stored():
    services.instructor_make(username="kim", password="correct-horse-battery")
    kim = login("kim")
    for name in ("A\x00B", "tab\x07bell"):
        answer = kim.post(reverse("instructor:index"), {"name": name})
        assert answer.status_code == 400, name
    assert not Cohort.objects.exists()
    assert kim.post(reverse("instructor:index"), {"name": "  LLM   서빙 "}).status_code == 302
    assert Cohort.objects.get().name == "LLM 서빙"


def test_an_unanswered_question_counts_0_in_its_cell_and_another_classs_learner_is_out_of_reach(small_class):
    """Mutants (issue #34): the cell as the mean over answered questions only; member() not scoped
    to the class in the URL."""
    cohort, teacher, _ana, _ben = small_class
    cho = Learner.objects.create(user=UserFactory(username="cho"))
    Membership.objects.create(cohort=cohort, learner=cho)
    q1 = cohort.lesson.objectives.get(order=1).questions.get(slug__endswith="q1")
    Attempt.objects.create(learner=cho, question=q1, response={"choice": "a"}, score=1.0, nonce="cho-1")
    assert cells(cohort, "latest")["cho"] == [50, None], "q2 unanswered: (1 + 0) / 2"
    other = services.cohort_create(instructor=teacher, name="다른 반", lesson=cohort.lesson)
    dan = Learner.objects.create(user=UserFactory(username="dan"))
    Membership.objects.create(cohort=other, learner=dan)
    assert selectors.member(cohort, dan.pk) is None and selectors.member(other, dan.pk) is not None
    assert login("teacher").get(reverse("instructor:learner", args=[cohort.pk, dan.pk])).status_code == 404
    assert login("teacher").get(reverse("instructor:learner", args=[other.pk, dan.pk])).status_code == 200
