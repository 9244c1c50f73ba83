from django.http import HttpResponse
from django.shortcuts import render
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from courseapp.learners.selectors import mastery_by_objective, resume_section, sections_with_read
from courseapp.learners.services import learner_get, section_mark_read, section_visit
from courseapp.lessons.models import Course
from courseapp.lessons.rendering import SELFCHECK_SLOT, render_section_cached
from courseapp.lessons.outline import outline_get
from courseapp.lessons.selectors import lesson_get, lesson_neighbours, section_position, section_subsections
from courseapp.quizzes.selectors import anchor_label, anchor_url
from courseapp.quizzes.views import question_cards, selfcheck_html


def home(request):
    course = Course.objects.prefetch_related("lessons").first()
    lesson = next((l for l in course.lessons.all() if l.available), None) if course else None
    learner = learner_get(request)
    context = {"course": course, "lesson": lesson}
    if lesson is not None:
        context["resume"] = resume_section(learner=learner, lesson=lesson)
        context["mastery"] = mastery_by_objective(learner=learner, lesson=lesson)
        # A first-time visitor starts; only someone who has opened a section resumes.
        context["started"] = learner is not None and learner.last_section_id is not None
    return render(request, "lessons/home.html", context)


def lesson_detail(request, number):
    lesson = outline_get(number=number).lesson
    learner = learner_get(request)
    prev_lesson, next_lesson = lesson_neighbours(lesson=lesson)
    sections = sections_with_read(learner=learner, lesson=lesson)
    read = {s.pk for s, is_read in sections if is_read}
    return render(
        request,
        "lessons/lesson_detail.html",
        {
            "lesson": lesson,
            "prev_lesson": prev_lesson,
            "next_lesson": next_lesson,
            "sections": sections,
            "mastery": mastery_by_objective(learner=learner, lesson=lesson),
            "resume": resume_section(learner=learner, lesson=lesson, read=read),
            "read_count": len(read),
            # Korean content inside a translated sentence: marked so a screen reader switches voice.
            "layer_html": format_html('<span lang="ko">{}</span>', lesson.layer),
        },
    )


def section_detail(request, number, slug):
    outline = outline_get(number=number)
    lesson, section = outline.lesson, outline.section(slug)
    learner = learner_get(request)  # a GET writes nothing: a visitor's first answer or read mark makes the row
    body = render_section_cached(section, outline=outline)
    if SELFCHECK_SLOT in body:
        body = body.replace(SELFCHECK_SLOT, selfcheck_html(request, learner=learner, lesson=lesson))
    prev_section, next_section = outline.neighbours(section)
    toc = sections_with_read(learner=learner, lesson=lesson)
    read_count = sum(read for _, read in toc)
    return render(
        request,
        "lessons/section_detail.html",
        {
            "lesson": lesson,
            "section": section,
            "body": body,
            "prev_section": prev_section,
            "next_section": next_section,
            "toc": toc,
            "subsections": section_subsections(section=section),
            "position": section_position(sections=outline.sections, section=section, read=read_count),
            "is_read": any(read for s, read in toc if s.pk == section.pk),
            # Where to resume is recorded by a POST the page sends once loaded (never by this GET).
            "record_visit": learner is not None and learner.last_section_id != section.pk,
            "mastery": mastery_by_objective(learner=learner, lesson=lesson),
            "cards": "" if "selfcheck" in section.body else question_cards(request, learner=learner, section=section),
        },
    )


@require_POST
def section_visited(request, number, slug):
    """Remember the section as the place to resume. Only for a learner who already has a row:
    a visit alone never creates one."""
    section = outline_get(number=number).section(slug)
    learner = learner_get(request)
    if learner is not None:
        section_visit(learner=learner, section=section)
    return HttpResponse(status=204)


@require_POST
def section_read(request, number, slug):
    outline = outline_get(number=number)
    lesson, section = outline.lesson, outline.section(slug)
    learner = learner_get(request, create=True)
    section_mark_read(learner=learner, section=section)
    # The page's "N read" line and the contents' ✓ change with it (out of band), not on reload.
    read_count = sum(read for _, read in sections_with_read(learner=learner, lesson=lesson))
    return render(request, "lessons/partials/read_mark.html", {
        "lesson": lesson, "section": section, "is_read": True, "oob": True,
        "position": section_position(sections=outline.sections, section=section, read=read_count)})


def glossary(request, number):
    lesson = lesson_get(number=number)
    terms = [(t, anchor_url(lesson, t.anchor), anchor_label(t.anchor)) for t in lesson.glossary.all()]
    return render(request, "lessons/glossary.html", {"lesson": lesson, "terms": terms})
