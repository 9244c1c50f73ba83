"""courseapp/http_workers.py's promise when a worker dies, with fake workers (no Django): the
request it was running fails if it was a POST (it may have written: never run twice) and is asked
again if it was a GET; the requests it held but had not begun run elsewhere, once each.

Mutants (issue #34) this kills: a POST whose worker died run again; every request the dead worker
held failed instead of only the one it was running. The e2e test only kills an idle worker.

The worker's side (its framing, a request that fails, the end of the server) is run here in a
thread, so that `make mutation` sees these tests reach it (it maps mutants to the tests that reach
them in the test process, not in the workers it spawns)."""
import asyncio
import logging
import multiprocessing
import os
import re
import pickle
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from courseapp import http_workers
from courseapp.http_workers import WorkerPool, _answer_requests, _Worker
from tests.aio import run_in_fresh_loop


def _exit_with_the_test() -> None:
    """A fake worker ends with the test process, as a real one does with its server, even when the
    test process was killed (make mutation kills a mutant's tests at their time limit)."""
    threading.Thread(target=http_workers._exit_with, args=(multiprocessing.parent_process().sentinel,), daemon=True).start()


def fake_worker(channel: socket.socket, log: str) -> None:
    """Answers each request with its path; /hang hangs (so the test can kill it mid-request).
    Every request begun is appended to `log`, one line each, before it runs. The framing is the
    real worker's (http_workers._answer_requests)."""
    _exit_with_the_test()
    def serve(environ: dict, _body: bytes):
        with open(log, "a") as out:
            out.write(f"{os.getpid()} {environ['REQUEST_METHOD']} {environ['PATH_INFO']}\n")
        if environ["PATH_INFO"] == "/hang":
            signal.pause()
        if environ["PATH_INFO"] == "/slow":
            time.sleep(0.3)
        if environ["PATH_INFO"] == "/die":  # every worker that begins it dies
            os._exit(1)
        if environ["PATH_INFO"] == "/boom":
            raise ValueError("no such page")
        return "200 OK", [], environ["PATH_INFO"].encode()

    _answer_requests(channel, serve)


def stillborn_worker(channel: socket.socket, log: str) -> None:
    """Dies before it says ready (a worker whose Django fails to load)."""
    with open(log, "a") as out:
        out.write(f"{os.getpid()} died before ready\n")
    os._exit(3)


def severed_worker(channel: socket.socket, log: str) -> None:
    """Says ready, closes its socket and lives on (a worker whose connection broke)."""
    _exit_with_the_test()
    channel.sendall(http_workers._HEADER.pack(len(http_workers._READY)) + http_workers._READY)
    channel.close()
    signal.pause()


class FakePool(WorkerPool):
    def __init__(self, log: Path, workers: int = 1, stillborn: int = 0, first=stillborn_worker):
        self.log, self.stillborn, self.first, self.spawned = str(log), stillborn, first, []  # spawned: (monotonic time, pid)
        super().__init__(workers=workers, paths=".*", settings_module="", databases={})

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        target = self.first if len(self.spawned) < self.stillborn else fake_worker
        process = self._context.Process(target=target, args=(theirs, self.log), daemon=True)
        process.start()
        self.spawned.append((time.monotonic(), process.pid))
        theirs.close()
        return _Worker(process, ours)


def request(method: str, path: str) -> dict:
    return {"REQUEST_METHOD": method, "PATH_INFO": path}


async def until(condition, within: float = 15.0) -> None:
    """Waits for `condition()`, failing after `within` seconds: a pool that never starts the request
    fails the test in seconds, not at the loop's time limit. (Each scene is bounded at 25 s: a
    pool that never answers fails the test well inside make mutation's limit, as a kill.)"""
    async def poll():
        while not condition():
            await asyncio.sleep(0.02)
    await asyncio.wait_for(poll(), within)


