"""A learner's path through the lesson in a real browser (issue #2's browser tests)."""
import re

import pytest
from playwright.sync_api import expect

from django.utils import translation

from courseapp.quizzes.models import Question
from tests.answers import shown_id

pytestmark = pytest.mark.e2e


def card(page, q):
    return page.locator(f"#q-{q.slug}")


def test_glossary_popover_feedback_and_objective_progress(page, site):
    page.goto(f"{site}/lessons/21/")
    expect(page.locator("html")).to_have_attribute("lang", "ko")
    page.get_by_test_id("resume").click()
    expect(page).to_have_url(re.compile(r"/lessons/21/s0/$"))
    page.goto(f"{site}/lessons/21/s2/")

    # Glossary popover: on hover …
    term = page.locator(".gloss-term[data-term=paged-attention]").first
    tip = page.locator(f"#{term.get_attribute('aria-describedby')}")
    expect(tip).to_be_hidden()
    term.hover()
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("구별된다")
    # … and on keyboard focus, dismissible with Escape.
    page.mouse.move(0, 0)
    expect(tip).to_be_hidden()
    term.focus()
    expect(tip).to_be_visible()
    page.keyboard.press("Escape")
    expect(tip).to_be_hidden()

    # A single-choice question on this page: wrong first, then right.
    q = Question.objects.filter(type="single", anchor__startswith="s2").order_by("order").first()
    wrong = next(shown_id(q, "choice", c["id"]) for c in q.public["choices"] if c["id"] != q.key["answer"])
    meter = page.locator(f"#mastery-{q.objective.slug}")
    before = int(meter.get_attribute("data-percent"))

    card(page, q).locator(f"input[value='{wrong}']").check()
    card(page, q).get_by_role("button", name="채점하기").click()
    feedback = card(page, q).locator(".feedback")
    expect(feedback).to_have_attribute("data-verdict", "wrong")
    label = "§" + q.anchor.removeprefix("s").replace("-", ".")
    link = feedback.locator("a.section-link")
    expect(link).to_have_text(label)
    expect(link).to_have_attribute("href", re.compile(f"#{q.anchor}$"))

    card(page, q).locator(f"input[value='{shown_id(q, 'choice', q.key['answer'])}']").check()
    card(page, q).get_by_role("button", name="채점하기").click()
    expect(card(page, q).locator(".feedback")).to_have_attribute("data-verdict", "correct")
    expect(meter).not_to_have_attribute("data-percent", str(before))
    assert int(meter.get_attribute("data-percent")) > before

    # The section link in the feedback leads to the explaining section's anchor.
    card(page, q).locator("a.section-link").first.click()
    expect(page).to_have_url(re.compile(f"#{q.anchor}$"))
    expect(page.locator(f"#{q.anchor}")).to_be_in_viewport()


def test_ordering_question_with_the_keyboard_only(page, site):
    q = Question.objects.filter(type="ordering").order_by("order").first()
    section = next(s for s in q.lesson.sections.all() if q.anchor in s.anchors)
    page.goto(f"{site}{section.get_absolute_url()}")
    items = card(page, q).locator(".ordering-item")

    # Selection sort with the "up" buttons: focus an item's button, press Enter until it is in place.
    right_order = [shown_id(q, "item", i) for i in q.key["order"]]
    for target, item_id in enumerate(right_order):
        shown = [items.nth(i).get_attribute("data-id") for i in range(items.count())]
        position = shown.index(item_id)
        up = card(page, q).locator(f".ordering-item[data-id='{item_id}'] button.move-up")
        up.focus()
        for _ in range(position - target):
            page.keyboard.press("Enter")
        expect(up).to_be_focused()  # focus follows the moved item

    assert [items.nth(i).get_attribute("data-id") for i in range(items.count())] == right_order
    expect(card(page, q).locator("[data-ordering-status]")).not_to_be_empty()
    card(page, q).locator("button[type=submit]").focus()
    page.keyboard.press("Enter")
    expect(card(page, q).locator(".feedback")).to_have_attribute("data-verdict", "correct")


