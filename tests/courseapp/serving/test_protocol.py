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
    # Korean travels as UTF-8, not as \\uXXXX escapes (a stream a learner reads with curl)
    assert protocol.sse({"content": "배송"}) == 'data: {"content":"배송"}\n\n'.encode()
    whole = protocol.response(request, request_id="chatcmpl-1", created=1, token_usage=used,
                              choices=[protocol.choice(request, 0, "안녕하세요", "stop")])
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "안녕하세요"}
    completion = parse_request(json.dumps({"model": "munuibot", "prompt": "x"}).encode(), chat=False, served_model="munuibot")
    whole = protocol.response(completion, request_id="cmpl-1", created=1, token_usage=used,
                              choices=[protocol.choice(completion, 0, "y", "length")])
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
    whole = ChatCompletion.model_validate(protocol.response(
        request, request_id="c", created=1, choices=[protocol.choice(request, 0, "네", "stop")], token_usage=used), strict=True)
    assert whole.choices[0].message.content == "네"
    completion = parse_request(json.dumps({"model": "munuibot", "prompt": "x"}).encode(), chat=False, served_model="munuibot")
    Completion.model_validate(protocol.response(
        completion, request_id="cmpl", created=1, choices=[protocol.choice(completion, 0, "y", "length")], token_usage=used),
        strict=True)
    listed = protocol.models_list("munuibot", created=1, max_model_len=2048)
    assert Model.model_validate(listed["data"][0]).id == "munuibot"


def test_no_token_of_the_shipped_model_spans_more_characters_than_the_early_refusal_assumes():
    from transformers import AutoTokenizer

    from engine.config import EngineConfig

    tokenizer = AutoTokenizer.from_pretrained(EngineConfig().model)
    longest = max(len(tokenizer.convert_tokens_to_string([token])) for token in tokenizer.get_vocab())
    assert longest <= protocol.MAX_CHARS_PER_TOKEN


# /tokenize and /detokenize (vLLM's bodies), and logprobs in their three shapes. The e2e tests
# (tests/e2e/test_serving_params.py) check them against transformers through a server; these hold
# the shapes in the test process, where make mutation sees them (issue #34).

def tokens_request(detokenize=False, **body):
    return protocol.parse_tokens_request(json.dumps(body).encode(), detokenize=detokenize, served_model="munuibot")


def test_a_tokenize_body_becomes_what_the_tokenizer_is_asked():
    assert tokens_request(prompt="배송") == {
        "tokenize": {"prompt": "배송", "add_special_tokens": True}, "return_token_strs": False}
    assert tokens_request(model="munuibot", prompt="배송", add_special_tokens=False, return_token_strs=True) == {
        "tokenize": {"prompt": "배송", "add_special_tokens": False}, "return_token_strs": True}
    chat = [{"role": "user", "content": "배송"}]
    assert tokens_request(messages=chat)["tokenize"] == {"messages": chat, "add_generation_prompt": True}
    assert tokens_request(messages=chat, add_generation_prompt=False, add_special_tokens=False)["tokenize"] == {
        "messages": chat, "add_generation_prompt": False}
    assert tokens_request(True, tokens=[0, 5, 17]) == {"tokens": [0, 5, 17]}
    assert tokens_request(True, model=None, tokens=[]) == {"tokens": []}
    longest = "가" * (protocol.MAX_TOKENIZE_TOKENS * protocol.MAX_CHARS_PER_TOKEN)
    assert tokens_request(prompt=longest)["tokenize"]["prompt"] == longest
    halves = [{"role": "system", "content": longest[:1000]}, {"role": "user", "content": longest[1000:]}]
    assert tokens_request(messages=halves)["tokenize"]["messages"] == halves, "a chat is counted by its contents alone"
    assert tokens_request(prompt="")["tokenize"] == {"prompt": "", "add_special_tokens": True}
    assert len(tokens_request(True, tokens=[1] * protocol.MAX_TOKENIZE_TOKENS)["tokens"]) == protocol.MAX_TOKENIZE_TOKENS


