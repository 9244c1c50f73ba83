"""Scaled mode under the faults a deployment meets every week (issue #31), each injected for real:
a Redis of the test's own, killed and started again mid-run; PostgreSQL backends terminated
mid-run; an engine worker killed under an open API stream; no worker at all. Each ends with the
run finished or stopped as its owner asked, the viewers told the truth and no seat held."""
import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from datetime import timedelta

import pytest
import websockets
from django.db import connection
from django.utils import timezone
from openai import APIError, APIStatusError, OpenAI

from courseapp.demo.models import DemoRun
from courseapp.quizzes.models import Question
from tests.answers import right_form
from tests.aio import run_in_fresh_loop
from tests.e2e import clients
from tests.e2e.clients import Browser
from tests.e2e.conftest import free_port, start_daphne, stop_process, wait_for_port, wait_until
from tests.e2e.test_scaled import ROOT, Workers, status_of

pytestmark = pytest.mark.e2e
MESSAGES = [{"role": "user", "content": "배송이 언제 오나요?"}]


class OwnRedis:
    """A redis-server of this test's own (nothing on disk, as the machine's), so it can be killed
    and started again on the same port while the web process and the workers hold connections."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port)

    def kill(self) -> None:
        """As a crash or a restart does: every connection drops, every key is gone."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def redis_server():
    server = OwnRedis()
    server.start()
    yield server
    if server.proc.poll() is None:
        server.kill()


@pytest.fixture
def site(transactional_db, redis_server):
    proc, url, log = start_daphne({"REDIS_URL": redis_server.url, "DEMO_MAX_RUNS_PER_ADDRESS": "10"})
    yield url
    stop_process(proc)
    log.close()


@pytest.fixture
def engine_workers(redis_server):
    pool = Workers(redis_server.url)
    yield pool
    pool.stop_all()


def ready(name: str) -> None:
    wait_until(lambda: b"model loaded" in (ROOT / f".test-worker-{name}.log").read_bytes(), 90, f"worker {name} to load the model")


class Viewer:
    """A page's socket in a thread of its own: every message it gets (frames whole, as the page
    draws them: clients.watch), and what it sends."""

    def __init__(self, url: str, run_id: str, cookie: str = ""):
        self.url, self.run_id, self.cookie = url, run_id, cookie
        self.messages: list[dict] = []
        self.outbox: list[dict] = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=lambda: run_in_fresh_loop(self._read), daemon=True)
        self.thread.start()

    async def _read(self):
        from courseapp.demo.traces import FrameMirror

        headers = {"Cookie": self.cookie} if self.cookie else None
        mirror = FrameMirror()
        async with websockets.connect(clients.run_socket(self.url, self.run_id), origin=self.url,
                                      additional_headers=headers, max_size=None) as sock:
            while not self.closing.is_set():
                while self.outbox:
                    await sock.send(json.dumps(self.outbox.pop(0)))
                try:
                    message = json.loads(await asyncio.wait_for(sock.recv(), 0.2))
                except TimeoutError:
                    continue
                if message.get("type") in ("snapshot", "delta"):
                    if not mirror.apply(message):
                        continue
                    message = {**mirror.state, "type": message["type"], "seq": message["seq"]}
                self.messages.append(message)

    def send(self, message: dict) -> None:
        self.outbox.append(message)

    def seen(self, predicate, since: int = 0):
        return next((m for m in self.messages[since:] if predicate(m)), None)

    def close(self) -> None:
        self.closing.set()
        self.thread.join(30)


async def _first_words(ws_url: str, origin: str) -> tuple[dict, int]:
    """The first message a new socket gets, and the code it is closed with."""
    async with websockets.connect(ws_url, origin=origin) as sock:
        first = json.loads(await asyncio.wait_for(sock.recv(), 10))
        try:
            await asyncio.wait_for(sock.recv(), 10)
        except websockets.ConnectionClosed as closed:
            return first, closed.rcvd.code
    return first, 0