def begun(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def begun_by(log: Path) -> list[tuple[int, str]]:
    return [(int(pid), what) for pid, what in (line.split(" ", 1) for line in log.read_text().splitlines())]


def test_a_dead_worker_fails_only_the_post_it_was_running_and_the_rest_run_once_elsewhere(tmp_path, caplog):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)

    async def scene():
        running = asyncio.ensure_future(pool.serve(request("POST", "/hang"), b""))
        await until(lambda: "POST /hang" in begun(log))  # it has begun
        waiting = asyncio.ensure_future(pool.serve(request("POST", "/next"), b""))  # in hand (IN_HAND = 2), not begun
        await asyncio.sleep(0.1)
        third = asyncio.ensure_future(pool.serve(request("GET", "/third"), b""))  # waits: the worker holds two
        await asyncio.sleep(0.1)
        dead = pool._pool[0]
        assert len(dead.jobs) == 2 and len(pool._pending) == 1
        os.kill(dead.process.pid, signal.SIGKILL)
        answers = await asyncio.wait_for(asyncio.gather(running, waiting, third), 20)
        assert dead.writer.is_closing(), "the dead worker's socket is closed"
        await until(lambda: caplog.records)  # logged once its exit code is known, without waiting in the loop
        return answers

    try:
        with caplog.at_level(logging.ERROR, logger="courseapp.http_workers"):
            (status, headers, body), (next_status, _, next_body), third = run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    # the socket's end reads as a short read or a reset, by whether the worker had unread data
    [record] = caplog.records
    assert re.fullmatch(r"An HTTP worker process died \((IncompleteReadError|ConnectionResetError), exit code -9\); "
                        r"starting a new one\.", record.getMessage())
    assert status == "503 Service Unavailable", "the POST it was running is not run again"
    assert headers == [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")]
    assert body == b"A page worker stopped while serving this request; reload the page.\n"
    assert (next_status, next_body) == ("200 OK", b"/next")
    assert third == ("200 OK", [], b"/third")
    assert begun(log) == ["POST /hang", "POST /next", "GET /third"], "each request begun once"
    assert http_workers.IN_HAND == 2


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_get_whose_worker_died_is_asked_again(tmp_path, method):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)
    assert pool._context.get_start_method() == "spawn", "workers start fresh, not forked from the server's threads"

    async def scene():
        hanging = asyncio.ensure_future(pool.serve(request(method, "/hang"), b""))
        await until(lambda: f"{method} /hang" in begun(log))
        first = pool._pool[0].process.pid
        os.kill(first, signal.SIGKILL)
        await until(lambda: len(begun(log)) >= 2)  # asked again of the new worker: it hangs there too
        hanging.cancel()
        return first

    try:
        run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    assert begun(log) == [f"{method} /hang", f"{method} /hang"]


def test_a_get_that_kills_every_worker_is_tried_three_times_then_answered_503(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)
    try:
        status, _, _ = run_in_fresh_loop(lambda: pool.serve(request("GET", "/die"), b""), timeout=25)
    finally:
        pool.close()
    assert status == "503 Service Unavailable"
    assert begun(log) == ["GET /die"] * 3


def test_a_request_the_worker_failed_to_serve_raises_with_its_reason_and_the_worker_goes_on(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)

    async def scene():
        with pytest.raises(RuntimeError, match=r"^An HTTP worker failed: ValueError: no such page$"):
            await pool.serve(request("GET", "/boom"), b"")
        return await pool.serve(request("GET", "/after"), b"")

    try:
        assert run_in_fresh_loop(scene, timeout=25) == ("200 OK", [], b"/after")
    finally:
        pool.close()
    assert begun(log) == ["GET /boom", "GET /after"], "asked once: a failure is an answer, not a death"



def test_requests_go_to_the_worker_with_the_fewest_in_hand(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log, workers=2)

    async def scene():
        await pool.serve(request("GET", "/warm"), b"")
        await until(lambda: all(w.ready for w in pool._pool))
        hanging = [asyncio.ensure_future(pool.serve(request("GET", "/hang"), b"")) for _ in range(2)]
        await until(lambda: len(begun(log)) == 3)
        for task in hanging:
            task.cancel()

    try:
        run_in_fresh_loop(scene, timeout=25)
        assert sorted(len(w.jobs) for w in pool._pool) == [1, 1]
        assert len({pid for pid, what in begun_by(log) if what == "GET /hang"}) == 2, "one each, not both on one"
    finally:
        pool.close()


