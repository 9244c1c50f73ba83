"""The §6 lab end to end on a live Daphne: the page runs the five experiments over the HTTP API
against an engine with the learner's knobs, shows the table with raw outputs, the /metrics series,
the log; CSV and JSON come down; `run_lab` prints the same table against the same server."""
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from courseapp.lab import report as lab_report
from tests.e2e.conftest import start_daphne, stop_process
from tests.e2e.test_axe import violations

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
TITLES = ["1. 요청 1건", "2. 같은 요청 8건 동시", "3a. 긴 공통 시스템 프롬프트 ×2", "3b. 맨 앞에 현재 시각 ×2", "4. /metrics 시계열", "5. 선점",
          "6. 동시 요청 수를 늘려 가며", "7. 정적 배칭 ↔ 연속 배칭"]


@pytest.fixture(scope="module")
def lab_server(django_db_setup, django_db_blocker):
    # Short answers keep it quick; /metrics sampled often so experiment 2 has a series.
    with django_db_blocker.unblock():
        # The lab's engines in the engine process, as `make run` hosts them (the live view's frames cross its pipe).
        proc, url, log = start_daphne({"LAB_MAX_TOKENS": "16", "LAB_SAMPLE_EVERY_S": "0.1", "SERVING_ENGINE_PROCESS": "1"})
    yield url
    stop_process(proc)
    log.close()


@pytest.mark.django_db(transaction=True)
def test_the_lab_page_runs_five_experiments_and_reports_them(browser, lab_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{lab_server}/lab/?preset=small-pool")
    assert violations(page) == []
    page.locator(".lab-submit button").click()
    expect(page.get_by_test_id("lab-status")).to_be_visible()
    expect(page.locator(".lab-table")).to_be_visible(timeout=240_000)  # the progress panel reloads the page at the end

    rows = page.locator(".lab-table tbody tr")
    assert [rows.nth(i).locator("th").inner_text() for i in range(rows.count())] == TITLES
    single = page.locator('tr[data-experiment="1"]')
    assert "토큰/초" in single.inner_text() and single.locator("pre").inner_text().strip(), "the raw answer is there"
    assert "캐시 0토큰" in page.locator('tr[data-experiment="3s"]').inner_text()
    series = page.locator(".lab-series tbody tr")
    assert series.count() >= 2, "experiment 2 was sampled"
    assert page.locator(".lab-chart svg polyline.running").get_attribute("points")
    assert len(page.locator(".lab-chart svg polyline.server").get_attribute("points").split()) == 5, "the sweep's chart"
    assert "Engine 000: Avg prompt throughput:" in page.locator(".lab-log").first.inner_text()
    assert "vllm serve engine/models/munuibot-tiny" in page.locator(".lab-launch").inner_text()
    assert "--max-num-seqs 32" in page.locator(".lab-launch").inner_text()
    assert "정적:" in page.locator('tr[data-experiment="7"]').inner_text(), "static against continuous, measured"
    assert violations(page) == []
    page.set_viewport_size({"width": 390, "height": 844})  # the report on a phone
    assert violations(page) == []
    page.set_viewport_size({"width": 1280, "height": 900})

    with page.expect_download() as caught:
        page.get_by_role("link", name="CSV").click()
    table = list(csv.reader(io.StringIO(Path(caught.value.path()).read_text(encoding="utf-8-sig"))))
    assert table[0] == ["실험", "조건", "측정값", "출력 원문"] and [r[0] for r in table[1:9]] == TITLES
    with page.expect_download() as caught:
        page.get_by_role("link", name="JSON").click()
    data = json.loads(Path(caught.value.path()).read_text(encoding="utf-8"))
    assert data["knobs"]["v0_preemption_warnings"] is True and len(data["concurrent"]["requests"]) == 8
    assert "<run>" in data["settings"]["base_url"], "the run's engine token is not kept"

    # Again with prefix caching off, then the two side by side.
    page.goto(f"{lab_server}/lab/?preset=no-prefix-cache")
    page.locator(".lab-submit button").click()
    expect(page.locator(".lab-table")).to_be_visible(timeout=240_000)
    assert "캐시 0토큰" in page.locator('tr[data-experiment="3s"]').inner_text()
    page.goto(f"{lab_server}/lab/")
    page.get_by_role("button", name="나란히 비교").or_(page.locator("form[action$='/lab/compare/'] button")).first.click()
    expect(page.locator(".lab-compare section")).to_have_count(2)
    assert "badge" in page.locator(".lab-compare-knobs tr", has_text="enable_prefix_caching").inner_html()
    assert violations(page) == []
    context.close()


@pytest.mark.django_db(transaction=True)
def test_the_live_view_draws_the_lab_runs_own_requests_as_they_are_served(browser, lab_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{lab_server}/lab/")
    page.locator(".lab-submit button").click()
    href = page.get_by_role("link", name=re.compile("실시간")).get_attribute("href")
    view = context.new_page()
    view.set_default_timeout(120_000)
    view.goto(lab_server + href)
    expect(view.locator("[data-lanes] .lane")).to_have_count(1)
    expect(view.locator("[data-lanes] li[data-request]").first).to_be_visible()  # a request the lab sent, drawn
    assert view.locator("[data-lanes] .block").count() > 0, "the pool is drawn"
    assert violations(view) == []
    view.set_viewport_size({"width": 390, "height": 844})
    assert violations(view) == []
    expect(page.locator(".lab-table")).to_be_visible(timeout=240_000)  # the run ends as before
    context.close()


def test_run_lab_prints_the_same_table_against_the_live_server(lab_server, tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "manage.py", "run_lab", "--base-url", lab_server, "--max-tokens", "16", "--sample-every", "0.2",
         "--concurrency", "3", "--launch-command", "make run", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "courseapp.settings.test"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    for row in lab_report.rows(report):
        assert f"■ {row['experiment']}" in done.stdout and row["measure"] in done.stdout
    assert "■ 2. 같은 요청 3건 동시" in done.stdout
    assert "기동 명령 원문: make run" in done.stdout
    assert report["metric_names"]["kv"] == "vllm:kv_cache_usage_perc" and report["logs"] is None
    assert report["prefix"]["same"][1]["cached_tokens"] > 0, "the site's engine caches the shared prompt"
    assert report["batching"] is None and "7. 정적" not in done.stdout, "another server has no static mode to compare"


def test_run_lab_says_clearly_when_no_server_answers(tmp_path):
    done = subprocess.run([sys.executable, "manage.py", "run_lab", "--base-url", "http://127.0.0.1:9", "--max-tokens", "4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "courseapp.settings.test"})
    assert done.returncode != 0 and "could not reach the server" in done.stderr
