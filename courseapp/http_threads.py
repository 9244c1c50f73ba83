"""HTTP for the ASGI server: Django's WSGI handler on a small pool of threads, one hop per
request.

Django's own ASGI handler starts a thread for every request and, with this project's mix of
sync and async middleware, hops between that thread and the event loop about six times per
request. With a class of 50 loading pages at once that was 50 threads taking turns on one
interpreter lock and queueing on asgiref's context-local locks: 22 req/s on the 2-core machine
(bench/web_load.py). Here a request is read on the event loop, run start to finish on one of
`threads` workers (the rest wait, first come first served, costing nothing), and its response
is sent back from the loop. Responses are buffered, which suits this app: pages, htmx partials
and small static files. (asgiref's WsgiToAsgi does the same job but sends from the worker
thread, and under Daphne its thread-sensitive executor broke after a few hundred requests.)
Websockets do not come here; Channels serves them. With a `workers` pool (http_workers.py), the
paths it handles are answered by its processes instead of these threads.
"""
import asyncio
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile

from asgiref.wsgi import WsgiToAsgiInstance


class WsgiOnThreads:
    def __init__(self, wsgi_application, threads: int, workers=None):
        self.wsgi_application = wsgi_application
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="http")
        self.workers = workers  # an http_workers.WorkerPool, or None

    async def __call__(self, scope, receive, send):
        request = _Request(self.wsgi_application)
        workers = self.workers if self.workers is not None and self.workers.handles(scope["path"]) else None
        await request(scope, receive, send, self.pool, workers)


_BAD_REQUEST = {"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"text/plain")]}, b"Bad Request"


class _Request(WsgiToAsgiInstance):
    """One request: asgiref builds the WSGI environ and parses start_response; we run it."""

    async def __call__(self, scope, receive, send, pool, workers=None):
        self.scope = scope
        with SpooledTemporaryFile(max_size=65536) as body:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body.seek(0)
            if workers is not None:
                start, content = await self._run_on(workers, body)
            else:
                start, content = await asyncio.get_running_loop().run_in_executor(pool, self._run, body)
        await send(start)
        await send({"type": "http.response.body", "body": content})

    async def _run_on(self, workers, body) -> tuple[dict, bytes]:
        try:
            environ = self.build_environ(self.scope, body)
        except ValueError:
            return _BAD_REQUEST
        data = body.read()
        del environ["wsgi.input"], environ["wsgi.errors"]  # the worker makes its own
        status, headers, content = await workers.serve(environ, data)
        self.start_response(status, headers)
        return self.response_start, content

    def _run(self, body) -> tuple[dict, bytes]:
        try:
            environ = self.build_environ(self.scope, body)
        except ValueError:  # too many duplicate headers
            return _BAD_REQUEST
        response = self.wsgi_application(environ, self.start_response)
        try:
            content = b"".join(response)
        finally:
            if hasattr(response, "close"):
                response.close()  # Django's request_finished (closes this thread's DB connection if due)
        return self.response_start, content
