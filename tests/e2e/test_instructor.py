"""The instructor's dashboard in a real browser: a learner joins by the invite link and answers,
the heat map shows it, drill-down works by keyboard, axe finds nothing (issue #11)."""
import re

import pytest
from playwright.sync_api import expect

from courseapp.instructor import services
from courseapp.lessons.models import Lesson
from courseapp.quizzes.models import Question
from tests.answers import right_form
from tests.e2e.test_axe import violations
from tests.e2e.conftest import log_in

pytestmark = pytest.mark.e2e


def test_dashboard_shows_a_learners_real_attempts_and_drills_down_by_keyboard(browser, site):
    services.instructor_make(username="kim", password="a-long-passphrase-1")
    from django.contrib.auth import get_user_model

    cohort = services.cohort_create(instructor=get_user_model().objects.get(username="kim"), name="월요일 오전반",
                                    lesson=Lesson.objects.get(number=21))

    # A learner joins by the invite link and answers one self-check on its page.
    learner = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    learner.set_default_timeout(15_000)
    learner.goto(f"{site}/classes/join/{cohort.join_code}/")
    learner.get_by_label("이 수업에서 쓸 이름").fill("김하늘")  # a guest names themself for the instructor
    learner.locator("main form button[type=submit]").click()
    expect(learner.get_by_role("heading", level=1)).to_contain_text("월요일 오전반")
    question = Question.objects.filter(type="single").order_by("order").first()
    learner.goto(f"{site}/lessons/21/{question.anchor.split('-')[0]}/")
    card = learner.locator(f"#q-{question.slug}")
    card.locator(f"input[value='{right_form(question)['choice']}']").check()
    card.locator("button[type=submit]").click()
    expect(card.locator("[data-verdict]")).to_have_attribute("data-verdict", "correct")

    teacher = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    teacher.set_default_timeout(15_000)
    log_in(teacher, site, "kim", "a-long-passphrase-1")
    teacher.goto(f"{site}/teach/")
    teacher.get_by_role("link", name="월요일 오전반").click()
    heatmap = teacher.locator("table.heatmap")
    expect(heatmap.locator("tbody tr")).to_have_count(1)
    expect(heatmap.locator("tbody th")).to_contain_text("김하늘")
    objective = question.objective.order
    cell = heatmap.locator("tbody tr td.cell").nth(objective - 1)
    expect(cell).not_to_have_text("–")  # the learner's right answer counts towards its objective
    assert violations(teacher) == []

    teacher.locator("a[href='?basis=first']").click()  # htmx swaps the table, the URL follows
    expect(teacher).to_have_url(re.compile(r"\?basis=first$"))
    link = heatmap.locator("tbody th a")
    link.focus()
    teacher.keyboard.press("Enter")
    expect(teacher.locator("table.attempts")).to_contain_text(question.slug)
    assert violations(teacher) == []
    for page_name in ("items", "progress", "regrades", "lms-grades"):
        teacher.goto(f"{site}/teach/classes/{cohort.pk}/{page_name}/")
        assert violations(teacher) == [], page_name
        if page_name == "progress":
            expect(teacher.locator("table.progress-days tbody tr")).to_have_count(1)  # one day of answers
    from lti_tool.models import Key

    if not Key.objects.active().exists():  # migrate made one; an earlier transactional test emptied the table
        Key.objects.generate()
    teacher.goto(f"{site}/lti/")  # the LTI registration page an LMS administrator copies from
    expect(teacher.locator("pre.jwks")).to_contain_text('"kty": "RSA"')
    assert violations(teacher) == []
