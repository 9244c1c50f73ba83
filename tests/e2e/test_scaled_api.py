"""Scaled mode's API: Daphne hands /v1 requests to a real `celery worker` on the engine queue,
whose engine streams the tokens back through Redis; /metrics shows that worker's engine."""
import urllib.error
import urllib.request

import pytest
from openai import BadRequestError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import wait_until
from tests.e2e.test_scaled import ROOT, web, workers  # noqa: F401 (fixtures)

pytestmark = pytest.mark.e2e
MESSAGES = [{"role": "user", "content": "환불 신청했는데 카드 취소가 언제 되나요?"}]


def healthy(url: str) -> bool:
    """/health is 200 once a worker has announced itself (a client waits for it, as for vLLM's)."""
    try:
        return urllib.request.urlopen(f"{url}/health", timeout=10).status == 200
    except urllib.error.HTTPError:
        return False


def engine_samples(url: str, name: str) -> dict:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    return {sample.labels.get("engine"): sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name}


def test_a_chat_completion_and_a_stream_are_served_by_an_engine_worker(web, workers):  # noqa: F811
    workers.start("api")
    wait_until(lambda: healthy(web), 60, "a worker to announce itself")
    api = OpenAI(base_url=f"{web}/v1", api_key="unused", max_retries=0, timeout=180)
    whole = api.chat.completions.create(model="munuibot", messages=MESSAGES, temperature=0, max_tokens=24)
    assert whole.choices[0].finish_reason in ("stop", "length") and whole.usage.completion_tokens > 0
    text, usage = "", None
    for chunk in api.chat.completions.create(model="munuibot", messages=MESSAGES, temperature=0, max_tokens=24,
                                             stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == whole.choices[0].message.content, "greedy: the stream says what the whole answer says"
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens > 0, "the worker's engine cached the prompt of the first answer"

    with pytest.raises(BadRequestError, match="maximum context length"):  # refused by the worker, named limit and all
        api.chat.completions.create(model="munuibot", messages=[{"role": "user", "content": "가 " * 5000}], max_tokens=8)

    served = wait_until(lambda: {e: v for e, v in engine_samples(web, "vllm:generation_tokens_total").items()
                                 if e and e.startswith("api@") and v >= 2 * whole.usage.completion_tokens},
                        30, "the worker's engine on /metrics")
    assert len(served) == 1


def test_a_client_leaving_mid_stream_stops_its_request_on_the_worker(web, workers):  # noqa: F811
    workers.start("leaver")
    wait_until(lambda: healthy(web), 60, "a worker to announce itself")
    api = OpenAI(base_url=f"{web}/v1", api_key="unused", max_retries=0, timeout=180)
    api.chat.completions.create(model="munuibot", messages=MESSAGES, temperature=0, max_tokens=4)  # the engine is up
    before = wait_until(lambda: engine_samples(web, "vllm:generation_tokens_total").get(next(
        (e for e in engine_samples(web, "vllm:generation_tokens_total") if e and e.startswith("leaver@")), None)),
        30, "the worker's counters")
    stream = api.chat.completions.create(model="munuibot", messages=MESSAGES, temperature=0, max_tokens=1500,
                                         stream=True, extra_body={"ignore_eos": True})
    def running() -> float:
        return next(v for e, v in engine_samples(web, "vllm:num_requests_running").items() if e and e.startswith("leaver@"))

    for i, _chunk in enumerate(stream):
        if i % 20 == 0 and running() == 1:  # /metrics has seen it running (it is published every second)
            break
    stream.close()  # the client goes away early in its 1,500 tokens

    def settled():
        return running() == 0

    wait_until(settled, 60, "the worker's engine to have nothing running")
    generated = engine_samples(web, "vllm:generation_tokens_total")
    after = next(v for e, v in generated.items() if e and e.startswith("leaver@"))
    assert after - before < 1500, "the request was aborted, not run to its end"