def test_requests_waiting_for_a_worker_begin_in_the_order_they_came(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)

    async def scene():
        await pool.serve(request("GET", "/warm"), b"")
        # the worker holds two; the other three wait in line
        later = [asyncio.ensure_future(pool.serve(request("GET", path), b"")) for path in ("/slow", "/a", "/b", "/c", "/d")]
        await asyncio.wait_for(asyncio.gather(*later), 15)

    try:
        run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    assert begun(log) == ["GET /warm", "GET /slow", "GET /a", "GET /b", "GET /c", "GET /d"], "first come, first served"


def test_a_worker_that_dies_before_it_is_ready_is_replaced_a_second_later_and_the_request_served(tmp_path, caplog):
    log = tmp_path / "begun.txt"
    pool = FakePool(log, stillborn=1)
    try:
        with caplog.at_level(logging.ERROR, logger="courseapp.http_workers"):
            async def scene():
                answer = await pool.serve(request("GET", "/page"), b"")
                await until(lambda: caplog.records)
                return answer
            answer = run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    assert answer == ("200 OK", [], b"/page")
    (first, _), (second, pid) = pool.spawned
    assert second - first >= 1.0, "not restarted in a tight loop"
    assert begun_by(log)[1:] == [(pid, "GET /page")]
    assert [r.getMessage() for r in caplog.records] == [
        "An HTTP worker process died (IncompleteReadError, exit code 3); starting a new one."]


def test_a_worker_found_dead_while_idle_gives_its_request_to_another(tmp_path, caplog):
    log = tmp_path / "begun.txt"
    pool = FakePool(log, workers=2)

    async def scene():
        await pool.serve(request("GET", "/warm"), b"")  # both joined to the loop
        await until(lambda: all(w.ready and not w.jobs for w in pool._pool))
        idle, live = pool._pool  # both hold nothing: the dispatcher tries the first first
        os.kill(idle.process.pid, signal.SIGKILL)
        idle.process.join(10)  # dead, and the loop has not yet read its socket's end (it has not run since)
        # the dispatcher sees it is gone and gives the request to the live one at once, not to
        # the replacement a moment later
        answer = await asyncio.wait_for(pool.serve(request("GET", "/one"), b""), 20)
        answers = await asyncio.wait_for(asyncio.gather(*(pool.serve(request("GET", f"/{n}"), b"") for n in range(4))), 20)
        await until(lambda: caplog.records)
        return idle.process.pid, live.process.pid, [answer, *answers]

    try:
        with caplog.at_level(logging.ERROR, logger="courseapp.http_workers"):
            dead_pid, live_pid, answers = run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    assert answers == [("200 OK", [], b"/one")] + [("200 OK", [], f"/{n}".encode()) for n in range(4)]
    assert all(pid != dead_pid for pid, what in begun_by(log) if what != "GET /warm")
    assert (live_pid, "GET /one") in begun_by(log)
    assert [r.getMessage() for r in caplog.records] == [
        "An HTTP worker process died (it exited, exit code -9); starting a new one."]


