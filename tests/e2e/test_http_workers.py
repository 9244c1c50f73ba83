"""Lesson pages answered by worker processes (courseapp/http_workers.py), as `make run` serves
them: one learner's session holds across the ASGI process and the workers, a dead worker costs
no page, and the workers go when the server goes."""
import os
import signal
import subprocess

import pytest

from tests.e2e.clients import Browser
from tests.e2e.conftest import start_daphne, stop_process, wait_until

pytestmark = pytest.mark.e2e


def children(pid: int) -> set[int]:
    """The server's worker processes (multiprocessing also starts a resource tracker: not one)."""
    found = subprocess.run(["pgrep", "-P", str(pid), "-f", "spawn_main"], capture_output=True, text=True).stdout.split()
    return {int(p) for p in found}


@pytest.fixture
def served(transactional_db):
    proc, url, log = start_daphne({"HTTP_WORKERS": "1"})  # one: every worker page comes from the same cache
    yield proc, url
    stop_process(proc)
    log.close()


def test_a_session_holds_across_processes_and_a_dead_worker_costs_no_page(served):
    proc, url = served
    workers = wait_until(lambda: children(proc.pid))

    me = Browser(url)
    assert me.get("/lessons/21/s2/")[0] == 200  # a worker
    assert me.post("/lessons/21/s2/read/", htmx=True)[0] == 200  # a worker writes the guest row
    status, page = me.post("/accounts/signup/", {"username": "minji", "password1": "kv-블록-테이블-9",
                                                 "password2": "kv-블록-테이블-9"})  # the ASGI process
    assert status == 200 and "minji" in page  # redirected to /progress/, a worker: logged in there too
    assert 'data-read="true"' in me.get("/lessons/21/s2/")[1]  # the guest's read mark came along

    stolen = Browser(url)  # someone holding a copy of the logged-in cookies
    for cookie in me.jar:
        stolen.jar.set_cookie(cookie)
    assert "minji" in stolen.get("/lessons/21/s3/")[1]
    me.post("/accounts/logout/")  # the ASGI process ends the session...
    for browser in (me, stolen):  # ...and the worker, which read it a moment ago, must not keep it
        page = browser.get("/lessons/21/s3/")[1]
        assert "minji" not in page and "/accounts/login/" in page

    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: victim not in children(proc.pid))
    assert [me.get(f"/lessons/21/s{n}/")[0] for n in range(6)] == [200] * 6
    assert proc.poll() is None
    assert wait_until(lambda: children(proc.pid)) - workers, "a new worker took its place"

    # The server killed outright: its workers notice and leave (no orphans holding memory).
    workers = children(proc.pid)
    proc.kill()
    proc.wait(10)
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in workers), timeout=15)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("path, worker", [
    ("/", True), ("/lessons/21/s2/", True), ("/lessons/21/s2/read/", True), ("/questions/q1/submit/", True),
    ("/progress/", True), ("/demo/", False), ("/demo/runs/", False), ("/accounts/login/", False),
    ("/accounts/signup/", False), ("/admin/", False), ("/static/css/app.css", False), ("/i18n/setlang/", False),
])
def test_only_pages_that_never_touch_the_demo_or_a_throttle_go_to_workers(settings, path, worker):
    """The demo's host, its channel layer and the signup/run throttles live in the ASGI process."""
    import re

    assert (re.match(settings.HTTP_WORKER_PATHS, path) is not None) == worker
