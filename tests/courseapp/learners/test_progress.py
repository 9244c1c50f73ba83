"""Progress: mastery per objective, sections read, where to resume, and guest → account."""
import pytest
from django.urls import reverse

from courseapp.learners.models import Learner, SectionRead
from courseapp.learners.selectors import mastery_by_objective, resume_section
from courseapp.learners.services import learner_merge_guest, section_mark_read
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
def test_resume_falls_back_to_the_first_unread_section(lesson):
    learner = LearnerFactory()
    for slug in ["s0", "s1"]:
        section_mark_read(learner=learner, section=lesson.sections.get(slug=slug))
    assert resume_section(learner=learner, lesson=lesson).slug == "s2"


@pytest.mark.django_db
def test_history_is_kept_not_overwritten(client):
    q = Question.objects.filter(type="single").first()
    answer(client, q, right=False)
    answer(client, q, right=True)
    assert list(Attempt.objects.filter(question=q).order_by("pk").values_list("score", flat=True)) == [0.0, 1.0]


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
    progress = client.get(reverse("progress")).content.decode()
    assert q.slug in progress


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