def test_a_worker_whose_socket_broke_while_it_lives_on_is_stopped_and_its_exit_logged(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(http_workers, "REAP_PATIENCE", 1.0)
    log = tmp_path / "begun.txt"
    pool = FakePool(log, stillborn=1, first=severed_worker)

    async def scene():
        severed = pool._pool[0].process
        answer = await pool.serve(request("GET", "/page"), b"")
        # served by its replacement while it still lived: the loop did not wait for it
        assert severed.is_alive() and not caplog.records
        await until(lambda: caplog.records)
        return severed, answer

    try:
        with caplog.at_level(logging.ERROR, logger="courseapp.http_workers"):
            severed, answer = run_in_fresh_loop(scene, timeout=25)
    finally:
        pool.close()
    assert answer == ("200 OK", [], b"/page") and not severed.is_alive()
    # its socket's end reads as a short read, or as a broken pipe if the request was on its way to it
    [record] = caplog.records
    assert re.fullmatch(r"An HTTP worker process died \((IncompleteReadError|BrokenPipeError|ConnectionResetError), "
                        r"exit code -9\); starting a new one\.", record.getMessage())


# The worker's side of the socket, in this process (a thread stands in for the worker process).

def _ask(channel: socket.socket, environ: dict, body: bytes):
    message = pickle.dumps((environ, body))
    channel.sendall(http_workers._HEADER.pack(len(message)) + message)
    header = http_workers._recv_exactly(channel, http_workers._HEADER.size)
    return pickle.loads(http_workers._recv_exactly(channel, http_workers._HEADER.unpack(header)[0]))


def test_a_worker_says_ready_then_answers_each_request_whole_and_survives_a_failing_one(caplog):
    ours, theirs = socket.socketpair()
    ours.settimeout(10)  # a worker that never answers fails the test, not hangs it
    seen = []

    def serve(environ, body):
        seen.append((environ["PATH_INFO"], len(body)))
        if environ["PATH_INFO"] == "/boom":
            raise ValueError("no such page")
        return "200 OK", [("X-Len", str(len(body)))], body[::-1]

    worker = threading.Thread(target=http_workers._answer_requests, args=(theirs, serve), daemon=True)
    worker.start()
    try:
        header = http_workers._recv_exactly(ours, http_workers._HEADER.size)
        assert http_workers._recv_exactly(ours, http_workers._HEADER.unpack(header)[0]) == b"ready"
        big = bytes(range(256)) * 8192  # 2 MiB: read in many pieces on both sides
        assert _ask(ours, request("POST", "/big"), big) == (True, ("200 OK", [("X-Len", str(len(big)))], big[::-1]))
        with caplog.at_level(logging.ERROR, logger="courseapp.http_workers"):
            assert _ask(ours, request("GET", "/boom"), b"") == (False, "ValueError: no such page")
        [record] = caplog.records  # in the worker's log, with its traceback
        assert record.getMessage() == "An HTTP worker failed to serve a request." and record.exc_info[0] is ValueError
        assert _ask(ours, request("GET", "/empty"), b"") == (True, ("200 OK", [("X-Len", "0")], b""))
        assert seen == [("/big", len(big)), ("/boom", 0), ("/empty", 0)]
    finally:
        ours.close()  # the server goes away: the worker returns
    worker.join(10)
    assert not worker.is_alive(), "the worker stops when the server's end closes"


def test_recv_exactly_waits_for_every_byte_and_says_none_when_the_peer_left():
    ours, theirs = socket.socketpair()
    theirs.settimeout(10)  # a reader that waits for more than was sent fails the test, not hangs it
    ours.sendall(b"abc")
    sender = threading.Timer(0.1, lambda: ours.sendall(b"defg"))
    sender.daemon = True  # a failing test must not wait for it
    sender.start()
    assert http_workers._recv_exactly(theirs, 6) == b"abcdef"
    sender.join()
    ours.close()
    assert http_workers._recv_exactly(theirs, 2) is None, "one byte and then the end is not a message"
    theirs.close()


def test_call_wsgi_gives_the_app_the_body_and_closes_its_response():
    closed = []

    class Response(list):
        def close(self):
            closed.append(True)

    def app(environ, start_response):
        assert environ["wsgi.errors"] is sys.stderr  # where Django writes what a view printed to it
        start_response("201 Created", [("Content-Type", "text/plain")])
        return Response([b"got ", environ["wsgi.input"].read(), b"!"])

    assert http_workers.call_wsgi(app, request("POST", "/x"), b"body") == ("201 Created", [("Content-Type", "text/plain")], b"got body!")
    assert closed == [True]


def test_the_pool_answers_the_paths_it_was_given_from_their_start():
    pool = WorkerPool.__new__(WorkerPool)  # no workers started: only the path rule is asked
    pool.paths = http_workers.re.compile(r"^/(?:$|lessons/)")
    assert pool.handles("/") and pool.handles("/lessons/21/")
    assert not pool.handles("/demo/") and not pool.handles("/x/lessons/")
