"""Browser tests: Playwright for Python driving the system Chromium (never a downloaded browser)."""
import os

import pytest
from django.conf import settings

# Playwright's sync API runs an event loop in this thread; the ORM calls made by fixtures and
# assertions are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def site(live_server, transactional_db):
    """The live server with the lesson loaded (transactional tests flush the DB after each test)."""
    from courseapp.lessons.loader import content_load

    content_load(root=settings.CONTENT_DIR)
    return live_server.url


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()
