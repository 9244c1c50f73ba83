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
# 13): a prompt with more than max_model_len × this many characters cannot fit in the context,
# and is refused before any tokenizing (which takes seconds of CPU for a megabyte).
MAX_CHARS_PER_TOKEN = 16


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
    prompt: str = ""  # completions
    messages: list = field(default_factory=list)  # chat
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None  # None: up to the model's context
    stop: list = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # vLLM's extension: generate max_tokens whatever the model says
    stream: bool = False
    include_usage: bool = False

    def sampling(self, max_tokens: int) -> dict:
        """Keyword arguments for engine.SamplingParams."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": max_tokens,
                "stop": list(self.stop), "seed": self.seed, "ignore_eos": self.ignore_eos}


def _number(body: dict, name: str, default: float, low: float, high: float, *, low_open: bool = False) -> float:
    value = body.get(name, default)
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
    value = body.get(name, False)
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
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise bad(f"messages[{i}].role must be 'system', 'user' or 'assistant'", f"messages[{i}].role")
        content = message.get("content")
        if isinstance(content, list):  # the newer "content parts" form: text parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
                raise bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"messages[{i}].content must be a string", f"messages[{i}].content")
        out.append({"role": message["role"], "content": content})
    return out


def parse_request(raw: bytes, *, chat: bool, served_model: str) -> GenerationRequest:
    """The body of a completions call, checked; ApiError (400/404) naming what is wrong."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise bad(f"the request body is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required", "model")
    if model != served_model:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served_model}'.",
                       type="not_found_error", param="model", code="model_not_found")
    if body.get("n") not in (None, 1) or isinstance(body.get("n"), bool):
        raise bad("only n=1 is supported", "n")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    request = GenerationRequest(
        chat=chat,
        model=model,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        max_tokens=_integer(body, "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens", 1),
        stop=_stop(body),
        seed=_integer(body, "seed", 0, 2**63 - 1),
        ignore_eos=_flag(body, "ignore_eos"),
        stream=_flag(body, "stream"),
        include_usage=bool(stream_options.get("include_usage", False)),
    )
    if chat:
        request.messages = _messages(body)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise bad("'prompt' must be a non-empty string", "prompt")
        request.prompt = prompt
    return request


def refuse_if_surely_too_long(request: GenerationRequest, max_model_len: int) -> None:
    """400 for a prompt whose characters alone exceed what the context could hold, as vLLM words
    a prompt too long for the context."""
    chars = sum(len(m["content"]) for m in request.messages) if request.chat else len(request.prompt)
    if chars > max_model_len * MAX_CHARS_PER_TOKEN:
        what = "messages" if request.chat else "prompt"
        raise bad(f"This model's maximum context length is {max_model_len} tokens. However, the {what} alone is "
                  f"{chars} characters, more than that many tokens can hold. Please reduce the length of the {what}.",
                  what)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def response(request: GenerationRequest, *, request_id: str, created: int, text: str, finish_reason: str,
             token_usage: dict) -> dict:
    """The whole answer of a non-streaming call."""
    if request.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        kind = "text_completion"
    return {"id": request_id, "object": kind, "created": created, "model": request.model,
            "choices": [choice], "usage": token_usage}


def chunk(request: GenerationRequest, *, request_id: str, created: int, text: str = "",
          finish_reason: str | None = None, first: bool = False, token_usage: dict | None = None) -> dict:
    """One server-sent event's data while streaming. With `token_usage`, the closing usage
    chunk (`stream_options.include_usage`): no choices."""
    if request.chat:
        delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        kind = "chat.completion.chunk"
    else:
        choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]
        kind = "text_completion"
    out = {"id": request_id, "object": kind, "created": created, "model": request.model,
           "choices": [] if token_usage is not None else choices}
    if request.include_usage:
        out["usage"] = token_usage  # null on every chunk but the last, as OpenAI sends it
    return out


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def models_list(served_model: str, *, created: int, max_model_len: int) -> dict:
    return {"object": "list", "data": [{"id": served_model, "object": "model", "created": created,
                                        "owned_by": "courseapp", "root": served_model, "max_model_len": max_model_len}]}
