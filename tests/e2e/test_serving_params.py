"""What the tools people point at vLLM send, on a live Daphne with the engine in its own process
(issue #29): vLLM's plain routes, token-id and batched prompts, echo and logprobs (checked against
a transformers forward of the shipped model), sampling parameters, parameters refused by name,
and streams that say exactly what the whole answer says."""
import json
import random
import urllib.error
import urllib.request

import pytest
import torch
from openai import BadRequestError, OpenAI
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.config import EngineConfig
from tests.e2e.conftest import start_daphne, stop_process

pytestmark = pytest.mark.e2e
INQUIRY = "지난주에 주문한 운동화가 아직 안 왔어요. 언제 오나요?"


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with django_db_blocker.unblock():
        proc, url, log = start_daphne({"SERVING_ENGINE_PROCESS": "1"})
    yield url
    stop_process(proc)
    log.close()


@pytest.fixture(scope="module")
def reference():
    path = EngineConfig().model
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(url: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def logprobs_of(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


def test_vllms_plain_routes(server, reference):
    _, tokenizer = reference
    assert get(server, "/health") == (200, b"")
    assert get(server, "/ping")[0] == 200
    status, body = get(server, "/version")
    assert status == 200 and json.loads(body)["version"]
    status, body = post(server, "/tokenize", {"model": "munuibot", "prompt": INQUIRY, "return_token_strs": True})
    assert status == 200 and body["tokens"] == tokenizer.encode(INQUIRY) and body["count"] == len(body["tokens"])
    # each id decoded alone (a character split over two tokens shows as U+FFFD in both, as in vLLM)
    assert body["token_strs"] == [tokenizer.decode([i]) for i in body["tokens"]] and body["max_model_len"] > 0
    chat = [{"role": "user", "content": INQUIRY}]
    status, body = post(server, "/tokenize", {"messages": chat})
    assert status == 200 and body["tokens"] == list(tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                                                                   tokenize=True)["input_ids"])
    status, body = post(server, "/detokenize", {"model": "munuibot", "tokens": tokenizer.encode(INQUIRY)})
    assert (status, body) == (200, {"prompt": INQUIRY})
    status, body = post(server, "/detokenize", {"tokens": [10**9]})
    assert status == 400 and body["error"]["param"] == "tokens"
    status, body = get(server, "/no-such-route/v1")  # Django's 404 page: not an API path
    assert status == 404


def test_echo_and_logprobs_score_a_prompt_as_lm_eval_asks(server, reference):
    """lm-eval's loglikelihood request: token ids, echo, logprobs=1, max_tokens 0 or 1; the
    prompt's logprobs are a forward's log_softmax, the first token's is null."""
    model, tokenizer = reference
    ids = tokenizer.encode("배송 조회는 어디서 하나요? 마이페이지에서 확인할 수 있습니다.")
    want = logprobs_of(model, ids)
    for max_tokens in (0, 1):
        status, body = post(server, "/v1/completions", {"model": "munuibot", "prompt": ids, "echo": True, "logprobs": 1,
                                                         "max_tokens": max_tokens, "temperature": 0})
        assert status == 200, body
        lp = body["choices"][0]["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + max_tokens and lp["token_logprobs"][0] is None
        for pos in range(1, len(ids)):
            assert lp["token_logprobs"][pos] == pytest.approx(want[pos - 1, ids[pos]].item(), abs=1e-3)
            top = max(lp["top_logprobs"][pos], key=lp["top_logprobs"][pos].get)
            assert top == tokenizer.decode([int(want[pos - 1].argmax())])
        assert body["choices"][0]["text"].startswith(tokenizer.decode(ids))
        assert body["usage"]["completion_tokens"] == max_tokens and body["usage"]["prompt_tokens"] == len(ids)


def test_prompt_logprobs_come_back_in_vllms_shape_without_echo(server, reference):
    model, tokenizer = reference
    ids = tokenizer.encode("적립금이 사라졌어요")
    want = logprobs_of(model, ids)
    status, body = post(server, "/v1/completions", {"model": "munuibot", "prompt": ids, "max_tokens": 2, "temperature": 0,
                                                     "prompt_logprobs": 2})
    assert status == 200, body
    prompt_lp = body["choices"][0]["prompt_logprobs"]
    assert prompt_lp[0] is None and len(prompt_lp) == len(ids)
    for pos in range(1, len(ids)):
        own = prompt_lp[pos][str(ids[pos])]
        assert own["logprob"] == pytest.approx(want[pos - 1, ids[pos]].item(), abs=1e-3)
        assert own["rank"] == int((want[pos - 1] > want[pos - 1, ids[pos]]).sum()) + 1
        assert str(int(want[pos - 1].argmax())) in prompt_lp[pos]
    assert body["choices"][0]["text"] and body["choices"][0]["logprobs"] is None


def test_a_batch_of_prompts_gives_one_choice_each(server):
    prompts = ["주문 취소는", "환불은 언제", "비밀번호를"]
    done = client(server).completions.create(model="munuibot", prompt=prompts, max_tokens=6, temperature=0)
    assert sorted(c.index for c in done.choices) == [0, 1, 2]
    alone = [client(server).completions.create(model="munuibot", prompt=p, max_tokens=6, temperature=0) for p in prompts]
    for c in done.choices:
        assert c.text == alone[c.index].choices[0].text
    assert done.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert done.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)


def test_chat_logprobs_are_the_models_own(server, reference):
    model, tokenizer = reference
    chat = [{"role": "user", "content": INQUIRY}]
    answer = client(server).chat.completions.create(model="munuibot", messages=chat, temperature=0, max_tokens=20,
                                                    logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    prompt = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)["input_ids"])
    generated = tokenizer.encode(answer.choices[0].message.content, add_special_tokens=False)
    assert len(content) == answer.usage.completion_tokens
    want = logprobs_of(model, prompt + generated)
    for i, entry in enumerate(content[: len(generated)]):
        row = want[len(prompt) + i - 1]
        assert entry.logprob == pytest.approx(row.max().item(), abs=1e-3)  # greedy: the likeliest token
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(row.topk(3).values.tolist(), abs=1e-3)
        assert bytes(entry.bytes).decode(errors="replace") == entry.token


