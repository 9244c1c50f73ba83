"""Demo runs: one engine session (one or more side-by-side engines) that learners watch live."""
import secrets
import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

# No 0/O, 1/I/L: a code read off a projector is typed right the first time.
JOIN_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
JOIN_CODE_LENGTH = 8


def new_join_code() -> str:
    return "".join(secrets.choice(JOIN_ALPHABET) for _ in range(JOIN_CODE_LENGTH))


_join_code = new_join_code  # the name migration 0001 refers to


class DemoRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")
        STARTING = "starting", _("starting")  # a host took it; the engine is being built (the model may be loading)
        RUNNING = "running", _("running")
        FINISHED = "finished", _("finished")
        FAILED = "failed", _("failed")
        EXPIRED = "expired", _("expired")
        STOPPED = "stopped", _("stopped")

    class EndReason(models.TextChoices):
        NONE = "", ""
        REPLACED = "replaced", _("stopped: you opened another scene")
        OWNER = "owner", _("stopped by the person who started it")
        NO_VIEWER = "no_viewer", _("ended: nobody watched it for a minute")
        NEVER_PICKED_UP = "never_picked_up", _("ended: no engine worker picked it up")  # before "no_worker"
        NO_WORKER = "no_worker", _("failed: no engine worker took it in time")
        START_TIMEOUT = "start_timeout", _("failed: the engine did not start in time")
        WORKER_LOST = "worker_lost", _("failed: its engine host stopped responding")
        ENGINE_ERROR = "engine_error", _("failed: the engine raised an error")
        WORKER_SHUTDOWN = "worker_shutdown", _("stopped: its engine worker shut down")
        PAUSED_IDLE = "paused_idle", _("ended: it stayed paused with nothing happening")
        IDLE = "idle", _("ended: no prompt came for a long time")
        LIFETIME = "lifetime", _("ended: it ran as long as a run may")
        SHUTDOWN = "shutdown", _("stopped: the server restarted")

    ACTIVE = (Status.QUEUED, Status.STARTING, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey("learners.Learner", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    preset = models.CharField(max_length=40, blank=True)  # "" for a custom or class run
    is_class = models.BooleanField(default=False)
    join_code = models.CharField(max_length=12, unique=True, default=new_join_code)
    spec = models.JSONField(default=dict)  # lanes (engine knobs) and scripted requests
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    end_reason = models.CharField(max_length=20, choices=EndReason.choices, blank=True)
    error = models.TextField(blank=True)
    host = models.CharField(max_length=120, blank=True)  # "embedded" or the Celery worker's name
    client_addr = models.GenericIPAddressField(null=True, blank=True)  # who started it (per-address limit)
    replaced_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaced")
    started_at = models.DateTimeField(null=True, blank=True)  # a host took it (queued → starting)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    watched_at = models.DateTimeField(null=True, blank=True)  # a viewer's socket was open then
    idle_until = models.DateTimeField(null=True, blank=True)  # ends then for idleness, unless something happens
    expires_at = models.DateTimeField(null=True, blank=True)  # ends then at the latest (learner runs)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The frames for replay: the first in full, then per-step deltas, gzip-compressed JSON
    # (courseapp/demo/traces.py). A run's frames repeat almost everything from step to step.
    trace_packed = models.BinaryField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "watched_at"], name="demo_run_status_watched")]

    def __str__(self):
        return f"{self.preset or ('class' if self.is_class else 'custom')} {self.id} ({self.status})"

    @property
    def group(self) -> str:
        return f"run-{self.id.hex}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def title(self) -> str:
        return self.spec.get("title", "") or self.preset

    @property
    def end_message(self) -> str:
        """Why the run ended, in the reader's language (empty while it runs or if it simply finished)."""
        if self.status == self.Status.FAILED:
            return self.error
        return self.get_end_reason_display() if self.end_reason else ""
