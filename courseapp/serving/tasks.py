"""Scaled mode: an engine worker answers API requests (the web side is courseapp/serving/remote.py).

The task only hands the request to a thread and returns, so the worker's pool slots stay free
for demo runs and a burst of requests waits where vLLM's would: in the engine's waiting queue
(vllm:num_requests_waiting), not in the broker. Delivery is at most once: a request whose worker
dies is not replayed to a client that has gone (the web side tells its client instead).
"""
import asyncio
import logging
import threading
import time
from dataclasses import asdict

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from courseapp.outages import Outage
from courseapp.serving import remote

logger = logging.getLogger("courseapp.serving")
KEEPALIVE_S = 5.0
ABORT_CHECK_S = 0.25
PUBLISH_EVERY_S = 1.0

_engine = None
_engine_lock = threading.Lock()


def worker_engine(name: str):
    """This worker's served engine, built once (the model is already loading: demo/worker.py),
    with a thread that publishes its counters for /metrics under the worker's name."""
    global _engine
    with _engine_lock:
        if _engine is None:
            from courseapp.demo.host import ServingEngine

            _engine = ServingEngine(**settings.SERVING_ENGINE)
            threading.Thread(target=_publish, args=(_engine, name), name="serving-metrics", daemon=True).start()
        return _engine


def _publish(engine, name: str) -> None:
    outage = Outage("served engine's metrics: cache", logger)
    while True:
        try:
            remote.publish_snapshot(name, engine.snapshot())
            outage.answered()
        except Exception as exc:  # Redis away for a moment: the next round
            outage.failed(exc)
        time.sleep(PUBLISH_EVERY_S)


@shared_task(bind=True, name="serving.generate", ignore_result=True, acks_late=False)
def generate(self, *, request_id: str, messages, prompt: str, max_tokens, sampling: dict, reply: str) -> None:
    name = self.request.hostname or "engine"
    threading.Thread(target=asyncio.run, args=(_serve(name, request_id, messages, prompt, max_tokens, sampling, reply),),
                     name=f"serve-{request_id[-12:]}", daemon=True).start()


async def _serve(name, request_id, messages, prompt, max_tokens, sampling, reply) -> None:
    from channels.layers import get_channel_layer

    from courseapp.demo.host import ServingRefused

    layer = get_channel_layer()
    try:
        engine = await asyncio.to_thread(worker_engine, name)
        handle, prompt_tokens = await engine.open(messages=messages, prompt=prompt, max_tokens=max_tokens,
                                                  sampling=sampling, request_id=request_id)
    except ServingRefused as refused:
        await layer.send(reply, {"type": "refused", "message": str(refused), "param": refused.param})
        return
    except Exception as exc:  # this request fails with the reason; the worker goes on
        logger.exception("serving %s failed", request_id)
        await layer.send(reply, {"type": "error", "message": f"{type(exc).__name__}: {exc}"})
        return
    await layer.send(reply, {"type": "accepted", "prompt_tokens": prompt_tokens})
    try:
        await _relay(engine, handle, layer, reply, request_id)
    except Exception as exc:
        logger.exception("serving %s failed mid-answer", request_id)
        engine.abort(request_id)
        await layer.send(reply, {"type": "error", "message": f"{type(exc).__name__}: {exc}"})


async def _relay(engine, handle, layer, reply: str, request_id: str) -> None:
    """Each new output to the web process; a keep-alive while the request waits; an abort when
    the web process flags one (its client went away)."""
    outputs, pending, sent, checked = handle.__aiter__(), None, 0, 0.0
    while True:
        if pending is None:
            pending = asyncio.ensure_future(outputs.__anext__())
        done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_S)
        if time.monotonic() - checked >= ABORT_CHECK_S:
            checked = time.monotonic()
            if cache.get(remote.abort_key(request_id)):
                engine.abort(request_id)
        if not done:
            await layer.send(reply, {"type": "waiting"})
            continue
        try:
            output = pending.result()
        except StopAsyncIteration:
            return
        pending = None
        await layer.send(reply, {"type": "output", "text": output.text, "new_ids": output.token_ids[sent:],
                                 "finished": output.finished, "finish_reason": output.finish_reason,
                                 "metrics": asdict(output.metrics),
                                 "new_logprobs": None if output.logprobs is None else output.logprobs[sent:],
                                 "prompt_logprobs": output.prompt_logprobs if sent == 0 else None})
        sent = len(output.token_ids)
