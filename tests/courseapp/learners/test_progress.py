"""Progress: mastery per objective, sections read, where to resume, and guest → account."""
import re

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse
from django.utils import translation

from courseapp.learners.models import Learner, SectionRead
from courseapp.learners.selectors import mastery_by_objective, resume_section
from courseapp.learners.services import learner_merge_guest, section_mark_read
from courseapp.lessons.rendering import markdown_inline
from courseapp.quizzes.models import Attempt, Question
from tests.answers import right_form, wrong_form
from tests.factories import LearnerFactory, UserFactory

HX = {"HTTP_HX_REQUEST": "true"}


def answer(client, q, right=True, nonce=None):
    data = right_form(q) if right else wrong_form(q)
    return client.post(reverse("quizzes:submit", args=[q.slug]), {**data, "nonce": nonce or f"{q.slug}-{right}"}, **HX)


@pytest.mark.django_db
def test_mastery_is_the_mean_of_each_questions_latest_score(lesson):
    learner = LearnerFactory()
    objective = lesson.objectives.get(slug="kv-waste")
    qs = list(objective.questions.all())
    Attempt.objects.create(learner=learner, question=qs[0], response={}, score=1.0, nonce="a")
    Attempt.objects.create(learner=learner, question=qs[1], response={}, score=1.0, nonce="b")
    Attempt.objects.create(learner=learner, question=qs[1], response={}, score=0.5, nonce="c")  # latest wins
    m = next(m for m in mastery_by_objective(learner=learner, lesson=lesson) if m.objective == objective)
    assert m.answered == 2 and m.total == len(qs)
    assert m.score == pytest.approx(1.5 / len(qs))


@pytest.mark.django_db
def test_a_visitor_without_a_learner_sees_zero(lesson):
    assert all(m.score == 0 and m.answered == 0 for m in mastery_by_objective(learner=None, lesson=lesson))


@pytest.mark.django_db
def test_reading_to_the_end_marks_the_section_read_once(client, lesson):
    section = lesson.sections.get(slug="s2")
    url = reverse("lessons:section-read", args=[21, "s2"])
    assert client.post(url, **HX).status_code == 200
    assert client.post(url, **HX).status_code == 200
    assert SectionRead.objects.filter(section=section).count() == 1
    page = client.get(lesson.get_absolute_url()).content.decode()
    assert 'data-section="s2" data-read="true"' in page


@pytest.mark.django_db
def test_resume_points_at_the_last_section_opened(client, lesson):
    client.post(reverse("lessons:section-read", args=[21, "s0"]))  # a learner row exists from the first write
    client.get(reverse("lessons:section", args=[21, "s3"]))
    client.post(reverse("lessons:section-visited", args=[21, "s3"]))  # what the opened page sends
    page = client.get(lesson.get_absolute_url()).content.decode()
    assert f'href="{reverse("lessons:section", args=[21, "s3"])}" data-testid="resume"' in page


@pytest.mark.django_db
def test_the_home_page_asks_a_first_time_visitor_to_start_and_a_returning_one_to_resume(client, lesson):
    first = BeautifulSoup(client.get("/").content, "html.parser").select_one("[data-testid=resume]")
    assert first.get_text(strip=True) == "읽기 시작" and first["href"] == reverse("lessons:section", args=[21, "s0"])
    client.post(reverse("lessons:section-read", args=[21, "s0"]))
    client.post(reverse("lessons:section-visited", args=[21, "s3"]))
    again = BeautifulSoup(client.get("/").content, "html.parser").select_one("[data-testid=resume]")
    assert again.get_text(" ", strip=True).startswith("§3") and "이어 읽기" in again.get_text()


@pytest.mark.django_db
def test_resume_falls_back_to_the_first_unread_section(lesson):
    learner = LearnerFactory()
    for slug in ["s0", "s1"]:
        section_mark_read(learner=learner, section=lesson.sections.get(slug=slug))
    assert resume_section(learner=learner, lesson=lesson).slug == "s2"


@pytest.mark.django_db
def test_resume_skips_a_section_already_read_to_its_end(lesson):
    """Reading §0–§2 to the end (the last one opened is §2) resumes at §3, not at §2 again."""
    learner = LearnerFactory()
    for slug in ["s0", "s1", "s2"]:
        section = lesson.sections.get(slug=slug)
        section_mark_read(learner=learner, section=section)
        learner.last_section = section
    learner.save()
    assert resume_section(learner=learner, lesson=lesson).slug == "s3"


