"""Classes (cohorts): who teaches them, who learns in them. Learners join with a code or an
invite link; instructors are accounts in the "instructors" group (roles.py)."""
import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

# No 0/O, 1/I/L: a code read off a projector is typed right the first time.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


def new_join_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


class Cohort(models.Model):
    name = models.CharField(_("name"), max_length=100)
    lesson = models.ForeignKey("lessons.Lesson", on_delete=models.PROTECT, related_name="cohorts")
    join_code = models.CharField(_("join code"), max_length=16, unique=True, default=new_join_code)
    instructors = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="taught_cohorts", blank=True)
    archived = models.BooleanField(_("archived"), default=False)  # no new members; its data stays
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("teach_cohort", "Can teach classes: see their dashboards and learners' attempts")]

    def __str__(self):
        return self.name


class Membership(models.Model):
    class Via(models.TextChoices):
        CODE = "code", _("join code")
        LTI = "lti", _("LTI launch")
        API = "api", _("named by an API client")
        ADMIN = "admin", _("added by an administrator")

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="memberships")
    learner = models.ForeignKey("learners.Learner", on_delete=models.CASCADE, related_name="memberships")
    via = models.CharField(max_length=8, choices=Via.choices, default=Via.CODE)
    # The name the instructor sees: a guest has no username ("guest #14" says nothing to a teacher).
    display_name = models.CharField(_("name in this class"), max_length=40, blank=True)
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["joined_at"]
        constraints = [models.UniqueConstraint(fields=["cohort", "learner"], name="member_once")]

    def __str__(self):
        return f"{self.learner} in {self.cohort}"

    @property
    def name(self) -> str:
        """What the instructor's pages call this learner: the name given on joining (with the
        account's username beside it when it differs), else the username, else guest #id."""
        learner = self.learner
        if not self.display_name:
            return str(learner)
        if learner.user_id and learner.user.get_username() != self.display_name:
            return f"{self.display_name} ({learner.user.get_username()})"
        return self.display_name


class Regrade(models.Model):
    """An instructor applied a question's current key to their class's earlier attempts: who,
    when, which question, and (RegradeChange) every score it changed, old and new."""

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="regrades")
    question = models.ForeignKey("quizzes.Question", on_delete=models.CASCADE, related_name="regrades")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(auto_now_add=True)
    key = models.JSONField()  # the key it applied

    class Meta:
        ordering = ["-at"]


class RegradeChange(models.Model):
    regrade = models.ForeignKey(Regrade, on_delete=models.CASCADE, related_name="changes")
    attempt = models.ForeignKey("quizzes.Attempt", on_delete=models.CASCADE, related_name="regrades")
    old_score = models.FloatField()
    new_score = models.FloatField()


class AuditEntry(models.Model):
    """What an instructor did that touches learners' data or grades: kept, read-only."""

    class Action(models.TextChoices):
        CLASS_CREATED = "class_created", _("made a class")
        EXPORTED = "exported", _("downloaded scores")
        ITEMS_COMPUTED = "items_computed", _("computed the item analysis")
        REGRADED = "regraded", _("regraded a question")
        DEMO_OPENED = "demo_opened", _("opened the class demo")

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=20, choices=Action.choices)
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    detail = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-at"]