@pytest.mark.parametrize("qtype,typed,message", [
    ("numeric", "3개", "“%(value)s” is not a number. Enter digits only, e.g. 3 or 2.5."),
    ("single", None, "Choose an answer first."),
])
def test_a_refused_self_check_shows_its_message_in_the_card_even_with_debug_on(page, site, settings, qtype, typed, message):
    settings.DEBUG = True  # as `DEBUG=1 make run`: django-htmx's debug script is on the page
    q = Question.objects.filter(type=qtype).order_by("order").first()
    section = next(s for s in q.lesson.sections.all() if q.anchor in s.anchors)
    page.goto(f"{site}{section.get_absolute_url()}")
    expect(page.locator("script[src*='django-htmx.js']")).to_have_count(1)
    title = page.locator("article.section h1").inner_text()

    if typed:
        card(page, q).locator("input[name=value]").fill(typed)
    card(page, q).get_by_role("button", name="채점하기").click()

    with translation.override("ko"):
        expected = translation.gettext(message) % {"value": typed}
    error = card(page, q).locator(".feedback-error[role=alert]")
    expect(error).to_contain_text(expected)
    expect(page.locator("article.section h1")).to_have_text(title)  # still the lesson page
    expect(page).to_have_url(f"{site}{section.get_absolute_url()}")

    # The card still works: a real answer replaces the message with a verdict.
    if qtype == "numeric":
        card(page, q).locator("input[name=value]").fill("-1")
    else:
        card(page, q).locator("input[name=choice]").first.check()
    card(page, q).get_by_role("button", name="채점하기").click()
    expect(card(page, q).locator(".feedback")).to_have_attribute("data-verdict", re.compile("correct|wrong"))


def test_switch_the_ui_to_english(page, site):
    page.goto(f"{site}/lessons/21/s3/")
    expect(page.get_by_role("link", name="용어집")).to_be_visible()
    page.locator("#lang-select").select_option("en")
    page.get_by_test_id("lang-submit").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("link", name="Glossary")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/lessons/21/s3/$"))
    expect(page.locator("article.section h1")).to_contain_text("연속 배칭")  # the lesson stays Korean


@pytest.mark.parametrize("pool,reserved_max,paged_range", [(22000, 3, (13, 15)), (28000, 3, (17, 19))])
def test_calculator_reproduces_the_seeds_figures(page, site, pool, reserved_max, paged_range):
    page.goto(f"{site}/lessons/21/s1/")
    calc = page.locator("[data-calculator]")
    calc.locator("#calc-pool").fill(str(pool))
    calc.locator("#calc-maxlen").fill("8192")
    calc.locator("#calc-avg").fill("1500")
    calc.locator("#calc-block").fill("16")
    reserved = int(calc.locator("[data-calc=reserved-fit]").inner_text())
    paged = int(calc.locator("[data-calc=paged-fit]").inner_text())
    assert 2 <= reserved <= reserved_max  # "3개 남짓"
    assert paged_range[0] <= paged <= paged_range[1]  # "십수 개"
    calc.locator("#calc-block").fill("0")
    expect(calc.locator("[data-calc=error]")).not_to_be_empty()


def test_reaching_the_end_marks_the_section_read(page, site):
    page.goto(f"{site}/lessons/21/s0/")
    page.locator("#read-mark").scroll_into_view_if_needed()
    expect(page.locator("#read-mark")).to_have_attribute("data-read", "true", timeout=5000)
    page.goto(f"{site}/lessons/21/")
    expect(page.locator(".toc li[data-section=s0]")).to_have_attribute("data-read", "true")


def test_prompt_blocks_get_a_copy_button(page, site):
    page.goto(f"{site}/lessons/21/appendix-c/")
    expect(page.locator("button.copy-button").first).to_be_visible()


def test_no_page_scrolls_sideways_on_a_phone(browser, site):
    from courseapp.lessons.models import Section

    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    urls = ["/", "/lessons/21/", "/lessons/21/glossary/", "/progress/"] + [s.get_absolute_url() for s in Section.objects.all()]
    wide = {}
    for url in urls:
        page.goto(f"{site}{url}")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 390:
            wide[url] = width
    context.close()
    assert not wide, wide
