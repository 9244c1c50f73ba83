"""Which engine an API path reaches.

`/v1/*` and `/metrics` reach the site's served engine (built on first use: it loads the model).
A §6 lab run gets an engine of its own, with the learner's knobs, reachable only under an
unguessable base URL `/lab/engines/<token>` for as long as the run lasts: its measurements are
its own, and the lab drives it through the same HTTP API a learner's script would use.

With SERVING_ENGINE_PROCESS (the default) every one of them lives in one engine process beside
the web server (demo/engine_process.py, serving/engine_core.py), the site's under the key "site",
a lab run's under "lab-<run id>". Either engine can be watched live (view_open: the demo's
renderer draws its real requests); the consumer that asks (lab/consumers.ServedViewConsumer)
checks who may.
"""
import atexit
import re
import secrets
import threading
from dataclasses import dataclass

from django.conf import settings

from courseapp.serving.metrics import ServingMetrics

LAB_PREFIX = "/lab/engines/"
# vLLM's plain routes beside /v1/*: health, version and the tokenizer
PLAIN_ROUTES = ("/metrics", "/health", "/ping", "/version", "/tokenize", "/detokenize")
_LAB_PATH = re.compile(r"^/lab/engines/(?P<token>[A-Za-z0-9_-]{16,64})(?P<rest>/v1/.*|"
                       + "|".join(PLAIN_ROUTES) + ")$")


@dataclass(slots=True)
class Served:
    engine: object | None  # host.ServingEngine; None until the site's engine is first needed
    metrics: ServingMetrics


_lock = threading.Lock()  # the maps below; held only for a lookup (the event loop takes it)
_build_lock = threading.Lock()  # held while the site's engine loads (seconds): never on the event loop
_site: Served | None = None
_lab: dict[str, Served] = {}
_lab_tokens: dict[str, str] = {}  # lab run id → its engine's token
_viewers: dict[str, int] = {}  # engine name ("site" or a lab run id) → sockets watching it
_process = None  # the EngineProcess of the served engines
_registered = False  # stop_all runs at exit


def _site_served() -> Served:
    global _site
    with _lock:
        if _site is None:
            _site = Served(None, ServingMetrics(settings.SERVED_MODEL_NAME, snapshots=_site_snapshots))
        return _site


def served_engine():
    """The site's engine, built on first use (it loads the model: seconds)."""
    served = _site_served()
    with _build_lock:
        if served.engine is None and settings.DEMO_HOST == "celery":
            from courseapp.serving.remote import RemoteEngine

            served.engine = RemoteEngine()  # the engine workers serve it (scaled mode)
        elif served.engine is None and settings.SERVING_ENGINE_PROCESS:
            served.engine = _in_process("site", settings.SERVING_ENGINE)
        elif served.engine is None:
            served.engine = new_engine(**settings.SERVING_ENGINE)
        return served.engine


def _in_process(key: str, options: dict):
    """The engine `key` in the served engines' process (started on first use), opened."""
    global _process
    from courseapp.demo.engine_process import EngineProcess
    from courseapp.serving.engine_core import ServedEngine

    with _lock:
        if _process is None:
            _process = EngineProcess(torch_threads=settings.SERVING_TORCH_THREADS, name="engine-core")
    _stop_at_exit()
    return ServedEngine(_process, key, {"served_name": settings.SERVED_MODEL_NAME, **options}).ensure_open()


def new_engine(**options):
    """A host.ServingEngine in this (the web) process, with torch on SERVING_TORCH_THREADS threads:
    by default one core fewer than the machine has, so the event loop that streams its tokens and
    the page views keep a core (on 2 cores, torch's second thread waited on the loop's and HTTP
    served 77% of in-process throughput at 8 streams: docs/benchmarks.md)."""
    import torch

    from courseapp.demo.host import ServingEngine

    torch.set_num_threads(settings.SERVING_TORCH_THREADS)
    engine = ServingEngine(**{"served_name": settings.SERVED_MODEL_NAME, **options})
    _stop_at_exit()
    return engine


