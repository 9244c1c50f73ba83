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
# A number followed by a word: "3개", "16 토큰", "94 blocks". The word may be any unit, but not a
# Korean or SI multiplier ("2.2만" is 22,000, not 2.2), which is refused as not a number.
_WITH_UNIT = re.compile(r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+))\s*(?P<unit>[^\W\d_]+\.?|%)$")
_KOREAN_MULTIPLIERS = set("십백천만억조")
_LATIN_MULTIPLIERS = {"k", "m", "b", "g", "e", "bn", "mn"}


def _number(raw) -> float:
    if isinstance(raw, bool):
        raise ResponseError(_("Enter a number."))
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip().replace(",", "")
        if not text:
            raise ResponseError(_("Enter a number."))
        match = _WITH_UNIT.match(text)
        unit = match["unit"] if match else ""
        if match and unit[0] not in _KOREAN_MULTIPLIERS and unit.casefold() not in _LATIN_MULTIPLIERS:
            text = match["number"]  # the unit the learner typed is dropped; the number is graded
        text = text.replace(" ", "")
        if not _NUMBER.match(text):
            raise ResponseError(_("“%(value)s” is not a number. Enter a number such as 3 or 2.5 (a unit after it is fine, e.g. 3 blocks).") % {"value": raw[:40]})
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
        if not isinstance(choice, str) or choice not in {c["id"] for c in public["choices"]}:
            raise ResponseError(_("That choice is not one of this question's options."))
        return {"choice": choice}
    if qtype == "multi":
        chosen = response.get("choices")
        if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
            raise ResponseError(_("The response must list the chosen options."))
        if not chosen:  # nothing to grade: not a try (every such question has at least one right option)
            raise ResponseError(_("Choose at least one option first."))
        valid = [c["id"] for c in public["choices"]]
        if set(chosen) - set(valid):
            raise ResponseError(_("That choice is not one of this question's options."))
        return {"choices": [c for c in valid if c in set(chosen)]}  # duplicates collapse
    if qtype == "numeric":
        value = _number(response.get("value"))
        if public.get("integer") and value != int(value):
            # Not graded, so the try is kept: the question counts whole things.
            raise ResponseError(_("Answer with a whole number: this question counts whole things, so round as the question says."))
        return {"value": value}
    if qtype == "short":
        text = response.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ResponseError(_("Type an answer first."))
        if len(text) > MAX_TEXT:
            raise ResponseError(_("The answer is too long (at most %(n)d characters).") % {"n": MAX_TEXT})
        if "\x00" in text:  # no one types it, and PostgreSQL cannot store it
            raise ResponseError(_("Type an answer first."))
        return {"text": text.strip()}
    if qtype == "ordering":
        order = response.get("order")
        items = [i["id"] for i in public["items"]]
        if not isinstance(order, list) or not all(isinstance(i, str) for i in order) or sorted(order) != sorted(items):
            raise ResponseError(_("The order must list every item exactly once."))
        if list(order) == items:  # the order the card starts in, which is never the answer
            raise ResponseError(_("Move the items into your order first; nothing was saved, so this try still counts as unused."))
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
            if right and (not isinstance(right, str) or right not in rights):
                raise ResponseError(_("That match is not one of this question's options."))
            clean[left["id"]] = right
        filled = sum(1 for right in clean.values() if right)
        if filled < len(clean):
            # A half-filled matching is not graded: finishing it should not cost a try.
            raise ResponseError(
                _("Match every item first (%(filled)d of %(total)d matched). Nothing was saved, so this try still counts as unused.")
                % {"filled": filled, "total": len(clean)}
            )
        return {"pairs": clean}
    raise ResponseError(_("Unknown question type."))
