"""§6 lab runs: one learner's five experiments on an engine with their knobs, and the report."""
import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from courseapp.lab.formats import progress_text


class LabRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")  # waiting for the lab's turn (one lab measures at a time)
        RUNNING = "running", _("running")
        FINISHED = "finished", _("finished")
        FAILED = "failed", _("failed")

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    learner = models.ForeignKey("learners.Learner", on_delete=models.CASCADE, related_name="lab_runs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True)
    knobs = models.JSONField()  # the engine's configuration for this run (services.KNOBS)
    progress = models.JSONField(default=dict)  # {done, total, message (an English msgid), params}
    report = models.JSONField(null=True, blank=True)  # experiments.run's result
    error = models.TextField(blank=True)
    script = models.JSONField(default=list)  # the script's output so far, kept when it fails
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    beat_at = models.DateTimeField(null=True, blank=True)  # its thread was alive then
    client_addr = models.GenericIPAddressField(null=True, blank=True)  # who started it (per-address limit)

    @property
    def progress_text(self) -> str:
        """What the run is doing now, in the reader's language ("" before it starts)."""
        return progress_text(self.progress.get("message") or "", self.progress.get("params"))

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"lab {self.id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE
