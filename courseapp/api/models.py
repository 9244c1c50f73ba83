"""API clients (per-client tokens, stored hashed, scoped to classes), the learners they name by
their own ids, and the answers kept for retried submissions (Idempotency-Key)."""
import hashlib
import secrets

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "gk_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiClient(models.Model):
    class Scope(models.TextChoices):
        READ = "read", _("read: questions, gradebook, attempts")
        GRADE = "grade", _("grade: read, and submit answers to be graded")

    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.READ)
    cohorts = models.ManyToManyField("instructor.Cohort", related_name="api_clients")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    token_hint = models.CharField(max_length=12, editable=False)  # the first characters, to tell tokens apart
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.token_hint}…)"

    @classmethod
    def issue(cls, *, name: str, scope: str, cohorts) -> tuple["ApiClient", str]:
        """A new client and its token, which exists only in the return value: keep it now."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        client = cls.objects.create(name=name, scope=scope, token_hash=token_hash(token), token_hint=token[:10])
        client.cohorts.set(cohorts)
        return client, token

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])


class LearnerIdentity(models.Model):
    """A learner as another system names them: an API client's own id for them, or (LTI) the
    platform's user id."""

    source = models.CharField(max_length=200)  # "client:<id>" or an LTI issuer
    external_id = models.CharField(max_length=255)
    learner = models.ForeignKey("learners.Learner", on_delete=models.CASCADE, related_name="identities")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "external_id"], name="identity_once_per_source")]


class IdempotentAnswer(models.Model):
    """The answer a submission got, kept under its Idempotency-Key: the same key and body get it
    again; the same key with another body is refused."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="answers")
    key = models.CharField(max_length=255)
    body_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "key"], name="idempotency_key_once")]