LIMIT_CHARS = protocol.MAX_TOKENIZE_TOKENS * protocol.MAX_CHARS_PER_TOKEN
NOT_IDS = "'tokens' must be a list of token ids (integers ≥ 0)"


@pytest.mark.parametrize("detokenize, body, param, says", [
    (False, {"model": "gpt-4o", "prompt": "x"}, "model", "The model 'gpt-4o' does not exist; this server serves 'munuibot'."),
    (False, {"prompt": "x", "temperature": 0}, "temperature",
     "'temperature' is not supported here (it takes add_generation_prompt, add_special_tokens, messages, model, "
     "prompt, return_token_strs)"),
    (True, {"tokens": [1], "prompt": "x"}, "prompt", "'prompt' is not supported here (it takes model, tokens)"),
    (False, {}, "prompt", "send either 'prompt' (a string) or 'messages' (a chat)"),
    (False, {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "prompt",
     "send either 'prompt' (a string) or 'messages' (a chat)"),
    (False, {"prompt": ["x"]}, "prompt", "'prompt' must be a string"),
    (False, {"messages": [{"role": "user", "content": "x"}], "add_special_tokens": True}, "add_special_tokens",
     "'add_special_tokens' with 'messages': the chat template writes them"),
    (False, {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens", "'add_special_tokens' must be true or false"),
    (False, {"prompt": "x", "return_token_strs": 1}, "return_token_strs", "'return_token_strs' must be true or false"),
    (False, {"prompt": "가" * (LIMIT_CHARS + 1)}, "prompt", f"the text is over {LIMIT_CHARS} characters"),
    (False, {"messages": [{"role": "user", "content": "가" * (LIMIT_CHARS + 1)}]}, "prompt",
     f"the text is over {LIMIT_CHARS} characters"),
    (True, {}, "tokens", NOT_IDS),
    (True, {"tokens": "1 2"}, "tokens", NOT_IDS),
    (True, {"tokens": [1, -1]}, "tokens", NOT_IDS),
    (True, {"tokens": [1, 2.5]}, "tokens", NOT_IDS),
    (True, {"tokens": [1] * (protocol.MAX_TOKENIZE_TOKENS + 1)}, "tokens",
     f"'tokens' takes at most {protocol.MAX_TOKENIZE_TOKENS} ids"),
])
def test_a_bad_tokenize_body_is_refused_naming_the_parameter(detokenize, body, param, says):
    with pytest.raises(ApiError) as caught:
        tokens_request(detokenize, **body)
    assert caught.value.status == (404 if param == "model" else 400) and caught.value.param == param
    assert caught.value.body()["error"]["message"] == says


def test_a_parameter_this_server_does_not_take_is_refused_with_openais_error_code():
    with pytest.raises(ApiError) as caught:
        tokens_request(prompt="x", temperature=0)
    assert caught.value.body()["error"]["code"] == "unsupported_parameter"  # what the openai client shows as .code
    with pytest.raises(ApiError, match="must be a list of token ids"):
        tokens_request(True, tokens=[True])  # JSON true is not token 1
    for bias in ([1], {str(n): 1 for n in range(protocol.MAX_LOGIT_BIAS + 1)}, {"a": 1}, {"1": 101}, {"1": True}):
        with pytest.raises(ApiError) as caught:
            parse_request(chat(logit_bias=bias), chat=True, served_model="munuibot")
        assert caught.value.param == "logit_bias"
    assert parse_request(chat(logit_bias={"5": -100, "7": 2.5}), chat=True, served_model="munuibot").logit_bias == {
        5: -100.0, 7: 2.5}


def test_a_prompt_is_refused_early_only_past_what_the_context_could_hold():
    fits = "가" * (2048 * protocol.MAX_CHARS_PER_TOKEN)
    protocol.refuse_if_surely_too_long(parse_request(chat(messages=[{"role": "user", "content": fits}]), chat=True,
                                                     served_model="munuibot"), 2048)
    request = parse_request(chat(messages=[{"role": "user", "content": fits + "가"}]), chat=True, served_model="munuibot")
    with pytest.raises(ApiError, match="maximum context length is 2048 tokens. However, the messages alone is 49153 characters"):
        protocol.refuse_if_surely_too_long(request, 2048)
    # a completions prompt: a string by its characters, token ids as the most characters they could be
    protocol.refuse_if_surely_too_long(parse_request(completion(prompt=fits), chat=False, served_model="munuibot"), 2048)
    protocol.refuse_if_surely_too_long(parse_request(completion(prompt=[1] * 2048), chat=False, served_model="munuibot"), 2048)
    for prompt, chars in ((fits + "가", 49153), ([1] * 2049, 2049 * protocol.MAX_CHARS_PER_TOKEN), (["x", [1] * 2049], 2049 * 24)):
        with pytest.raises(ApiError, match=f"However, the prompt alone is {chars} characters") as caught:
            protocol.refuse_if_surely_too_long(parse_request(completion(prompt=prompt), chat=False, served_model="munuibot"), 2048)
        assert caught.value.param == "prompt"


STRINGS = {3: "배", 4: "송", 7: "환", 9: " 불"}
# an engine's logprob entry: (its token, its logprob, its rank, [(a likely token, its logprob), …])
ENTRIES = [(3, -0.25, 1, [(3, -0.25), (7, -1.5)]), (4, float("-inf"), 3, [(9, -0.5), (7, float("nan"))])]


def test_chat_logprobs_are_openais_shape_with_each_tokens_bytes():
    assert protocol.chat_logprobs(ENTRIES, STRINGS) == {"content": [
        {"token": "배", "logprob": -0.25, "bytes": list("배".encode()), "top_logprobs": [
            {"token": "배", "logprob": -0.25, "bytes": list("배".encode())},
            {"token": "환", "logprob": -1.5, "bytes": list("환".encode())}]},
        {"token": "송", "logprob": -9999.0, "bytes": list("송".encode()), "top_logprobs": [  # JSON has no -inf
            {"token": " 불", "logprob": -0.5, "bytes": list(" 불".encode())},
            {"token": "환", "logprob": -9999.0, "bytes": list("환".encode())}]},  # nor NaN
    ], "refusal": None}
    assert protocol.chat_logprobs([], STRINGS) == {"content": [], "refusal": None}


def test_a_prompt_logprob_position_is_vllms_shape_its_own_token_first():
    assert protocol.vllm_logprob_entry(ENTRIES[1], STRINGS) == {
        "4": {"logprob": -9999.0, "rank": 3, "decoded_token": "송"},
        "9": {"logprob": -0.5, "rank": 1, "decoded_token": " 불"},
        "7": {"logprob": -9999.0, "rank": 2, "decoded_token": "환"}}
    assert list(protocol.vllm_logprob_entry(ENTRIES[1], STRINGS)) == ["4", "9", "7"]
    # the likeliest token is the position's own: listed once, with its own rank
    assert protocol.vllm_logprob_entry(ENTRIES[0], STRINGS) == {
        "3": {"logprob": -0.25, "rank": 1, "decoded_token": "배"},
        "7": {"logprob": -1.5, "rank": 2, "decoded_token": "환"}}


def test_completion_logprobs_are_parallel_lists_with_offsets_and_null_for_a_first_prompt_token():
    # under echo the prompt's first token has no logprob; offsets count characters from `offset`
    assert protocol.completion_logprobs([9, 3, 4], [None, *ENTRIES], STRINGS, offset=5) == {
        "tokens": [" 불", "배", "송"],
        "token_logprobs": [None, -0.25, -9999.0],
        "top_logprobs": [None, {"배": -0.25, "환": -1.5}, {" 불": -0.5, "환": -9999.0, "송": -9999.0}],
        "text_offset": [5, 7, 8]}
    assert protocol.completion_logprobs([3], ENTRIES[:1], STRINGS)["text_offset"] == [0]
    assert protocol._lp(-10000.0) == -9999.0 and protocol._lp(-3.0) == -3.0 and protocol._lp(0.0) == 0.0


def completion(**fields) -> bytes:
    return json.dumps({"model": "munuibot", **fields}).encode()


@pytest.mark.parametrize("prompt, prompts", [
    ("안녕", ["안녕"]),
    ([0, 5, 17], [[0, 5, 17]]),  # one prompt as token ids
    (["안녕", "배송"], ["안녕", "배송"]),  # a batch: one choice each
    ([[1, 2], [3]], [[1, 2], [3]]),
    (["안녕", [3]], ["안녕", [3]]),
    (["x"] * protocol.MAX_BATCH_PROMPTS, ["x"] * protocol.MAX_BATCH_PROMPTS),
])
def test_a_completions_prompt_is_a_string_token_ids_or_a_batch_of_either(prompt, prompts):
    assert parse_request(completion(prompt=prompt), chat=False, served_model="munuibot").prompts == prompts


BATCH = "'prompt' must be a non-empty string, a list of token ids, or a list of either (a batch)"


@pytest.mark.parametrize("fields, message", [
    ({}, BATCH),
    ({"prompt": None}, BATCH),
    ({"prompt": []}, BATCH),
    ({"prompt": 7}, BATCH),
    ({"prompt": ["x"] * (protocol.MAX_BATCH_PROMPTS + 1)},
     f"'prompt' takes at most {protocol.MAX_BATCH_PROMPTS} prompts in one call; got {protocol.MAX_BATCH_PROMPTS + 1}"),
    ({"prompt": ""}, "prompt[0] must be a non-empty string or a non-empty list of token ids (integers ≥ 0)"),
    ({"prompt": ["a", ""]}, "prompt[1] must be"),
    ({"prompt": [[]]}, "prompt[0] must be"),
    ({"prompt": [[1, 2], [3, -1]]}, "prompt[1] must be"),
    ({"prompt": [[1, 2], [3, True]]}, "prompt[1] must be"),
    ({"prompt": [1, "a"]}, "prompt[0] must be"),  # neither token ids nor a batch
    ({"prompt": [True]}, "prompt[0] must be"),
])
def test_a_bad_completions_prompt_is_refused_saying_which(fields, message):
    with pytest.raises(ApiError) as caught:
        parse_request(completion(**fields), chat=False, served_model="munuibot")
    assert caught.value.param == "prompt" and caught.value.body()["error"]["message"].startswith(message)


def test_echo_with_logprobs_asks_for_the_prompts_logprobs_too():
    def sampling(**fields):
        return parse_request(completion(prompt="x", **fields), chat=False, served_model="munuibot").sampling(16)

    assert sampling(echo=True, logprobs=2)["prompt_logprobs"] == 2  # lm-eval's loglikelihood request
    assert sampling(logprobs=2)["prompt_logprobs"] is None
    assert sampling(echo=True)["prompt_logprobs"] is None
    assert sampling(echo=True, logprobs=2, prompt_logprobs=5)["prompt_logprobs"] == 5
    assert sampling(prompt_logprobs=3)["prompt_logprobs"] == 3


def test_every_answer_shape_has_exactly_openais_keys():
    """The official client tolerates missing keys, so these are compared whole: a key renamed or
    left out would reach a learner's script as a missing field."""
    chat_request = parse_request(chat(stream=True), chat=True, served_model="munuibot")
    text_request = parse_request(completion(prompt="x", stream=True, stream_options={"include_usage": True}), chat=False,
                                 served_model="munuibot")
    lp = {"content": [], "refusal": None}
    assert protocol.choice(chat_request, 1, "네", "stop", lp) == {
        "index": 1, "message": {"role": "assistant", "content": "네"}, "logprobs": lp, "finish_reason": "stop"}
    assert protocol.choice(text_request, 2, "y", None) == {"index": 2, "text": "y", "logprobs": None, "finish_reason": None}
    used = protocol.usage(3, 1, 0)
    assert protocol.response(text_request, request_id="cmpl-1", created=7, token_usage=used, choices=["c"]) == {
        "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "munuibot", "choices": ["c"], "usage": used}
    assert protocol.response(chat_request, request_id="chatcmpl-1", created=7, token_usage=used, choices=[])["object"] == \
        "chat.completion"
    middle = protocol.chunk(chat_request, request_id="chatcmpl-1", created=7, text="송", index=1, logprobs=lp)
    assert middle == {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "munuibot",
                      "choices": [{"index": 1, "delta": {"content": "송"}, "logprobs": lp, "finish_reason": None}]}
    assert "usage" not in middle, "no usage key unless stream_options.include_usage asked for it"
    closing = protocol.chunk(chat_request, request_id="chatcmpl-1", created=7, finish_reason="length")
    assert closing["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}]
    assert protocol.chunk(text_request, request_id="cmpl-1", created=7, text="t", index=3, finish_reason="stop") == {
        "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "munuibot",
        "choices": [{"index": 3, "text": "t", "logprobs": None, "finish_reason": "stop"}], "usage": None}
    assert protocol.chunk(text_request, request_id="cmpl-1", created=7)["choices"][0]["text"] == ""
    assert protocol.models_list("munuibot", created=7, max_model_len=2048) == {"object": "list", "data": [
        {"id": "munuibot", "object": "model", "created": 7, "owned_by": "courseapp", "root": "munuibot",
         "max_model_len": 2048}]}


# Every sampling parameter: its name, its default (absent or null), its range at both ends and
# just past them, and a refusal that names it — what a learner's script meets first.
NUMBERS = [  # name, default, low, high, low open, the field it sets
    ("temperature", 1.0, 0.0, 2.0, False, "temperature"),
    ("top_p", 1.0, 0.0, 1.0, True, "top_p"),
    ("min_p", 0.0, 0.0, 1.0, False, "min_p"),
    ("presence_penalty", 0.0, -2.0, 2.0, False, "presence_penalty"),
    ("frequency_penalty", 0.0, -2.0, 2.0, False, "frequency_penalty"),
    ("repetition_penalty", 1.0, 0.0, 10.0, True, "repetition_penalty"),
]


def raised(raw: bytes, *, is_chat=True) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_request(raw, chat=is_chat, served_model="munuibot")
    return caught.value


def refused(raw: bytes, *, is_chat=True) -> ApiError:
    error = raised(raw, is_chat=is_chat)
    assert error.status == 400
    return error


@pytest.mark.parametrize("name, default, low, high, low_open, field", NUMBERS)
def test_each_number_parameter_has_its_default_and_its_range(name, default, low, high, low_open, field):
    def value(**fields):
        return getattr(parse_request(chat(**fields), chat=True, served_model="munuibot"), field)

    assert value() == default and value(**{name: None}) == default
    assert value(**{name: high}) == high and value(**{name: (low + high) / 2}) == (low + high) / 2
    interval = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
    beyond = [low - 0.01, high + 0.01] + ([low] if low_open else [])
    if not low_open:
        assert value(**{name: low}) == low
    for outside in beyond:
        error = refused(chat(**{name: outside}))
        assert error.param == name and error.body()["error"]["message"] == f"'{name}' must be in {interval}; got {outside}"
    for wrong in ("1", True, [1]):
        error = refused(chat(**{name: wrong}))
        assert (error.param, error.body()["error"]["message"]) == (name, f"'{name}' must be a number")


@pytest.mark.parametrize("name, given, expected", [
    ("top_k", None, 0), ("top_k", -1, 0), ("top_k", 0, 0), ("top_k", 40, 40),  # -1 and 0 turn it off, as in vLLM
    ("seed", None, None), ("seed", 0, 0), ("seed", 2**63 - 1, 2**63 - 1),
    ("min_tokens", None, 0), ("min_tokens", 0, 0), ("min_tokens", 5, 5),
    ("max_tokens", None, None), ("max_tokens", 1, 1),
    ("prompt_logprobs", None, None), ("prompt_logprobs", 0, 0), ("prompt_logprobs", 20, 20),
])
def test_each_integer_parameter_has_its_default_and_its_range(name, given, expected):
    request = parse_request(completion(prompt="x", **({} if given is None else {name: given})), chat=False,
                            served_model="munuibot")
    assert getattr(request, name) == expected


@pytest.mark.parametrize("name, given, message", [
    ("top_k", -2, "'top_k' must be at least -1; got -2"),
    ("top_k", 1.5, "'top_k' must be an integer"),
    ("seed", -1, "'seed' must be at least 0 and at most 9223372036854775807; got -1"),
    ("seed", 2**63, "'seed' must be at least 0 and at most 9223372036854775807; got 9223372036854775808"),
    ("min_tokens", -1, "'min_tokens' must be at least 0; got -1"),
    ("max_tokens", 0, "'max_tokens' must be at least 1; got 0"),
    ("prompt_logprobs", 21, "'prompt_logprobs' must be at least 0 and at most 20; got 21"),
    ("logprobs", 21, "'logprobs' must be at least 0 and at most 20; got 21"),
    ("logprobs", True, "'logprobs' must be an integer"),
])
def test_an_integer_out_of_range_is_refused_saying_the_range(name, given, message):
    error = refused(completion(prompt="x", **{name: given}), is_chat=False)
    assert (error.param, error.body()["error"]["message"]) == (name, message)


def test_echo_lets_max_tokens_be_zero_to_score_the_prompt_alone():
    request = parse_request(completion(prompt="x", echo=True, max_tokens=0, logprobs=1), chat=False, served_model="munuibot")
    assert (request.max_tokens, request.echo) == (0, True)
    error = refused(completion(prompt="x", max_tokens=5, min_tokens=6), is_chat=False)
    assert (error.param, error.body()["error"]["message"]) == ("min_tokens", "'min_tokens' (6) must not exceed 'max_tokens' (5)")


@pytest.mark.parametrize("stop, expected", [
    (None, []), ("\n", ["\n"]), ([], []), (["a", "b", "c", "d"], ["a", "b", "c", "d"]),
    (["x" * protocol.MAX_STOP_CHARS], ["x" * protocol.MAX_STOP_CHARS]),
])
def test_stop_takes_a_string_or_up_to_four_of_them(stop, expected):
    assert parse_request(chat(stop=stop), chat=True, served_model="munuibot").stop == expected


@pytest.mark.parametrize("stop, message", [
    (7, "'stop' must be a non-empty string or a list of them"),
    ([""], "'stop' must be a non-empty string or a list of them"),
    (["a", 1], "'stop' must be a non-empty string or a list of them"),
    (["a", "b", "c", "d", "e"], "'stop' takes at most 4 sequences of at most 200 characters"),
    (["a", "x" * (protocol.MAX_STOP_CHARS + 1)], "'stop' takes at most 4 sequences of at most 200 characters"),
])
def test_a_bad_stop_is_refused_saying_what_it_takes(stop, message):
    error = refused(chat(stop=stop))
    assert (error.param, error.body()["error"]["message"]) == ("stop", message)


def test_logit_bias_maps_token_ids_to_numbers_from_minus_100_to_100():
    def bias(value):
        return parse_request(chat(logit_bias=value), chat=True, served_model="munuibot").logit_bias

    assert bias(None) is None and bias({}) is None
    assert parse_request(chat(), chat=True, served_model="munuibot").logit_bias is None
    assert bias({"5": -100, "7": 100, "9": 2.5}) == {5: -100.0, 7: 100.0, 9: 2.5}
    assert all(type(v) is float for v in bias({"5": -100, "7": 1}).values())
    assert len(bias({str(n): 1 for n in range(protocol.MAX_LOGIT_BIAS)})) == protocol.MAX_LOGIT_BIAS
    shape = f"'logit_bias' must be an object of at most {protocol.MAX_LOGIT_BIAS} token ids to numbers in [-100, 100]"
    for value, message in (([1], shape), ({str(n): 1 for n in range(protocol.MAX_LOGIT_BIAS + 1)}, shape),
                           ({"a": 1}, "'logit_bias' maps token ids to numbers in [-100, 100]; got 'a': 1"),
                           ({"1": 100.5}, "'logit_bias' maps token ids to numbers in [-100, 100]; got '1': 100.5"),
                           ({"1": -100.5}, "'logit_bias' maps token ids to numbers in [-100, 100]; got '1': -100.5"),
                           ({"1": True}, "'logit_bias' maps token ids to numbers in [-100, 100]; got '1': True"),
                           ({"1": "2"}, "'logit_bias' maps token ids to numbers in [-100, 100]; got '1': '2'")):
        error = refused(chat(logit_bias=value))
        assert (error.param, error.body()["error"]["message"]) == ("logit_bias", message)


@pytest.mark.parametrize("fields, param, message", [
    ({"model": ""}, "model", "'model' is required"),
    ({"model": 7}, "model", "'model' is required"),
    ({"stream_options": [1]}, "stream_options", "'stream_options' must be an object"),
    ({"stream_options": "yes"}, "stream_options", "'stream_options' must be an object"),
])
def test_a_missing_model_or_bad_stream_options_is_refused_by_name(fields, param, message):
    error = refused(json.dumps({"messages": [{"role": "user", "content": "x"}], "model": "munuibot", **fields}).encode())
    assert (error.param, error.body()["error"]["message"]) == (param, message)
    assert not parse_request(chat(stream_options=None), chat=True, served_model="munuibot").include_usage


def error_body(raw: bytes, *, is_chat=True) -> dict:
    return raised(raw, is_chat=is_chat).body()["error"]


def test_a_parameter_of_the_other_endpoint_or_none_is_refused_saying_where_it_belongs():
    assert error_body(chat(echo=True)) == {
        "message": "'echo' is not supported by this server (it belongs to /v1/completions); it would be ignored, "
                   "so the request is refused", "type": "invalid_request_error", "param": "echo", "code": "unsupported_parameter"}
    assert error_body(completion(prompt="x", messages=[]), is_chat=False)["message"] == (
        "'messages' is not supported by this server (it belongs to /v1/chat/completions); it would be ignored, "
        "so the request is refused")
    assert error_body(chat(guided_json={}))["message"] == (
        "'guided_json' is not supported by this server; it would be ignored, so the request is refused")


def test_a_parameter_taken_only_at_the_value_that_asks_nothing_says_why_otherwise():
    for fields in ({"n": 1}, {"response_format": {"type": "text"}}, {"tools": []}, {"parallel_tool_calls": True},
                   {"parallel_tool_calls": False}, {"store": False}, {"n": None}):
        parse_request(chat(**fields), chat=True, served_model="munuibot")
    assert error_body(chat(n=2)) == {"message": "only n=1 is supported; got 2", "type": "invalid_request_error",
                                     "param": "n", "code": "unsupported_parameter"}
    assert error_body(chat(n=True))["message"] == "only n=1 is supported; got true", "true is not 1"
    assert error_body(chat(store=True))["message"] == "responses are not stored here ('store' must be false); got true"
    schema = {"type": "json_schema", "json_schema": {"name": "주문", "schema": {"properties": {"x" * 100: {}}}}}
    got = error_body(chat(response_format=schema))["message"].split("; got ", 1)[1]
    assert got == json.dumps(schema, ensure_ascii=False)[:80], "the value quoted, in its own characters, cut at 80"


def test_messages_take_four_roles_and_text_parts_and_developer_is_system():
    messages = [{"role": "developer", "content": "상담원"}, {"role": "system", "content": "짧게"},
                {"role": "user", "content": [{"type": "text", "text": "배송"}, {"type": "text", "text": " 언제"}]},
                {"role": "assistant", "content": "내일"}]
    assert parse_request(chat(messages=messages), chat=True, served_model="munuibot").messages == [
        {"role": "system", "content": "상담원"}, {"role": "system", "content": "짧게"},
        {"role": "user", "content": "배송 언제"}, {"role": "assistant", "content": "내일"}]


@pytest.mark.parametrize("messages, param, message", [
    (None, "messages", "'messages' must be a non-empty list of {role, content}"),
    ("hi", "messages", "'messages' must be a non-empty list of {role, content}"),
    (["hi"], "messages[0].role", "messages[0].role must be 'system', 'developer', 'user' or 'assistant'"),
    ([{"role": "user", "content": "x"}, {"role": "tool", "content": "x"}], "messages[1].role",
     "messages[1].role must be 'system', 'developer', 'user' or 'assistant'"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]}],
     "messages[0].content", "messages[0].content: only text parts are supported"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages[0].content",
     "messages[0].content: only text parts are supported"),
    ([{"role": "user", "content": "x"}, {"role": "user"}], "messages[1].content", "messages[1].content must be a string"),
])
def test_a_bad_message_is_refused_naming_it(messages, param, message):
    body = error_body(chat(messages=messages))
    assert (body["param"], body["message"]) == (param, message)


def test_a_body_that_is_not_a_json_object_or_names_another_model_says_so():
    assert error_body(b"{not json")["message"] == "the request body is not valid JSON (JSONDecodeError)"
    assert error_body(b"\xff")["message"] == "the request body is not valid JSON (UnicodeDecodeError)"
    assert error_body(b"[1]")["message"] == "the request body must be a JSON object"
    assert error_body(chat(model="gpt-4o")) == {
        "message": "The model 'gpt-4o' does not exist; this server serves 'munuibot'.", "type": "not_found_error",
        "param": "model", "code": "model_not_found"}
    assert not parse_request(chat(), chat=True, served_model="munuibot").stream, "stream is off unless asked"


def test_chat_asks_logprobs_with_logprobs_true_and_its_alternatives_with_top_logprobs():
    """OpenAI's chat shape: `logprobs: true` for the chosen tokens' own, `top_logprobs` (0 to the
    most this server gives) for alternatives beside them; `top_logprobs` alone is refused, and
    the prompt's logprobs belong to /v1/completions."""
    def asked(**fields):
        return parse_request(chat(**fields), chat=True, served_model="munuibot").logprobs

    assert asked() is None and asked(logprobs=False) is None
    assert asked(logprobs=True) == 0 and asked(logprobs=True, top_logprobs=0) == 0
    assert asked(logprobs=True, top_logprobs=3) == 3 and asked(logprobs=True, top_logprobs=protocol.MAX_LOGPROBS) == protocol.MAX_LOGPROBS
    for wrong in (-1, protocol.MAX_LOGPROBS + 1):
        assert refused(chat(logprobs=True, top_logprobs=wrong)).param == "top_logprobs"
    assert error_body(chat(top_logprobs=2))["message"] == "'top_logprobs' needs 'logprobs': true"
    assert error_body(chat(top_logprobs=2))["param"] == "top_logprobs"
    assert error_body(chat(prompt_logprobs=1)) | {"type": None, "code": None} == {
        "message": "'prompt_logprobs' is for /v1/completions here", "param": "prompt_logprobs", "type": None, "code": None}


def test_a_conversation_too_long_for_the_context_counts_every_message():
    """Two messages each short enough but together too long are refused before the engine."""
    limit = 64 * protocol.MAX_CHARS_PER_TOKEN
    half = "가" * (limit // 2 + 1)
    request = parse_request(chat(messages=[{"role": "system", "content": half}, {"role": "user", "content": half}]),
                            chat=True, served_model="munuibot")
    with pytest.raises(ApiError) as caught:
        protocol.refuse_if_surely_too_long(request, 64)
    assert caught.value.param == "messages" and f"alone is {2 * len(half)} characters" in caught.value.message


def test_a_flag_sent_as_null_is_false():
    """Clients that serialise every field send `"stream": null` and the like: off, as absent."""
    request = parse_request(chat(stream=None, ignore_eos=None, logprobs=None), chat=True, served_model="munuibot")
    assert (request.stream, request.ignore_eos, request.logprobs) == (False, False, None)
