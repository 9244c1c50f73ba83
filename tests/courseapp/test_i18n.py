"""Korean UI by default, English through set_language; the lesson text stays Korean."""
import pytest
from django.urls import reverse


@pytest.mark.django_db
def test_korean_by_default_even_for_an_english_browser(client):
    html = client.get(reverse("lessons:lesson", args=[21]), HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9").content.decode()
    assert '<html lang="ko">' in html
    assert "용어집" in html  # "Glossary" in the Korean UI


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
