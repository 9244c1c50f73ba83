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
from engine.version import __version__

logger = logging.getLogger("courseapp.serving")
ROUTES = ("/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics", "/health", "/ping", "/version",
          "/tokenize", "/detokenize")

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
            method = scope["method"]
            if path in ("/health", "/ping"):  # unguarded, as vLLM's: a load balancer asks it
                if method not in ("GET", "POST" if path == "/ping" else "GET"):
                    raise ApiError(405, f"{method} is not allowed on {path}", code="method_not_allowed")
                await _health(served, send)
                return
            _check_key(scope, settings.SERVING_API_KEY)
            rate_limit().check(_caller(scope))
            if path == "/v1/models" and method == "GET":
                engine = await asyncio.to_thread(engines.engine_of, served)
                await _json(send, 200, protocol.models_list(settings.SERVED_MODEL_NAME, created=int(time.time()),
                                                            max_model_len=engine.max_model_len))
            elif path == "/version" and method == "GET":
                await _json(send, 200, {"version": __version__})
            elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
                body = await _read_body(receive)
                request = protocol.parse_request(body, chat=path.endswith("chat/completions"),
                                                 served_model=settings.SERVED_MODEL_NAME)
                await _generate(served, request, receive, send)
            elif path in ("/tokenize", "/detokenize") and method == "POST":
                body = await _read_body(receive)
                await _tokens(served, path, body, send)
            elif path in ROUTES:
                raise ApiError(405, f"{method} is not allowed on {path}", code="method_not_allowed")
            else:
                raise ApiError(404, f"There is no {path} on this server (it serves {', '.join(sorted(ROUTES))}).",
                               type="not_found_error")
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


async def _health(served: engines.Served, send) -> None:
    """200 with an empty body when the engine can take a request, else 503 with the reason (vLLM's
    /health). The site's engine is built by the first call that needs it, this one included."""
    try:
        engine = await asyncio.to_thread(engines.engine_of, served)
        await asyncio.to_thread(engine.check_health)
    except Exception as exc:
        await _json(send, 503, ApiError(503, f"The engine cannot serve: {exc}", type="service_unavailable").body())
        return
    await _respond(send, 200, b"")


async def _tokens(served: engines.Served, path: str, raw: bytes, send) -> None:
    """vLLM's /tokenize ({prompt} or {messages}) → {count, max_model_len, tokens[, token_strs]}
    and /detokenize ({tokens}) → {prompt}."""
    from courseapp.demo.host import ServingRefused

    body = protocol.parse_tokens_request(raw, detokenize=path == "/detokenize", served_model=settings.SERVED_MODEL_NAME)
    engine = await asyncio.to_thread(engines.engine_of, served)
    try:
        if path == "/detokenize":
            await _json(send, 200, {"prompt": await asyncio.to_thread(engine.detokenize, body["tokens"])})
            return
        ids = await asyncio.to_thread(engine.tokenize, **body["tokenize"])
        strings = await asyncio.to_thread(engine.token_strings, ids) if body["return_token_strs"] else None
    except ServingRefused as refused:
        raise ApiError(400, str(refused), param=refused.param) from None
    await _json(send, 200, {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids,
                            "token_strs": None if strings is None else [strings[i] for i in ids]})


class _Choice:
    """One prompt of a call (a completions batch has several) and what has gone out of it."""

    def __init__(self, index: int, request_id: str, prompt, handle, prompt_tokens: int):
        self.index, self.request_id, self.prompt, self.handle = index, request_id, prompt, handle
        self.prompt_tokens = prompt_tokens
        self.prompt_ids: list[int] | None = prompt if isinstance(prompt, list) else None
        self.final = None
        self.sent_text, self.sent_tokens, self.started = "", 0, False


