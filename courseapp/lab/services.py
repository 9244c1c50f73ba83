"""Writes for the §6 lab: start a learner's run (knobs checked here, never trusted from the form),
record its progress and its end. The run itself is courseapp/lab/runner.py."""
import math
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from courseapp.demo import limits
from courseapp.lab.models import LabRun

BLOCK_SIZE = 16
# Digits of the run's tag and clock may split into more tokens than the ones counted.
PROMPT_MARGIN_TOKENS = BLOCK_SIZE


@lru_cache(maxsize=4)
def longest_prompt_tokens(model_dir: str) -> int:
    """Experiment 3's longest prompt (≈1,500 tokens), counted with this model's own tokenizer and
    chat template: a new model or a longer system prompt changes it."""
    from courseapp.lab.experiments import longest_messages
    from engine.chat_prompt import chat_prompt_ids

    return len(chat_prompt_ids(model_dir, longest_messages())) + PROMPT_MARGIN_TOKENS


def min_num_blocks() -> int:
    """The smallest pool that holds experiment 3's longest request whole."""
    from engine.config import EngineConfig

    return math.ceil((longest_prompt_tokens(EngineConfig().model) + settings.LAB_MAX_TOKENS) / BLOCK_SIZE)


# name → (kind, default, low, high): the engine's knobs a learner may change, and two lab options.
def knob_table() -> dict:
    engine = settings.SERVING_ENGINE

    def within(value, low, high):  # the site's own setting may lie outside what the lab allows
        return min(max(value, low), high)

    return {
        "num_blocks": ("int", within(engine["num_blocks"], min_num_blocks(), 1024), min_num_blocks(), 1024),
        "max_num_seqs": ("int", within(engine["max_num_seqs"], 1, 64), 1, 64),
        "max_num_batched_tokens": ("int", within(engine["max_num_batched_tokens"], 64, 2048), 64, 2048),
        "enable_prefix_caching": ("bool", engine["enable_prefix_caching"], None, None),
        "ignore_eos": ("bool", False, None, None),  # every answer runs to max_tokens (vLLM's extension)
        "v0_preemption_warnings": ("bool", False, None, None),  # V0's log warning, as history
    }


# Ready-made knob sets for the page's buttons (what a learner would change to see each effect).
KNOB_PRESETS = {
    "default": {},
    "small-pool": {"num_blocks": None, "ignore_eos": True, "v0_preemption_warnings": True},  # None: the smallest pool allowed
    "no-prefix-cache": {"enable_prefix_caching": False},
}


class LabRefused(ValueError):
    """A start the lab will not make; the message says why and what to do."""


@dataclass
class LabBusy(Exception):
    retry_in: int  # seconds
    why: str  # "hour": this learner's runs this hour; "address": this network's; "server": the queue is full


def knobs_clean(data) -> dict:
    """The knobs from a form (a QueryDict or a dict), checked against their ranges. A box left
    empty means the default; an unchecked checkbox means off (a form sends nothing for it)."""
    clean = {}
    for name, (kind, default, low, high) in knob_table().items():
        raw = data.get(name)
        if kind == "bool":
            clean[name] = raw is not None and str(raw).lower() in ("on", "true", "1", "yes")
            continue
        if raw in (None, ""):
            clean[name] = default
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise LabRefused(_("%(name)s must be a whole number.") % {"name": name}) from None
        if not low <= value <= high:
            raise LabRefused(_("%(name)s must be between %(low)d and %(high)d.") % {"name": name, "low": low, "high": high})
        clean[name] = value
    # Every running request needs a block: the ranges keep max_num_seqs (≤ 64) under num_blocks (≥ 100).
    return clean


def knobs_for_preset(name: str) -> dict:
    if name not in KNOB_PRESETS:
        raise LabRefused(_("There is no preset %(name)s.") % {"name": name})
    table = knob_table()
    knobs = {key: default for key, (_kind, default, _low, _high) in table.items()}
    for key, value in KNOB_PRESETS[name].items():
        knobs[key] = table[key][2] if value is None else value
    return knobs


def lab_fail_stale() -> None:
    """A run whose thread stopped beating (the server restarted) ends as failed, so it never
    blocks its learner's next run nor holds a place in the queue."""
    cutoff = timezone.now() - timedelta(seconds=settings.LAB_STALE_S)
    for run in LabRun.objects.filter(status__in=LabRun.ACTIVE):
        if (run.beat_at or run.created_at) < cutoff:
            lab_end(run_id=run.pk, status=LabRun.Status.FAILED, error=_("The server stopped while this run was going on."))


def lab_start(*, learner, knobs: dict, client_addr: str | None) -> LabRun:
    """Queue a run of the five experiments with these (clean) knobs; its thread starts at once and
    waits for its turn. One run per learner at a time; so many an hour per learner and per client
    address (a guest without cookies is a new learner each time, its address is not); so many
    waiting or measuring, server-wide. Each run builds an engine, so the queue is bounded."""
    lab_fail_stale()
    with transaction.atomic():
        limits.serialise_starts(74022)
        active = LabRun.objects.filter(status__in=LabRun.ACTIVE)
        if active.filter(learner=learner).exists():
            raise LabRefused(_("Your previous lab run is still going on: wait for its report first."))
        if active.count() >= settings.LAB_MAX_QUEUED:
            raise LabBusy(retry_in=60, why="server")
        if client_addr and active.filter(client_addr=client_addr).count() >= settings.LAB_MAX_ACTIVE_PER_ADDRESS:
            raise LabBusy(retry_in=60, why="address")
        if client_addr and limits.over(key=f"lab-addr:{client_addr}", limit=settings.LAB_RUNS_PER_HOUR_PER_ADDRESS, window=3600):
            raise LabBusy(retry_in=3600 // settings.LAB_RUNS_PER_HOUR_PER_ADDRESS, why="address")
        if not limits.hit(key=f"lab:{learner.pk}", limit=settings.LAB_RUNS_PER_HOUR, window=3600):
            raise LabBusy(retry_in=3600 // settings.LAB_RUNS_PER_HOUR, why="hour")
        if client_addr:
            limits.add(key=f"lab-addr:{client_addr}", window=3600)
        run = LabRun.objects.create(learner=learner, knobs=knobs, client_addr=client_addr,
                                    progress={"done": 0, "total": 0, "message": ""})
    from courseapp.lab import runner

    transaction.on_commit(lambda: runner.launch(run.pk))
    return run


def lab_beat(*, run_id, status: str | None = None, progress: dict | None = None) -> None:
    fields = {"beat_at": timezone.now()}
    if status == LabRun.Status.RUNNING:
        fields.update(status=status, started_at=timezone.now())
    if progress is not None:
        fields["progress"] = progress
    LabRun.objects.filter(pk=run_id, status__in=LabRun.ACTIVE).update(**fields)


def lab_end(*, run_id, status: str, report: dict | None = None, error: str = "", script: list | None = None) -> None:
    LabRun.objects.filter(pk=run_id, status__in=LabRun.ACTIVE).update(
        status=status, report=report, error=error, script=script or [], finished_at=timezone.now(), beat_at=timezone.now())
