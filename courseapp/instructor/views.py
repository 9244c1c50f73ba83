"""Instructor pages (`/teach/`) and joining a class (`/classes/join/`). Instructor pages need the
instructor role and show only the classes the account teaches (another class: 404); joining
writes only on POST."""
import csv
import io
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _, gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from courseapp.demo import limits
from courseapp.instructor import selectors, services
from courseapp.instructor.roles import is_instructor
from courseapp.learners.services import learner_get
from courseapp.lessons.models import Lesson
from courseapp.lessons.outline import outline_for

JOIN_TRIES_PER_MINUTE = 10  # per address: a code cannot be guessed by trying
FLAGS = {"easy": gettext_lazy("too easy"), "hard": gettext_lazy("too hard"), "negative": gettext_lazy("discriminates negatively"),
         "few": gettext_lazy("few answers"), "none": gettext_lazy("no answers")}


def instructor_required(view):
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_instructor(request.user):
            return render(request, "403.html", {"message": _("This page is for the class's instructors.")}, status=403)
        return view(request, *args, **kwargs)

    return wrapped


def cohort_or_404(request, cohort_id):
    """The class if the signed-in instructor teaches it; another class is as good as missing."""
    cohort = selectors.cohort_for(request.user, cohort_id)
    if cohort is None:
        raise Http404
    return cohort


@instructor_required
@require_http_methods(["GET", "POST"])
def teach_index(request):
    error = ""
    if request.method == "POST":
        lesson = Lesson.objects.filter(available=True).order_by("number").first()
        try:
            cohort = services.cohort_create(instructor=request.user, name=request.POST.get("name", ""), lesson=lesson)
        except ValueError as exc:
            error = str(exc)
        else:
            return redirect("instructor:cohort", cohort_id=cohort.pk)
    return render(request, "instructor/index.html", {"cohorts": selectors.cohorts_taught(request.user), "error": error},
                  status=400 if error else 200)


@instructor_required
@require_GET
def cohort_dashboard(request, cohort_id):
    cohort = cohort_or_404(request, cohort_id)
    basis = request.GET.get("basis") if request.GET.get("basis") in selectors.BASES else "latest"
    objectives, rows = selectors.roster(cohort, basis)
    context = {"cohort": cohort, "objectives": objectives, "rows": rows, "basis": basis,
               "join_url": request.build_absolute_uri(reverse("instructor:join-code", args=[cohort.join_code]))}
    template = "instructor/partials/heatmap.html" if request.htmx else "instructor/cohort.html"
    return render(request, template, context)


@instructor_required
@require_GET
def cohort_learner(request, cohort_id, learner_id):
    cohort = cohort_or_404(request, cohort_id)
    membership = selectors.member(cohort, learner_id)
    if membership is None:
        raise Http404
    from courseapp.learners.selectors import sections_with_read

    return render(request, "instructor/learner.html", {
        "cohort": cohort, "membership": membership,
        "attempts": selectors.learner_attempts(cohort, learner_id),
        "sections": sections_with_read(learner=membership.learner, lesson=cohort.lesson),
    })


@instructor_required
@require_GET
def cohort_progress(request, cohort_id):
    cohort = cohort_or_404(request, cohort_id)
    objectives, days = selectors.progress_by_day(cohort)
    return render(request, "instructor/progress.html", {"cohort": cohort, "objectives": objectives, "days": days,
                                                        "chart": selectors.progress_chart(days)})


@instructor_required
@require_GET
def cohort_export(request, cohort_id, what):
    """CSV downloads: `gradebook` (learner × objective, latest attempts) or `scores` (learner ×
    question: first and latest score, number of attempts)."""
    cohort = cohort_or_404(request, cohort_id)
    if what not in ("gradebook", "scores"):
        raise Http404
    rows = selectors.gradebook_rows(cohort) if what == "gradebook" else selectors.score_rows(cohort)
    services.audit(user=request.user, action="exported", cohort=cohort, detail=f"{what}.csv")
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    response = HttpResponse("\ufeff" + buffer.getvalue(), content_type="text/csv; charset=utf-8")  # BOM: Excel reads UTF-8
    response["Content-Disposition"] = f'attachment; filename="class-{cohort.pk}-{what}.csv"'
    return response


