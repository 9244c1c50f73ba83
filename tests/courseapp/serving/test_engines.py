"""Which engine a path reaches: the site's under /v1 and /metrics; a lab run's only under its own
unguessable base URL, and only while the run lasts."""
import json

from courseapp.serving import engines
from courseapp.serving.asgi import ServingApp
from tests.aio import run_in_fresh_loop


def call(path: str, method: str = "GET") -> tuple[int, dict | str]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def fallback(scope, receive, send):
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"django"})

    scope = {"type": "http", "method": method, "path": path, "headers": [], "client": ("127.0.0.1", 1)}
    run_in_fresh_loop(lambda: ServingApp(fallback)(scope, receive, send))
    body = sent[1]["body"].decode()
    return sent[0]["status"], (json.loads(body) if body.startswith("{") else body)


def test_a_lab_engine_answers_under_its_token_until_it_closes(db, settings):
    token, engine = engines.lab_engine_open("run-1", num_blocks=64, max_num_seqs=4, max_num_batched_tokens=128, log_interval_s=60)
    try:
        status, body = call(f"/lab/engines/{token}/v1/models")
        assert status == 200 and body["data"][0]["id"] == settings.SERVED_MODEL_NAME
        status, text = call(f"/lab/engines/{token}/metrics")
        assert status == 200 and 'vllm:num_requests_running{engine="0",model_name="munuibot"} 0.0' in text
        assert engines.route(f"/lab/engines/{token}/v1/models")[0].engine is engine
    finally:
        engines.lab_engine_close(token)
    status, body = call(f"/lab/engines/{token}/v1/models")
    assert status == 404 and "closed" in body["error"]["message"]
    assert call("/lab/engines/short/v1/models")[0] == 404, "a malformed token is no engine either"
    assert call("/lab/")[0] == 299 and call("/lab/runs/x/")[0] == 299, "the lab's pages are Django's"
