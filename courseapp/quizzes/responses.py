"""Turn a submitted form (or JSON body) into a validated response for the grader.

Anything malformed or tampered with raises ResponseError, whose message the learner sees
with a 400; nothing is stored for it.
"""
import math
import re

from django.utils.translation import gettext as _

from courseapp.quizzes.presenting import raw_ids

MAX_TEXT = 300


class ResponseError(ValueError):
    pass


def from_form(question, data) -> dict:
    """Read the HTML form's fields (a QueryDict) into the response shape `validate` expects,
    turning the opaque ids the page showed back into the authored ids."""
    qtype = question.type
    if qtype == "single":
        values = [v for v in data.getlist("choice") if v]
        if len(values) > 1:
            raise ResponseError(_("Choose exactly one answer."))
        return {"choice": _authored(question, "choices", values)[0] if values else None}
    if qtype == "multi":
        return {"choices": _authored(question, "choices", data.getlist("choice"))}
    if qtype == "numeric":
        return {"value": data.get("value")}
    if qtype == "short":
        return {"text": data.get("text")}
    if qtype == "ordering":
        return {"order": _authored(question, "items", data.getlist("order"))}
    if qtype == "matching":
        rights = raw_ids(question, "right") | {"": ""}
        pairs = {}
        for shown_left, left in raw_ids(question, "left").items():
            value = data.get(f"match-{shown_left}", "")
            if value not in rights:
                raise ResponseError(_("That match is not one of this question's options."))
            pairs[left] = rights[value]
        return {"pairs": pairs}
    raise ResponseError(_("Unknown question type."))


def _authored(question, group: str, shown_ids: list) -> list:
    ids = raw_ids(question, group)
    if any(v not in ids for v in shown_ids):
        if group == "items":
            raise ResponseError(_("The order must list every item exactly once."))
        raise ResponseError(_("That choice is not one of this question's options."))
    return [ids[v] for v in shown_ids]


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _number(raw) -> float:
    if isinstance(raw, bool):
        raise ResponseError(_("Enter a number."))
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip().replace(",", "").replace(" ", "")
        if not text:
            raise ResponseError(_("Enter a number."))
        if not _NUMBER.match(text):
            raise ResponseError(_("“%(value)s” is not a number. Enter digits only, e.g. 3 or 2.5.") % {"value": raw[:40]})
        value = float(text)
    else:
        raise ResponseError(_("Enter a number."))
    if not math.isfinite(value):
        raise ResponseError(_("Enter a finite number."))
    return value


def validate(question, response) -> dict:
    """Check the response against what the question offers; return a clean copy."""
    if not isinstance(response, dict):
        raise ResponseError(_("The response must be an object."))
    public = question.public
    qtype = question.type
    if qtype == "single":
        choice = response.get("choice")
        if choice in (None, ""):
            raise ResponseError(_("Choose an answer first."))
        if choice not in {c["id"] for c in public["choices"]}:
            raise ResponseError(_("That choice is not one of this question's options."))
        return {"choice": choice}
    if qtype == "multi":
        chosen = response.get("choices")
        if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
            raise ResponseError(_("The response must list the chosen options."))
        valid = [c["id"] for c in public["choices"]]
        if set(chosen) - set(valid):
            raise ResponseError(_("That choice is not one of this question's options."))
        return {"choices": [c for c in valid if c in set(chosen)]}  # duplicates collapse
    if qtype == "numeric":
        return {"value": _number(response.get("value"))}
    if qtype == "short":
        text = response.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ResponseError(_("Type an answer first."))
        if len(text) > MAX_TEXT:
            raise ResponseError(_("The answer is too long (at most %(n)d characters).") % {"n": MAX_TEXT})
        return {"text": text.strip()}
    if qtype == "ordering":
        order = response.get("order")
        items = [i["id"] for i in public["items"]]
        if not isinstance(order, list) or sorted(map(str, order)) != sorted(items):
            raise ResponseError(_("The order must list every item exactly once."))
        return {"order": list(order)}
    if qtype == "matching":
        pairs = response.get("pairs")
        lefts = {i["id"] for i in public["left"]}
        rights = {i["id"] for i in public["right"]}
        if not isinstance(pairs, dict) or set(pairs) - lefts:
            raise ResponseError(_("The response must pair this question's items."))
        clean = {}
        for left in public["left"]:
            right = pairs.get(left["id"]) or ""
            if right and right not in rights:
                raise ResponseError(_("That match is not one of this question's options."))
            clean[left["id"]] = right
        if not any(clean.values()):
            raise ResponseError(_("Match at least one pair first."))
        return {"pairs": clean}
    raise ResponseError(_("Unknown question type."))
