"""Who is learning: a guest (identified by the session) or an account, and what they read."""
import secrets

from django.conf import settings
from django.db import models


# Usernames that begin so belong to accounts an LMS launch made (courseapp/lti): sign-up refuses
# them, so nobody can register the name an LMS user's account will have.
LTI_USERNAME_PREFIX = "lti-"


def new_seed() -> str:
    return secrets.token_hex(16)


class Learner(models.Model):
    """One learner's progress. Guests get a row on their first write; logging in or signing up
    attaches it to the account (or merges it into the account's own learner)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="learner"
    )
    last_section = models.ForeignKey(
        "lessons.Section", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Decides the order this learner sees each question's options in (quizzes/presenting.py).
    # A guest's first write copies the seed their pages were drawn with (learners/order_seed.py).
    seed = models.CharField(max_length=32, default=new_seed, editable=False)
    # Came from an LMS placement with a gradebook column (courseapp/lti): their new scores go
    # back to it. Kept on the row so every other learner's answer costs no lookup.
    lms_graded = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # A browser's first writes, sent together, find each other by the seed cookie they
            # share (learners/services.py _new_guest).
            models.UniqueConstraint(fields=["seed"], condition=models.Q(user__isnull=True), name="one_guest_per_seed"),
        ]

    def __str__(self):
        return self.user.get_username() if self.user_id else f"guest #{self.pk}"

    @property
    def is_guest(self):
        return self.user_id is None


class SectionRead(models.Model):
    learner = models.ForeignKey(Learner, on_delete=models.CASCADE, related_name="reads")
    section = models.ForeignKey("lessons.Section", on_delete=models.CASCADE, related_name="reads")
    read_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["learner", "section"], name="read_once")]
