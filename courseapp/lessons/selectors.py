"""Reads for lesson pages."""
from django.shortcuts import get_object_or_404

from courseapp.lessons.models import Lesson


def lesson_get(*, number: int) -> Lesson:
    return get_object_or_404(Lesson.objects.select_related("course"), number=number, available=True)


def lesson_neighbours(*, lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    siblings = lesson.course.lessons.all()
    prev = siblings.filter(number__lt=lesson.number).order_by("-number").first()
    nxt = siblings.filter(number__gt=lesson.number).order_by("number").first()
    return prev, nxt
