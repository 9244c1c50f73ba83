"""Each lesson scene from its URL, in the system Chromium, against Daphne with the real engine.
A scene's page starts its run with a POST from its script; reading the page starts nothing."""
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def open_preset(page, site, name):
    page.goto(f"{site}/demo/?preset={name}")
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=120_000)
    return page


def test_a_scene_page_starts_its_run_and_a_second_scene_stops_the_first_saying_so(demo_page, asgi_site):
    from courseapp.demo.models import DemoRun

    first = demo_page
    first.goto(f"{asgi_site}/demo/?preset=preemption&paused=1")
    expect(first.locator("#demo")).to_have_attribute("data-state", "paused", timeout=60_000)
    expect(first).to_have_url(re.compile(r"/demo/runs/[0-9a-f-]{36}/$"))  # a reload shows this run, starts none
    second = first.context.new_page()
    second.goto(f"{asgi_site}/demo/?preset=concurrency&paused=1")
    expect(second.locator("[data-notice]")).to_contain_text("KV 캐시가 꽉 차면")  # the previous run's title
    expect(first.locator("#demo")).to_have_attribute("data-state", "stopped", timeout=30_000)
    expect(first.locator("p[data-status]")).to_have_text("멈춤: 다른 장면을 열었습니다")
    assert list(DemoRun.objects.values_list("preset", "status").order_by("created_at")) == [
        ("preemption", "stopped"), ("concurrency", "running")]


def metric(page, lane, name):
    return float(page.locator(f"[data-lane={lane}] [data-metric={name}]").get_attribute("data-value").rstrip("%"))


def test_reservation_fits_fewer_requests_than_paged_blocks(demo_page, asgi_site):
    page = demo_page
    page.goto(f"{asgi_site}/demo/?preset=reservation")
    expect(page.locator("[data-lane=reserve] .block[data-owner]:not([data-owner=''])").first).to_be_visible(timeout=60_000)
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=120_000)
    assert metric(page, "reserve", "peak-running") < metric(page, "paged", "peak-running")
    assert metric(page, "reserve", "steps") > metric(page, "paged", "steps")


def test_static_takes_more_steps_than_continuous(demo_page, asgi_site):
    page = open_preset(demo_page, asgi_site, "static-vs-continuous")
    assert metric(page, "static", "steps") > metric(page, "continuous", "steps")
    idle_static = page.locator("[data-lane=static] td[data-code='']").count()
    assert idle_static > 0


def test_concurrency_eight_requests_share_the_steps(demo_page, asgi_site):
    page = open_preset(demo_page, asgi_site, "concurrency")
    assert metric(page, "eight", "tokens") == 8 * metric(page, "one", "tokens")
    assert metric(page, "eight", "steps") < 2 * metric(page, "one", "steps")  # 8× the tokens in about as many steps


def test_prefix_caching_shares_blocks_for_the_repeat_and_not_for_timestamped_prompts(demo_page, asgi_site):
    page = demo_page
    page.goto(f"{asgi_site}/demo/?preset=prefix-caching&paused=1")  # step through it: no race with the engine
    expect(page.locator("#demo")).to_have_attribute("data-state", "paused", timeout=60_000)
    shared = page.locator("[data-lane=cache] .block[data-refcount='2']")
    steps = page.locator("[data-lane=cache] [data-metric=steps]")
    for _ in range(40):
        before = steps.get_attribute("data-value") if steps.count() else None
        page.locator("[data-action=step]").click()
        expect(steps).not_to_have_attribute("data-value", before or "-1")
        if shared.count():
            break
    expect(shared.first).to_be_attached()
    page.locator("[data-action=pause]").click()  # resume
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=120_000)
    outputs = page.locator("[data-lane=cache] .outputs li")
    cached = {li.get_attribute("data-request"): int(li.get_attribute("data-cached-tokens")) for li in outputs.all()}
    assert cached["same-2"] > 0
    assert cached["time-1"] == 0 and cached["time-2"] == 0
    assert metric(page, "cache", "hit-rate") > 0


def test_preemption_is_counted_marked_and_logged(demo_page, asgi_site):
    page = open_preset(demo_page, asgi_site, "preemption")
    assert metric(page, "small", "preemptions") > 0
    expect(page.locator("[data-lane=small] td[data-code=X]").first).to_be_attached()
    expect(page.locator("[data-lane=small] [data-log]")).to_contain_text("PreemptionMode.RECOMPUTE")


