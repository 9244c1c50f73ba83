"""Demo pages. Reading a page never starts anything: runs start from a POST (CSRF-checked),
which the scene page's script sends on load."""
import gzip

from django.http import Http404, HttpResponse, HttpResponseBadRequest, HttpResponseForbidden, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from courseapp.demo import presets, selectors, services
from courseapp.demo.models import DemoRun
from courseapp.learners.services import learner_get

MAX_DISPLAY_NAME = 30
MAX_JOINED_KEPT = 5


def _client_addr(request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None


def _viewer(request, run) -> selectors.Viewer:
    return selectors.viewer_for(run, user=request.user, session=request.session)


def _wants_json(request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _index(request, error: str = "", status: int = 200):
    return render(request, "demo/index.html", {"presets": presets.PRESETS, "knobs": presets.KNOBS, "error": error}, status=status)


def _run_page(request, run: DemoRun):
    viewer = _viewer(request, run)
    context = {
        "run": run,
        "place": selectors.queue_place(run),
        "spec": run.spec,
        "section_url": presets.section_path(run.spec["section"]) if run.spec.get("section") else "",
        "can_control": selectors.can_control(run, viewer),
        "can_submit": selectors.can_submit(run, viewer),
        # Told to the owner only: "your previous run … was stopped".
        "replaced": list(run.replaced.all()) if run.owner_id and run.owner_id == viewer.learner_id else [],
    }
    return render(request, "demo/run.html", context)


def _duration(seconds: int) -> str:
    if seconds < 90:
        return _("%(n)d s") % {"n": seconds}
    return _("%(n)d min") % {"n": round(seconds / 60)}


def _busy(request, busy: services.DemoBusy):
    """503 (the server's cap) or 429 (this address's): the real wait, and a way to wait for it."""
    retry_in = busy.retry_in()
    unavailable = isinstance(busy, services.EnginesUnavailable)
    title = _("The live engines are unavailable") if unavailable else _("The demo engine is busy")
    if unavailable:
        message = _("The live engines are unavailable right now: the server lost its connection to them. "
                    "The lesson and the self-checks still work.")
    elif busy.per_address:
        message = _("Your network already has %(n)d demo runs going, the most it may have at once.") % {"n": busy.per_address}
    else:
        message = _("Too many demo runs are going on right now.")
    if busy.retry_at is not None and busy.expected:
        wait = _("A place should free up around %(time)s (in %(duration)s), going by how long these scenes take; "
                 "this page tries again until then.") % {
            "time": timezone.localtime(busy.retry_at).strftime("%H:%M:%S"), "duration": _duration(retry_in)}
    elif busy.retry_at is not None:
        wait = _("A place frees up by %(time)s at the latest (in %(duration)s); this page tries again until then.") % {
            "time": timezone.localtime(busy.retry_at).strftime("%H:%M:%S"), "duration": _duration(retry_in)}
    elif unavailable:
        wait = _("This page tries again every few seconds until the connection is back.")
    else:
        wait = _("This page tries again every few seconds until a place frees up.")
    status = 429 if busy.per_address else 503
    headers = {"Retry-After": str(min(retry_in or 10, 10))}
    if _wants_json(request):
        return JsonResponse({"error": message, "wait": wait, "retry_in": retry_in}, status=status, headers=headers)
    fields = [(k, v) for k, v in request.POST.items() if k != "csrfmiddlewaretoken"]
    response = render(request, "demo/busy.html", {"title": title, "message": message, "wait": wait, "retry_in": retry_in,
                                                  "fields": fields}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@require_GET
def demo_index(request):
    """`/demo/?preset=NAME` shows that scene's page; its script starts the run with a POST
    (`&paused=1`: ready, waiting for a step). Without it, the demo's front page."""
    name = request.GET.get("preset")
    if not name:
        return _index(request)
    if name not in presets.PRESETS:
        return _index(request, _("Unknown preset “%(name)s”.") % {"name": name[:40]}, status=400)
    preset = presets.PRESETS[name]
    context = {
        "run": None, "preset": name, "paused": request.GET.get("paused") == "1",
        "spec": {"title": _(preset["title"]), "summary": _(preset["summary"]), "section": preset["section"], "open": False},
        "section_url": presets.section_path(preset["section"]),
        "can_control": True,  # whoever starts it owns it
        "can_submit": False,
    }
    return render(request, "demo/run.html", context)


@require_POST
def run_create(request):
    """Start a run: a preset scene (`preset`, `paused`) or the learner's own engine (knobs).
    The scene page's script asks for JSON; the knob form gets the run page."""
    preset = request.POST.get("preset", "")
    knobs = {k: request.POST.get(k) for k in presets.KNOBS}
    knobs.update(enable_prefix_caching=request.POST.get("enable_prefix_caching") == "on",
                 scheduling=request.POST.get("scheduling"), preemption_mode=request.POST.get("preemption_mode"))
    try:
        spec = services.run_spec(preset=preset, knobs=knobs, paused=request.POST.get("paused") == "1")
    except services.DemoRefused as exc:
        if _wants_json(request):
            return JsonResponse({"error": str(exc)}, status=400)
        return _index(request, str(exc), status=400)
    try:
        started = services.run_start(owner=learner_get(request, create=True), spec=spec, client_addr=_client_addr(request))
    except services.DemoBusy as busy:
        return _busy(request, busy)
    run = started.run
    if _wants_json(request):
        return JsonResponse({
            "run": str(run.pk),
            "url": reverse("demo:run", args=[run.pk]),
            "ws_path": f"/ws/demo/runs/{run.pk}/",
            "trace_url": reverse("demo:run-trace", args=[run.pk]),
            "summary_url": reverse("demo:run-summary", args=[run.pk]),
            "replaced": [old.title for old in started.replaced],
        }, status=201)
    return redirect("demo:run", run_id=run.pk)


@require_GET
def run_detail(request, run_id):
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    return _run_page(request, run)


@require_GET
def run_trace(request, run_id):
    """A finished run's frames for replay: the first picture and per-step deltas (see traces.py),
    sent gzip-encoded as stored. Only its owner may read a run with learner text in it."""
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    if not selectors.can_read_trace(run, _viewer(request, run)):
        return HttpResponseForbidden(_("Only the person who started this run can replay it."))
    if run.is_active:
        return HttpResponseBadRequest(_("The run is still going; replay is for finished runs."))
    data = bytes(run.trace_packed or b"")
    if not data:
        return JsonResponse({"v": 1, "base": None, "deltas": []})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(data, content_type="application/json")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(gzip.decompress(data), content_type="application/json")
    response["Vary"] = "Accept-Encoding"
    return response


@require_POST
def class_create(request):
    """A shared run for a class (staff or an instructor; the class dashboard has the button)."""
    if not selectors.may_teach(request.user):
        return HttpResponseForbidden(_("Only staff and instructors open a class run."))
    try:
        spec = services.run_spec(knobs={"max_num_seqs": 16, "num_blocks": 256})
        # Everyone in the class sees whose run this is, not "My run".
        teacher = request.user.get_full_name() or request.user.get_username()
        spec["title"] = _("Class run of %(name)s") % {"name": teacher}
        spec["lanes"][0]["label"] = _("Class engine")
        started = services.run_start(owner=learner_get(request, create=True), spec=spec, is_class=True)
    except services.DemoBusy as busy:
        return _busy(request, busy)
    from courseapp.instructor.services import audit

    audit(user=request.user, action="demo_opened", detail=str(started.run.pk))
    return redirect("demo:run", run_id=started.run.pk)


@require_POST
def class_join(request):
    """Join a class run with its code and a name the class will see next to your prompts."""
    name = " ".join((request.POST.get("display_name") or "").split())[:MAX_DISPLAY_NAME]
    if not name:
        return _index(request, _("Choose a name the class will see next to your prompts."), status=400)
    try:
        run = services.class_join(code=request.POST.get("code") or "", client_addr=_client_addr(request))
    except services.DemoBusy:
        return _index(request, _("Too many wrong codes from your network; try again in 10 minutes."), status=429)
    except services.DemoRefused as exc:
        return _index(request, str(exc), status=404)
    learner_get(request, create=True)  # prompts are counted per learner
    joined = dict(request.session.get(selectors.JOINED_KEY) or {})
    joined.pop(str(run.pk), None)
    joined[str(run.pk)] = name
    request.session[selectors.JOINED_KEY] = dict(list(joined.items())[-MAX_JOINED_KEPT:])
    return redirect("demo:run", run_id=run.pk)


@require_GET
def run_summary(request, run_id):
    """The slow-changing facts about a run (status, host, times), polled by htmx; 286 stops the
    polling once the run has ended."""
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    response = render(request, "demo/partials/run_summary.html", {"run": run, "place": selectors.queue_place(run)})
    if not run.is_active:
        response.status_code = 286
    return response
