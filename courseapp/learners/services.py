"""Writes about learners: who they are, what they read, and carrying a guest's work into an account."""
from django.db import IntegrityError, transaction

from courseapp.learners.models import Learner, SectionRead

SESSION_KEY = "learner_id"


def learner_get(request, *, create: bool = False) -> Learner | None:
    """The learner behind this request: the account's, else the guest's from the session.

    Guests get a row only when they first write something (create=True), so a visit alone
    stores nothing.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        learner = Learner.objects.filter(user=user).first()
        if learner is None and create:
            learner = Learner.objects.create(user=user)
        return learner
    learner_id = request.session.get(SESSION_KEY)
    if learner_id is not None:
        learner = Learner.objects.filter(pk=learner_id, user__isnull=True).first()
        if learner is not None:
            return learner
    if not create:
        return None
    learner = Learner.objects.create()
    request.session[SESSION_KEY] = learner.pk
    return learner


def section_visit(*, learner: Learner, section) -> None:
    """Remember where to resume."""
    if learner.last_section_id != section.pk:
        learner.last_section = section
        learner.save(update_fields=["last_section"])


def section_mark_read(*, learner: Learner, section) -> bool:
    """Record that the learner finished reading a section. Returns False if it was already read."""
    try:
        with transaction.atomic():
            _, created = SectionRead.objects.get_or_create(learner=learner, section=section)
    except IntegrityError:  # a concurrent duplicate; the first one counts
        return False
    return created


@transaction.atomic
def learner_merge_guest(*, guest_id: int | None, user) -> Learner:
    """Keep what a guest did when they log in or sign up.

    If the account has no learner yet, the guest's learner simply becomes the account's.
    Otherwise the guest's attempts and reads move over (reads already present are kept once)
    and the guest row is deleted.
    """
    guest = Learner.objects.select_for_update().filter(pk=guest_id, user__isnull=True).first() if guest_id else None
    owned = Learner.objects.select_for_update().filter(user=user).first()
    if guest is None:
        return owned or Learner.objects.create(user=user)
    if owned is None:
        guest.user = user
        guest.save(update_fields=["user"])
        return guest
    already = set(owned.reads.values_list("section_id", flat=True))
    guest.reads.exclude(section_id__in=already).update(learner=owned)
    taken = set(owned.attempts.values_list("nonce", flat=True))
    guest.attempts.exclude(nonce__in=taken).update(learner=owned)
    if owned.last_section_id is None and guest.last_section_id is not None:
        owned.last_section_id = guest.last_section_id
        owned.save(update_fields=["last_section"])
    guest.delete()
    return owned
