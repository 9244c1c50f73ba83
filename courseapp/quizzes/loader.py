"""Questions from questions.yaml → Question rows, split into what the page may show (`public`)
and what only the grader reads (`key`).

Both keep the ids as authored; `presenting` turns them into per-question HMACs and draws each
learner's order of the options when a page is rendered. Ordering items are stored in a fixed
shuffle that is never the right order, so neither ids nor positions give the answer away.
"""
import random
import re

from courseapp.quizzes.models import Question

REQUIRED = {
    "single": ("choices", "answer"),
    "multi": ("choices", "answer"),
    "numeric": ("answer",),
    "short": (),  # answers, or a rubric with a model answer: checked below
    "ordering": ("items",),
    "matching": ("left", "right", "answer"),
}


class QuestionFileError(ValueError):
    pass


def _shuffled(slug: str, items: list) -> list:
    """A deterministic shuffle (stable across loads) that differs from the given order."""
    rng = random.Random(f"shuffle:{slug}")
    shown = list(items)
    if len(shown) < 2:
        return shown
    while shown == items:
        rng.shuffle(shown)
    return shown


def _entries(slug, kind, raw):
    seen = set()
    out = []
    for entry in raw:
        if entry["id"] in seen:
            raise QuestionFileError(f"{slug}: duplicate {kind} id {entry['id']!r}")
        seen.add(entry["id"])
        out.append({"id": str(entry["id"]), "text": str(entry["text"])})
    return out


def split_question(data: dict) -> tuple[dict, dict, dict]:
    """Return (public, key, choice_feedback) for one question entry of the YAML file."""
    slug, qtype = data["id"], data["type"]
    if qtype not in REQUIRED:
        raise QuestionFileError(f"{slug}: unknown type {qtype!r}")
    missing = [k for k in REQUIRED[qtype] if k not in data]
    if missing:
        raise QuestionFileError(f"{slug}: {qtype} question needs {', '.join(missing)}")

    feedback = {}
    if qtype in ("single", "multi"):
        choices = _entries(slug, "choice", data["choices"])
        ids = {c["id"] for c in data["choices"]}
        answer = data["answer"] if qtype == "multi" else [data["answer"]]
        if not isinstance(answer, list) or set(answer) - ids:
            raise QuestionFileError(f"{slug}: answer names a choice that does not exist")
        public = {"choices": choices}
        if qtype == "single":
            key = {"answer": str(data["answer"])}
        else:
            key = {"choices": [c["id"] for c in choices], "answer": [str(a) for a in answer]}
        for raw_id, text in (data.get("choice_feedback") or {}).items():
            if raw_id not in ids:
                raise QuestionFileError(f"{slug}: choice_feedback for unknown choice {raw_id!r}")
            feedback[str(raw_id)] = str(text)
    elif qtype == "numeric":
        answer, tolerance = float(data["answer"]), float(data.get("tolerance", 0))
        # A count (blocks, requests, steps): the page asks for a whole number and offers the
        # digits-only keypad. Public by design: the prompt already says "정수로".
        whole = answer == int(answer) and tolerance < 1
        public = {"unit": data.get("unit", ""), "integer": whole}
        key = {"answer": answer, "tolerance": tolerance}
    elif qtype == "short" and "rubric" in data:
        rubric = data["rubric"]
        if not rubric or not all(idea.get("label") and idea.get("patterns") for idea in rubric):
            raise QuestionFileError(f"{slug}: every rubric idea needs a label and patterns")
        if not str(data.get("model_answer", "")).strip():
            raise QuestionFileError(f"{slug}: a rubric-graded answer needs a model_answer to show")
        for idea in rubric:
            for pattern in [*idea["patterns"], *idea.get("contradicted_by", [])]:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise QuestionFileError(f"{slug}: rubric pattern {pattern!r}: {exc}") from exc
        public = {"long": True, "ideas": len(rubric)}
        key = {
            "answers": [],
            "rubric": [{"label": str(i["label"]), "patterns": [str(p) for p in i["patterns"]],
                        "contradicted_by": [str(p) for p in i.get("contradicted_by", [])]} for i in rubric],
            "model_answer": str(data["model_answer"]).strip(),
        }
    elif qtype == "short":
        if not data.get("answers"):
            raise QuestionFileError(f"{slug}: short answer needs at least one accepted answer (or a rubric)")
        public = {}
        key = {"answers": [str(a) for a in data["answers"]], "patterns": list(data.get("patterns", []))}
    elif qtype == "ordering":
        items = _entries(slug, "item", data["items"])
        if len(items) < 3:
            raise QuestionFileError(f"{slug}: ordering needs at least 3 items")
        public = {"items": _shuffled(slug, items)}
        key = {"order": [i["id"] for i in items]}
    else:  # matching
        left = _entries(slug, "left", data["left"])
        right = _entries(slug, "right", data["right"])
        left_ids = {e["id"] for e in data["left"]}
        right_ids = {e["id"] for e in data["right"]}
        if set(data["answer"]) != left_ids or set(data["answer"].values()) - right_ids:
            raise QuestionFileError(f"{slug}: matching answer must pair every left item with a right item")
        public = {"left": left, "right": right}  # the right side is shuffled per learner (presenting)
        key = {"pairs": {str(lft): str(r) for lft, r in data["answer"].items()}}
    return public, key, feedback


def questions_load(*, lesson, entries: list, objectives: dict, anchors: set) -> int:
    """Create or update the lesson's questions from parsed YAML entries. Returns how many."""
    seen = set()
    for order, data in enumerate(entries, start=1):
        slug = data.get("id")
        if not slug or slug in seen:
            raise QuestionFileError(f"question #{order}: missing or duplicate id {slug!r}")
        seen.add(slug)
        if data.get("objective") not in objectives:
            raise QuestionFileError(f"{slug}: unknown objective {data.get('objective')!r}")
        if data.get("section") not in anchors:
            raise QuestionFileError(f"{slug}: section anchor {data.get('section')!r} is not in the lesson")
        public, key, feedback = split_question(data)
        Question.objects.update_or_create(
            slug=slug,
            defaults={
                "lesson": lesson,
                "type": data["type"],
                "objective": objectives[data["objective"]],
                "anchor": data["section"],
                "order": order,
                "prompt": str(data["prompt"]).strip(),
                "public": public,
                "key": key,
                "explanation": str(data.get("explanation", "")).strip(),
                "hint": str(data.get("hint", "")).strip(),
                "choice_feedback": feedback,
            },
        )
    return len(seen)
