"""courseapp/http_workers.py's promise when a worker dies, with fake workers (no Django): the
request it was running fails if it was a POST (it may have written: never run twice) and is asked
again if it was a GET; the requests it held but had not begun run elsewhere, once each.

Mutants (issue #34) this kills: a POST whose worker died run again; every request the dead worker
held failed instead of only the one it was running. The e2e test only kills an idle worker."""
import asyncio
import os
import signal
import socket
from pathlib import Path

from courseapp import http_workers
from courseapp.http_workers import WorkerPool, _answer_requests, _Worker
from tests.aio import run_in_fresh_loop


def fake_worker(channel: socket.socket, log: str) -> None:
    """Answers each request with its path; /hang hangs (so the test can kill it mid-request).
    Every request begun is appended to `log`, one line each, before it runs. The framing is the
    real worker's (http_workers._answer_requests)."""
    def serve(environ: dict, _body: bytes):
        with open(log, "a") as out:
            out.write(f"{os.getpid()} {environ['REQUEST_METHOD']} {environ['PATH_INFO']}\n")
        if environ["PATH_INFO"] == "/hang":
            signal.pause()
        return "200 OK", [], environ["PATH_INFO"].encode()

    _answer_requests(channel, serve)


class FakePool(WorkerPool):
    def __init__(self, log: Path):
        self.log = str(log)
        super().__init__(workers=1, paths=".*", settings_module="", databases={})

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        process = self._context.Process(target=fake_worker, args=(theirs, self.log), daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours)


def request(method: str, path: str) -> dict:
    return {"REQUEST_METHOD": method, "PATH_INFO": path}


def begun(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_dead_worker_fails_only_the_post_it_was_running_and_the_rest_run_once_elsewhere(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)

    async def scene():
        running = asyncio.ensure_future(pool.serve(request("POST", "/hang"), b""))
        while "POST /hang" not in begun(log):  # it has begun
            await asyncio.sleep(0.02)
        waiting = asyncio.ensure_future(pool.serve(request("POST", "/next"), b""))  # in hand (IN_HAND = 2), not begun
        await asyncio.sleep(0.1)
        assert len(pool._pool[0].jobs) == 2
        os.kill(pool._pool[0].process.pid, signal.SIGKILL)
        return await asyncio.wait_for(asyncio.gather(running, waiting), 60)

    try:
        (status, _, body), (next_status, _, next_body) = run_in_fresh_loop(scene, timeout=90)
    finally:
        pool.close()
    assert status.startswith("503") and b"reload" in body, "the POST it was running is not run again"
    assert (next_status, next_body) == ("200 OK", b"/next")
    assert begun(log) == ["POST /hang", "POST /next"], "each request begun once"
    assert http_workers.IN_HAND == 2


def test_a_get_whose_worker_died_is_asked_again(tmp_path):
    log = tmp_path / "begun.txt"
    pool = FakePool(log)

    async def scene():
        hanging = asyncio.ensure_future(pool.serve(request("GET", "/hang"), b""))
        while "GET /hang" not in begun(log):
            await asyncio.sleep(0.02)
        first = pool._pool[0].process.pid
        os.kill(first, signal.SIGKILL)
        while len(begun(log)) < 2:  # asked again of the new worker: it hangs there too
            await asyncio.sleep(0.02)
        hanging.cancel()
        return first

    try:
        run_in_fresh_loop(scene, timeout=90)
    finally:
        pool.close()
    assert begun(log) == ["GET /hang", "GET /hang"]

