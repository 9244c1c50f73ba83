"""Lesson pages on the other cores: a pool of Django processes behind the ASGI server.

One Python process runs Django on one core at a time (the interpreter lock), and under a class's
load the `make run` process sat at 100 % of one core while the second was mostly idle
(bench/web_load.py). The requests that make up a class's traffic — section pages, self-check
submits, read marks, progress, the grading API — only read and write the database (and count
rate limits where every process sees them, demo/limits.py), so the ASGI process hands them to
`HTTP_WORKERS` worker processes (spawned, each with its own Django) and sends back what they
answer; everything that touches the demo's engine host, the in-memory channel layer or a
process-local counter (demo runs, accounts and their throttles, the admin, static files) stays in
the ASGI process (http_threads.py). `HTTP_WORKER_PATHS` says which is which.

What the workers share with the ASGI process lives in the database — learners, attempts — and in
the cache every process sees: sessions (the database behind them) and rate limits. Content edits reach a worker within
OUTLINE_RECHECK_SECONDS (lessons/outline.py). A worker that dies costs at most the POST it was
running (503, with the reason logged); a GET is asked again of another worker, and so is any
request it had not begun; a new worker takes its place. Workers exit with their parent, even
one killed without a chance to clean up.

Each worker is joined to the event loop by a socket of its own: a request goes down it as one
pickled message, the answer comes back up it, read by the loop itself. (A ProcessPoolExecutor
did this through two threads of its own and three hand-offs between them and the loop per
request, each waiting for the interpreter lock: under the grading API's load the ASGI process
spent 2.1 ms of CPU a request, now 1.2, bench/grading_api.py.) A busy worker is given one more request to start as soon as it is done, so
it does not wait for the loop between requests; new requests go to the worker with the
fewest in hand, and wait in order when every worker has two.
"""
import asyncio
import collections
import io
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

IN_HAND = 2  # requests a worker holds: the one it runs and the next
_HEADER = struct.Struct("!Q")  # a message's length, before it
_READY = b"ready"  # a new worker's first message, once its Django is loaded
REAP_POLL = 0.05  # seconds between looks at a dead worker's exit code
REAP_PATIENCE = 5.0  # seconds a worker whose socket broke may live on before it is killed

_wsgi_app = None  # in a worker: its Django


def _worker_init(settings_module: str, databases: dict) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True, name="parent-watch").start()
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    global _wsgi_app
    _wsgi_app = get_wsgi_application()
    settings.DATABASES = databases  # the parent's, as a test runner may have changed them; no connection is open yet


def _exit_with(sentinel) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def call_wsgi(app, environ: dict, body: bytes) -> tuple[str, list, bytes]:
    """One WSGI request to `app`, start to finish: (status, headers, content)."""
    environ["wsgi.input"], environ["wsgi.errors"] = io.BytesIO(body), sys.stderr
    started = []
    response = app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    try:
        content = b"".join(response)
    finally:
        if hasattr(response, "close"):
            response.close()
    status, headers = started[0]
    return status, headers, content


def _serve(environ: dict, body: bytes) -> tuple[str, list, bytes]:
    """In a worker: one WSGI request to its Django."""
    return call_wsgi(_wsgi_app, environ, body)


