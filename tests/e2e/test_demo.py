"""Each lesson scene from its URL, in the system Chromium, against Daphne with the real engine."""
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def open_preset(page, site, name):
    page.goto(f"{site}/demo/?preset={name}")
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=120_000)
    return page


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
    page.goto(f"{asgi_site}/demo/?preset=prefix-caching")
    expect(page.locator("[data-lane=cache] .block[data-refcount='2']").first).to_be_attached(timeout=60_000)
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


def test_controls_work_from_the_keyboard_and_replay_plays_the_trace(demo_page, asgi_site):
    page = demo_page
    page.goto(f"{asgi_site}/demo/?preset=preemption")
    pause = page.locator("[data-action=pause]")
    pause.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#demo")).to_have_attribute("data-state", "paused", timeout=30_000)
    steps = metric(page, "small", "steps")
    page.locator("[data-action=step]").focus()
    page.keyboard.press("Enter")
    expect(page.locator("[data-lane=small] [data-metric=steps]")).not_to_have_attribute("data-value", str(int(steps)), timeout=30_000)
    page.locator("[data-action=speed]").select_option("4")
    pause.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=120_000)
    page.locator("[data-action=table]").click()
    expect(page.locator("[data-lane=small] .pool-table")).to_be_visible()
    page.locator("[data-action=replay]").click()
    expect(page.locator("#demo")).to_have_attribute("data-state", "replay")
    expect(page.locator("#demo")).to_have_attribute("data-state", "finished", timeout=60_000)
