"""Scaled mode end to end and under faults: real Redis, real `celery worker` processes on the
engine queue, Daphne, websocket clients (issue #8)."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from django.utils import timezone

from courseapp.demo.models import DemoRun
from tests.aio import run_in_fresh_loop
from tests.e2e import clients
from tests.e2e.clients import Browser
from tests.e2e.conftest import free_port, server_database_url, start_daphne, stop_process, wait_until

pytestmark = pytest.mark.e2e
# A database of its own per pytest-xdist worker (gw0 → 9, gw1 → 8, …): a test flushes it, and its
# Celery workers take every task queued on it. test_scaled_api.py shares these fixtures.
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
REDIS_URL = os.environ.get("TEST_REDIS_URL", f"redis://127.0.0.1:6379/{9 - XDIST_WORKER}")
ROOT = Path(__file__).resolve().parents[2]


def worker_env(redis_url: str, **extra) -> dict:
    return {**os.environ, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "courseapp.settings.test",
            "DATABASE_URL": server_database_url(), "PYTHONUNBUFFERED": "1", **extra}


class Workers:
    """`celery worker` processes started the way the README says, each with a name of its own."""

    def __init__(self, redis_url: str):
        self.redis_url, self.procs, self.logs = redis_url, [], []

    def start(self, name: str, concurrency: int = 2, **env) -> subprocess.Popen:
        celery = Path(sys.executable).with_name("celery")
        log = open(ROOT / f".test-worker-{name}.log", "w")
        proc = subprocess.Popen(
            [str(celery), "-A", "courseapp", "worker", "-Q", "engine", "--pool", "threads", "-c", str(concurrency),
             "-n", f"{name}@%h", "-l", "info", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=worker_env(self.redis_url, **env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for log in self.logs:
            log.close()


def flush(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()


@pytest.fixture
def web(transactional_db, request):
    """Daphne in scaled mode (REDIS_URL), with the settings a test passes as its param."""
    flush(REDIS_URL)
    proc, url, log = start_daphne({"REDIS_URL": REDIS_URL, "DEMO_MAX_RUNS_PER_ADDRESS": "10",
                                   **getattr(request, "param", {})})
    yield url
    stop_process(proc)
    log.close()


@pytest.fixture
def workers():
    pool = Workers(REDIS_URL)
    yield pool
    pool.stop_all()


def status_of(run_id: str) -> tuple[str, str]:
    return tuple(DemoRun.objects.filter(pk=run_id).values_list("status", "end_reason").get())


async def watch(url: str, run_id: str, until, timeout: float, send=None, cookie: str = ""):
    """The run's socket until `until(message)`; `cookie`: the session of whoever started the run
    (only its owner may send prompts into it)."""
    return await clients.watch(clients.run_socket(url, run_id), until, timeout, send=send, cookie=cookie)


def owned_blocks(message):
    return [b for lane in message.get("lanes", []) for b in lane["blocks"] if b[4]]


ended = clients.ended


def test_a_fresh_worker_serves_its_first_run_streams_blocks_and_its_death_is_reported(web, workers):
    worker = workers.start("first")
    me = Browser(web)
    status, started = me.start(preset="reservation")  # at once: the worker may still be loading the model
    assert status == 201
    last = run_in_fresh_loop(lambda: watch(web, started["run"], ended, timeout=120))
    assert last["status"] == "finished", last
    wait_until(lambda: status_of(started["run"])[0] != "running", 10, "the end to be written")
    assert status_of(started["run"]) == ("finished", "")

    # A learner's own open run: prompts in, blocks out, from the worker.
    status, started = me.start(num_blocks=64)
    run_id = started["run"]
    frame = run_in_fresh_loop(lambda: watch(web, run_id, lambda m: bool(owned_blocks(m)), timeout=60, cookie=me.cookie_header(),
                                            send={"type": "submit", "prompt": "배송이 언제 오나요?", "max_tokens": 200}))
    assert owned_blocks(frame), "block events for the submitted request arrived from the worker"
    assert DemoRun.objects.get(pk=run_id).host.startswith("first@")

    os.killpg(worker.pid, signal.SIGKILL)  # the worker dies mid-run, someone watching
    worker.wait(10)
    failed = run_in_fresh_loop(lambda: watch(web, run_id, lambda m: m.get("status") == "failed", timeout=40))
    run = DemoRun.objects.get(pk=run_id)
    assert (run.status, run.end_reason) == ("failed", "worker_lost")
    assert failed["message"] == run.error and "first@" in failed["message"]  # names the worker that was lost


@pytest.mark.parametrize("web", [{"DEMO_STEP_DELAY": "0.03"}], indirect=True)
def test_four_runs_on_one_worker_of_two_seats_wait_their_turn_and_all_finish(web, workers):
    workers.start("solo", concurrency=2)
    wait_until(lambda: b"ready" in (ROOT / ".test-worker-solo.log").read_bytes(), 60, "the worker to be ready")
    runs = []
    for _ in range(4):
        status, started = Browser(web).start(preset="reservation")
        assert status == 201
        runs.append(started["run"])
    samples = []  # (on the worker, queued) seen while they ran
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        states = list(DemoRun.objects.filter(pk__in=runs).values_list("status", flat=True))
        samples.append((states.count("starting") + states.count("running"), states.count("queued")))
        DemoRun.objects.filter(pk__in=runs, status__in=DemoRun.ACTIVE).update(watched_at=timezone.now())  # as viewers would
        if all(s not in DemoRun.ACTIVE for s in states):
            break
        time.sleep(0.05)
    assert max(on for on, _ in samples) == 2, "never more runs at once than the worker has seats"
    assert (2, 2) in samples, "two on the worker while the other two waited their turn"
    assert sorted(DemoRun.objects.filter(pk__in=runs).values_list("status", flat=True)) == ["finished"] * 4


@pytest.mark.parametrize("web", [{"DEMO_PICKUP_WITHIN_S": "3"}], indirect=True)
def test_with_no_worker_a_run_waits_queued_then_fails_saying_no_worker_took_it(web):
    me = Browser(web)
    status, started = me.start(preset="reservation")
    assert status == 201
    first = run_in_fresh_loop(lambda: watch(web, started["run"], lambda m: m.get("type") == "status", timeout=10))
    assert (first["status"], first["place"], first["waiting"]) == ("queued", 1, 1)
    wait_until(lambda: status_of(started["run"])[0] == "failed", 20, "the reaper")
    run = DemoRun.objects.get(pk=started["run"])
    assert run.end_reason == "no_worker" and "3" in run.error


def test_a_killed_worker_nobody_watches_is_found_by_the_reaper_and_frees_its_seat(web, workers):
    worker = workers.start("lonely")
    status, started = Browser(web).start(num_blocks=64)  # an open run: it waits for prompts, nobody watches
    run_id = started["run"]
    wait_until(lambda: status_of(run_id)[0] == "running", 60, "the run to start")
    os.killpg(worker.pid, signal.SIGKILL)
    wait_until(lambda: status_of(run_id)[0] != "running", 40, "the reaper")  # heartbeat stale after 10 s, reaped every 5
    assert status_of(run_id) == ("failed", "worker_lost")
    assert not DemoRun.objects.filter(status__in=DemoRun.ACTIVE).exists()  # its seat is free


def test_sigterm_stops_an_open_run_saying_the_worker_shut_down_and_the_worker_exits(web, workers):
    """A warm shutdown does not wait for its runs: an open run (which would wait ten minutes for
    prompts) is stopped, its page is told why, and the worker exits cleanly. Checked by what
    happened, never by how long it took (the waits below only keep a broken worker from hanging
    the suite)."""
    worker = workers.start("leaving")
    status, started = Browser(web).start(num_blocks=64)
    run_id = started["run"]
    wait_until(lambda: status_of(run_id)[0] == "running", 60, "the run to start")
    watching, seen = threading.Event(), {}

    def until(message):
        watching.set()
        return ended(message)

    def viewer():
        seen["last"] = run_in_fresh_loop(lambda: watch(web, run_id, until, timeout=120))

    page = threading.Thread(target=viewer, daemon=True)
    page.start()
    assert watching.wait(60), "the page gets the run's frames"
    os.killpg(worker.pid, signal.SIGTERM)  # a warm shutdown, as systemd or Ctrl-C sends
    assert worker.wait(120) == 0, "the worker exits cleanly"
    page.join(120)
    last = seen.get("last") or {}
    assert (last.get("status"), last.get("reason")) == ("stopped", "worker_shutdown"), "the page says why it ended"
    assert status_of(run_id) == ("stopped", "worker_shutdown")


def test_two_workers_share_the_runs_and_the_page_names_each_runs_host(web, workers):
    workers.start("left", concurrency=1)
    workers.start("right", concurrency=1)
    for name in ("left", "right"):
        wait_until(lambda name=name: b"ready" in (ROOT / f".test-worker-{name}.log").read_bytes(), 60, f"{name} to be ready")
    owners = [Browser(web) for _ in range(2)]
    runs = [owner.start(num_blocks=64)[1]["run"] for owner in owners]
    wait_until(lambda: all(status_of(r)[0] == "running" for r in runs), 60, "both runs to start")
    hosts = {DemoRun.objects.get(pk=r).host.split("@")[0] for r in runs}
    assert hosts == {"left", "right"}
    for owner, run_id in zip(owners, runs):
        page = owner.get(f"/demo/runs/{run_id}/summary/")[1]
        assert DemoRun.objects.get(pk=run_id).host in page


def test_a_class_run_reaches_a_hall_split_over_two_daphnes_on_one_redis(web, workers):
    """A lecture hall (issue #14): the instructor opens a class run on one web process, viewers
    watch it through two, and everyone's picture — built from one snapshot and the deltas that
    crossed Redis — shows the same answer. A viewer on the second process that asks for a
    snapshot gets it from the worker, through Redis, on its own socket."""
    import asyncio

    from courseapp.instructor.services import instructor_make

    workers.start("hall", concurrency=2)
    other, other_url, other_log = start_daphne({"REDIS_URL": REDIS_URL, "DEMO_MAX_RUNS_PER_ADDRESS": "10"})
    try:
        instructor_make(username="prof", password="a-long-passphrase-1")
        teacher = Browser(web)
        teacher.get("/accounts/login/")
        assert teacher.post("/accounts/login/", {"username": "prof", "password": "a-long-passphrase-1"})[0] == 200
        assert teacher.post("/demo/class/")[0] == 200  # redirected to the run's page
        run_id = str(DemoRun.objects.get(is_class=True).pk)
        wait_until(lambda: status_of(run_id)[0] == "running", 60, "the class run to start on the worker")

        def answered(message):
            requests = [r for lane in message.get("lanes", []) for r in lane["requests"]]
            return bool(requests) and requests[0]["status"] == "finished"

        async def hall():
            viewers = [clients.watch(clients.run_socket(url, run_id), answered, timeout=120,
                                     send={"type": "snapshot"} if url == other_url else None)
                       for url in (web, other_url, web, other_url)]
            prompt = clients.watch(clients.run_socket(web, run_id), answered, timeout=120, cookie=teacher.cookie_header(),
                                   send={"type": "submit", "prompt": "배송이 언제 오나요?", "max_tokens": 16})
            return await asyncio.gather(prompt, *viewers)

        pictures = run_in_fresh_loop(hall, timeout=180)
        answers = {p["lanes"][0]["requests"][0]["text"] for p in pictures}
        assert len(answers) == 1 and answers != {""}, "every viewer, on either process, saw the same answer"
        assert DemoRun.objects.get(pk=run_id).host.startswith("hall@")
    finally:
        stop_process(other)
        other_log.close()


def test_a_worker_without_a_broker_a_database_or_its_flags_refuses_to_start(transactional_db):
    celery = Path(sys.executable).with_name("celery")
    env = {k: v for k, v in worker_env("").items() if k not in ("REDIS_URL", "DATABASE_URL")}
    out = subprocess.run([str(celery), "-A", "courseapp", "worker", "-Q", "engine", "--pool", "threads"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    said = out.stderr + out.stdout
    assert out.returncode != 0
    assert "REDIS_URL is not set" in said and "DATABASE_URL is not set" in said and "--without-gossip" in said


def test_a_worker_keeps_serving_after_its_redis_restarts(transactional_db, tmp_path):
    """A Redis of the test's own, killed and started again mid-run: the worker reconnects by
    itself and takes new runs without a restart."""
    port = free_port()
    redis_url = f"redis://127.0.0.1:{port}/0"

    def start_redis():
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _pings(redis_url), 10, "redis")
        return proc

    server = start_redis()
    web_proc, url, log = start_daphne({"REDIS_URL": redis_url, "DEMO_MAX_RUNS_PER_ADDRESS": "10"})
    pool = Workers(redis_url)
    try:
        pool.start("sturdy")
        me = Browser(url)
        status, started = me.start(preset="reservation")
        assert status == 201
        wait_until(lambda: status_of(started["run"])[0] in ("running", "finished"), 60, "the first run")
        server.kill()
        server.wait(10)
        time.sleep(1)  # down long enough for the worker's next read to fail
        server = start_redis()
        wait_until(lambda: status_of(started["run"])[0] not in DemoRun.ACTIVE, 90, "the first run to end")
        status, again = Browser(url).start(preset="reservation")  # a new run after the restart
        assert status == 201
        wait_until(lambda: status_of(again["run"])[0] not in DemoRun.ACTIVE, 90, "a run after the restart")
        assert status_of(again["run"]) == ("finished", "")
        assert pool.procs[0].poll() is None, "the worker is still up"
    finally:
        pool.stop_all()
        stop_process(web_proc)
        log.close()
        server.kill()
        server.wait(10)


def _pings(redis_url: str) -> bool:
    try:
        return redis.Redis.from_url(redis_url, socket_connect_timeout=0.5).ping()
    except redis.ConnectionError:
        return False
