"""OpenAI's API, as this server speaks it: a request body checked into what the engine needs, and
the JSON the official client and curl expect back — responses, stream chunks, usage, errors.

Pure functions and dataclasses: no engine, no Django. The transport (courseapp/serving/asgi.py,
server-sent events) and the engine host sit around it. Shapes follow OpenAI's reference and
vLLM's server where the two differ on details a learner's script might read (`usage` carries
`prompt_tokens_details.cached_tokens`; an error is `{"error": {"message", "type", "param",
"code"}}`).
"""
import json
import math
from dataclasses import dataclass, field

MAX_STOP_SEQUENCES = 4  # OpenAI's limit
MAX_STOP_CHARS = 200
# No token of a real vocabulary spans more characters than this (the shipped model's longest is
# 17, at a 6,000-token vocabulary): a prompt with more than max_model_len × this many characters cannot fit in the context,
# and is refused before any tokenizing (which takes seconds of CPU for a megabyte).
MAX_CHARS_PER_TOKEN = 24
MAX_BATCH_PROMPTS = 32  # prompts in one completions call (lm-eval sends batches)
MAX_LOGIT_BIAS = 300  # OpenAI's limit
MAX_TOKENIZE_TOKENS = 32_768  # /tokenize and /detokenize: far past any context this server serves