@pytest.mark.django_db
def test_resume_goes_on_from_where_the_learner_jumped_to_then_wraps_round(lesson):
    learner = LearnerFactory()
    sections = list(lesson.sections.all())
    for s in sections[4:]:
        section_mark_read(learner=learner, section=s)
    section_mark_read(learner=learner, section=sections[0])
    learner.last_section = sections[4]
    learner.save()
    assert resume_section(learner=learner, lesson=lesson) == sections[1]  # nothing unread after §3: back to the first unread
    for s in sections:
        section_mark_read(learner=learner, section=s)
    assert resume_section(learner=learner, lesson=lesson) == sections[4]  # all read: where they were


@pytest.mark.django_db
def test_progress_lists_answers_by_their_question_text_with_a_link_to_the_question(client, lesson):
    q = Question.objects.filter(type="single").order_by("order").first()
    answer(client, q)
    page = BeautifulSoup(client.get(reverse("progress")).content, "html.parser")
    row = page.select_one(f".history tr[data-question={q.slug}]")
    link = row.find("a")
    words = BeautifulSoup(markdown_inline(q.prompt), "html.parser").get_text().strip()
    assert link.get_text().rstrip("…") in words and len(link.get_text()) >= min(len(words), 60)
    section = next(s for s in lesson.sections.all() if q.anchor in s.anchors)
    assert link["href"] == f"{section.get_absolute_url()}#q-{q.slug}"
    assert f'id="q-{q.slug}"' in client.get(link["href"].split("#")[0]).content.decode(), "the link lands on the card"
    assert q.slug not in row.get_text()


@pytest.mark.django_db
def test_history_is_kept_not_overwritten(client):
    q = Question.objects.filter(type="single").first()
    answer(client, q, right=False)
    answer(client, q, right=True)
    assert list(Attempt.objects.filter(question=q).order_by("pk").values_list("score", flat=True)) == [0.0, 1.0]


@pytest.mark.django_db
def test_progress_shows_one_row_per_question_with_its_latest_score_and_tries(client):
    """One pass is ~80 answers to ~40 questions: a row per answer buried the latest score
    (issue #33). The newest-answered question comes first."""
    first, second = Question.objects.filter(type="single").order_by("order")[:2]
    answer(client, first, right=False, nonce="t1")
    answer(client, first, right=False, nonce="t2")
    answer(client, second, right=False, nonce="t3")
    answer(client, first, right=True, nonce="t4")
    page = BeautifulSoup(client.get(reverse("progress")).content, "html.parser")
    rows = page.select(".history tbody tr")
    assert [r["data-question"] for r in rows] == [first.slug, second.slug]
    cells = [td.get_text(strip=True) for td in rows[0].find_all("td")]
    assert cells[2:] == ["100%", "3"]
    assert [td.get_text(strip=True) for td in rows[1].find_all("td")][2:] == ["0%", "1"]


@pytest.mark.django_db
def test_logging_in_keeps_what_the_guest_did(client):
    user = UserFactory(username="mina")
    q = Question.objects.filter(type="single").first()
    answer(client, q)
    client.post(reverse("lessons:section-read", args=[21, "s1"]), **HX)
    response = client.post(reverse("login"), {"username": "mina", "password": "correct-horse-battery"})
    assert response.status_code == 302
    learner = Learner.objects.get(user=user)
    assert learner.attempts.filter(question=q, score=1.0).exists()
    assert learner.reads.filter(section__slug="s1").exists()
    assert Learner.objects.filter(user__isnull=True).count() == 0


@pytest.mark.django_db
def test_signing_up_keeps_what_the_guest_did(client):
    q = Question.objects.filter(type="numeric").first()
    answer(client, q)
    response = client.post(
        reverse("signup"), {"username": "jun", "password1": "a-long-passphrase-9", "password2": "a-long-passphrase-9"}
    )
    assert response.status_code == 302
    learner = Learner.objects.get(user__username="jun")
    assert learner.attempts.filter(question=q).count() == 1
    assert response["Location"] == reverse("progress")
    progress = client.get(reverse("progress"))
    assert f'data-question="{q.slug}"' in progress.content.decode()
    with translation.override("ko"):
        carried = translation.gettext("What you did as a guest (sections read and answers) is now in your account.")
    notice = BeautifulSoup(progress.content, "html.parser").select_one("[data-testid=notice]")
    assert notice is not None and notice.get_text(strip=True) == carried


