"""One lab run, in a thread of the web process: wait for a turn (LAB_MAX_ACTIVE labs measure at
once, so one lab's numbers are not another's load), open an engine with the learner's knobs
behind its own base URL, run the five experiments over HTTP, keep the report, close the engine.

A failure ends this run with its reason (kept with the script's output so far); the server and
the other runs go on.
"""
import logging
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connections

from courseapp.lab import experiments, services
from courseapp.lab.models import LabRun
from courseapp.serving import engines

logger = logging.getLogger("courseapp.lab")
BEAT_EVERY_S = 10
PROGRESS_EVERY_S = 0.5

_turns: threading.BoundedSemaphore | None = None
_turns_lock = threading.Lock()


def _turn() -> threading.BoundedSemaphore:
    global _turns
    with _turns_lock:
        if _turns is None:
            _turns = threading.BoundedSemaphore(settings.LAB_MAX_ACTIVE)
        return _turns


def launch(run_id) -> threading.Thread:
    thread = threading.Thread(target=_run, args=(run_id,), name=f"lab-{str(run_id)[:8]}", daemon=True)
    thread.start()
    return thread


def engine_options(knobs: dict) -> dict:
    """host.ServingEngine's options for these knobs (the rest as the site's served engine)."""
    engine = {**settings.SERVING_ENGINE, **{k: knobs[k] for k in ("num_blocks", "max_num_seqs", "max_num_batched_tokens",
                                                                   "enable_prefix_caching")}}
    return {**engine, "log_interval_s": settings.LAB_LOG_INTERVAL_S, "v0_preemption_warnings": knobs["v0_preemption_warnings"]}


def launch_command(knobs: dict) -> str:
    """The engine's configuration, written as the `vllm serve` command that would start the same
    server (the lab quotes it as its 기동 명령 원문)."""
    from engine.config import EngineConfig

    e = engine_options(knobs)
    model = Path(EngineConfig().model)
    model = model.relative_to(settings.BASE_DIR) if model.is_relative_to(settings.BASE_DIR) else model
    parts = [f"vllm serve {model}", f"--served-model-name {settings.SERVED_MODEL_NAME}",
             f"--block-size {services.BLOCK_SIZE}", f"--num-gpu-blocks-override {e['num_blocks']}",
             f"--max-num-seqs {e['max_num_seqs']}", f"--max-num-batched-tokens {e['max_num_batched_tokens']}",
             "--enable-prefix-caching" if e["enable_prefix_caching"] else "--no-enable-prefix-caching"]
    return " ".join(parts)


def _run(run_id) -> None:
    stop_beating = threading.Event()
    try:
        run = LabRun.objects.get(pk=run_id)
        turn = _turn()
        while not turn.acquire(timeout=5):  # waiting: show that we are alive
            services.lab_beat(run_id=run_id)
        try:
            _measure(run, stop_beating)
        finally:
            turn.release()
    except Exception as exc:  # this run fails with its reason; nothing else does
        logger.exception("lab run %s failed", run_id)
        services.lab_end(run_id=run_id, status=LabRun.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
    finally:
        stop_beating.set()
        connections.close_all()  # this thread's connections would outlive it otherwise


def _measure(run: LabRun, stop_beating: threading.Event) -> None:
    services.lab_beat(run_id=run.pk, status=LabRun.Status.RUNNING)
    latest: dict = {}  # the newest progress; the beat thread writes it (the lab's event loop must not)
    threading.Thread(target=_beat, args=(run.pk, latest, stop_beating), name="lab-beat", daemon=True).start()
    options = engine_options(run.knobs)
    token, engine = engines.lab_engine_open(str(run.pk), **options)
    # Experiment 7: the same knobs with a few seats, batching continuously and statically.
    batching = {mode: engines.lab_engine_open(f"{run.pk}-{mode}", **{**options, "max_num_seqs": experiments.BATCHING_SEATS,
                                                                       "scheduling": mode})[0]
                for mode in ("continuous", "static")}
    tokens = [token, *batching.values()]
    base = settings.LAB_BASE_URL.rstrip("/") + engines.LAB_PREFIX
    try:
        lab = experiments.LabSettings(
            # The site's own address, from settings only (never from a request's Host header): the
            # lab's requests, and the API key they carry, go to this server and nowhere else.
            base_url=base + token, model=settings.SERVED_MODEL_NAME,
            api_key=settings.SERVING_API_KEY, concurrency=settings.LAB_CONCURRENCY, max_tokens=settings.LAB_MAX_TOKENS,
            sample_every_s=settings.LAB_SAMPLE_EVERY_S, ignore_eos=run.knobs["ignore_eos"],
            launch_command=launch_command(run.knobs), timeout_s=settings.LAB_MAX_RUN_S,
            batching_urls={mode: base + t for mode, t in batching.items()})

        def progress(p: experiments.Progress) -> None:
            latest["progress"] = {"done": p.done, "total": p.total, "message": p.message, "params": p.params}

        try:
            report = experiments.run(lab, read_logs=engine.log_lines, on_progress=progress)
        except experiments.LabError as exc:
            services.lab_end(run_id=run.pk, status=LabRun.Status.FAILED, error=_redact(str(exc), tokens),
                             script=[_redact(line, tokens) for line in getattr(exc, "script", [])])
            return
        # The engines' tokens are no use once the run is over: the report does not show them.
        report["settings"]["base_url"] = _redact(report["settings"]["base_url"], tokens)
        report["settings"]["batching_urls"] = {k: _redact(v, tokens) for k, v in report["settings"]["batching_urls"].items()}
        report["script"] = [_redact(line, tokens) for line in report["script"]]
        services.lab_end(run_id=run.pk, status=LabRun.Status.FINISHED, report=report, script=report["script"])
    finally:
        for t in tokens:
            engines.lab_engine_close(t)


def _redact(text: str, tokens: list[str]) -> str:
    for token in tokens:
        text = text.replace(token, "<run>")
    return text


def _beat(run_id, latest: dict, stop: threading.Event) -> None:
    """Write the newest progress when it changes (twice a second at most), else a plain beat."""
    written, last = None, time.monotonic()
    try:
        while not stop.wait(PROGRESS_EVERY_S):
            progress = latest.get("progress")
            if progress is not written or time.monotonic() - last >= BEAT_EVERY_S:
                services.lab_beat(run_id=run_id, progress=progress)
                written, last = progress, time.monotonic()
    finally:
        connections.close_all()