def test_a_redis_restart_mid_run_loses_no_command_no_viewer_no_seat_and_no_page(site, engine_workers, redis_server):
    engine_workers.start("blip")
    ready("blip")
    owner = Browser(site)
    status, started = owner.start(num_blocks=64)  # an open run: it waits for the owner's prompts
    assert status == 201
    run_id = started["run"]
    wait_until(lambda: status_of(run_id)[0] == "running", 60, "the run to start")
    watcher = Viewer(site, run_id, cookie=owner.cookie_header())
    wait_until(lambda: watcher.seen(lambda m: m.get("type") == "snapshot"), 30, "the first picture")
    scene = Browser(site)
    status, paused = scene.start(preset="reservation", paused=True)  # a second learner's scene, open through the blip
    scene_page = Viewer(site, paused["run"], cookie=scene.cookie_header())
    wait_until(lambda: status_of(paused["run"])[0] == "running", 60, "the scene to start")

    redis_server.kill()
    # While Redis is away: the lesson keeps working; a scene start is refused plainly and leaves nothing.
    learner = Browser(site)
    for path in ("/", "/lessons/21/", "/progress/"):
        assert learner.get(path)[0] == 200, path
    question = Question.objects.filter(type="single", anchor__startswith="s2").first()
    status, card = learner.post(f"/questions/{question.slug}/submit/", {**right_form(question), "nonce": "outage"},
                                htmx=True)
    assert status == 200 and 'data-verdict="correct"' in card, "a self-check is graded and kept"
    api = OpenAI(base_url=f"{site}/v1", api_key="unused", max_retries=0, timeout=20)
    with pytest.raises(APIStatusError, match="cannot be reached right now") as refused_api:
        api.chat.completions.create(model="munuibot", messages=MESSAGES, max_tokens=4)
    assert refused_api.value.status_code == 503 and refused_api.value.body["code"] == "engine_unavailable"
    runs_before = DemoRun.objects.count()
    status, refused = learner.start(preset="reservation")
    assert status == 503 and "실시간 엔진을 쓸 수 없습니다" in refused["error"]
    assert DemoRun.objects.count() == runs_before, "no run row left behind in the learner's name"
    wait_until(lambda: watcher.seen(lambda m: m.get("type") == "link" and m["state"] == "down"), 30,
               "the viewer to be told the live connection is down")
    # A page that connects meanwhile is told why, not handed an HTTP 500 at the handshake.
    told = run_in_fresh_loop(lambda: _first_words(clients.run_socket(site, run_id), site))
    assert told == ({"type": "link", "state": "down", "message": "엔진과의 실시간 연결이 끊겼습니다. 다시 잇는 중…"}, 4503)
    # A stop sent while Redis is away cannot be handed to the worker: it reads it from the database.
    scene_page.send({"type": "stop"})
    wait_until(lambda: status_of(paused["run"]) == ("stopped", "owner"), 30, "the scene's stop to be recorded")
    time.sleep(3)  # the outage outlasts the sender's retries

    redis_server.start()  # empty: no groups, no queued messages
    mark = len(watcher.messages)
    wait_until(lambda: watcher.seen(lambda m: m.get("type") == "link" and m["state"] == "up", since=mark), 30,
               "the viewer to be told it is back")
    # A command after the restart reaches the worker, and its frames reach the viewer (group
    # re-joined): the picture shows the prompt's answer (as deltas, or as the latest picture in
    # their place when they came late).
    mark = len(watcher.messages)
    watcher.send({"type": "submit", "prompt": "환불 언제 되나요?", "max_tokens": 40})

    def answered(m) -> bool:
        return m.get("type") in ("snapshot", "delta") and any(
            r.get("output_tokens", 0) > 0 for lane in m.get("lanes", []) for r in lane.get("requests", []))
    wait_until(lambda: watcher.seen(answered, since=mark), 60, "the picture of the prompt sent after the restart")
    # The stop reached the worker all the same: its task for the scene ended (the only one that
    # can have: the open run goes on), and the scene's page was told it stopped.
    wait_until(lambda: b"succeeded" in (ROOT / ".test-worker-blip.log").read_bytes(), 30, "the worker to end the scene")
    wait_until(lambda: scene_page.seen(lambda m: m.get("status") == "stopped"), 30, "the scene's page to say stopped")
    scene_page.close()

    # No ghost viewer: the socket that lived through the blip, once closed, marks nothing watched.
    watcher.close()
    time.sleep(1)
    marked = DemoRun.objects.get(pk=run_id).watched_at
    time.sleep(12)  # a socket marks its run every 10 s
    assert DemoRun.objects.get(pk=run_id).watched_at == marked, "a closed socket still marks the run watched"

    # A control after the restart arrives: the owner's page, opened again, stops the run.
    page = Viewer(site, run_id, cookie=owner.cookie_header())
    page.send({"type": "stop"})
    wait_until(lambda: status_of(run_id) == ("stopped", "owner"), 30, "the owner's stop")
    wait_until(lambda: page.seen(lambda m: m.get("status") == "stopped"), 30, "the page to say stopped")
    page.close()
    assert not DemoRun.objects.filter(status__in=DemoRun.ACTIVE).exists(), "every seat is free"