async def _generate(served: engines.Served, request: protocol.GenerationRequest, receive, send) -> None:
    from courseapp.demo.host import ServingRefused

    engine = await asyncio.to_thread(engines.engine_of, served)
    protocol.refuse_if_surely_too_long(request, engine.max_model_len)
    request_id = f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    score_only = request.max_tokens == 0  # echo with max_tokens 0: the prompt's logprobs, no answer
    prompts = [None] if request.chat else request.prompts
    choices: list[_Choice] = []
    try:
        for index, prompt in enumerate(prompts):
            rid = request_id if len(prompts) == 1 else f"{request_id}-{index}"
            handle, prompt_tokens = await engine.open(
                messages=request.messages if request.chat else None, prompt=prompt,
                max_tokens=1 if score_only else request.max_tokens, sampling=request.sampling(max_tokens=0),
                request_id=rid)
            choices.append(_Choice(index, rid, prompt, handle, prompt_tokens))
    except ServingRefused as refused:
        for c in choices:
            engine.abort(c.request_id)
        param = refused.param
        raise ApiError(400, (f"prompt[{len(choices)}]: " if len(prompts) > 1 else "") + str(refused), param=param) from None
    except BaseException:
        for c in choices:
            engine.abort(c.request_id)
        raise

    gone = asyncio.Event()

    async def watch_disconnect():
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()
        for c in choices:
            engine.abort(c.request_id)  # frees its blocks; the stream below ends with "abort"

    watcher = asyncio.create_task(watch_disconnect())
    try:
        if request.stream:
            await _stream(request, engine, choices, send, gone, request_id=request_id, created=created,
                          score_only=score_only, observe=served.metrics.observe)
        else:
            try:
                await asyncio.gather(*(_finish(c) for c in choices))
            except Exception as exc:  # the engine failed mid-answer (in scaled mode: its worker died)
                for c in choices:
                    engine.abort(c.request_id)
                raise ApiError(503, f"The engine failed while answering: {exc}", type="service_unavailable",
                               code="engine_failed") from None
            if gone.is_set():
                return
            out = [protocol.choice(request, c.index, *await _whole_text(request, engine, c, score_only)) for c in choices]
            if request.prompt_logprobs is not None:  # vLLM's extra field, beside the choice's text
                for piece, c in zip(out, choices):
                    piece["prompt_logprobs"] = await _prompt_logprobs(request, engine, c)
            await _json(send, 200, protocol.response(request, request_id=request_id, created=created, choices=out,
                                                     token_usage=_usage(choices, score_only)))
            for c in choices:
                _observe(served.metrics.observe, request, engine, c)
    finally:
        watcher.cancel()


def _observe(observe, request, engine, c: _Choice) -> None:
    room = engine.max_model_len - c.prompt_tokens
    observe(c.final, prompt_tokens=c.prompt_tokens,
            max_tokens=room if request.max_tokens is None else max(1, request.max_tokens))


async def _finish(c: _Choice) -> None:
    async for output in c.handle:
        c.final = output


def _usage(choices: list[_Choice], score_only: bool) -> dict:
    return protocol.usage(sum(c.prompt_tokens for c in choices),
                          0 if score_only else sum(len(c.final.token_ids) for c in choices),
                          sum(c.final.metrics.num_cached_tokens for c in choices))


async def _prompt_ids(engine, request, c: _Choice) -> list[int]:
    if c.prompt_ids is None:
        c.prompt_ids = await asyncio.to_thread(engine.tokenize, prompt=c.prompt)
    return c.prompt_ids


async def _echo_text(engine, c: _Choice) -> str:
    return c.prompt if isinstance(c.prompt, str) else await asyncio.to_thread(engine.detokenize, c.prompt)


async def _whole_text(request, engine, c: _Choice, score_only: bool) -> tuple[str, str, dict | None]:
    """(text, finish_reason, logprobs) of a finished choice."""
    final = c.final
    text = "" if score_only else final.text
    if request.echo:
        text = await _echo_text(engine, c) + text
    return text, final.finish_reason, await _logprobs(request, engine, c, 0, 0 if score_only else len(final.token_ids),
                                                      with_prompt=request.echo)