@dataclass(slots=True)
class ApiError(Exception):
    """An answer of OpenAI's error shape. `status`: the HTTP status it goes out with."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None  # seconds, for a 429

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(slots=True)
class GenerationRequest:
    """What one /v1/completions or /v1/chat/completions call asks of the engine."""

    chat: bool
    model: str
    prompts: list = field(default_factory=list)  # completions: each a string or token ids (a batch when several)
    messages: list = field(default_factory=list)  # chat
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_tokens: int | None = None  # None: up to the model's context; 0 (with echo): score the prompt only
    stop: list = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # vLLM's extension: generate max_tokens whatever the model says
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # vLLM's extension
    min_tokens: int = 0  # vLLM's extension
    logit_bias: dict | None = None
    logprobs: int | None = None  # how many alternatives per generated token (chat: top_logprobs); None: none
    prompt_logprobs: int | None = None  # vLLM's extension; `echo` with `logprobs` asks for it too
    echo: bool = False  # completions: the prompt comes back in front of the answer
    stream: bool = False
    include_usage: bool = False

    @property
    def prompt(self) -> str | list:
        """The one prompt of a completions call that sends one."""
        return self.prompts[0]

    def sampling(self, max_tokens: int) -> dict:
        """Keyword arguments for engine.SamplingParams."""
        prompt_logprobs = self.prompt_logprobs
        if self.echo and self.logprobs is not None and prompt_logprobs is None:
            prompt_logprobs = self.logprobs
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
                "max_tokens": max_tokens, "stop": list(self.stop), "seed": self.seed, "ignore_eos": self.ignore_eos,
                "presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
                "repetition_penalty": self.repetition_penalty, "min_tokens": self.min_tokens,
                "logit_bias": self.logit_bias, "logprobs": self.logprobs, "prompt_logprobs": prompt_logprobs}


MAX_LOGPROBS = 20  # vLLM's default max_logprobs (OpenAI's chat allows 20 too)

# Every parameter of OpenAI's two endpoints (and vLLM's extensions) this server acts on; anything
# else is refused by name rather than quietly ignored. A few are taken only at the value that
# asks for nothing (`n: 1`, `response_format: text`, no tools…): NO_OP.
_COMMON = {"model", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop", "seed", "stream", "stream_options",
           "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "logit_bias", "logprobs",
           "prompt_logprobs", "ignore_eos", "user"}
KNOWN = {True: _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "response_format", "tools", "tool_choice",
                          "parallel_tool_calls", "functions", "function_call", "modalities", "store", "metadata"},
         False: _COMMON | {"prompt", "echo", "best_of", "suffix"}}
NO_OP = {"n": (1,), "best_of": (1,), "suffix": ("",), "response_format": ({"type": "text"},), "tools": ([],),
         "tool_choice": ("none",), "functions": ([],), "function_call": ("none",), "parallel_tool_calls": (True, False),
         "modalities": (["text"],), "store": (False,), "metadata": ({},)}
_WHY = {"n": "only n=1 is supported", "best_of": "only best_of=1 is supported",
        "suffix": "'suffix' (insertion) is not supported", "response_format": "only response_format {\"type\": \"text\"} "
        "is supported (no JSON mode or JSON schema here)", "tools": "tools (function calling) are not supported",
        "tool_choice": "tool_choice is not supported (no tools)", "functions": "functions are not supported",
        "function_call": "function_call is not supported", "parallel_tool_calls": "tools are not supported",
        "modalities": "only the text modality is supported", "store": "responses are not stored here ('store' must be false)",
        "metadata": "'metadata' goes with 'store', which this server does not do"}


def _refuse_unsupported(body: dict, chat: bool) -> None:
    for name in body:
        if name not in KNOWN[chat]:
            other = "/v1/completions" if chat else "/v1/chat/completions"
            hint = f" (it belongs to {other})" if name in KNOWN[not chat] else ""
            raise bad(f"'{name}' is not supported by this server{hint}; it would be ignored, so the request is refused",
                      name, "unsupported_parameter")
        value, allowed = body[name], NO_OP.get(name)
        if allowed is None or value is None:
            continue
        # a bool where a number is taken is refused (True == 1 in Python, not in the API)
        number_as_bool = isinstance(value, bool) and not any(isinstance(ok, bool) for ok in allowed)  # pragma: no mutate (all for any: each NO_OP's values are all bools or none)
        if value not in allowed or number_as_bool:
            raise bad(_WHY[name] + f"; got {json.dumps(value, ensure_ascii=False)[:80]}", name, "unsupported_parameter")


def _number(body: dict, name: str, default: float, low: float, high: float, *, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(f"'{name}' must be a number", name)
    if value < low or value > high or (low_open and value == low):
        interval = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise bad(f"'{name}' must be in {interval}; got {value}", name)
    return float(value)


def _integer(body: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"'{name}' must be an integer", name)
    if value < low or (high is not None and value > high):
        raise bad(f"'{name}' must be at least {low}" + (f" and at most {high}" if high is not None else "") + f"; got {value}", name)
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(f"'{name}' must be true or false", name)
    return value


def _stop(body: dict) -> list:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise bad("'stop' must be a non-empty string or a list of them", "stop")
    if len(stop) > MAX_STOP_SEQUENCES or any(len(s) > MAX_STOP_CHARS for s in stop):
        raise bad(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences of at most {MAX_STOP_CHARS} characters", "stop")
    return stop


def _messages(body: dict) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {role, content}", "messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer", "user", "assistant"):
            raise bad(f"messages[{i}].role must be 'system', 'developer', 'user' or 'assistant'", f"messages[{i}].role")
        content = message.get("content")
        if isinstance(content, list):  # the newer "content parts" form: text parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
                raise bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"messages[{i}].content must be a string", f"messages[{i}].content")
        # OpenAI's newer clients say "developer" for what the model's template calls "system".
        out.append({"role": "system" if message["role"] == "developer" else message["role"], "content": content})
    return out


def _prompts(body: dict) -> list:
    """A completions prompt: a string, token ids, or a batch of either (each becomes a choice)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompt = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_token(t) for t in prompt):
        prompt = [prompt]  # one prompt as token ids
    if not isinstance(prompt, list) or not prompt:
        raise bad("'prompt' must be a non-empty string, a list of token ids, or a list of either (a batch)", "prompt")
    if len(prompt) > MAX_BATCH_PROMPTS:
        raise bad(f"'prompt' takes at most {MAX_BATCH_PROMPTS} prompts in one call; got {len(prompt)}", "prompt")
    for i, item in enumerate(prompt):
        if isinstance(item, str) and item:
            continue
        if isinstance(item, list) and item and all(_is_token(t) for t in item):
            continue
        raise bad(f"prompt[{i}] must be a non-empty string or a non-empty list of token ids (integers ≥ 0)", "prompt")
    return prompt