def test_my_own_run_takes_prompts_and_obeys_pause_step_resume_from_the_keyboard(demo_page, asgi_site):
    page = demo_page
    page.goto(f"{asgi_site}/demo/")
    page.locator("input[name=num_blocks]").fill("64")
    page.get_by_role("button", name="내 엔진 시작").click()
    expect(page.locator("#demo")).to_have_attribute("data-state", "running", timeout=60_000)

    pause = page.locator("[data-action=pause]")
    pause.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#demo")).to_have_attribute("data-state", "paused")

    prompt = page.locator("#demo-prompt")
    prompt.fill("환불은 언제 되나요?")
    prompt.focus()
    page.keyboard.press("Tab")  # to max_tokens
    page.keyboard.press("Enter")  # submits the form
    lane = page.locator("[data-lane=mine]")
    expect(lane.locator(".outputs li")).to_have_count(1)
    expect(lane.locator("[data-queue=waiting] .chip")).to_have_count(1)  # paused: admitted by no step yet

    page.locator("[data-action=step]").focus()
    page.keyboard.press("Enter")
    expect(lane.locator("[data-metric=steps]")).to_have_attribute("data-value", "1")
    expect(lane.locator(".block[data-refcount='1']").first).to_be_attached()

    pause.focus()
    page.keyboard.press("Enter")  # resume
    expect(lane.locator(".outputs li[data-status=finished]")).to_have_count(1, timeout=60_000)
    assert lane.locator(".outputs li .answer").inner_text().strip()


def test_a_finished_run_replays_from_its_trace_and_has_a_table_view(demo_page, asgi_site):
    page = open_preset(demo_page, asgi_site, "preemption")
    page.locator("[data-action=table]").click()
    expect(page.locator("[data-lane=small] .pool-table")).to_be_visible()
    page.locator("[data-action=replay]").click()
    expect(page.locator("#demo")).to_have_attribute("data-state", "replay")
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=60_000)


def test_a_block_tells_which_tokens_it_holds(demo_page, asgi_site):
    page = demo_page
    page.goto(f"{asgi_site}/demo/?preset=preemption&paused=1")
    expect(page.locator("#demo")).to_have_attribute("data-state", "paused", timeout=30_000)
    page.locator("[data-action=step]").click()
    block = page.locator("[data-lane=small] .block.used").first
    expect(block).to_have_attribute("title", re.compile("“.+”", re.S), timeout=30_000)
    page.locator("[data-action=table]").click()  # the same, for keyboard and screen-reader users
    expect(page.locator("[data-lane=small] .pool-table td.tokens").first).not_to_be_empty()
    page.locator("[data-action=pause]").click()  # resume


def test_class_mode_learners_requests_interleave_in_the_instructors_run(browser, asgi_site):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("teacher", password="a-long-passphrase-1", is_staff=True)
    teacher = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    teacher.set_default_timeout(60_000)
    teacher.goto(f"{asgi_site}/accounts/login/")
    teacher.locator("input[name=username]").fill("teacher")
    teacher.locator("input[name=password]").fill("a-long-passphrase-1")
    teacher.locator("form.auth-form button[type=submit]").click()
    teacher.goto(f"{asgi_site}/demo/")
    teacher.get_by_role("button", name="수업용 공유 실행 열기").click()
    code = teacher.locator("[data-join-code]").inner_text()
    expect(teacher.locator("#demo")).to_have_attribute("data-state", "running")

    learners = []
    for i in range(2):
        page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{asgi_site}/demo/")
        page.locator("input[name=code]").fill(code.lower())  # typed as read off the projector
        page.locator("input[name=display_name]").fill(f"학생{i}")
        page.get_by_role("button", name="참여").click()
        expect(page.locator("[data-join-code]")).to_have_text(code)
        expect(page.locator("[data-action=pause]")).to_have_count(0)  # only the instructor drives
        page.locator("#demo-prompt").fill(f"학생 {i}의 문의: 배송은 언제 오나요?")
        page.get_by_role("button", name="보내기").click()
        learners.append(page)

    outputs = teacher.locator("[data-lane=mine] .outputs li")
    expect(outputs).to_have_count(2)
    # Everyone sees the names the learners chose, never usernames or guest ids.
    expect(teacher.locator("[data-lane=mine] .outputs li .owner")).to_have_text(["학생0", "학생1"])
    expect(learners[0].locator("[data-lane=mine] .outputs li")).to_have_count(2)  # everyone sees one pool
    expect(teacher.locator("[data-lane=mine] .outputs li[data-status=finished]")).to_have_count(2, timeout=90_000)
    for page in [teacher, *learners]:
        page.context.close()