async def _prompt_logprobs(request, engine, c: _Choice) -> list:
    """vLLM's `prompt_logprobs`: per prompt token, null for the first, else {token id: {logprob,
    rank, decoded_token}} for the token itself and the k likeliest."""
    entries = list(c.final.prompt_logprobs or [])
    wanted = [t for e in entries if e is not None for t in (e[0], *(i for i, _ in e[3]))]
    strings = await asyncio.to_thread(engine.token_strings, wanted) if wanted else {}
    return [None if e is None else protocol.vllm_logprob_entry(e, strings) for e in entries]


async def _logprobs(request, engine, c: _Choice, first: int, last: int, *, with_prompt: bool) -> dict | None:
    """The logprobs of generated tokens [first, last) (and, under echo, the prompt's), in the
    call's shape; None when none were asked for."""
    if request.logprobs is None:
        return None
    final = c.final
    ids = final.token_ids[first:last]
    entries = (final.logprobs or [])[first:last]
    if with_prompt:
        prompt_ids = await _prompt_ids(engine, request, c)
        ids, entries = prompt_ids + ids, list(final.prompt_logprobs or [None] * len(prompt_ids)) + entries
    wanted = ids + [t for e in entries if e is not None for t, _ in e[3]]
    strings = await asyncio.to_thread(engine.token_strings, wanted) if wanted else {}
    if request.chat:
        return protocol.chat_logprobs(entries, strings)
    return protocol.completion_logprobs(ids, entries, strings)


async def _stream(request, engine, choices: list[_Choice], send, gone: asyncio.Event, *, request_id: str, created: int,
                  score_only: bool, observe) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})

    async def emit(data) -> None:
        await send({"type": "http.response.body", "body": protocol.sse(data), "more_body": True})

    def piece(c: _Choice, **fields) -> dict:
        return protocol.chunk(request, request_id=request_id, created=created, index=c.index, **fields)

    async def relay(c: _Choice) -> None:
        async for output in c.handle:
            if gone.is_set():
                return
            c.final = output
            # The engine's text only grows (engine.LLMEngine.output): what is new goes out, with
            # the logprobs of the tokens since the last piece (a token whose text is held back
            # goes with the next piece). Under echo the first piece carries the prompt.
            delta = "" if score_only else output.text[len(c.sent_text):]
            upto = 0 if score_only else len(output.token_ids)
            first = not c.started
            if delta or first or (request.logprobs is not None and upto > c.sent_tokens and output.finished):
                lp = await _logprobs(request, engine, c, c.sent_tokens, upto, with_prompt=first and request.echo)
                text = (await _echo_text(engine, c) if first and request.echo else "") + delta
                data = piece(c, text=text, first=first, logprobs=lp)
                if first and request.prompt_logprobs is not None:  # with the first piece, as vLLM sends them
                    data["choices"][0]["prompt_logprobs"] = await _prompt_logprobs(request, engine, c)
                await emit(data)
                c.sent_text, c.sent_tokens, c.started = c.sent_text + delta, upto, True
        if not gone.is_set():
            await emit(piece(c, finish_reason=c.final.finish_reason))

    # A batch's choices stream side by side, each chunk naming its index.
    try:
        await asyncio.gather(*(relay(c) for c in choices))
    except Exception as exc:  # the engine failed mid-answer (in scaled mode: its worker died)
        # The 200 and some chunks are out: the stream ends with an error event and [DONE], as
        # vLLM ends one, so a client stops waiting instead of hanging on an open connection.
        for c in choices:
            engine.abort(c.request_id)
        if not gone.is_set():
            error = ApiError(503, f"The engine failed while answering: {exc}", type="service_unavailable",
                             code="engine_failed")
            await emit(error.body())
            await send({"type": "http.response.body", "body": protocol.sse("[DONE]"), "more_body": False})
        return
    if gone.is_set():
        return
    if request.include_usage:
        await emit(protocol.chunk(request, request_id=request_id, created=created, token_usage=_usage(choices, score_only)))
    await send({"type": "http.response.body", "body": protocol.sse("[DONE]"), "more_body": False})
    for c in choices:
        _observe(observe, request, engine, c)
