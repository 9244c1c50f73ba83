"""Self-check questions and the immutable history of attempts at them."""
from django.db import models


class Question(models.Model):
    class Type(models.TextChoices):
        SINGLE = "single", "single choice"
        MULTI = "multi", "multi-select"
        NUMERIC = "numeric", "numeric"
        SHORT = "short", "short answer"
        ORDERING = "ordering", "ordering"
        MATCHING = "matching", "matching"

    lesson = models.ForeignKey("lessons.Lesson", on_delete=models.CASCADE, related_name="questions")
    slug = models.SlugField(unique=True)
    type = models.CharField(max_length=16, choices=Type.choices)
    objective = models.ForeignKey("lessons.Objective", on_delete=models.PROTECT, related_name="questions")
    anchor = models.SlugField(help_text="Section anchor the feedback cites, e.g. s3-3.")
    order = models.PositiveIntegerField()
    prompt = models.TextField(help_text="Markdown")
    # What the page may show before submission: choices, items, units. Never the key.
    public = models.JSONField(default=dict, blank=True)
    # The answer key and grading parameters. Only the grader reads it.
    key = models.JSONField(default=dict, blank=True)
    explanation = models.TextField(blank=True, help_text="Markdown, shown after a submission")
    hint = models.TextField(blank=True)
    choice_feedback = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)  # part of the lesson's content version

    class Meta:
        ordering = ["lesson", "order"]

    def __str__(self):
        return self.slug


class Attempt(models.Model):
    """One submission. Never edited after it is written: progress is computed from this history."""

    learner = models.ForeignKey("learners.Learner", on_delete=models.CASCADE, related_name="attempts")
    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="attempts")
    response = models.JSONField()
    score = models.FloatField()  # 0 … 1
    feedback = models.JSONField(default=dict)
    # A token rendered into each form; a second POST of it to the same question is the same attempt.
    nonce = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["learner", "question", "nonce"], name="attempt_nonce_once_per_question")
        ]
        indexes = [models.Index(fields=["learner", "question", "-created_at"])]

    def __str__(self):
        return f"{self.learner} · {self.question.slug} · {self.score:.2f}"

    @property
    def is_correct(self):
        return self.score >= 0.999

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("Attempts are immutable history; write a new one instead.")
        super().save(*args, **kwargs)
