"""Pages a class reads at once: a visit writes nothing, and rendered sections are cached but
never stale after a content edit."""
import pytest
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from courseapp.learners.models import Learner
from courseapp.lessons import rendering


def _pages(lesson):
    yield reverse("home")
    yield lesson.get_absolute_url()
    yield reverse("lessons:glossary", args=[lesson.number])
    yield reverse("progress")
    for section in lesson.sections.all():
        yield section.get_absolute_url()


@pytest.mark.django_db
def test_a_cookieless_visit_writes_no_row(client, lesson):
    learners, sessions = Learner.objects.count(), Session.objects.count()
    for url in _pages(lesson):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200, url
        writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
        assert writes == [], (url, writes)
    assert (Learner.objects.count(), Session.objects.count()) == (learners, sessions)


@pytest.mark.django_db
def test_a_known_learner_resumes_where_the_page_said_it_was_seen(client, lesson):
    s2, s4 = lesson.sections.get(slug="s2"), lesson.sections.get(slug="s4")
    client.post(reverse("lessons:section-read", args=[21, "s2"]))  # the first real write
    learner = Learner.objects.get()
    page = client.get(s4.get_absolute_url()).content.decode()
    learner.refresh_from_db()
    assert learner.last_section_id != s4.pk, "the GET itself records nothing"
    assert reverse("lessons:section-visited", args=[21, "s4"]) in page
    assert client.post(reverse("lessons:section-visited", args=[21, "s4"])).status_code == 204
    learner.refresh_from_db()
    assert learner.last_section_id == s4.pk
    assert s2.pk != s4.pk


@pytest.mark.django_db
def test_a_visit_by_someone_without_a_row_records_nothing(client, lesson):
    assert client.post(reverse("lessons:section-visited", args=[21, "s3"])).status_code == 204
    assert Learner.objects.count() == 0


@pytest.mark.django_db
def test_a_section_is_rendered_once_and_an_edit_shows_at_once(client, lesson, monkeypatch):
    cache.clear()
    renders = []
    real = rendering.render_section
    monkeypatch.setattr(rendering, "render_section", lambda *a: renders.append(a) or real(*a))
    section = lesson.sections.get(slug="s3")
    url = section.get_absolute_url()
    first = client.get(url).content.decode()
    second = client.get(url).content.decode()
    assert len(renders) == 1
    assert first.count('class="gloss-term"') == second.count('class="gloss-term"') > 0

    section.body += "\n\n새로 덧붙인 문단입니다.\n"
    section.save()  # what an admin edit or load_content does
    assert "새로 덧붙인 문단입니다." in client.get(url).content.decode()

    term = lesson.glossary.first()
    term.genus = "완전히 새 상위 개념"
    term.save()
    assert "완전히 새 상위 개념" in client.get(url).content.decode()
    assert len(renders) == 3


@pytest.mark.django_db
def test_an_edit_from_another_process_shows_within_the_recheck_window(client, lesson, settings, monkeypatch):
    """`manage.py load_content` run beside the server sends no signal to it: the page asks the
    database for the content version again once OUTLINE_RECHECK_SECONDS have passed."""
    from courseapp.lessons import outline

    settings.OUTLINE_RECHECK_SECONDS = 60  # a slow machine must not cross the window by itself
    section = lesson.sections.get(slug="s3")
    url = section.get_absolute_url()
    client.get(url)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    assert not any("updated_at" in q["sql"] and "COUNT" in q["sql"] for q in queries.captured_queries), "asked again within the window"

    # An UPDATE without the ORM's signals, as another process's write looks from here.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE lessons_section SET body = body || %s, updated_at = %s WHERE id = %s",
                       ["\n\n다른 프로세스가 고친 문단.\n", "2099-01-01 00:00:00", section.pk])
    now = [outline.time.monotonic()]
    monkeypatch.setattr(outline.time, "monotonic", lambda: now[0])
    assert "다른 프로세스가 고친 문단." not in client.get(url).content.decode()
    now[0] += settings.OUTLINE_RECHECK_SECONDS + 0.01
    assert "다른 프로세스가 고친 문단." in client.get(url).content.decode()