def _is_token(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _logit_bias(body: dict) -> dict | None:
    bias = body.get("logit_bias")
    if bias is None or bias == {}:
        return None
    if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS:
        raise bad(f"'logit_bias' must be an object of at most {MAX_LOGIT_BIAS} token ids to numbers in [-100, 100]", "logit_bias")
    out = {}
    for key, value in bias.items():
        if not str(key).isdigit() or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -100 <= value <= 100:
            raise bad(f"'logit_bias' maps token ids to numbers in [-100, 100]; got {key!r}: {value!r}", "logit_bias")
        out[int(key)] = float(value)
    return out


def _json_object(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise bad(f"the request body is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    return body


def _check_model(model, served_model: str) -> None:
    if model != served_model:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served_model}'.",
                       type="not_found_error", param="model", code="model_not_found")


def parse_request(raw: bytes, *, chat: bool, served_model: str) -> GenerationRequest:
    """The body of a completions call, checked; ApiError (400/404) naming what is wrong."""
    body = _json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required", "model")
    _check_model(model, served_model)
    _refuse_unsupported(body, chat)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    echo = False if chat else _flag(body, "echo")  # pragma: no mutate (chat's echo was refused above)
    tokens_name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    request = GenerationRequest(
        chat=chat,
        model=model,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=_top_k(body),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        max_tokens=_integer(body, tokens_name, 0 if echo else 1),
        stop=_stop(body),
        seed=_integer(body, "seed", 0, 2**63 - 1),
        ignore_eos=_flag(body, "ignore_eos"),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, low_open=True),
        min_tokens=_integer(body, "min_tokens", 0) or 0,
        logit_bias=_logit_bias(body),
        prompt_logprobs=_integer(body, "prompt_logprobs", 0, MAX_LOGPROBS),
        echo=echo,
        stream=_flag(body, "stream"),
        include_usage=bool(stream_options.get("include_usage")),
    )
    if request.max_tokens is not None and request.min_tokens > request.max_tokens:
        raise bad(f"'min_tokens' ({request.min_tokens}) must not exceed '{tokens_name}' ({request.max_tokens})", "min_tokens")
    if chat:
        request.messages = _messages(body)
        if _flag(body, "logprobs"):
            request.logprobs = _integer(body, "top_logprobs", 0, MAX_LOGPROBS) or 0
        elif body.get("top_logprobs") is not None:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        if request.prompt_logprobs is not None:
            raise bad("'prompt_logprobs' is for /v1/completions here", "prompt_logprobs")
    else:
        request.prompts = _prompts(body)
        request.logprobs = _integer(body, "logprobs", 0, MAX_LOGPROBS)
    return request


def _top_k(body: dict) -> int:
    value = _integer(body, "top_k", -1)
    return 0 if value in (None, -1) else value  # vLLM: -1 (or 0) turns it off


def parse_tokens_request(raw: bytes, *, detokenize: bool, served_model: str) -> dict:
    """vLLM's /tokenize body ({prompt} or {messages}, add_special_tokens, add_generation_prompt,
    return_token_strs) or /detokenize body ({tokens}); `model` is optional, as in vLLM."""
    body = _json_object(raw)
    if body.get("model") is not None:
        _check_model(body["model"], served_model)
    known = {"model", "tokens"} if detokenize else {"model", "prompt", "messages", "add_special_tokens",
                                                       "add_generation_prompt", "return_token_strs"}
    for name in body:
        if name not in known:
            raise bad(f"'{name}' is not supported here (it takes {', '.join(sorted(known))})", name, "unsupported_parameter")
    if detokenize:
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(_is_token(t) for t in tokens):
            raise bad("'tokens' must be a list of token ids (integers ≥ 0)", "tokens")
        if len(tokens) > MAX_TOKENIZE_TOKENS:
            raise bad(f"'tokens' takes at most {MAX_TOKENIZE_TOKENS} ids", "tokens")
        return {"tokens": tokens}
    if ("prompt" in body) == ("messages" in body):
        raise bad("send either 'prompt' (a string) or 'messages' (a chat)", "prompt")
    if "messages" in body:
        tokenize = {"messages": _messages(body), "add_generation_prompt": _flag_default(body, "add_generation_prompt", True)}
        if body.get("add_special_tokens"):
            raise bad("'add_special_tokens' with 'messages': the chat template writes them", "add_special_tokens")
    else:
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            raise bad("'prompt' must be a string", "prompt")
        tokenize = {"prompt": prompt, "add_special_tokens": _flag_default(body, "add_special_tokens", True)}
    text = tokenize.get("prompt") or "".join(m["content"] for m in tokenize.get("messages", []))
    if len(text) > MAX_TOKENIZE_TOKENS * MAX_CHARS_PER_TOKEN:
        raise bad(f"the text is over {MAX_TOKENIZE_TOKENS * MAX_CHARS_PER_TOKEN} characters", "prompt")
    return {"tokenize": tokenize, "return_token_strs": _flag(body, "return_token_strs")}


def _flag_default(body: dict, name: str, default: bool) -> bool:
    return default if body.get(name) is None else _flag(body, name)


