from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from courseapp.demo import presets, selectors, services
from courseapp.demo.models import DemoRun
from courseapp.learners.services import learner_get


def _run_page(request, run: DemoRun, status=200):
    learner = learner_get(request)
    context = {
        "run": run,
        "spec": run.spec,
        "can_control": selectors.can_control(run, learner_id=learner.pk if learner else None, user=request.user),
        "presets": presets.PRESETS,
    }
    return render(request, "demo/run.html", context, status=status)


def _busy(request):
    return render(request, "demo/busy.html", status=503)


@require_GET
def demo_index(request):
    """`/demo/?preset=NAME` opens and starts that scene (`&paused=1`: ready, waiting for a step);
    without it, the demo's front page."""
    name = request.GET.get("preset")
    if name:
        if name not in presets.PRESETS:
            return render(request, "demo/index.html", {"presets": presets.PRESETS, "knobs": presets.KNOBS,
                                                       "error": _("Unknown preset “%(name)s”.") % {"name": name[:40]}}, status=400)
        try:
            run = services.run_start(owner=learner_get(request, create=True), preset=name,
                                     paused=request.GET.get("paused") == "1")
        except services.DemoBusy:
            return _busy(request)
        return _run_page(request, run)
    return render(request, "demo/index.html", {"presets": presets.PRESETS, "knobs": presets.KNOBS})


@require_POST
def run_create(request):
    knobs = {k: request.POST.get(k) for k in presets.KNOBS}
    knobs.update(
        enable_prefix_caching=request.POST.get("enable_prefix_caching") == "on",
        scheduling=request.POST.get("scheduling"),
        preemption_mode=request.POST.get("preemption_mode"),
    )
    try:
        run = services.run_start(owner=learner_get(request, create=True), knobs=knobs)
    except services.DemoBusy:
        return _busy(request)
    except (ValueError, TypeError) as exc:
        return render(request, "demo/index.html", {"presets": presets.PRESETS, "knobs": presets.KNOBS, "error": str(exc)}, status=400)
    return redirect("demo:run", run_id=run.pk)


@require_GET
def run_detail(request, run_id):
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    return _run_page(request, run)


@require_GET
def run_trace(request, run_id):
    """A finished run's frames, for replay in the page."""
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    if run.is_active:
        return HttpResponseBadRequest(_("The run is still going; replay is for finished runs."))
    return JsonResponse({"run": str(run.id), "status": run.status, "frames": run.trace})


@staff_member_required
@require_POST
def class_create(request):
    try:
        run = services.run_start(owner=None, knobs={"max_num_seqs": 16, "num_blocks": 256}, is_class=True)
    except services.DemoBusy:
        return _busy(request)
    return redirect("demo:run", run_id=run.pk)


@require_GET
def class_join(request):
    code = (request.GET.get("code") or "").strip().upper()
    run = DemoRun.objects.filter(join_code=code, is_class=True, status__in=["queued", "running"]).first()
    if run is None:
        return render(request, "demo/index.html", {"presets": presets.PRESETS, "knobs": presets.KNOBS,
                                                   "error": _("No open class run has the code “%(code)s”.") % {"code": code[:12]}}, status=404)
    return redirect("demo:run", run_id=run.pk)


@require_GET
def run_summary(request, run_id):
    """The slow-changing facts about a run (status, host, times), polled by htmx; 286 stops the
    polling once the run has ended."""
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    response = render(request, "demo/partials/run_summary.html", {"run": run})
    if not run.is_active:
        response.status_code = 286
    return response
