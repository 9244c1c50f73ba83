"""OpenAI's request and response shapes: what a learner's script sends is checked with errors
naming the parameter; what comes back is what the official client parses."""
import json

import pytest

from courseapp.serving import protocol
from courseapp.serving.protocol import ApiError, parse_request


def chat(**fields) -> bytes:
    return json.dumps({"model": "munuibot", "messages": [{"role": "user", "content": "배송 언제 와요?"}], **fields}).encode()


def test_a_chat_request_becomes_sampling_parameters():
    request = parse_request(chat(temperature=0, max_tokens=200, stop="\n\n", seed=7, stream=True,
                                 stream_options={"include_usage": True}), chat=True, served_model="munuibot")
    assert request.messages == [{"role": "user", "content": "배송 언제 와요?"}]
    from engine.sampling import SamplingParams

    params = SamplingParams(**request.sampling(200))  # every key is one the engine takes
    assert (params.temperature, params.top_p, params.max_tokens, params.stop, params.seed, params.ignore_eos) == \
        (0.0, 1.0, 200, ["\n\n"], 7, False)
    assert (params.logprobs, params.prompt_logprobs, params.logit_bias, params.repetition_penalty) == (None, None, None, 1.0)
    assert request.stream and request.include_usage


def test_max_completion_tokens_and_ignore_eos_reach_the_engine():
    """Mutants (issue #34): max_completion_tokens ignored for max_tokens; ignore_eos forced off."""
    request = parse_request(chat(max_completion_tokens=12, ignore_eos=True), chat=True, served_model="munuibot")
    sampling = request.sampling(request.max_tokens)  # the engine host passes it on (or the context's room)
    assert (request.max_tokens, sampling["max_tokens"], sampling["ignore_eos"]) == (12, 12, True)
    with pytest.raises(ApiError) as refused:
        parse_request(chat(max_completion_tokens=0), chat=True, served_model="munuibot")
    assert refused.value.param == "max_completion_tokens", "the error names the parameter the client sent"


def test_text_content_parts_are_joined_and_a_single_prompt_list_is_a_prompt():
    body = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "가"}, {"type": "text", "text": "나"}]}])
    assert parse_request(body, chat=True, served_model="munuibot").messages[0]["content"] == "가나"
    completion = json.dumps({"model": "munuibot", "prompt": ["안녕"]}).encode()
    assert parse_request(completion, chat=False, served_model="munuibot").prompt == "안녕"


@pytest.mark.parametrize("raw, param, status", [
    (b"{not json", None, 400),
    (b"[1, 2]", None, 400),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model", 400),
    (chat(model="gpt-4o"), "model", 404),
    (chat(temperature=2.5), "temperature", 400),
    (chat(temperature="hot"), "temperature", 400),
    (chat(temperature=float("1e400")), "temperature", 400),
    (chat(top_p=0), "top_p", 400),
    (chat(max_tokens=0), "max_tokens", 400),
    (chat(max_tokens=2.5), "max_tokens", 400),
    (chat(n=2), "n", 400),
    (chat(stream="yes"), "stream", 400),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop", 400),
    (chat(messages=[]), "messages", 400),
    (chat(messages=[{"role": "robot", "content": "x"}]), "messages[0].role", 400),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), "messages[0].content", 400),
])
def test_bad_input_is_refused_naming_the_parameter(raw, param, status):
    with pytest.raises(ApiError) as caught:
        parse_request(raw, chat=True, served_model="munuibot")
    assert (caught.value.status, caught.value.param) == (status, param)
    body = caught.value.body()
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["message"]


def test_a_temperature_out_of_range_says_the_range():
    with pytest.raises(ApiError, match=r"\[0.0, 2.0\]; got 2.5"):
        parse_request(chat(temperature=2.5), chat=True, served_model="munuibot")


def test_responses_and_chunks_have_openais_shapes():
    request = parse_request(chat(stream=True, stream_options={"include_usage": True}), chat=True, served_model="munuibot")
    used = protocol.usage(12, 3, 8)
    assert used == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 8}}
    first = protocol.chunk(request, request_id="chatcmpl-1", created=1, text="안", first=True)
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant", "content": "안"}
    assert first["usage"] is None  # present but null until the closing chunk
    last = protocol.chunk(request, request_id="chatcmpl-1", created=1, token_usage=used)
    assert last["choices"] == [] and last["usage"] == used
    assert protocol.sse("[DONE]") == b"data: [DONE]\n\n"
    whole = protocol.response(request, request_id="chatcmpl-1", created=1, text="안녕하세요", finish_reason="stop", token_usage=used)
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "안녕하세요"}
    completion = parse_request(json.dumps({"model": "munuibot", "prompt": "x"}).encode(), chat=False, served_model="munuibot")
    whole = protocol.response(completion, request_id="cmpl-1", created=1, text="y", finish_reason="length", token_usage=used)
    assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == "y"


def test_the_official_clients_own_types_accept_what_we_send():
    from openai.types import Completion, Model
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    request = parse_request(chat(stream=True, stream_options={"include_usage": True}), chat=True, served_model="munuibot")
    used = protocol.usage(12, 3, 8)
    ChatCompletionChunk.model_validate(protocol.chunk(request, request_id="c", created=1, text="안", first=True), strict=True)
    ChatCompletionChunk.model_validate(protocol.chunk(request, request_id="c", created=1, finish_reason="stop"), strict=True)
    closing = ChatCompletionChunk.model_validate(protocol.chunk(request, request_id="c", created=1, token_usage=used), strict=True)
    assert closing.usage.prompt_tokens_details.cached_tokens == 8
    whole = ChatCompletion.model_validate(protocol.response(request, request_id="c", created=1, text="네", finish_reason="stop",
                                                           token_usage=used), strict=True)
    assert whole.choices[0].message.content == "네"
    completion = parse_request(json.dumps({"model": "munuibot", "prompt": "x"}).encode(), chat=False, served_model="munuibot")
    Completion.model_validate(protocol.response(completion, request_id="cmpl", created=1, text="y", finish_reason="length",
                                                token_usage=used), strict=True)
    listed = protocol.models_list("munuibot", created=1, max_model_len=2048)
    assert Model.model_validate(listed["data"][0]).id == "munuibot"


def test_no_token_of_the_shipped_model_spans_more_characters_than_the_early_refusal_assumes():
    from transformers import AutoTokenizer

    from engine.config import EngineConfig

    tokenizer = AutoTokenizer.from_pretrained(EngineConfig().model)
    longest = max(len(tokenizer.convert_tokens_to_string([token])) for token in tokenizer.get_vocab())
    assert longest <= protocol.MAX_CHARS_PER_TOKEN