@pytest.mark.django_db
def test_a_sign_up_without_guest_progress_does_not_claim_any_was_carried(client):
    client.post(reverse("signup"), {"username": "new", "password1": "a-long-passphrase-9", "password2": "a-long-passphrase-9"})
    with translation.override("ko"):
        carried = translation.gettext("What you did as a guest (sections read and answers) is now in your account.")
    assert carried not in client.get(reverse("progress")).content.decode()


@pytest.mark.django_db
def test_sign_up_errors_sit_beside_their_field_and_are_read_with_it(client):
    response = client.post(reverse("signup"), {"username": "x", "password1": "a-long-passphrase-9", "password2": "different-one-9"})
    assert response.status_code == 200
    page = BeautifulSoup(response.content, "html.parser")
    field = page.find("input", attrs={"name": "password2"})
    errors = field.find_parent(class_="field-row").select_one(".field-errors")
    assert errors is not None and errors.get_text(strip=True)
    assert errors["id"] in field["aria-describedby"].split()
    assert field["aria-invalid"] == "true"
    assert field.find_parent(class_="field")["class"] == ["field", "field-invalid"]
    assert page.find("input", attrs={"name": "username"}).find_parent(class_="field-invalid") is None


@pytest.mark.django_db
def test_a_wrong_password_is_said_at_the_top_of_the_login_form(client):
    UserFactory(username="mina")
    response = client.post(reverse("login"), {"username": "mina", "password": "wrong"})
    page = BeautifulSoup(response.content, "html.parser")
    said = page.select_one(".auth-form .form-errors[role=alert]").get_text(strip=True)
    # Django's own Korean reads "올바른 사용자 이름와/과 비밀번호" (issue #33).
    assert "사용자 이름 또는 비밀번호가 틀렸습니다" in said and "와/과" not in said


@pytest.mark.django_db
def test_merge_into_an_account_that_already_has_progress(lesson):
    user = UserFactory()
    owned = LearnerFactory(user=user)
    guest = LearnerFactory()
    s1, s2 = lesson.sections.get(slug="s1"), lesson.sections.get(slug="s2")
    section_mark_read(learner=owned, section=s1)
    section_mark_read(learner=guest, section=s1)
    section_mark_read(learner=guest, section=s2)
    q = Question.objects.first()
    Attempt.objects.create(learner=guest, question=q, response={}, score=0.5, nonce="g1")
    Attempt.objects.create(learner=owned, question=q, response={}, score=1.0, nonce="o1")

    merged = learner_merge_guest(guest_id=guest.pk, user=user)

    assert merged == owned
    assert set(owned.reads.values_list("section__slug", flat=True)) == {"s1", "s2"}
    assert owned.attempts.count() == 2
    assert not Learner.objects.filter(pk=guest.pk).exists()


@pytest.mark.django_db
def test_a_forged_guest_id_cannot_take_another_accounts_learner():
    victim = LearnerFactory(user=UserFactory())
    intruder = UserFactory()
    learner_merge_guest(guest_id=victim.pk, user=intruder)
    victim.refresh_from_db()
    assert victim.user_id != intruder.pk


@pytest.mark.django_db
def test_sign_up_and_login_pages_say_what_guest_progress_carries_over(client):
    for url in (reverse("signup"), reverse("login")):
        assert 'data-testid="guest-work"' not in client.get(url).content.decode()  # nothing done yet
    client.post(reverse("lessons:section-read", args=[21, "s1"]), **HX)
    client.post(reverse("lessons:section-read", args=[21, "s2"]), **HX)
    q = Question.objects.filter(type="single").first()
    answer(client, q, right=False)
    answer(client, q, right=True)
    for url in (reverse("signup"), reverse("login")):
        notice = BeautifulSoup(client.get(url).content, "html.parser").select_one("[data-testid=guest-work]")
        assert re.findall(r"\d+", notice.get_text()) == ["2", "1"], notice.get_text()


@pytest.mark.django_db
def test_sign_up_refuses_the_names_kept_for_lms_accounts(client):
    from django.contrib.auth import get_user_model

    for name in ("lti-1-teacher-7", "LTI-anything"):
        response = client.post(reverse("signup"), {"username": name, "password1": "a-long-passphrase-9",
                                                   "password2": "a-long-passphrase-9"})
        assert response.status_code == 200 and "lti-" in response.content.decode()
    assert not get_user_model().objects.exists()
