"""A client that goes away mid-stream: the app aborts its request and the engine frees its
blocks. Driven at the ASGI level, so the test decides exactly when the client leaves (through
Daphne, a closed socket is noticed only when a write fails, a moment later)."""
import asyncio
import json

from courseapp.serving.asgi import ServingApp
from courseapp.serving.engines import served_engine
from tests.aio import run_in_fresh_loop


def test_leaving_mid_stream_aborts_the_request_and_frees_its_blocks(db):
    engine = served_engine()
    before = engine.snapshot()
    body = json.dumps({"model": "munuibot", "messages": [{"role": "user", "content": "환불 문의"}], "temperature": 0,
                       "max_tokens": 300, "ignore_eos": True, "stream": True}).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "client": ("127.0.0.1", 1)}
    sent = []

    async def run():
        left = asyncio.Event()
        inbox = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if inbox:
                return inbox.pop(0)
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and len(sent) == 3:  # two events read, then gone
                left.set()

        await asyncio.wait_for(ServingApp(None)(scope, receive, send), 60)

    run_in_fresh_loop(lambda: run())
    after = engine.snapshot()
    assert sent[0]["status"] == 200
    assert after.num_requests_running == 0 and after.kv_blocks_used == 0, "its blocks are free"
    assert after.generation_tokens_total - before.generation_tokens_total < 300, "it was cut short"
    assert not any(b"[DONE]" in m.get("body", b"") for m in sent), "nothing more was sent to a client that left"
