"""`/v1/*` (OpenAI-compatible) and `/metrics` (Prometheus), served straight on the ASGI event loop.

Everything else goes on to Django (`fallback`). These paths skip Django because a stream is a
long-lived response sent piece by piece as the engine steps (server-sent events), and because
§6's lab and `bench/api.py` measure the server: a request costs one JSON parse and one engine
submission, no middleware. What they share with the site is the settings: the served model's
name (`SERVED_MODEL_NAME`, default `munuibot`), an optional API key (`SERVING_API_KEY`, like
vLLM's `--api-key`), the body size cap and a rate limit per key or address (`SERVING_RATE_LIMIT`). A client that goes away mid-answer aborts its
request, and the engine frees its blocks.
"""
import asyncio
import hashlib
import hmac
import json
import logging
import math
import time
import uuid
from collections import deque

from django.conf import settings

from courseapp.serving import engines, metrics, protocol
from courseapp.serving.protocol import ApiError

logger = logging.getLogger("courseapp.serving")

class ServingApp:
    def __init__(self, fallback):
        self.fallback = fallback

    async def __call__(self, scope, receive, send):
        routed = engines.route(scope["path"]) if scope["type"] == "http" else None
        if routed is None:
            return await self.fallback(scope, receive, send)
        served, path = routed
        try:
            if served is None:
                raise ApiError(404, "This lab engine has closed: its run is over.", type="not_found_error")
            if path == "/metrics":
                if scope["path"] == "/metrics":  # the site's; a lab engine's has its token in the path
                    _check_key(scope, settings.SERVING_METRICS_KEY)
                # Off the loop: the engine's figures may come from its process (a round trip).
                exposition = await asyncio.to_thread(served.metrics.exposition)
                await _respond(send, 200, exposition, content_type=metrics.CONTENT_TYPE)
                return
            _check_key(scope, settings.SERVING_API_KEY)
            rate_limit().check(_caller(scope))
            method = scope["method"]
            if path == "/v1/models" and method == "GET":
                engine = await asyncio.to_thread(engines.engine_of, served)
                await _json(send, 200, protocol.models_list(settings.SERVED_MODEL_NAME, created=int(time.time()),
                                                            max_model_len=engine.max_model_len))
            elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
                body = await _read_body(receive)
                request = protocol.parse_request(body, chat=path.endswith("chat/completions"),
                                                 served_model=settings.SERVED_MODEL_NAME)
                await _generate(served, request, receive, send)
            elif path in ("/v1/models", "/v1/completions", "/v1/chat/completions"):
                raise ApiError(405, f"{method} is not allowed on {path}", code="method_not_allowed")
            else:
                raise ApiError(404, f"There is no {path} on this server (it serves /v1/models, /v1/completions, "
                                    "/v1/chat/completions and /metrics).", type="not_found_error")
        except ApiError as error:
            headers = [(b"retry-after", str(error.retry_after).encode())] if error.retry_after else []
            await _json(send, error.status, error.body(), headers=headers)
        except _ClientGone:
            return


class _ClientGone(Exception):
    pass