def _recv_exactly(channel: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = channel.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _answer_requests(channel: socket.socket, serve) -> None:
    """Say ready, then answer requests one after another with `serve(environ, body)` until the
    server goes away (its end of the socket closes)."""
    channel.sendall(_HEADER.pack(len(_READY)) + _READY)
    while True:
        header = _recv_exactly(channel, _HEADER.size)
        message = header and _recv_exactly(channel, _HEADER.unpack(header)[0])
        if message is None:
            return
        try:
            answer = (True, serve(*pickle.loads(message)))
        except Exception as exc:  # Django turns a view's errors into responses: this is rarer
            logger.exception("An HTTP worker failed to serve a request.")
            answer = (False, f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)  # pragma: no mutate (any protocol both ends read: the highest is the fastest)
        channel.sendall(_HEADER.pack(len(data)) + data)


def _worker_main(channel: socket.socket, settings_module: str, databases: dict) -> None:
    """A worker: load Django and warm it up, then answer requests until the server goes away."""
    _worker_init(settings_module, databases)
    from django.conf import settings

    from courseapp.warm import warm

    warm(_wsgi_app, settings.HTTP_WARM_PATHS)
    _answer_requests(channel, _serve)


class _Died(Exception):
    """The worker died while running the request (it may have written)."""


class _NotRun(Exception):
    """The worker died before it began the request."""


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.Process
    channel: socket.socket  # our end, until connected to the loop
    writer: asyncio.StreamWriter | None = None
    reading: asyncio.Task | None = None  # reads its answers (kept here: the loop holds tasks weakly)
    ready: bool = False
    jobs: collections.deque = field(default_factory=collections.deque)  # futures of the requests sent, in order


class WorkerPool:
    def __init__(self, *, workers: int, paths: str, settings_module: str, databases: dict):
        self.workers, self.paths = workers, re.compile(paths)
        self._init_args = (settings_module, databases)
        self._context = multiprocessing.get_context("spawn")
        self._pool = [self._spawn() for _ in range(workers)]  # start them now, not on the first learner's request
        self._pending: collections.deque = collections.deque()  # (message, future) waiting for a worker
        self._loop = None

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        process = self._context.Process(target=_worker_main, args=(theirs, *self._init_args), name="http-worker",
                                        daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def handles(self, path: str) -> bool:
        return self.paths.match(path) is not None

    async def serve(self, environ: dict, body: bytes) -> tuple[str, list, bytes]:
        # A GET writes nothing (a rule of this app), so one that met a dead worker is simply asked
        # again; a POST may have written before its worker died, so it is not run twice.
        self._attach()
        safe = environ.get("REQUEST_METHOD") in ("GET", "HEAD")
        message = pickle.dumps((environ, body), protocol=pickle.HIGHEST_PROTOCOL)  # pragma: no mutate (any protocol both ends read: the highest is the fastest)
        for attempt in range(3):
            future = self._loop.create_future()
            # asked again, it keeps its place: ahead of those that came after it
            (self._pending.appendleft if attempt else self._pending.append)((message, future))
            self._dispatch()
            try:
                ok, answer = pickle.loads(await future)
            except _NotRun:
                continue
            except _Died:
                if safe:
                    continue
                break
            if not ok:
                raise RuntimeError(f"An HTTP worker failed: {answer}")
            return answer
        return ("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")],
                "A page worker stopped while serving this request; reload the page.\n".encode())

    def _attach(self) -> None:
        """On the first request: join the workers' sockets to the event loop."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            for worker in self._pool:
                self._connect(worker)

    def _connect(self, worker: _Worker) -> None:
        worker.reading = self._loop.create_task(self._read_answers(worker))

    def _dispatch(self) -> None:
        """Hand the waiting requests, oldest first, to the ready workers with the fewest in hand."""
        while self._pending:
            free = [w for w in self._pool if w.ready and len(w.jobs) < IN_HAND]
            if not free:
                return
            worker = min(free, key=lambda w: len(w.jobs))
            if not worker.process.is_alive():  # gone while idle: nothing is lost, another takes the request
                self._replace(worker, "it exited")
                continue
            message, future = self._pending.popleft()
            if future.done():  # its request was cancelled (the client went away) while it waited
                continue
            worker.jobs.append(future)
            worker.writer.write(_HEADER.pack(len(message)) + message)

    async def _read_answers(self, worker: _Worker) -> None:
        try:
            reader, worker.writer = await asyncio.open_connection(sock=worker.channel)
            while True:
                data = await reader.readexactly(_HEADER.unpack(await reader.readexactly(_HEADER.size))[0])
                if not worker.ready:
                    worker.ready = data == _READY
                else:
                    future = worker.jobs.popleft()
                    if not future.done():
                        future.set_result(data)
                self._dispatch()
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._replace(worker, type(exc).__name__)
            self._dispatch()

    def _replace(self, worker: _Worker, why: str) -> None:
        """A worker died: fail what it held (the first it was running; the rest had not begun) and
        start another in its place (a second later if it died before it was ready: not in a loop)."""
        if worker not in self._pool:
            return
        self._pool.remove(worker)
        if worker.writer is not None:  # pragma: no mutate (its transport closes itself once the dead worker's end is read)
            worker.writer.close()
        for n, future in enumerate(worker.jobs):
            if not future.done():
                future.set_exception(_Died() if n == 0 else _NotRun())
        worker.jobs.clear()
        self._reap(worker.process, why)
        if worker.ready:
            self._start_another()
        else:
            self._loop.call_later(1, self._start_another)

    def _start_another(self) -> None:
        fresh = self._spawn()
        self._pool.append(fresh)
        self._connect(fresh)

    def _reap(self, process, why: str, waited: float = 0.0) -> None:
        """Log a dead worker's exit code once it has one (its socket closes a moment before it
        exits), looking again every REAP_POLL seconds rather than waiting in the event loop; one
        whose socket broke while it lives on is of no use and is stopped after REAP_PATIENCE."""
        process.join(0)
        if process.exitcode is None:
            if waited >= REAP_PATIENCE:  # pragma: no mutate (> waits one more look: 50 ms)
                process.kill()
            self._loop.call_later(REAP_POLL, self._reap, process, why, waited + REAP_POLL)
            return
        logger.error("An HTTP worker process died (%s, exit code %s); starting a new one.", why, process.exitcode)

    def close(self) -> None:
        for worker in self._pool:
            if worker.process.is_alive():
                worker.process.terminate()
