"""Browser tests: Playwright for Python driving the system Chromium (never a downloaded browser)."""
import os

import pytest

# Playwright's sync API runs an event loop in this thread; the ORM calls made by fixtures and
# assertions are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _expect_waits_like_a_page():
    """expect()'s own 5 s default is shorter than a fresh server's first demo run takes to load the
    model on a busy 2-core machine (CI failed on it twice); a passing assertion returns as soon as it
    holds, so only a real failure waits this long."""
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)


_expect_waits_like_a_page()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield KoreanBrowser(browser)
        browser.close()


class KoreanBrowser:
    """The browser as a Korean learner's: its contexts announce ko-KR unless a test names another
    locale (the site follows Accept-Language; headless Chromium would announce en-US)."""

    def __init__(self, browser):
        self._browser = browser

    def new_context(self, **kwargs):
        kwargs.setdefault("locale", "ko-KR")
        return self._browser.new_context(**kwargs)

    def new_page(self, **kwargs):
        kwargs.setdefault("locale", "ko-KR")
        return self._browser.new_page(**kwargs)

    def __getattr__(self, name):
        return getattr(self._browser, name)


@pytest.fixture
def site(live_server, transactional_db):
    """The live server (the lesson is loaded: tests/conftest.py's _lesson_content)."""
    return live_server.url


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


def stop_process(proc, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it is still shutting down (Daphne waits for open sockets)."""
    import subprocess

    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def server_database_url() -> str:
    """The test database (SQLite file or PostgreSQL) as a URL for server processes we start."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def wait_until(predicate, timeout: float = 30.0, what: str = "the condition"):
    """Poll until `predicate()` is truthy; its value. Waits are bounded, never timed."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start_daphne(extra_env: dict):
    """The real ASGI server (Daphne) in its own process, on the test database."""
    import subprocess
    import sys
    from pathlib import Path


    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "courseapp.settings.test", "PYTHONUNBUFFERED": "1", "PORT": str(port),
           **extra_env}
    env["DATABASE_URL"] = server_database_url()
    daphne = Path(sys.executable).with_name("daphne")
    log = open(Path(__file__).resolve().parents[2] / ".test-daphne.log", "a")
    proc = subprocess.Popen([str(daphne), "-b", "127.0.0.1", "-p", str(port), "--application-close-timeout", "2",
                             "courseapp.asgi:application"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_for_port(port)
    return proc, f"http://127.0.0.1:{port}", log


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    """Daphne serving the whole app (HTTP + websockets, embedded engine) on the test DB, one per
    test module: starting it and loading torch into it for its first run cost ~9 CPU-seconds, which
    every test paid again when each had its own. Tests stay apart all the same: each has its own
    browser context (its own guest), the tables are emptied between tests, ids are never reused
    (AUTOINCREMENT / sequences) and the run limits are counted in the database."""
    proc, url, log = start_daphne({"HTTP_WORKERS": "2"})  # as `make run` serves: lesson pages from worker processes
    yield url
    stop_process(proc)
    log.close()


@pytest.fixture
def asgi_site(asgi_server, transactional_db):
    """The module's Daphne, for a test whose writes the server process sees (no transaction to
    roll back: the tables are emptied as the test ends, and the lesson loaded again before the next)."""
    return asgi_server


@pytest.fixture
def demo_page(browser, asgi_site):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def log_in(page, site: str, username: str, password: str) -> None:
    """Through the login form, as a person would."""
    page.goto(f"{site}/accounts/login/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.locator("form.auth-form button[type=submit]").click()
