"""Course structure: course → lessons → objectives, sections, glossary.

Rows come from the files under courseapp/content/ (see docs/content-format.md) and are matched
by slug, so learner progress keyed on them survives edits of the wording.
"""
import re

from django.db import models
from django.urls import reverse

ANCHOR_RE = re.compile(r"\{#([a-z0-9-]+)\}")


class Course(models.Model):
    slug = models.SlugField(unique=True)
    title = models.CharField(max_length=200)

    def __str__(self):
        return self.title


class Lesson(models.Model):
    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="lessons")
    number = models.PositiveIntegerField(unique=True)
    slug = models.SlugField(unique=True)
    title = models.CharField(max_length=200)
    day = models.PositiveSmallIntegerField(null=True, blank=True)
    layer = models.CharField(max_length=100, blank=True)
    keywords = models.JSONField(default=list, blank=True)
    available = models.BooleanField(default=False, help_text="Has content learners can open.")
    updated_at = models.DateTimeField(auto_now=True)  # with its rows', the content version (outline.py)

    class Meta:
        ordering = ["number"]

    def __str__(self):
        return f"{self.number}차시 {self.title}"

    def get_absolute_url(self):
        return reverse("lessons:lesson", kwargs={"number": self.number})


class Objective(models.Model):
    lesson = models.ForeignKey(Lesson, on_delete=models.CASCADE, related_name="objectives")
    slug = models.SlugField()
    order = models.PositiveSmallIntegerField()
    text = models.TextField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["lesson", "order"]
        constraints = [models.UniqueConstraint(fields=["lesson", "slug"], name="objective_slug_per_lesson")]

    def __str__(self):
        return f"{self.order}. {self.text[:60]}"


class Section(models.Model):
    """A top-level section (§0 … §6, appendices): one page, one unit of 'read'."""

    lesson = models.ForeignKey(Lesson, on_delete=models.CASCADE, related_name="sections")
    slug = models.SlugField()
    number = models.CharField(max_length=8)
    title = models.CharField(max_length=200)
    order = models.PositiveSmallIntegerField()
    body = models.TextField(help_text="Markdown; see docs/content-format.md.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["lesson", "order"]
        constraints = [models.UniqueConstraint(fields=["lesson", "slug"], name="section_slug_per_lesson")]

    def __str__(self):
        return f"§{self.number} {self.title}"

    @property
    def label(self):
        return f"부록 {self.number}" if self.slug.startswith("appendix") else f"§{self.number}"

    @property
    def anchors(self):
        """Sub-anchors on this page (`## 2.1 … {#s2-1}`), so a link to §2.1 finds its page."""
        return [self.slug, *ANCHOR_RE.findall(self.body)]

    def get_absolute_url(self):
        return reverse("lessons:section", kwargs={"number": self.lesson.number, "slug": self.slug})


class GlossaryTerm(models.Model):
    lesson = models.ForeignKey(Lesson, on_delete=models.CASCADE, related_name="glossary")
    slug = models.SlugField()
    term = models.CharField(max_length=100)
    aliases = models.JSONField(default=list, blank=True)
    genus = models.CharField(max_length=200)
    differentia = models.TextField()
    contrast = models.CharField(max_length=300)
    anchor = models.SlugField(help_text="Where the lesson defines it, e.g. s2-1.")
    updated_at = models.DateTimeField(auto_now=True)  # part of the rendered-section cache key

    class Meta:
        ordering = ["lesson", "term"]
        constraints = [models.UniqueConstraint(fields=["lesson", "slug"], name="glossary_slug_per_lesson")]

    def __str__(self):
        return self.term

    @property
    def definition(self):
        return f"[{self.genus}]인데, [{self.differentia}]는 점에서 {self.contrast}{_wa(self.contrast)} 구별된다."


def _wa(word: str) -> str:
    """Korean particle 와/과 by whether the last syllable has a final consonant."""
    last = word.rstrip(" )]")[-1:] if word else ""
    if "가" <= last <= "힣":
        return "과" if (ord(last) - 0xAC00) % 28 else "와"
    return "와(과)"
