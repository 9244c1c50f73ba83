"""Form data that answers a loaded question rightly or wrongly, built from its key (tests only).

The key holds the authored ids; a form carries the opaque ids the page shows (`presenting`)."""
from courseapp.quizzes.presenting import opaque_id


def shown_id(q, kind, raw_id) -> str:
    return opaque_id(q.slug, kind, raw_id)


def right_form(q) -> dict:
    key = q.key
    if q.type == "single":
        return {"choice": shown_id(q, "choice", key["answer"])}
    if q.type == "multi":
        return {"choice": [shown_id(q, "choice", c) for c in key["answer"]]}
    if q.type == "numeric":
        return {"value": str(key["answer"])}
    if q.type == "short":  # an own-words answer: its model answer meets every idea of the rubric
        return {"text": key["model_answer"] if key.get("rubric") else key["answers"][0]}
    if q.type == "ordering":
        return {"order": [shown_id(q, "item", i) for i in key["order"]]}
    return {f"match-{shown_id(q, 'left', left)}": shown_id(q, "right", right) for left, right in key["pairs"].items()}


def wrong_form(q) -> dict:
    """A response that scores below 1 (zero for single, numeric and short)."""
    key, public = q.key, q.public
    if q.type == "single":
        return {"choice": next(shown_id(q, "choice", c["id"]) for c in public["choices"] if c["id"] != key["answer"])}
    if q.type == "multi":
        return {"choice": [shown_id(q, "choice", c) for c in key["choices"] if c not in key["answer"]]}
    if q.type == "numeric":
        return {"value": str(key["answer"] + 1000 + 10 * key["tolerance"])}
    if q.type == "short":
        return {"text": "전혀 다른 답"}
    if q.type == "ordering":
        return {"order": [shown_id(q, "item", i) for i in reversed(key["order"])]}
    lefts = list(key["pairs"])
    rights = [key["pairs"][left] for left in lefts]
    return {
        f"match-{shown_id(q, 'left', left)}": shown_id(q, "right", right)
        for left, right in zip(lefts, rights[1:] + rights[:1])
    }


def api_response(q, right: bool = True) -> dict:
    """The grading API's response shape (courseapp/api), from the same right or wrong form."""
    form = right_form(q) if right else wrong_form(q)
    if q.type == "single":
        return {"choice": form["choice"]}
    if q.type == "multi":
        return {"choices": form["choice"]}
    if q.type in ("numeric", "short", "ordering"):
        return form
    return {"pairs": {name.removeprefix("match-"): value for name, value in form.items()}}
