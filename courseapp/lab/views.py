"""The §6 lab pages. Reading never starts anything; a run starts from a POST (CSRF-checked) and
belongs to the learner who started it: anyone else gets 404 for its report and downloads."""
import json

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _, gettext_lazy

KNOB_HELP = {
    "num_blocks": gettext_lazy("KV blocks in the pool, 16 tokens each. Experiment 3's longest request must fit whole."),
    "max_num_seqs": gettext_lazy("Requests in one step at most (seats); the rest wait."),
    "max_num_batched_tokens": gettext_lazy("Tokens in one step at most (the token budget); long prompts are prefilled in chunks."),
    "enable_prefix_caching": gettext_lazy("Reuse the KV blocks of a prompt's start that an earlier request already computed."),
    "ignore_eos": gettext_lazy("Every answer runs to max_tokens even if the model would stop (vLLM's extension)."),
    "v0_preemption_warnings": gettext_lazy("Also write V0's old preemption warning to the log (history: V1 writes none; its counter is the signal)."),
}
from django.views.decorators.http import require_GET, require_POST

from courseapp.lab import report as lab_report, selectors, services
from courseapp.learners.services import learner_get


def _page(request, *, error: str = "", knobs: dict | None = None, status: int = 200):
    learner = learner_get(request)
    runs = selectors.runs_of(learner)
    knobs = knobs or services.knobs_for_preset("default")
    context = {
        "fields": [{"name": name, "kind": kind, "value": knobs[name], "low": low, "high": high, "help": KNOB_HELP[name]}
                   for name, (kind, _default, low, high) in services.knob_table().items()],
        "runs": runs,
        "finished": [r for r in runs if r.status == r.Status.FINISHED],
        "error": error,
        "max_tokens": settings.LAB_MAX_TOKENS,
        "concurrency": settings.LAB_CONCURRENCY,
    }
    return render(request, "lab/index.html", context, status=status)


@require_GET
def lab_index(request):
    """The lab: what it does, the knobs (`?preset=NAME` fills them in), the learner's reports."""
    name = request.GET.get("preset")
    if name:
        try:
            return _page(request, knobs=services.knobs_for_preset(name))
        except services.LabRefused as exc:
            return _page(request, error=str(exc), status=400)
    return _page(request)


@require_POST
def lab_create(request):
    try:
        knobs = services.knobs_clean(request.POST)
    except services.LabRefused as exc:
        return _page(request, error=str(exc), status=400)
    try:
        run = services.lab_start(learner=learner_get(request, create=True), knobs=knobs,
                                 client_addr=request.META.get("REMOTE_ADDR") or None)
    except services.LabRefused as exc:
        return _page(request, error=str(exc), knobs=knobs, status=409)
    except services.LabBusy as busy:
        return _busy(request, busy)
    return redirect("lab:run", run_id=run.pk)


def _busy(request, busy: services.LabBusy):
    """429 (this learner's or this network's share is used up) or 503 (the queue is full), with
    when to try again; nothing is stored."""
    if busy.why == "server":
        message, status = _("The lab's queue is full: %(n)d runs are waiting or measuring.") % {"n": settings.LAB_MAX_QUEUED}, 503
    elif busy.why == "address":
        message, status = _("Your network has started as many lab runs as it may for now."), 429
    else:
        message, status = _("You started the lab many times this hour."), 429
    if busy.retry_in < 120:
        hint = _("Try again in %(n)d seconds.") % {"n": busy.retry_in}
    else:
        hint = _("Try again in %(n)d minutes.") % {"n": busy.retry_in // 60}
    title = _("The lab is busy") if status == 503 else ""
    response = render(request, "429.html", {"title": title, "message": message, "hint": hint}, status=status)
    response["Retry-After"] = str(busy.retry_in)
    return response


def _own(request, run_id):
    run = selectors.run_of(learner_get(request), run_id)
    if run is None:
        raise Http404
    return run


@require_GET
def lab_run(request, run_id):
    run = _own(request, run_id)
    return render(request, "lab/run.html", {"run": run, "view": selectors.report_view(run), "place": selectors.queue_place(run),
                                            "script": "\n".join(run.script)})


@require_GET
def lab_run_progress(request, run_id):
    """The progress panel, polled by htmx while the run is going; once it has ended, the page
    reloads to show the report."""
    run = _own(request, run_id)
    if not run.is_active:
        response = HttpResponse(status=204)
        response["HX-Refresh"] = "true"
        return response
    return render(request, "lab/partials/progress.html", {"run": run, "place": selectors.queue_place(run)})


@require_GET
def lab_run_live(request, run_id):
    """The run's engine, drawn live while it measures (lab/consumers.py)."""
    run = _own(request, run_id)
    return render(request, "lab/live.html", {"run": run, "ws_path": f"/ws/lab/runs/{run.pk}/live/",
                                             "title": _("Your lab run's engine, live")})


@require_GET
def site_live(request):
    """The site's own engine (what /v1 serves), drawn live: for instructors and staff."""
    from courseapp.demo.selectors import may_teach

    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not may_teach(request.user):
        return render(request, "403.html", {"message": _("This page is for the class's instructors.")}, status=403)
    return render(request, "lab/live.html", {"run": None, "ws_path": "/ws/lab/site/live/", "title": _("The site's engine (/v1), live")})


@require_GET
def lab_run_download(request, run_id, fmt):
    run = _own(request, run_id)
    if fmt not in ("csv", "json") or not run.report:
        raise Http404
    name = f"lab-{run.created_at:%Y%m%d-%H%M%S}"
    if fmt == "csv":
        response = HttpResponse("\ufeff" + lab_report.as_csv(run.report), content_type="text/csv; charset=utf-8")  # BOM: Excel reads UTF-8
    else:
        data = {"knobs": run.knobs, **run.report}
        response = HttpResponse(json.dumps(data, ensure_ascii=False, indent=2), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


@require_GET
def lab_compare(request):
    learner = learner_get(request)
    chosen = [selectors.run_of(learner, request.GET.get(key)) if _uuid(request.GET.get(key)) else None for key in ("a", "b")]
    if any(run is None or not run.report for run in chosen):
        return _page(request, error=_("Pick two of your finished reports to compare."), status=400)
    views = [selectors.report_view(run) for run in chosen]
    knob_rows = [{"name": name, "values": [run.knobs.get(name) for run in chosen],
                  "differs": len({str(run.knobs.get(name)) for run in chosen}) > 1} for name in services.knob_table()]
    return render(request, "lab/compare.html", {"views": views, "knob_rows": knob_rows})


def _uuid(value) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
