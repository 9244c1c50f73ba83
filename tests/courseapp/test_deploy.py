"""Safe defaults and deployment (issue #7 §5, §7): DEBUG off for `make run`, no tracebacks, a
strict Content-Security-Policy on every page, and prod settings that pass `check --deploy`."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from django.core.management.utils import get_random_secret_key
from django.urls import path, reverse

ROOT = Path(__file__).resolve().parents[2]


def run_python(code, settings_module, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "DJANGO_SETTINGS_MODULE", "DJANGO_SECRET_KEY"}}
    full_env.update(DJANGO_SETTINGS_MODULE=settings_module, PYTHONDONTWRITEBYTECODE="1", **env)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


PROD_ENV = {"DJANGO_SECRET_KEY": get_random_secret_key(), "DJANGO_ALLOWED_HOSTS": "course.example.org"}
SHOW_DEBUG_AND_KEY = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG, settings.SECRET_KEY)"


def test_make_run_settings_have_debug_off_unless_asked():
    assert run_python(SHOW_DEBUG_AND_KEY, "courseapp.settings.dev").split()[0] == "False"
    assert run_python(SHOW_DEBUG_AND_KEY, "courseapp.settings.dev", DEBUG="1").split()[0] == "True"


def test_make_run_never_uses_the_published_secret_key():
    from courseapp.settings import base

    first = run_python(SHOW_DEBUG_AND_KEY, "courseapp.settings.dev").split()[1]
    again = run_python(SHOW_DEBUG_AND_KEY, "courseapp.settings.dev").split()[1]
    assert first == again, "the key (and every quiz id made from it) survives a restart"
    assert first != base.SECRET_KEY and len(first) >= 50
    assert first == (ROOT / ".secret-key").read_text().strip()
    ignored = subprocess.run(["git", "check-ignore", "-q", ".secret-key"], cwd=ROOT)
    assert ignored.returncode == 0, ".secret-key must never be committed"


def test_check_deploy_reports_no_issues_under_prod_settings():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        # The browser tests' conftest sets DJANGO_ALLOW_ASYNC_UNSAFE for this process; a server never has it.
        env={**{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
             "DJANGO_SETTINGS_MODULE": "courseapp.settings.prod", **PROD_ENV},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


PROXIED_POST = """
import django; django.setup()
from django.test import Client
token = "a" * 32  # an unmasked CSRF secret, as in the cookie
client = Client(enforce_csrf_checks=True, HTTP_HOST="course.example.org")
client.cookies["csrftoken"] = token
post = lambda **headers: client.post("/i18n/setlang/", {"language": "en", "next": "/", "csrfmiddlewaretoken": token}, **headers)
behind_proxy = post(HTTP_X_FORWARDED_PROTO="https", HTTP_ORIGIN="https://course.example.org")
print(behind_proxy.status_code, behind_proxy.headers.get("Strict-Transport-Security"))
plain = client.get("/", HTTP_X_FORWARDED_PROTO="http")
print(plain.status_code, plain.headers.get("Location"))
"""


def test_prod_behind_an_https_proxy_accepts_posts_and_redirects_plain_http():
    posted, redirected = run_python(PROXIED_POST, "courseapp.settings.prod", **PROD_ENV).splitlines()
    status, hsts = posted.split(" ", 1)
    assert status == "302", "the CSRF origin check passes for https://course.example.org behind the proxy"
    assert "max-age=31536000" in hsts and "includeSubDomains" in hsts
    assert redirected == "301 https://course.example.org/"


COLLECT_AND_SERVE = """
import atexit, shutil, tempfile
from django.conf import settings
settings.STATIC_ROOT = tempfile.mkdtemp()
atexit.register(shutil.rmtree, settings.STATIC_ROOT)
import django; django.setup()
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client
call_command("collectstatic", interactive=False, verbosity=0)
url = static("js/app.js")
response = Client(HTTP_HOST="localhost").get(url, HTTP_ACCEPT_ENCODING="gzip, br")
print(url)
print(response.status_code, response.headers.get("Content-Encoding"), response.headers.get("Cache-Control"))
"""


def test_static_files_are_hashed_compressed_and_cached_for_good_without_debug():
    url, served = run_python(COLLECT_AND_SERVE, "courseapp.settings.dev", DJANGO_SECRET_KEY=PROD_ENV["DJANGO_SECRET_KEY"]).splitlines()
    assert url != "/static/js/app.js" and url.startswith("/static/js/app.") and url.endswith(".js")  # hashed name
    status, encoding, cache_control = served.split(" ", 2)
    assert status == "200" and encoding in {"br", "gzip"}
    assert "immutable" in cache_control and "max-age=315360000" in cache_control


def test_test_settings_serve_static_files_without_collectstatic(settings):
    assert "Manifest" not in settings.STORAGES["staticfiles"]["BACKEND"]


def boom(request):
    raise RuntimeError("secret internals: " + request.path)


urlpatterns = [path("boom/", boom)]


@pytest.mark.urls(__name__)
def test_a_server_error_shows_a_page_without_any_traceback(client, settings):
    client.raise_request_exception = False
    response = client.get("/boom/")
    html = response.content.decode()
    assert response.status_code == 500
    assert "문제가 생겼습니다" in html
    for leak in ("Traceback", "secret internals", "RuntimeError", settings.SECRET_KEY):
        assert leak not in html


def every_page(client, lesson):
    urls = [reverse("home"), lesson.get_absolute_url(), reverse("lessons:glossary", args=[21]), reverse("progress"),
            reverse("login"), reverse("signup"), reverse("demo:index")]
    return urls + [s.get_absolute_url() for s in lesson.sections.all()]


@pytest.mark.django_db
def test_every_page_carries_the_csp_and_no_inline_script(client, lesson):
    for url in every_page(client, lesson):
        response = client.get(url)
        assert response.status_code == 200, url
        policy = dict(
            part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";") if part.strip()
        )
        assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'", url
        assert policy["style-src"] == "'self'" and policy["frame-ancestors"] == "'none'", url
        assert policy["object-src"] == "'none'" and policy["connect-src"] == "'self'", url
        soup = BeautifulSoup(response.content, "html.parser")
        for script in soup.find_all("script"):
            assert script.get("src") and not script.string, (url, str(script)[:200])
        assert not soup.find_all("style"), url
        for tag in soup.find_all(True):
            handlers = [name for name in tag.attrs if name.lower().startswith("on")]
            assert not handlers, (url, tag.name, handlers)
            assert not str(tag.get("href", "")).strip().lower().startswith("javascript:"), url
