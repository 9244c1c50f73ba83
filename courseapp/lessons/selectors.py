"""Reads for lesson pages."""
from django.db.models import Count, Max
from django.shortcuts import get_object_or_404

from courseapp.lessons.models import Lesson


def lesson_get(*, number: int) -> Lesson:
    return get_object_or_404(Lesson.objects.select_related("course"), number=number, available=True)


def lesson_neighbours(*, lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    siblings = lesson.course.lessons.all()
    prev = siblings.filter(number__lt=lesson.number).order_by("-number").first()
    nxt = siblings.filter(number__gt=lesson.number).order_by("number").first()
    return prev, nxt


def section_neighbours(*, section) -> tuple:
    sections = list(section.lesson.sections.all())
    i = next(i for i, s in enumerate(sections) if s.pk == section.pk)
    return (sections[i - 1] if i > 0 else None), (sections[i + 1] if i + 1 < len(sections) else None)


_ANCHOR_PAGES: dict[tuple, dict[str, str]] = {}


def anchor_pages(*, lesson: Lesson) -> dict[str, str]:
    """anchor (s3-3, appendix-a, …) → the URL of the section page that carries it.

    Every feedback and glossary entry links its section; scanning every section body for
    anchors each time was most of a glossary page. Kept per content version (the sections'
    latest `updated_at`), so an edit shows at once.
    """
    stamp = lesson.sections.aggregate(n=Count("pk"), last=Max("updated_at"))
    key = (lesson.pk, stamp["n"], stamp["last"])
    pages = _ANCHOR_PAGES.get(key)
    if pages is None:
        pages = {}
        for section in lesson.sections.all():
            for anchor in section.anchors:
                pages.setdefault(anchor, section.get_absolute_url())
        _ANCHOR_PAGES.clear()  # one version per process is enough
        _ANCHOR_PAGES[key] = pages
    return pages
