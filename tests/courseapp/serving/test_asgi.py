"""The ASGI front of /v1 and /metrics, driven at the ASGI level: what is refused before the
engine is asked anything, and which key guards what."""
import asyncio
import json

from courseapp.serving import asgi, engines
from tests.aio import run_in_fresh_loop


def call(method: str, path: str, body: bytes = b"", headers=()) -> list[dict]:
    sent = []
    scope = {"type": "http", "method": method, "path": path, "headers": list(headers), "client": ("10.1.2.3", 1)}

    asked = []

    async def receive():  # the body once; then, as a server does, nothing until the client leaves
        if asked:
            await asyncio.Event().wait()
        asked.append(True)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    run_in_fresh_loop(lambda: asyncio.wait_for(asgi.ServingApp(None)(scope, receive, send), 10))
    return sent


def test_a_prompt_too_long_for_any_tokenization_is_refused_before_the_engine_sees_it(monkeypatch):
    opened = []

    class Engine:
        max_model_len = 2048

        async def open(self, **kwargs):
            opened.append(kwargs)
            raise AssertionError("tokenized")

    monkeypatch.setattr(engines, "engine_of", lambda served: Engine())
    monkeypatch.setattr(engines, "route", lambda path: (object(), path))
    monkeypatch.setattr(asgi, "_check_key", lambda scope, key: None)
    for path, body in (("/v1/completions", {"prompt": "가" * 340_000}),  # ~1 MB, under the body cap
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * 60_000}]})):
        sent = call("POST", path, json.dumps({"model": "munuibot", **body}, ensure_ascii=False).encode())
        error = json.loads(sent[1]["body"])["error"]
        assert sent[0]["status"] == 400 and "maximum context length is 2048" in error["message"], error
        assert error["param"] == ("prompt" if path == "/v1/completions" else "messages")
    assert opened == []



def test_the_metrics_key_guards_the_sites_metrics_and_the_api_key_does_not(monkeypatch, settings):
    class Served:
        class metrics:
            @staticmethod
            def exposition():
                return b"vllm:num_requests_running 0\n"

    monkeypatch.setattr(engines, "route", lambda path: (Served, "/metrics"))
    settings.SERVING_API_KEY, settings.SERVING_METRICS_KEY = "api-key", ""
    assert call("GET", "/metrics")[0]["status"] == 200, "open by default, as vLLM's"
    settings.SERVING_METRICS_KEY = "scrape-key"
    refused = call("GET", "/metrics", headers=[(b"authorization", b"Bearer api-key")])
    assert refused[0]["status"] == 401 and json.loads(refused[1]["body"])["error"]["code"] == "invalid_api_key"
    assert call("GET", "/metrics", headers=[(b"authorization", b"Bearer scrape-key")])[0]["status"] == 200
    assert call("GET", "/lab/engines/" + "t" * 32 + "/metrics")[0]["status"] == 200, "a lab engine's: its token is the key"


def test_health_is_200_when_the_engine_can_serve_and_503_saying_why_when_not(monkeypatch, settings):
    class Engine:
        broken = None

        def check_health(self):
            if self.broken:
                raise RuntimeError(self.broken)

    engine = Engine()
    monkeypatch.setattr(engines, "engine_of", lambda served: engine)
    monkeypatch.setattr(engines, "route", lambda path: (object(), path))
    settings.SERVING_API_KEY = "secret"  # as vLLM's, /health needs no key
    sent = call("GET", "/health")
    assert (sent[0]["status"], sent[1]["body"]) == (200, b"")
    engine.broken = "the engine stopped: CUDA error"
    sent = call("GET", "/health")
    assert sent[0]["status"] == 503 and "the engine stopped: CUDA error" in json.loads(sent[1]["body"])["error"]["message"]
    assert call("POST", "/health")[0]["status"] == 405


def test_an_engine_that_fails_mid_answer_ends_a_stream_with_an_error_and_done_and_a_whole_answer_with_503(monkeypatch):
    """As when a scaled-mode worker dies under a request: never a connection left open."""
    from types import SimpleNamespace

    aborted = []

    class Handle:
        def __aiter__(self):
            return self._outputs()

        async def _outputs(self):
            yield SimpleNamespace(text="배송", token_ids=[5], finished=False, finish_reason=None, logprobs=None,
                                  prompt_logprobs=None, metrics=SimpleNamespace(num_cached_tokens=0))
            raise RuntimeError("the engine worker stopped answering for 15 s")

    class Engine:
        max_model_len = 2048

        async def open(self, **kwargs):
            return Handle(), 3

        def abort(self, request_id):
            aborted.append(request_id)
            return True

    monkeypatch.setattr(engines, "engine_of", lambda served: Engine())
    monkeypatch.setattr(engines, "route", lambda path: (SimpleNamespace(metrics=SimpleNamespace(observe=lambda *a, **k: None)), path))
    monkeypatch.setattr(asgi, "_check_key", lambda scope, key: None)
    body = {"model": "munuibot", "messages": [{"role": "user", "content": "배송 언제?"}], "max_tokens": 50}
    streamed = call("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}).encode())
    events = b"".join(m.get("body", b"") for m in streamed[1:]).decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and "stopped answering" in json.loads(events[-3][6:])["error"]["message"]
    assert streamed[-1]["more_body"] is False, "the response ends"
    whole = call("POST", "/v1/chat/completions", json.dumps(body).encode())
    assert whole[0]["status"] == 503 and json.loads(whole[1]["body"])["error"]["code"] == "engine_failed"
    assert len(aborted) == 2, "the engine frees what the failed request held"
