"""Demo runs: one engine session (one or more side-by-side engines) that learners watch live."""
import secrets
import uuid

from django.db import models


def _join_code():
    return secrets.token_hex(3).upper()


class DemoRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey("learners.Learner", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    preset = models.CharField(max_length=40, blank=True)  # "" for a custom or class run
    is_class = models.BooleanField(default=False)
    join_code = models.CharField(max_length=12, unique=True, default=_join_code)
    spec = models.JSONField(default=dict)  # lanes (engine knobs) and scripted requests
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    host = models.CharField(max_length=120, blank=True)  # "embedded" or the Celery worker's name
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    trace = models.JSONField(default=list, blank=True)  # the frames, for replay once finished

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.preset or ('class' if self.is_class else 'custom')} {self.id} ({self.status})"

    @property
    def group(self) -> str:
        return f"run-{self.id.hex}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)