@instructor_required
@require_http_methods(["GET", "POST"])
def cohort_items(request, cohort_id):
    """Item analysis: kept with its "computed at"; POST computes it again (here, or by an engine
    worker in scaled mode, the page then polling until it is there)."""
    cohort = cohort_or_404(request, cohort_id)
    basis = request.GET.get("basis") if request.GET.get("basis") in selectors.BASES else "first"
    kept = services.item_analysis_kept(cohort_id=cohort.pk, basis=basis)
    if request.method == "POST" or kept is None:
        services.audit(user=request.user, action="items_computed", cohort=cohort, detail=basis)
        if settings.DEMO_HOST == "celery":
            from courseapp.instructor.tasks import item_analysis

            item_analysis.delay(cohort.pk, basis)
        else:
            kept = services.item_analysis_refresh(cohort_id=cohort.pk, basis=basis)
        if request.method == "POST":
            return redirect(f"{reverse('instructor:items', args=[cohort.pk])}?basis={basis}")
    rows = (kept or {}).get("rows", [])
    named = selectors.question_names(cohort.lesson)
    for row in rows:
        row["flag_labels"] = [FLAGS[flag] for flag in row["flags"]]
        row["name"] = named.get(row["question_id"])
    return render(request, "instructor/items.html", {
        "cohort": cohort, "basis": basis, "analysis": kept,
        "answered": [row for row in rows if row["n"]], "unanswered": [row for row in rows if not row["n"]],
        "computed_at": parse_datetime(kept["computed_at"]) if kept else None})


@instructor_required
@require_GET
def cohort_regrades(request, cohort_id):
    """Every question whose key (as it is now) would change some of this class's scores, and the
    record of regrades done."""
    cohort = cohort_or_404(request, cohort_id)
    pending, names = [], selectors.question_names(cohort.lesson)
    for question in outline_for(cohort.lesson).questions:
        changes = services.regrade_plan(cohort=cohort, question=question)
        if changes:
            pending.append((question, len(changes), names.get(question.pk)))
    return render(request, "instructor/regrades.html", {
        "cohort": cohort, "pending": pending,
        "done": cohort.regrades.select_related("question", "by").prefetch_related("changes")[:50]})


@instructor_required
@require_http_methods(["GET", "POST"])
def cohort_regrade(request, cohort_id, slug):
    """GET: the dry run (who would change, from what to what); POST: apply it, with a record."""
    cohort = cohort_or_404(request, cohort_id)
    question = next((q for q in outline_for(cohort.lesson).questions if q.slug == slug), None)
    if question is None:
        raise Http404
    if request.method == "POST":
        regrade = services.regrade_apply(cohort=cohort, question=question, by=request.user)
        messages.success(request, _("%(n)d scores changed.") % {"n": regrade.changes.count()})
        return redirect("instructor:regrades", cohort_id=cohort.pk)
    return render(request, "instructor/regrade.html", {"cohort": cohort, "question": question,
                                                       "changes": services.regrade_plan(cohort=cohort, question=question)})


@require_http_methods(["GET", "POST"])
def join(request, code: str = ""):
    """GET: the form (an invite link fills in the code); POST: join. A guest becomes a learner here."""
    error, status = "", 200
    if request.method == "POST":
        address = request.META.get("REMOTE_ADDR") or "?"
        if not limits.hit(key=f"join:{address}", limit=JOIN_TRIES_PER_MINUTE, window=60):
            error, status = _("Too many tries. Wait a minute and try again."), 429
        else:
            try:
                name = services.member_name(request.POST.get("display_name", ""))
                if not name and not request.user.is_authenticated:
                    raise services.JoinRefused(_("Give the name your instructor will know you by."))
                cohort, _joined = services.cohort_join(learner=learner_get(request, create=True),
                                                       code=request.POST.get("code", ""), display_name=name)
            except services.JoinRefused as exc:
                error, status = str(exc), 400
            else:
                return render(request, "instructor/joined.html", {"cohort": cohort})
    return render(request, "instructor/join.html", {
        "code": code or request.POST.get("code", ""), "display_name": request.POST.get("display_name", "")[:services.MAX_MEMBER_NAME],
        "error": error}, status=status)
