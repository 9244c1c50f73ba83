"""Scaled mode end to end: real Redis, a real `celery worker` on the engine queue, Daphne, and a
websocket client. Then the worker is killed mid-run and the run must be reported failed."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import websockets

from courseapp.demo.models import DemoRun
from tests.aio import run_in_fresh_loop
from tests.e2e.conftest import server_database_url, start_daphne, stop_process

pytestmark = pytest.mark.e2e
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


@pytest.fixture
def scaled(transactional_db):
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = {
        **os.environ, "REDIS_URL": REDIS_URL, "DJANGO_SETTINGS_MODULE": "courseapp.settings.test",
        "DATABASE_URL": server_database_url(), "PYTHONUNBUFFERED": "1",
    }
    celery = Path(sys.executable).with_name("celery")
    log = open(Path(__file__).resolve().parents[2] / ".test-worker.log", "w")
    worker = subprocess.Popen(
        [str(celery), "-A", "courseapp", "worker", "-Q", "engine", "--pool", "threads", "-c", "2",
         "-n", "scaled-test@%h", "--without-gossip", "--without-mingle", "-l", "info"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    web, url, web_log = start_daphne({"REDIS_URL": REDIS_URL})
    yield url, worker
    web_log.close()
    stop_process(web)
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    log.close()


async def watch(url: str, run_id: str, until, timeout: float, send=None, cookie: str = ""):
    """Read frames from the run's socket until `until(message)` is true. `cookie`: the session of
    whoever started the run (only its owner may send prompts into it)."""
    ws_url = url.replace("http://", "ws://") + f"/ws/demo/runs/{run_id}/"
    headers = {"Cookie": cookie} if cookie else None
    async with websockets.connect(ws_url, origin=url, additional_headers=headers) as sock:
        if send:
            await sock.send(json.dumps(send))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(await asyncio.wait_for(sock.recv(), timeout=deadline - time.monotonic()))
            if until(message):
                return message
    raise TimeoutError("the expected frame never came")


def owned_blocks(message):
    return [b for lane in message.get("lanes", []) for b in lane["blocks"] if b[4]]


def test_worker_hosts_the_run_streams_blocks_and_its_death_is_reported(scaled):
    url, worker = scaled
    import urllib.request

    # A learner's own open run, started over HTTP like the page does.
    import http.cookiejar

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{url}/demo/").read().decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    data = f"csrfmiddlewaretoken={token}&num_blocks=64".encode()
    request = urllib.request.Request(f"{url}/demo/runs/", data=data, headers={"Referer": f"{url}/demo/"})
    response = opener.open(request)
    run_id = response.geturl().rstrip("/").split("/")[-1]

    run = DemoRun.objects.get(pk=run_id)
    assert run.host.startswith("celery")
    cookie = "; ".join(f"{c.name}={c.value}" for c in jar)
    frame = run_in_fresh_loop(lambda: watch(url, run_id, lambda m: bool(owned_blocks(m)), timeout=90, cookie=cookie,
                                            send={"type": "submit", "prompt": "배송이 언제 오나요?", "max_tokens": 200}))
    assert owned_blocks(frame), "block events for the submitted request arrived from the worker"
    run.refresh_from_db()
    assert run.host.startswith("celery@")

    os.killpg(worker.pid, signal.SIGKILL)  # the worker dies mid-run
    worker.wait(10)
    began = time.monotonic()
    failed = run_in_fresh_loop(lambda: watch(url, run_id, lambda m: m.get("status") == "failed", timeout=30))
    assert time.monotonic() - began < 20
    run.refresh_from_db()
    assert (run.status, run.end_reason) == ("failed", "worker_lost")
    assert failed["message"] == run.error and "scaled-test@" in failed["message"]  # names the worker that was lost
