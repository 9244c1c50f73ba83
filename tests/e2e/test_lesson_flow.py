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
    expect(card(page, q).locator("button[type=submit]")).to_be_focused()  # not dropped to <body>


def test_after_the_key_is_shown_the_feedback_stops_asking_for_another_try(page, site):
    """Two wrong tries reveal the key; "see §x and try again" beside it asked for a pointless
    third try (issue #33). Keyboard only: focus stays on the submit button after each grading."""
    q = Question.objects.filter(type="single").order_by("order").first()
    section = next(s for s in q.lesson.sections.all() if q.anchor in s.anchors)
    page.goto(f"{site}{section.get_absolute_url()}")
    wrong = next(shown_id(q, "choice", c["id"]) for c in q.public["choices"] if c["id"] != q.key["answer"])
    submit = card(page, q).locator("button[type=submit]")
    feedback = card(page, q).locator(".feedback")
    for attempt in (1, 2):
        card(page, q).locator(f"input[value='{wrong}']").check()
        submit.focus()
        page.keyboard.press("Enter")
        expect(feedback).to_have_attribute("data-verdict", "wrong")
        expect(submit).to_be_focused()
        if attempt == 1:
            expect(feedback).to_contain_text("다시 풀어")
            expect(feedback.locator(".reveal")).to_have_count(0)
    expect(feedback.locator(".reveal")).to_have_count(1)
    expect(feedback).not_to_contain_text("다시 풀어")


@pytest.mark.parametrize("qtype,typed,message", [
    ("numeric", "세 개", "“%(value)s” is not a number. Enter a number such as 3 or 2.5 (a unit after it is fine, e.g. 3 blocks)."),
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
    expect(page.get_by_test_id("section-progress")).to_contain_text("0개 읽음")
    page.locator("#read-mark").scroll_into_view_if_needed()
    expect(page.locator("#read-mark")).to_have_attribute("data-read", "true", timeout=5000)
    # The page's count and the contents' ✓ follow at once, not after a reload (issue #33).
    expect(page.get_by_test_id("section-progress")).to_contain_text("1개 읽음")
    expect(page.locator(".toc li[data-section=s0] .read-mark")).to_contain_text("✓")
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


def phone(browser):
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    return context, page


def test_a_tap_on_a_glossary_term_opens_its_popover_and_a_second_tap_the_glossary(browser, site):
    context, page = phone(browser)
    page.goto(f"{site}/lessons/21/s2/")
    term = page.locator(".lesson-body .gloss-term").nth(1)
    tip = page.locator(f"#{term.get_attribute('aria-describedby')}")
    term.tap()
    expect(tip).to_be_visible()
    expect(page).to_have_url(re.compile(r"/lessons/21/s2/$"))  # still reading
    box = tip.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box  # inside the phone's screen
    page.locator("article h1").tap()
    expect(tip).to_be_hidden()  # a tap elsewhere closes it
    term.tap()
    term.tap()
    expect(page).to_have_url(re.compile(r"/lessons/21/glossary/#g-"))
    context.close()


def test_the_keyboard_still_follows_a_glossary_link(page, site):
    page.goto(f"{site}/lessons/21/s2/")
    term = page.locator(".lesson-body .gloss-term").first
    slug = term.get_attribute("data-term")
    term.focus()
    expect(page.locator(f"#{term.get_attribute('aria-describedby')}")).to_be_visible()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(f"/lessons/21/glossary/#g-{slug}$"))


def test_fewer_glossary_links_before_the_first_question(page, site):
    """§2 had 51 term links: 76 Tab presses from the top to its first question."""
    page.goto(f"{site}/lessons/21/s2/")
    first_input = page.locator(".section-check .question input, .section-check .question select").first
    first_input.wait_for()
    presses = 0
    while presses < 80:
        page.keyboard.press("Tab")
        presses += 1
        if first_input.evaluate("el => el === document.activeElement"):
            break
    assert presses < 76, presses  # now about 50


def test_the_table_of_contents_stays_in_view_and_follows_the_reader(page, site):
    page.goto(f"{site}/lessons/21/s2/")
    sub = page.locator(".toc-sub a[data-anchor=s2-3]")
    expect(sub).to_be_visible()
    page.evaluate("document.getElementById('s2-3').scrollIntoView()")
    expect(sub).to_be_in_viewport()  # sticky beside the text
    expect(sub).to_have_attribute("aria-current", "location")
    sub2 = page.locator(".toc-sub a[data-anchor=s2-1]")
    sub2.click()
    expect(page).to_have_url(re.compile(r"#s2-1$"))
    expect(page.locator("#s2-1")).to_be_in_viewport()


def test_on_a_phone_the_tab_order_follows_what_the_eye_sees(browser, site):
    context, page = phone(browser)
    page.goto(f"{site}/lessons/21/s3/")
    summary = page.locator(".sidebar-summary")
    expect(page.locator(".sidebar-box")).not_to_have_attribute("open", "")  # one closed line above the text
    expect(page.locator(".sidebar .toc")).to_be_hidden()
    # Tab from the header onwards: every focus lands at or below the previous one on screen.
    page.locator("#lang-select").focus()
    last_y, seen_summary = -1, False
    for _ in range(25):
        page.keyboard.press("Tab")
        y = page.evaluate("document.activeElement.getBoundingClientRect().top + window.scrollY")
        assert y >= last_y - 1, (page.evaluate("document.activeElement.outerHTML.slice(0, 120)"), y, last_y)
        last_y = y
        seen_summary = seen_summary or page.evaluate("document.activeElement.matches('.sidebar-summary')")
    assert seen_summary
    summary.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".sidebar .toc-sub a").first).to_be_visible()
    context.close()


def test_every_control_is_at_least_24_px(browser, site):
    context, page = phone(browser)
    small = {}
    for url in ["/lessons/21/s3/", "/lessons/21/s1/", "/accounts/signup/", "/progress/"]:
        page.goto(f"{site}{url}")
        found = page.evaluate("""() => [...document.querySelectorAll(
                'button, select, input:not([type=hidden]), summary, .toc a, .pager a, .scene-link a')]
            .filter(el => el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden')
            .map(el => [el.id || el.className || el.tagName, // a radio or checkbox is hit through its whole label
                           (el.matches('[type=radio], [type=checkbox]') && el.closest('label') || el).getBoundingClientRect().height])
            .filter(([, h]) => h < 24)""")
        if found:
            small[url] = found
    context.close()
    assert not small, small


def test_resume_goes_to_the_first_section_not_yet_read(page, site):
    for slug in ("s0", "s1"):
        page.goto(f"{site}/lessons/21/{slug}/")
        page.locator("#read-mark").scroll_into_view_if_needed()
        expect(page.locator("#read-mark")).to_have_attribute("data-read", "true")
    page.goto(f"{site}/lessons/21/")
    page.get_by_test_id("resume").click()
    expect(page).to_have_url(re.compile(r"/lessons/21/s2/$"))
    expect(page.get_by_test_id("section-progress")).to_have_text(re.compile(r"Section 3 of 10 · 2 read|10.*3.*2"))


def test_a_chosen_matching_answer_shows_whole_on_a_phone(browser, site):
    """A closed select shows one line; on a phone the chosen answer's full text appears under it."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(f"{site}/lessons/21/s2/")
    select = page.locator("table.matching select").first
    longest = max(select.locator("option").all_text_contents()[1:], key=len)
    select.select_option(label=longest)
    echo = select.locator("xpath=..").locator("[data-match-echo]")
    expect(echo).to_be_visible()
    expect(echo).to_have_text(longest)
    assert echo.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "the whole answer fits its line(s)"
    context.close()