def refuse_if_surely_too_long(request: GenerationRequest, max_model_len: int) -> None:
    """400 for a prompt whose characters alone exceed what the context could hold, as vLLM words
    a prompt too long for the context."""
    if request.chat:
        chars = sum(len(m["content"]) for m in request.messages)
    else:  # token ids are counted as they are
        chars = max(len(p) * (MAX_CHARS_PER_TOKEN if isinstance(p, list) else 1) for p in request.prompts)
    if chars > max_model_len * MAX_CHARS_PER_TOKEN:
        what = "messages" if request.chat else "prompt"
        raise bad(f"This model's maximum context length is {max_model_len} tokens. However, the {what} alone is "
                  f"{chars} characters, more than that many tokens can hold. Please reduce the length of the {what}.",
                  what)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def response(request: GenerationRequest, *, request_id: str, created: int, token_usage: dict, choices: list) -> dict:
    """The whole answer of a non-streaming call, its `choices` made by `choice` (one per prompt)."""
    kind = "chat.completion" if request.chat else "text_completion"
    return {"id": request_id, "object": kind, "created": created, "model": request.model,
            "choices": choices, "usage": token_usage}


def choice(request: GenerationRequest, index: int, text: str, finish_reason: str | None, logprobs: dict | None = None) -> dict:
    if request.chat:
        return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                "finish_reason": finish_reason}
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def chunk(request: GenerationRequest, *, request_id: str, created: int, text: str = "",
          finish_reason: str | None = None, first: bool = False, token_usage: dict | None = None,
          index: int = 0, logprobs: dict | None = None) -> dict:
    """One server-sent event's data while streaming. With `token_usage`, the closing usage
    chunk (`stream_options.include_usage`): no choices."""
    if request.chat:
        delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        choices = [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]
        kind = "chat.completion.chunk"
    else:
        choices = [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]
        kind = "text_completion"
    out = {"id": request_id, "object": kind, "created": created, "model": request.model,
           "choices": [] if token_usage is not None else choices}
    if request.include_usage:
        out["usage"] = token_usage  # null on every chunk but the last, as OpenAI sends it
    return out


# --- logprobs, in the two shapes OpenAI has ----------------------------------------------------
LOWEST_LOGPROB = -9999.0  # JSON has no -inf; vLLM sends this instead


def _lp(value: float) -> float:
    return max(value, LOWEST_LOGPROB) if value == value else LOWEST_LOGPROB


def chat_logprobs(entries: list, strings: dict[int, str]) -> dict:
    """Chat's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]} per generated token."""
    def one(token_id: int, logprob: float) -> dict:
        text = strings[token_id]
        return {"token": text, "logprob": _lp(logprob), "bytes": list(text.encode())}

    return {"content": [one(e[0], e[1]) | {"top_logprobs": [one(t, lp) for t, lp in e[3]]} for e in entries],
            "refusal": None}


def vllm_logprob_entry(entry, strings: dict[int, str]) -> dict:
    """One position of vLLM's `prompt_logprobs`: {token id: {logprob, rank, decoded_token}}, the
    position's own token first, then the likeliest others."""
    out = {str(entry[0]): {"logprob": _lp(entry[1]), "rank": entry[2], "decoded_token": strings[entry[0]]}}
    for rank, (token_id, logprob) in enumerate(entry[3], start=1):
        out.setdefault(str(token_id), {"logprob": _lp(logprob), "rank": rank, "decoded_token": strings[token_id]})
    return out


def completion_logprobs(token_ids: list[int], entries: list, strings: dict[int, str], offset: int = 0) -> dict:
    """Completions' (legacy) `logprobs`: parallel lists over the returned tokens; a position with
    no logprob (the prompt's first token, under echo) has null. top_logprobs holds the k likeliest
    and the token itself, as vLLM's does."""
    tokens, token_logprobs, top, offsets = [], [], [], []
    for token_id, entry in zip(token_ids, entries):
        text = strings[token_id]
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
        if entry is None:
            token_logprobs.append(None)
            top.append(None)
            continue
        token_logprobs.append(_lp(entry[1]))
        top.append({strings[t]: _lp(lp) for t, lp in entry[3]} | {text: _lp(entry[1])})
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))  # pragma: no mutate (ensure_ascii None is False)
    return f"data: {text}\n\n".encode()


def models_list(served_model: str, *, created: int, max_model_len: int) -> dict:
    return {"object": "list", "data": [{"id": served_model, "object": "model", "created": created,
                                        "owned_by": "courseapp", "root": served_model, "max_model_len": max_model_len}]}