def test_postgresql_backends_killed_mid_run_cost_a_retry_not_the_run(site, engine_workers):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's backends are what a restart or a pooler kills (the PostgreSQL pass runs this)")
    engine_workers.start("pg")
    ready("pg")
    owner = Browser(site)
    status, started = owner.start(num_blocks=64)  # an open run lives until its owner stops it
    assert status == 201
    run_id = started["run"]
    wait_until(lambda: status_of(run_id)[0] == "running", 60, "the run to start")
    page = Viewer(site, run_id, cookie=owner.cookie_header())
    for _ in range(3):  # a restart, a failover, a pooler's timeout: every other connection is cut
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        time.sleep(2)
    cut_at = timezone.now()
    # Past the point where a worker still holding a dead connection is taken for lost (no
    # heartbeat for 10 s, reaped within 5): the heartbeats went on, on new connections.
    wait_until(lambda: DemoRun.objects.get(pk=run_id).heartbeat_at > cut_at + timedelta(seconds=15), 40,
               "heartbeats after the connections were cut")
    assert status_of(run_id) == ("running", ""), "the run lives on"
    page.send({"type": "stop"})
    wait_until(lambda: status_of(run_id)[0] != "running", 30, "the owner's stop")
    assert status_of(run_id) == ("stopped", "owner")
    page.close()


def test_a_worker_killed_under_an_open_api_stream_ends_the_stream_with_an_error(site, engine_workers):
    worker = engine_workers.start("doomed")
    ready("doomed")
    api = OpenAI(base_url=f"{site}/v1", api_key="unused", max_retries=0, timeout=120)
    stream = api.chat.completions.create(model="munuibot", messages=MESSAGES, max_tokens=1500, stream=True,
                                         extra_body={"ignore_eos": True})
    chunks = 0
    # The stream ends with an error event (the official client raises it) and [DONE], instead of
    # hanging on an open connection until the client's own timeout (APITimeoutError: no match).
    with pytest.raises(APIError, match="engine failed while answering"):
        for chunks, _chunk in enumerate(stream, 1):
            if chunks == 20:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
    assert chunks >= 20


def test_with_no_worker_the_api_and_a_waiting_run_say_so_at_once(site):
    # Said at once: a client that waited out the 60 s pickup would time out first (no match).
    api = OpenAI(base_url=f"{site}/v1", api_key="unused", max_retries=0, timeout=20)
    with pytest.raises(APIStatusError, match="No engine worker is running") as refused:
        api.chat.completions.create(model="munuibot", messages=MESSAGES, max_tokens=4)
    assert refused.value.status_code == 503
    status, started = Browser(site).start(preset="reservation")
    assert status == 201
    told = run_in_fresh_loop(lambda: clients.watch(clients.run_socket(site, started["run"]),
                                                   lambda m: m.get("type") == "status" and "workers" in m, timeout=10))
    assert told["workers"] == 0 and 0 < told["fails_in"] <= 60
