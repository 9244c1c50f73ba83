"""The OpenAI-compatible API and /metrics on a live Daphne, driven by the official `openai`
client and by raw HTTP, as a learner's §6 scripts would (issue #10)."""
import json
import threading
import urllib.request

import pytest
from openai import AuthenticationError, BadRequestError, NotFoundError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import start_daphne, stop_process

pytestmark = pytest.mark.e2e
LONG_SYSTEM = "당신은 문의봇입니다. 주문, 배송, 환불, 계정 문의에 짧고 정확하게 답합니다. " * 12


@pytest.fixture(scope="module")
def server(django_db_blocker):
    # A small engine: 2 seats and a pool two long answers overflow, so queues and preemptions show;
    # in a process of its own, as `make run` serves it.
    with django_db_blocker.unblock():
        proc, url, log = start_daphne({"SERVING_MAX_NUM_SEQS": "2", "SERVING_NUM_BLOCKS": "24", "SERVING_ENGINE_PROCESS": "1"})
    yield url
    stop_process(proc)
    log.close()


def client(url: str, key: str = "unused") -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def scrape(url: str) -> dict:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.labels.get("model_name") == "munuibot" and "finished_reason" not in sample.labels}


def ask(url: str, **extra):
    return client(url).chat.completions.create(
        model="munuibot", messages=[{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "배송이 언제 오나요?"}],
        temperature=0, max_tokens=24, **extra)


def test_models_completions_and_chat_through_the_official_client(server):
    api = client(server)
    assert [m.id for m in api.models.list().data] == ["munuibot"]
    done = api.completions.create(model="munuibot", prompt="주문 취소는", max_tokens=8, temperature=0)
    assert done.choices[0].finish_reason in ("stop", "length") and done.usage.completion_tokens <= 8
    whole = ask(server)
    streamed = ask(server, stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in streamed:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == whole.choices[0].message.content, "greedy: the stream says what the whole answer says"
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_a_repeated_long_prompt_is_served_from_the_prefix_cache(server):
    before = scrape(server)
    first, second = ask(server), ask(server)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 16 * (second.usage.prompt_tokens // 16) - 16, "every full block but the last one came from the cache"
    assert cached > 0 and cached >= first.usage.prompt_tokens_details.cached_tokens
    after = scrape(server)
    assert after["vllm:prefix_cache_hits_total"] > before["vllm:prefix_cache_hits_total"]
    assert after["vllm:prompt_tokens_total"] > before["vllm:prompt_tokens_total"]


def test_errors_come_in_openais_shape_with_the_right_status(server):
    api = client(server)
    with pytest.raises(BadRequestError, match="maximum context length"):
        api.chat.completions.create(model="munuibot", messages=[{"role": "user", "content": "가 " * 5000}], max_tokens=8)
    with pytest.raises(NotFoundError):
        api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    request = urllib.request.Request(f"{server}/v1/chat/completions", data=b"{not json", method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 400 and set(json.loads(caught.value.read())["error"]) == {"message", "type", "param", "code"}


def test_more_streams_than_seats_wait_and_a_tiny_pool_preempts(server):
    before = scrape(server)
    seen_waiting, answers, failures = [], [], []
    api = client(server)

    together = threading.Barrier(10)

    def one(i):
        together.wait()  # all ten at once: more than the 2 seats
        try:  # ignore_eos (vLLM's extension): every answer runs its full 200 tokens
            answers.append(api.chat.completions.create(
                model="munuibot", messages=[{"role": "user", "content": f"{i}번 주문 배송 문의"}],
                temperature=0, max_tokens=200, extra_body={"ignore_eos": True}))
        except Exception as exc:  # noqa: BLE001 — reported below, not lost in a thread
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(10)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        seen_waiting.append(scrape(server)["vllm:num_requests_waiting"])
    for thread in threads:
        thread.join()
    after = scrape(server)
    assert failures == [] and len(answers) == 10, failures
    assert all(a.usage.completion_tokens == 200 for a in answers)
    assert max(seen_waiting) > 0, "10 streams on 2 seats: some waited, none was dropped"
    assert after["vllm:num_preemptions_total"] > before["vllm:num_preemptions_total"], "24 blocks of 16 cannot hold 2 answers of 200 tokens"
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] < 1
    assert after["vllm:request_queue_time_seconds_count"] == before.get("vllm:request_queue_time_seconds_count", 0) + 10
    assert after["vllm:request_queue_time_seconds_sum"] > before.get("vllm:request_queue_time_seconds_sum", 0), "some waited"


def test_with_an_api_key_set_a_wrong_key_gets_401(django_db_blocker):
    with django_db_blocker.unblock():
        proc, url, log = start_daphne({"SERVING_API_KEY": "s3cret"})
    try:
        with pytest.raises(AuthenticationError):
            client(url, key="wrong").models.list()
        assert [m.id for m in client(url, key="s3cret").models.list().data] == ["munuibot"]
    finally:
        stop_process(proc)
        log.close()


def test_past_the_rate_limit_a_caller_gets_429_with_retry_after(django_db_blocker):
    with django_db_blocker.unblock():
        proc, url, log = start_daphne({"SERVING_RATE_LIMIT": "3/60"})
    try:
        for _ in range(3):
            assert urllib.request.urlopen(f"{url}/v1/models", timeout=60).status == 200
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{url}/v1/models", timeout=60)
        assert caught.value.code == 429 and 0 < int(caught.value.headers["Retry-After"]) <= 60
        assert json.loads(caught.value.read())["error"]["type"] == "rate_limit_error"
        other = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": "Bearer another-learner"})
        assert urllib.request.urlopen(other, timeout=60).status == 200  # counted apart
    finally:
        stop_process(proc)
        log.close()
