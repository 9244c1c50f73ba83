"""The UI follows the browser's language (Korean when it asks for neither), set_language
overrides it; the lesson text stays Korean."""
import pytest
from django.urls import reverse


@pytest.mark.django_db
@pytest.mark.parametrize("accept,lang,word", [
    ("en-US,en;q=0.9", "en", "Glossary"),  # an English browser gets the English UI first (issue #33)
    ("ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7", "ko", "용어집"),
    ("fr-FR,fr;q=0.9", "ko", "용어집"),  # neither: the course's language
    (None, "ko", "용어집"),
])
def test_the_ui_language_follows_the_browser_and_defaults_to_korean(client, accept, lang, word):
    headers = {"HTTP_ACCEPT_LANGUAGE": accept} if accept else {}
    response = client.get(reverse("lessons:lesson", args=[21]), **headers)
    html = response.content.decode()
    assert f'<html lang="{lang}">' in html and word in html
    assert "Accept-Language" in response.get("Vary", "")  # a shared cache keeps the two apart


@pytest.mark.django_db
def test_a_chosen_language_beats_the_browsers(client):
    url = reverse("lessons:lesson", args=[21])
    client.post(reverse("set_language"), {"language": "ko", "next": url})
    assert '<html lang="ko">' in client.get(url, HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9").content.decode()


@pytest.mark.django_db
def test_set_language_switches_the_ui_to_english(client):
    url = reverse("lessons:section", args=[21, "s2"])
    response = client.post(reverse("set_language"), {"language": "en", "next": url})
    assert response.status_code == 302
    html = client.get(url).content.decode()
    assert '<html lang="en">' in html
    assert "Glossary" in html
    assert "PagedAttention" in html and "블록" in html  # lesson text is still Korean


@pytest.mark.django_db
def test_the_demo_scenes_instructions_follow_the_interface_language(client):
    ko = client.get(reverse("demo:index")).content.decode()
    assert "같은 요청 A~G를 한 번에 4건씩" in ko
    client.post(reverse("set_language"), {"language": "en", "next": reverse("demo:index")})
    en = client.get(reverse("demo:index")).content.decode()
    assert "continuous batching fills a free seat at every step" in en and "같은 요청 A~G" not in en
