"""axe-core on every lesson page type, at desktop and phone widths, in the Korean and the English
UI: no violations (WCAG 2.2 AA rules and axe's best practices, target size included)."""
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from courseapp.lessons.models import Section

pytestmark = pytest.mark.e2e

WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}
OPTIONS = {"resultTypes": ["violations"], "rules": {"target-size": {"enabled": True}}}
AXE = Axe()


def page_urls(lang: str):
    """Every page in the Korean UI; in the English one, each kind of page once (the section pages
    differ only in their Korean text, which the language switch leaves as it is)."""
    sections = [s.get_absolute_url() for s in Section.objects.order_by("order")]
    if lang != "ko":
        sections = sections[:1] + sections[-1:]  # §0 and the last appendix
    return ["/", "/lessons/21/", "/lessons/21/glossary/", "/progress/", "/accounts/login/", "/accounts/signup/"] + sections


def violations(page) -> list[str]:
    results = AXE.run(page, options=OPTIONS)
    return [
        f"{v['id']} ({v['impact']}): " + "; ".join(" ".join(n["target"]) for n in v["nodes"][:5])
        for v in results.response["violations"]
    ]


def choose_language(page, site, lang):
    page.goto(f"{site}/lessons/21/")
    if lang != "ko":
        page.locator("#lang-select").select_option(lang)
        page.get_by_test_id("lang-submit").click()
    expect(page.locator("html")).to_have_attribute("lang", lang)


@pytest.mark.parametrize("lang", ["ko", "en"])
@pytest.mark.parametrize("width", list(WIDTHS))
def test_no_axe_violations_on_any_lesson_page(browser, site, width, lang):
    w, h = WIDTHS[width]
    context = browser.new_context(viewport={"width": w, "height": h}, has_touch=width == "phone")
    page = context.new_page()
    page.set_default_timeout(15_000)
    choose_language(page, site, lang)
    # A learner with something to show: a section read (the progress page lists it).
    page.goto(f"{site}/lessons/21/s0/")
    page.locator("#read-mark").scroll_into_view_if_needed()
    expect(page.locator("#read-mark")).to_have_attribute("data-read", "true")

    found = {}
    for url in page_urls(lang):
        page.goto(f"{site}{url}")
        page.wait_for_load_state("load")
        problems = violations(page)
        if problems:
            found[url] = problems
    context.close()
    assert not found, "\n".join(f"{url}: {p}" for url, ps in found.items() for p in ps)


def test_no_axe_violations_with_the_phone_sidebar_open_and_a_glossary_popover_shown(browser, site):
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    page = context.new_page()
    page.goto(f"{site}/lessons/21/s2/")
    page.locator(".sidebar-summary").tap()
    expect(page.locator(".sidebar .toc-sub")).to_be_visible()
    term = page.locator(".lesson-body .gloss-term").first
    term.tap()
    expect(page.locator(f"#{term.get_attribute('aria-describedby')}")).to_be_visible()
    problems = violations(page)
    context.close()
    assert not problems, problems
