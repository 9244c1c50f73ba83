"""Login and signup throttling (issue #7 §7): guessing passwords or mass sign-ups hit a wall."""
import types
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

PASSWORD = "correct-horse-battery"


@pytest.fixture
def mina(db):
    return User.objects.create_user("mina", password=PASSWORD)


def log_in(client, password, username="mina", **extra):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def logged_in(client):
    return "_auth_user_id" in client.session


@pytest.mark.django_db
def test_fifty_wrong_passwords_then_the_right_one_does_not_log_in(client, mina):
    for i in range(50):
        response = log_in(client, f"guess-{i}")
        assert response.status_code == (200 if i < 4 else 429), i  # the 5th failure locks the pair out
    response = log_in(client, PASSWORD)
    assert response.status_code == 429
    assert not logged_in(client)
    html = response.content.decode()
    assert "15분" in html  # how long, in the Korean UI
    assert "<form" not in html.split("<main", 1)[1]  # no login form to keep guessing on


@pytest.mark.django_db
def test_the_lockout_message_reads_in_english_after_switching(client, mina):
    client.post(reverse("set_language"), {"language": "en", "next": "/"})
    for i in range(5):
        log_in(client, f"guess-{i}")
    html = log_in(client, PASSWORD).content.decode()
    assert "Too many failed logins" in html and "15 minutes" in html


@pytest.mark.django_db
def test_a_lockout_is_per_username_and_address(mina):
    User.objects.create_user("jun", password=PASSWORD)
    attacker = Client()
    for i in range(6):
        log_in(attacker, f"guess-{i}")
    classmate = Client()  # same address (one school network), other account
    log_in(classmate, PASSWORD, username="jun")
    assert logged_in(classmate)
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")  # the locked account, from another address
    log_in(elsewhere, PASSWORD)
    assert logged_in(elsewhere)


@pytest.mark.django_db
def test_the_lockout_ends_after_fifteen_minutes(client, mina):
    for i in range(5):
        log_in(client, f"guess-{i}")
    assert log_in(client, PASSWORD).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    log_in(client, PASSWORD)
    assert logged_in(client)


@pytest.mark.django_db
def test_axes_reset_lifts_a_lockout(client, mina):
    for i in range(5):
        log_in(client, f"guess-{i}")
    call_command("axes_reset", verbosity=0)
    log_in(client, PASSWORD)
    assert logged_in(client)


@pytest.mark.django_db
def test_a_few_typos_do_not_lock_anyone_out(client, mina):
    for i in range(4):
        log_in(client, f"typo-{i}")
    log_in(client, PASSWORD)
    assert logged_in(client)


@pytest.fixture
def signup_window(monkeypatch):
    """One fixed clock for django-ratelimit, so the test can never straddle two of its windows."""
    import django_ratelimit.core

    cache.clear()
    monkeypatch.setattr(django_ratelimit.core, "time", types.SimpleNamespace(time=lambda: 1_900_000_000.0))
    yield
    cache.clear()


def sign_up(username, **extra):
    password = "a-long-passphrase-9"
    return Client(**extra).post(reverse("signup"), {"username": username, "password1": password, "password2": password})


@pytest.mark.django_db
def test_signups_from_one_address_are_throttled(signup_window):
    for i in range(10):
        assert sign_up(f"learner{i}").status_code == 302, i
    response = sign_up("one-too-many")
    assert response.status_code == 429
    assert not User.objects.filter(username="one-too-many").exists()
    assert "1분 뒤" in response.content.decode()
    assert sign_up("elsewhere", REMOTE_ADDR="10.9.8.7").status_code == 302  # other addresses are not affected


@pytest.mark.django_db
def test_one_password_sprayed_over_many_usernames_locks_the_address_out(mina, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = "10/15m"
    sprayer = Client()
    for i in range(10):
        assert log_in(sprayer, "Password1!", username=f"user-{i}").status_code == 200, i
    refused = log_in(Client(), PASSWORD)  # even the right password, from this address
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "<form" not in refused.content.decode().split("<main", 1)[1]
    admin = Client().post("/admin/login/", {"username": "mina", "password": PASSWORD})
    assert "_auth_user_id" not in admin.wsgi_request.session, "the admin's login too"
    elsewhere = Client(REMOTE_ADDR="10.9.8.7")
    log_in(elsewhere, PASSWORD)
    assert logged_in(elsewhere), "another network is not affected"
