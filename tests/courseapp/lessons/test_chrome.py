"""The site header is rendered once per language and visitor and kept (courseapp/lessons/chrome.py):
what differs per page and per browser must still be this page's and this browser's."""
import pytest
from bs4 import BeautifulSoup
from django.contrib.auth.models import User
from django.template.defaultfilters import urlencode
from django.test import Client

from courseapp.instructor.roles import instructors_group


def header(response):
    assert response.status_code == 200
    return BeautifulSoup(response.content, "html.parser").select_one("header.site-header")


@pytest.mark.django_db
def test_each_page_names_its_own_path_in_the_language_form_and_the_login_link(client, lesson):
    first = header(client.get("/lessons/21/s1/"))
    second = header(client.get("/lessons/21/s2/", {"q": '"><b>', "x": "한"}))  # the same kept header, another path
    path = "/lessons/21/s2/?q=%22%3E%3Cb%3E&x=%ED%95%9C"
    assert first.select_one('input[name="next"]')["value"] == "/lessons/21/s1/"
    assert second.select_one('input[name="next"]')["value"] == path
    login = second.select_one('a[href^="/accounts/login/"]')["href"]
    assert login == "/accounts/login/?next=" + urlencode(path)  # as the template's |urlencode wrote it


@pytest.mark.django_db
def test_each_browser_gets_its_own_csrf_token_and_the_forms_accept_it(lesson):
    a, b = Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)
    tokens = []
    for c in (a, b):
        form = header(c.get("/lessons/21/s1/")).select_one("form.lang-form")
        token = form.select_one('input[name="csrfmiddlewaretoken"]')["value"]
        tokens.append(token)
        answer = c.post("/i18n/setlang/", {"csrfmiddlewaretoken": token, "language": "en", "next": "/lessons/21/s1/"})
        assert answer.status_code == 302, "the kept header's form carries a token this browser's cookie accepts"
    assert tokens[0] != tokens[1]


@pytest.mark.django_db
def test_a_teacher_and_a_guest_and_each_language_get_their_own_header(lesson):
    teacher = User.objects.create_user("t<&>", password="pw")
    teacher.groups.add(instructors_group())
    learner = User.objects.create_user("learner", password="pw")
    guest, t, other = Client(), Client(), Client()
    t.force_login(teacher)
    other.force_login(learner)
    assert header(guest.get("/")).select_one('a[href="/teach/"]') is None
    shown = header(t.get("/"))
    assert shown.select_one('a[href="/teach/"]') is not None
    assert "t<&>" in shown.select_one("form.inline-form button").get_text()
    mine = header(other.get("/"))
    assert mine.select_one('a[href="/teach/"]') is None and "learner" in mine.get_text() and "t<&>" not in mine.get_text()
    english = header(guest.get("/", HTTP_ACCEPT_LANGUAGE="en"))
    korean = header(Client().get("/", HTTP_ACCEPT_LANGUAGE="ko"))
    assert "Glossary" in english.get_text() and "용어집" in korean.get_text()
    assert english.select_one("option[selected]")["value"] == "en" and korean.select_one("option[selected]")["value"] == "ko"