class RateLimit:
    """At most `limit` requests in any `window` seconds per caller — the API key it sends, else its
    address — counted in this process (the API is served by one). Past it: 429 with Retry-After."""

    def __init__(self, limit: int, window: float, max_callers: int = 10_000):
        self.limit, self.window, self.max_callers = limit, window, max_callers
        self.calls: dict[str, deque] = {}

    def check(self, caller: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        calls = self.calls.get(caller)
        if calls is None:
            if len(self.calls) >= self.max_callers:  # forget the quietest callers first
                for stale in [c for c, q in self.calls.items() if not q or q[-1] < now - self.window]:
                    del self.calls[stale]
            calls = self.calls[caller] = deque()
        while calls and calls[0] <= now - self.window:
            calls.popleft()
        if len(calls) >= self.limit:
            retry = max(1, math.ceil(calls[0] + self.window - now))
            raise ApiError(429, f"Too many requests: at most {self.limit} in {self.window:g} s; try again in {retry} s.",
                           type="rate_limit_error", code="rate_limit_exceeded", retry_after=retry)
        calls.append(now)


def _caller(scope) -> str:
    auth = dict(scope["headers"]).get(b"authorization")
    if auth:
        return "key:" + hashlib.sha256(auth).hexdigest()[:16]
    return "addr:" + (scope.get("client") or ("?",))[0]


_limit = None


def rate_limit() -> RateLimit:
    global _limit
    if _limit is None:
        count, seconds = settings.SERVING_RATE_LIMIT.split("/")
        _limit = RateLimit(int(count), float(seconds))
    return _limit


def _check_key(scope, key: str) -> None:
    if not key:
        return
    given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
    if not hmac.compare_digest(given, f"Bearer {key}"):
        raise ApiError(401, "Incorrect or missing API key: send `Authorization: Bearer <key>`.",
                       type="authentication_error", code="invalid_api_key")


async def _read_body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        size += len(message.get("body", b""))
        if size > settings.SERVING_MAX_BODY_BYTES:
            raise ApiError(413, f"The request body is over {settings.SERVING_MAX_BODY_BYTES} bytes.", code="body_too_large")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send, status: int, body: bytes, content_type: str = "application/json", headers=()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def _json(send, status: int, data: dict, headers=()) -> None:
    await _respond(send, status, json.dumps(data, ensure_ascii=False).encode(), headers=headers)


async def _generate(served: engines.Served, request: protocol.GenerationRequest, receive, send) -> None:
    from courseapp.demo.host import ServingRefused

    engine = await asyncio.to_thread(engines.engine_of, served)
    protocol.refuse_if_surely_too_long(request, engine.max_model_len)
    request_id = f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    try:
        handle, prompt_tokens = await engine.open(
            messages=request.messages if request.chat else None, prompt=request.prompt, max_tokens=request.max_tokens,
            sampling=request.sampling(max_tokens=0), request_id=request_id)
    except ServingRefused as refused:
        raise ApiError(400, str(refused), param=refused.param) from None

    gone = asyncio.Event()

    async def watch_disconnect():
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()
        engine.abort(request_id)  # frees its blocks; the stream below ends with "abort"

    watcher = asyncio.create_task(watch_disconnect())
    try:
        if request.stream:
            await _stream(request, handle, send, gone, request_id=request_id, created=created, prompt_tokens=prompt_tokens,
                          observe=served.metrics.observe)
        else:
            final = None
            async for output in handle:
                final = output
            if gone.is_set():
                return
            used = protocol.usage(prompt_tokens, len(final.token_ids), final.metrics.num_cached_tokens)
            await _json(send, 200, protocol.response(request, request_id=request_id, created=created, text=final.text,
                                                     finish_reason=final.finish_reason, token_usage=used))
            served.metrics.observe(final)
    finally:
        watcher.cancel()


async def _stream(request, handle, send, gone: asyncio.Event, *, request_id: str, created: int, prompt_tokens: int,
                  observe) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
    sent, first, final = "", True, None

    async def emit(data) -> None:
        await send({"type": "http.response.body", "body": protocol.sse(data), "more_body": True})

    async for output in handle:
        if gone.is_set():
            return
        final = output
        delta = output.text[len(sent):] if output.text.startswith(sent) else ""
        if delta or first:
            await emit(protocol.chunk(request, request_id=request_id, created=created, text=delta, first=first))
            sent, first = sent + delta, False
    if gone.is_set():
        return
    await emit(protocol.chunk(request, request_id=request_id, created=created, finish_reason=final.finish_reason))
    if request.include_usage:
        used = protocol.usage(prompt_tokens, len(final.token_ids), final.metrics.num_cached_tokens)
        await emit(protocol.chunk(request, request_id=request_id, created=created, token_usage=used))
    await send({"type": "http.response.body", "body": protocol.sse("[DONE]"), "more_body": False})
    observe(final)
