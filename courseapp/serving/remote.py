"""Scaled mode's served engine, as the web process sees it: requests go to the Celery workers on
the "engine" queue (courseapp/serving/tasks.py) and their tokens come back through the channel
layer (Redis), to a channel of this process made for the one request.

    web (ServingApp)                                    engine worker (any one)
    RemoteEngine.open ──task serving.generate──▶        ServingEngine.open: prepare, submit
                      ◀──{"type": "accepted"}──         (or {"type": "error"}: 400, the limit named)
    async for output  ◀──{"type": "output"} …──         one per new token, the last one finished
    abort()           ──cache flag──▶                   the relay sees it, the engine frees the blocks

The web process never loads torch for this. A request no worker takes within
DEMO_PICKUP_WITHIN_S fails with 503; a worker gone silent mid-answer ends the answer with an
error. Each worker's counters and gauges reach /metrics through the cache (labelled `engine`
with the worker's name: tasks.publish_metrics).
"""
import asyncio
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from django.conf import settings
from django.core.cache import cache

from courseapp.demo import events, registry
from courseapp.serving.protocol import ApiError

SILENT_FOR_S = 15  # a worker sends at least a keep-alive every 5 s while a request waits (tasks.KEEPALIVE_S)
METRICS_KEY = "serving-metrics:{}"


def abort_key(request_id: str) -> str:
    return f"serving-abort:{request_id}"


@dataclass(slots=True)
class RemoteOutput:
    """What asgi.py reads of an engine's RequestOutput, rebuilt from the worker's messages."""

    text: str = ""
    token_ids: list = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    metrics: SimpleNamespace = field(default_factory=SimpleNamespace)
    logprobs: list | None = None  # engine.logits_processors.TokenLogprob per token, when asked
    prompt_logprobs: list | None = None


class RemoteHandle:
    def __init__(self, layer, channel: str, request_id: str):
        self.layer, self.channel, self.request_id = layer, channel, request_id
        self.output = RemoteOutput()

    async def __aiter__(self):
        while not self.output.finished:
            message = await self._next()
            if message["type"] == "output":
                self.output.text = message["text"]
                self.output.token_ids.extend(message["new_ids"])
                self.output.finished = message["finished"]
                self.output.finish_reason = message["finish_reason"]
                self.output.metrics = SimpleNamespace(**message["metrics"])
                if message.get("new_logprobs") is not None:
                    self.output.logprobs = (self.output.logprobs or []) + message["new_logprobs"]
                if message.get("prompt_logprobs") is not None:
                    self.output.prompt_logprobs = message["prompt_logprobs"]
                yield self.output
            elif message["type"] == "error":
                raise RuntimeError(f"the engine worker failed: {message['message']}")

    async def _next(self) -> dict:
        try:
            return await asyncio.wait_for(self.layer.receive(self.channel), SILENT_FOR_S)
        except TimeoutError:
            raise RuntimeError(f"the engine worker stopped answering for {SILENT_FOR_S} s") from None


