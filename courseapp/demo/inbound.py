"""What a viewer's socket may send, checked before anything acts on it.

Every refusal is an Invalid whose message is a sentence for the person (naming the limit);
the consumer turns it into an error frame and keeps the socket open. The text is bounded in
size and nesting *before* json.loads, which would otherwise recurse 50,000 levels deep, and
numbers are bounded as they are parsed (10^400 is neither a speed nor a float).
"""
import json
import math
from dataclasses import dataclass

from django.utils.translation import gettext as _

MAX_MESSAGE_CHARS = 8192  # a 500-character prompt, \u-escaped, fits with room to spare
MAX_DEPTH = 3
MAX_PROMPT_CHARS = 500
MAX_TOKENS = (1, 256)
SPEED = (0.125, 8.0)
BIGGEST_NUMBER = 10**15
CONTROLS = ("pause", "resume", "step", "stop")


class Invalid(ValueError):
    """A message that will not be acted on; str() is the sentence to show."""


@dataclass(frozen=True)
class Message:
    type: str
    prompt: str = ""
    max_tokens: int = 64
    value: float = 1.0


def _too_deep(text: str, limit: int) -> bool:
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _number_refused():
    return Invalid(_("numbers in a message must lie between -%(n)s and %(n)s") % {"n": f"{BIGGEST_NUMBER:,}"})


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > len(str(BIGGEST_NUMBER)):
        raise _number_refused()
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > BIGGEST_NUMBER:
        raise _number_refused()
    return value


def _parse_constant(name: str):
    raise _number_refused()  # NaN, Infinity, -Infinity


def parse(text: str | None) -> dict:
    """The JSON object a socket sent, or Invalid."""
    if not text:
        raise Invalid(_("malformed message: send a JSON object"))
    if len(text) > MAX_MESSAGE_CHARS:
        raise Invalid(_("the message is too long: at most %(n)d characters") % {"n": MAX_MESSAGE_CHARS})
    if _too_deep(text, MAX_DEPTH):
        raise Invalid(_("the message is nested too deeply: at most %(n)d levels") % {"n": MAX_DEPTH})
    try:
        content = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, Invalid):
            raise
        raise Invalid(_("malformed message: send a JSON object")) from None
    if not isinstance(content, dict):
        raise Invalid(_("malformed message: send a JSON object"))
    return content


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate(content: dict) -> Message:
    """The command a parsed message asks for, every field checked, or Invalid."""
    kind = content.get("type")
    if kind in ("ping", "snapshot") or kind in CONTROLS:  # snapshot: a viewer that missed a frame
        return Message(kind)
    if kind == "speed":
        value = content.get("value")
        lo, hi = SPEED
        if not _is_number(value) or not lo <= value <= hi:
            raise Invalid(_("speed must be a number from %(lo)s to %(hi)s") % {"lo": f"{lo:g}", "hi": f"{hi:g}"})
        return Message(kind, value=float(value))
    if kind == "submit":
        prompt = content.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise Invalid(_("type a prompt first"))
        if len(prompt) > MAX_PROMPT_CHARS:
            raise Invalid(_("the prompt is too long: at most %(n)d characters") % {"n": MAX_PROMPT_CHARS})
        max_tokens = content.get("max_tokens", 64)
        lo, hi = MAX_TOKENS
        if not _is_number(max_tokens) or max_tokens != int(max_tokens) or not lo <= max_tokens <= hi:
            raise Invalid(_("max_tokens must be a whole number from %(lo)d to %(hi)d") % {"lo": lo, "hi": hi})
        return Message(kind, prompt=prompt.strip(), max_tokens=int(max_tokens))
    raise Invalid(_("unknown message type %(kind)r") % {"kind": str(kind)[:40]})
