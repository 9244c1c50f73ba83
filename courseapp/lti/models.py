"""Where an LMS placed the lesson and what went back to its gradebook.

django-lti (app `lti_tool`) keeps the LMS's side: registrations, deployments, users, contexts,
resource links. These models tie them to ours: a placement is one resource link, opening the
lesson or one section for one class; a passback is one learner's score for one placement, with
how its delivery to the LMS went."""
from django.db import models
from django.utils.translation import gettext_lazy as _


class ContextCohort(models.Model):
    """An LMS course (context) is one class here, made on the course's first launch."""

    context = models.OneToOneField("lti_tool.LtiContext", on_delete=models.CASCADE, related_name="cohort_link")
    cohort = models.OneToOneField("instructor.Cohort", on_delete=models.CASCADE, related_name="lti_context_link")


class Placement(models.Model):
    resource_link = models.OneToOneField("lti_tool.LtiResourceLink", on_delete=models.CASCADE, related_name="placement")
    cohort = models.ForeignKey("instructor.Cohort", on_delete=models.CASCADE, related_name="placements")
    section = models.ForeignKey("lessons.Section", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                help_text="The section it opens and scores; empty: the whole lesson.")
    # The AGS claim of the latest launch: the gradebook column ("" when the LMS gave none) and
    # the scopes the tool was granted for it.
    lineitem_url = models.URLField(max_length=500, blank=True)
    ags_scopes = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.resource_link} → {self.section or self.cohort.lesson}"


class Passback(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("waiting to be sent")
        SENDING = "sending", _("being sent")
        SENT = "sent", _("sent")
        RETRYING = "retrying", _("failed, will retry")
        FAILED = "failed", _("failed, gave up")

    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="passbacks")
    learner = models.ForeignKey("learners.Learner", on_delete=models.CASCADE, related_name="passbacks")
    lti_user = models.ForeignKey("lti_tool.LtiUser", on_delete=models.CASCADE, related_name="+")
    score_given = models.FloatField(default=0)
    score_maximum = models.FloatField(default=0)
    completed = models.BooleanField(default=False)  # every question in scope answered
    scored_at = models.DateTimeField(null=True, blank=True)  # AGS `timestamp`: when the score last changed
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING, db_index=True)
    tries = models.PositiveIntegerField(default=0)  # of the current score
    next_try_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_error = models.CharField(max_length=300, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["placement", "learner"], name="one_passback_per_placement")]

    def __str__(self):
        return f"{self.learner} @ {self.placement_id}: {self.score_given}/{self.score_maximum} ({self.status})"


class LaunchTicket(models.Model):
    """A login this site started (OIDC step 1) that no launch has answered yet: the launch must
    bring its state (with the browser's state cookie) and a token carrying its nonce, and spends
    it. See launch_checks.py."""

    state = models.CharField(max_length=255, unique=True)
    nonce = models.CharField(max_length=255)
    expires_at = models.DateTimeField(db_index=True)