class RemoteEngine:
    """The same calls asgi.py makes of host.ServingEngine, answered by the engine workers."""

    def __init__(self):
        from engine.config import EngineConfig  # no torch: the model's config.json says its context

        import json
        from pathlib import Path

        self.model = EngineConfig().model
        config = json.loads((Path(self.model) / "config.json").read_text())
        self.max_model_len = config["max_position_embeddings"]

    async def open(self, *, messages, prompt: str, max_tokens, sampling: dict, request_id: str):
        from channels.layers import get_channel_layer

        from courseapp.demo.host import ServingRefused
        from courseapp.serving import tasks

        layer = get_channel_layer()
        channel = await layer.new_channel(prefix="serving")
        if not registry.workers_up():  # said at once, not after the pickup wait: nobody would take it
            reason, code = _no_worker_reason()
            raise ApiError(503, reason + "; try again later.", type="service_unavailable", code=code)
        try:
            await asyncio.to_thread(tasks.generate.apply_async, kwargs={
                "request_id": request_id, "messages": messages, "prompt": prompt, "max_tokens": max_tokens,
                "sampling": sampling, "reply": channel})
            first = await asyncio.wait_for(layer.receive(channel), settings.DEMO_PICKUP_WITHIN_S)
        except TimeoutError:
            raise ApiError(503, f"No engine worker took the request within {settings.DEMO_PICKUP_WITHIN_S} s; "
                                "try again later.", type="service_unavailable", code="no_engine_worker") from None
        except Exception as exc:  # Redis (the broker and the way back) is away
            raise ApiError(503, f"The engine workers cannot be reached right now ({type(exc).__name__}); "
                                "try again in a minute.", type="service_unavailable", code="engine_unavailable") from None
        if first["type"] == "refused":
            raise ServingRefused(first["message"], first.get("param"))
        if first["type"] == "error":
            raise ApiError(500, f"The engine worker failed: {first['message']}", type="internal_server_error")
        return RemoteHandle(layer, channel, request_id), first["prompt_tokens"]

    def abort(self, request_id: str) -> bool:
        cache.set(abort_key(request_id), True, 600)
        return True

    def check_health(self) -> None:
        """Some engine worker is up (it announced itself in the last seconds: demo/registry.py)."""
        if not registry.workers_up():
            raise RuntimeError(_no_worker_reason()[0] + " (README: Scaled mode)")

    # The tokenizer's calls are answered here, from the model's own files and without torch
    # (engine/chat_prompt.py): a round trip to a worker for /tokenize would wait behind its requests.
    def tokenize(self, *, messages=None, prompt="", add_special_tokens: bool = True,
                 add_generation_prompt: bool = True) -> list[int]:
        from engine import chat_prompt

        if messages is not None:
            return chat_prompt.chat_prompt_ids(self.model, messages, add_generation_prompt=add_generation_prompt)
        if isinstance(prompt, list):
            self._check_ids(prompt, "prompt")
            return list(prompt)
        return chat_prompt.encode(self.model, prompt, add_special_tokens=add_special_tokens)

    def detokenize(self, ids: list[int]) -> str:
        from engine import chat_prompt

        self._check_ids(ids, "tokens")
        return chat_prompt.decode(self.model, ids)

    def token_strings(self, ids: list[int]) -> dict[int, str]:
        from engine import chat_prompt

        return {i: chat_prompt.decode(self.model, [i]) for i in set(ids)}

    def _check_ids(self, ids: list[int], param: str) -> None:
        from courseapp.demo.host import check_token_ids
        from engine import chat_prompt

        check_token_ids(ids, chat_prompt.vocab_size(self.model), param)


def _no_worker_reason() -> tuple[str, str]:
    """Why no worker is heard from, and its error code: Redis, where they announce themselves, is
    away, or none is up."""
    if not events.engines_reachable():
        return "The engine workers cannot be reached right now (Redis does not answer)", "engine_unavailable"
    return f"No engine worker is running (none has reported in the last {registry.GONE_AFTER_S} s)", "no_engine_worker"


def worker_snapshots() -> list[tuple[str, SimpleNamespace]]:
    """Each live worker's latest counters and gauges, by its name (the registry's names; a worker
    silent for 15 s drops out as its figures expire)."""
    workers = registry.names()
    found = cache.get_many([METRICS_KEY.format(name) for name in workers])
    return [(name, SimpleNamespace(**found[METRICS_KEY.format(name)])) for name in workers
            if METRICS_KEY.format(name) in found]


def publish_snapshot(name: str, snapshot, ttl: int = 15) -> None:
    fields = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries_total",
              "prefix_cache_hits_total", "num_preemptions_total", "prompt_tokens_total", "generation_tokens_total")
    cache.set(METRICS_KEY.format(name), {f: getattr(snapshot, f) for f in fields} | {"at": time.time()}, ttl)