def _stop_at_exit() -> None:
    global _registered
    with _lock:
        if not _registered:
            atexit.register(stop_all)
            _registered = True


def stop_all() -> None:
    """Stop every engine thread before the interpreter finalises: one still inside torch then
    aborts the process (`terminate called without an active exception`; host.EmbeddedHost.shutdown)."""
    with _lock:
        engines = [s.engine for s in [_site, *_lab.values()] if s is not None and hasattr(s.engine, "stop")]
    for engine in engines:
        engine.stop()


def lab_engine_open(run_id: str, **options) -> tuple[str, object]:
    """A new engine for one lab run (host.ServingEngine options); its token and the engine."""
    if settings.SERVING_ENGINE_PROCESS:
        engine = _in_process(f"lab-{run_id}", options)
    else:
        engine = new_engine(**options)
    token = secrets.token_urlsafe(24)
    with _lock:
        _lab[token] = Served(engine, ServingMetrics(settings.SERVED_MODEL_NAME, snapshots=lambda: snapshots_of(engine)))
        _lab_tokens[str(run_id)] = token
    return token, engine


def lab_engine_close(token: str) -> None:
    with _lock:
        served = _lab.pop(token, None)
        run_id = next((r for r, t in _lab_tokens.items() if t == token), None)
        _lab_tokens.pop(run_id, None)
        _viewers.pop(run_id, None)
    if served is not None:
        served.engine.stop()


# --- the live view -------------------------------------------------------------------------------
def _watched(name: str):
    """The open engine called `name` ("site" or a lab run's id), or None."""
    with _lock:
        if name == "site":
            return _site.engine if _site is not None else None
        token = _lab_tokens.get(name)
        served = _lab.get(token) if token else None
        return served.engine if served is not None else None


def view_open(name: str, publish) -> bool:
    """One more socket watches engine `name`; the first starts the drawing. False when that
    engine is not open (no request yet, or the lab run is over)."""
    engine = _watched(name)
    if engine is None:
        return False
    with _lock:
        first = _viewers.get(name, 0) == 0
        _viewers[name] = _viewers.get(name, 0) + 1
    if first and not engine.view_open(publish):
        view_close(name)
        return False
    return True


def view_close(name: str) -> None:
    """One socket fewer; the last one stops the drawing."""
    with _lock:
        left = _viewers.get(name, 0) - 1
        if left > 0:
            _viewers[name] = left
            return
        _viewers.pop(name, None)
    engine = _watched(name)
    if engine is not None:
        engine.view_close()


def view_snapshot(name: str) -> tuple[int, str] | None:
    engine = _watched(name)
    return None if engine is None else engine.view_snapshot()


def route(path: str) -> tuple[Served | None, str] | None:
    """(what serves it, the API path) for a path this module answers, else None. A lab path
    whose run has ended gives (None, path): the caller answers 404."""
    if path.startswith("/v1/") or path in PLAIN_ROUTES:
        return _site_served(), path
    match = _LAB_PATH.match(path)
    if match is None:
        return (None, path) if path.startswith(LAB_PREFIX) else None
    with _lock:
        return _lab.get(match["token"]), match["rest"]


def snapshots_of(engine) -> list[tuple[str, object]]:
    """(engine label, counters and gauges) for /metrics: this process's one engine is "0", as in
    vLLM (none before the first request built it)."""
    return [] if engine is None else [("0", engine.snapshot())]


def _site_snapshots() -> list[tuple[str, object]]:
    """Scaled mode: one per engine worker, labelled with the worker's name, whether or not this
    web process has sent a request yet."""
    if settings.DEMO_HOST == "celery":
        from courseapp.serving.remote import worker_snapshots

        return worker_snapshots()
    return snapshots_of(_site.engine)


def engine_of(served: Served):
    """The engine behind a route, building the site's on first use."""
    return served.engine if served.engine is not None else served_engine()
