"""Lesson pages on the other cores: a pool of Django processes behind the ASGI server.

One Python process runs Django on one core at a time (the interpreter lock), and under a class's
load the `make run` process sat at 100 % of one core while the second was mostly idle
(bench/web_load.py). The requests that make up a class's traffic — section pages, self-check
submits, read marks, progress — only read and write the database, so the ASGI process hands them
to `HTTP_WORKERS` worker processes (spawned, each with its own Django) and sends back what they
answer; everything that touches the demo's engine host, the in-memory channel layer or a
process-local counter (demo runs, accounts and their throttles, the admin, static files, the
API) stays in the ASGI process (http_threads.py). `HTTP_WORKER_PATHS` says which is which.

What the workers share with the ASGI process lives in the database: sessions (the `db` engine,
not a per-process cache), learners, attempts. Content edits reach a worker within
OUTLINE_RECHECK_SECONDS (lessons/outline.py). A worker that dies costs at most the POSTs it
held (503, with the reason logged); a GET is asked again of the fresh pool that takes the rest.
Workers exit with their parent, even one killed without a chance to clean up.
"""
import asyncio
import io
import logging
import multiprocessing
import os
import re
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

logger = logging.getLogger(__name__)

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


def _serve(environ: dict, body: bytes) -> tuple[str, list, bytes]:
    """In a worker: one WSGI request, start to finish."""
    environ["wsgi.input"], environ["wsgi.errors"] = io.BytesIO(body), sys.stderr
    started = []
    response = _wsgi_app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    try:
        content = b"".join(response)
    finally:
        if hasattr(response, "close"):
            response.close()
    status, headers = started[0]
    return status, headers, content


def _warm() -> int:
    return os.getpid()


class WorkerPool:
    def __init__(self, *, workers: int, paths: str, settings_module: str, databases: dict):
        self.workers, self.paths = workers, re.compile(paths)
        self._init_args = (settings_module, databases)
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init, initargs=self._init_args)
        for _ in range(self.workers):  # start them now, not on the first learner's request
            pool.submit(_warm)
        return pool

    def handles(self, path: str) -> bool:
        return self.paths.match(path) is not None

    async def serve(self, environ: dict, body: bytes) -> tuple[str, list, bytes]:
        # A GET writes nothing (a rule of this app), so one that met a dead worker is simply asked
        # again; a POST may have written before its worker died, so it is not run twice.
        safe = environ.get("REQUEST_METHOD") in ("GET", "HEAD")
        for _ in range(2):
            pool = self._pool
            try:
                future = pool.submit(_serve, environ, body)
            except BrokenProcessPool as exc:  # it broke while idle: none of this request ran, a new pool takes it
                self._replace(pool, exc)
                continue
            try:
                return await asyncio.wrap_future(future)
            except BrokenProcessPool as exc:
                self._replace(pool, exc)
                if not safe:
                    break
        return ("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")],
                "A page worker stopped while serving this request; reload the page.\n".encode())

    def _replace(self, pool, exc) -> None:
        if self._pool is pool:  # the first request to notice replaces it (all of them run on the event loop)
            logger.error("An HTTP worker process died (%s); starting a new pool.", exc)
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._start()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
