"""The Content-Security-Policy breaks nothing, and login lockout works through Daphne (issue #7 §7)."""
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import log_in

pytestmark = pytest.mark.e2e

# Registered through the DevTools protocol, so the policy under test does not apply to it.
RECORD_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def watched_page(demo_page):
    console = []
    demo_page.on("console", lambda msg: console.append(msg.text))
    demo_page.add_init_script(RECORD_VIOLATIONS)
    yield demo_page, console


def violations(page, console):
    return page.evaluate("window.cspViolations") + [t for t in console if "Content Security Policy" in t]


def test_lesson_and_demo_pages_run_under_the_policy_without_violations(watched_page, asgi_site):
    page, console = watched_page

    response = page.goto(f"{asgi_site}/lessons/21/s1/")  # the KV-cache calculator
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.locator("[data-calc-preset='22000']").click()  # bars resized from script
    assert violations(page, console) == []

    page.goto(f"{asgi_site}/lessons/21/s2/")  # glossary popovers and a self-check answered through htmx
    page.locator(".gloss-term").first.hover()
    card = page.locator("div.question[data-question]:has(input[type=radio])").first
    card.locator("input[type=radio]").first.check()
    card.get_by_role("button", name="채점하기").click()
    expect(card.locator(".feedback[data-verdict]")).to_be_visible()
    assert violations(page, console) == []

    page.goto(f"{asgi_site}/demo/?preset=reservation&paused=1")  # frames arrive over ws:// to this host
    expect(page.locator("#demo")).to_have_attribute("data-state", "paused", timeout=60_000)
    steps = page.locator("[data-metric=steps]").first
    before = steps.get_attribute("data-value")
    page.locator("[data-action=step]").click()
    expect(steps).not_to_have_attribute("data-value", before)
    assert violations(page, console) == []


def test_five_wrong_passwords_lock_the_account_out_over_daphne(demo_page, asgi_site):
    from django.contrib.auth.models import User

    User.objects.create_user("mina", password="correct-horse-battery")
    page = demo_page
    for password in ["a", "b", "c", "d", "e", "correct-horse-battery"]:
        log_in(page, asgi_site, "mina", password)
    expect(page.get_by_test_id("throttled")).to_contain_text("15분")
    expect(page.get_by_role("button", name="로그아웃 (mina)")).to_have_count(0)
