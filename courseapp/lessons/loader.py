"""Load the course from courseapp/content/ into the database (docs/content-format.md).

Idempotent: rows are matched by slug and updated in place, so loading twice changes nothing
and learners' progress (keyed on those rows) survives content edits.
"""
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.db import transaction

from courseapp.lessons.models import Course, GlossaryTerm, Lesson, Objective, Section
from courseapp.lessons.rendering import directive_errors
from courseapp.quizzes.loader import QuestionFileError, questions_load

FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n(.*)\Z", re.S)


class ContentError(ValueError):
    pass


@dataclass(slots=True)
class LoadReport:
    lessons: int = 0
    sections: int = 0
    objectives: int = 0
    terms: int = 0
    questions: int = 0


def _yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ContentError(f"{path}: {exc}") from exc


def _fields(entry, path: Path, what: str, required: tuple[str, ...]) -> dict:
    """A YAML mapping (a file, or one entry of a list in it) with every required field present,
    or a ContentError naming the file, the entry and the missing field (not a bare KeyError from
    deep in the load)."""
    if not isinstance(entry, dict):
        raise ContentError(f"{path}: {what} must be a mapping of fields, got {entry!r}")
    missing = [name for name in required if entry.get(name) is None]
    if missing:
        label = f"{what} {entry['slug']!r}" if entry.get("slug") is not None else what
        raise ContentError(f"{path}: {label} needs {', '.join(repr(m) for m in missing)}")
    return entry


def read_section_file(path: Path) -> tuple[dict, str]:
    match = FRONT_MATTER.match(path.read_text(encoding="utf-8"))
    if not match:
        raise ContentError(f"{path}: missing YAML front matter (--- … ---)")
    meta = yaml.safe_load(match.group(1)) or {}
    for field in ("slug", "number", "title"):
        if field not in meta:
            raise ContentError(f"{path}: front matter needs {field!r}")
    return meta, match.group(2).strip() + "\n"


@transaction.atomic
def content_load(*, root: Path) -> LoadReport:
    """Load course.yaml and every lesson folder that has a lesson.yaml."""
    report = LoadReport()
    course_data = _fields(_yaml(root / "course.yaml"), root / "course.yaml", "the course", ("slug", "title", "lessons"))
    course, _ = Course.objects.update_or_create(slug=course_data["slug"], defaults={"title": course_data["title"]})
    for entry in course_data["lessons"]:
        _fields(entry, root / "course.yaml", "lesson", ("number", "slug", "title"))
        Lesson.objects.update_or_create(
            number=entry["number"],
            defaults={
                "course": course,
                "slug": entry["slug"],
                "title": entry["title"],
                "day": entry.get("day"),
                "layer": entry.get("layer", ""),
                "available": bool(entry.get("available", False)),
            },
        )
        report.lessons += 1
        folder = root / entry["slug"]
        if (folder / "lesson.yaml").exists():
            _load_lesson(folder, report)
    return report


def _load_lesson(folder: Path, report: LoadReport) -> None:
    data = _fields(_yaml(folder / "lesson.yaml"), folder / "lesson.yaml", "the lesson", ("number", "title", "objectives"))
    lesson = Lesson.objects.get(number=data["number"])
    lesson.title = data["title"]
    lesson.keywords = list(data.get("keywords", []))
    lesson.layer = data.get("layer", lesson.layer)
    lesson.day = data.get("day", lesson.day)
    lesson.save()

    objectives = {}
    for order, obj in enumerate(data["objectives"], start=1):
        _fields(obj, folder / "lesson.yaml", "objective", ("slug", "text"))
        objectives[obj["slug"]], _ = Objective.objects.update_or_create(
            lesson=lesson, slug=obj["slug"], defaults={"order": order, "text": obj["text"].strip()}
        )
    report.objectives += len(objectives)

    anchors: set[str] = set()
    for order, path in enumerate(sorted((folder / "sections").glob("*.md")), start=1):
        meta, body = read_section_file(path)
        problems = directive_errors(body)  # a dead scene link or missing figure fails the load, not a page view
        if problems:
            raise ContentError(f"{path}: " + "; ".join(problems))
        section, _ = Section.objects.update_or_create(
            lesson=lesson,
            slug=meta["slug"],
            defaults={"number": str(meta["number"]), "title": meta["title"], "order": order, "body": body},
        )
        clash = anchors & set(section.anchors)
        if clash:
            raise ContentError(f"{path}: anchors used twice: {sorted(clash)}")
        anchors |= set(section.anchors)
        report.sections += 1

    glossary = folder / "glossary.yaml"
    for entry in _yaml(glossary) or []:
        _fields(entry, glossary, "glossary entry", ("slug", "term", "genus", "differentia", "contrast", "section"))
        if entry["section"] not in anchors:
            raise ContentError(f"{glossary}: glossary entry {entry['slug']!r}: section anchor {entry['section']!r} is not in the lesson")
        GlossaryTerm.objects.update_or_create(
            lesson=lesson,
            slug=entry["slug"],
            defaults={
                "term": entry["term"],
                "aliases": list(entry.get("aliases") or [entry["term"]]),
                "genus": entry["genus"].strip(),
                "differentia": entry["differentia"].strip(),
                "contrast": entry["contrast"].strip(),
                "anchor": entry["section"],
            },
        )
        report.terms += 1

    try:
        report.questions += questions_load(
            lesson=lesson, entries=_yaml(folder / "questions.yaml") or [], objectives=objectives, anchors=anchors
        )
    except QuestionFileError as exc:
        raise ContentError(f"{folder / 'questions.yaml'}: {exc}") from exc