def test_sampling_parameters_change_the_answer_as_asked(server):
    api = client(server)
    # The small model is sure of its answer: only a heavy penalty moves it (its greedy answer
    # repeats two of its tokens within 40; penalised, none).
    plain = api.completions.create(model="munuibot", prompt="배송 배송", max_tokens=40, temperature=0)
    penalised = api.completions.create(model="munuibot", prompt="배송 배송", max_tokens=40, temperature=0,
                                       frequency_penalty=2.0, extra_body={"repetition_penalty": 10.0})
    assert penalised.choices[0].text != plain.choices[0].text
    status, body = post(server, "/v1/completions", {"model": "munuibot", "prompt": "배송", "max_tokens": 5, "temperature": 0,
                                                     "min_tokens": 5, "ignore_eos": False})
    assert status == 200 and body["usage"]["completion_tokens"] == 5
    developer = api.chat.completions.create(model="munuibot", max_tokens=4, temperature=0, messages=[
        {"role": "developer", "content": "당신은 누리마켓 고객센터 상담원입니다."}, {"role": "user", "content": INQUIRY}])
    system = api.chat.completions.create(model="munuibot", max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": "당신은 누리마켓 고객센터 상담원입니다."}, {"role": "user", "content": INQUIRY}])
    assert developer.choices[0].message.content == system.choices[0].message.content


@pytest.mark.parametrize("extra, param", [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"n": 2}, "n"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"presence_penalty": 3}, "presence_penalty"),
])
def test_a_parameter_this_server_would_ignore_is_refused_by_name(server, extra, param):
    status, body = post(server, "/v1/chat/completions", {"model": "munuibot", "max_tokens": 4,
                                                          "messages": [{"role": "user", "content": "안녕"}], **extra})
    assert status == 400 and body["error"]["param"] == param, body


@pytest.mark.parametrize("extra, param", [({"best_of": 3}, "best_of"), ({"suffix": "끝"}, "suffix"),
                                          ({"max_tokens": 0}, "max_tokens"), ({"prompt": [[1, 2], "x", -1]}, "prompt")])
def test_completions_refuse_what_they_cannot_do_by_name(server, extra, param):
    status, body = post(server, "/v1/completions", {"model": "munuibot", "prompt": "안녕", **extra})
    assert status == 400 and body["error"]["param"] == param, body


def test_streams_say_exactly_what_whole_answers_say(server):
    """Over seeds and temperatures (hot ones pick tokens that split a character's bytes) and stop
    strings of several tokens: the streamed pieces join to the whole answer, none ends in U+FFFD."""
    api = client(server)
    rng = random.Random(29)
    for round in range(8):
        kwargs = dict(model="munuibot", max_tokens=48, seed=rng.randrange(10**6), temperature=rng.choice((0.7, 1.3, 2.0)),
                      messages=[{"role": "user", "content": INQUIRY}])
        if round % 2:
            kwargs["stop"] = ["답변", "니다."]
        whole = api.chat.completions.create(**kwargs).choices[0]
        pieces, reason = [], None
        for chunk in api.chat.completions.create(stream=True, **kwargs):
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        assert "".join(pieces) == whole.message.content, kwargs
        assert not any(p.endswith("\ufffd") for p in pieces) and reason == whole.finish_reason
