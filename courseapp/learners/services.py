"""Writes about learners: who they are, what they read, and carrying a guest's work into an account."""
import secrets
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from courseapp.learners.models import Learner, SectionRead, new_seed
from courseapp.learners.order_seed import request_seed
from courseapp.learners.signals import guest_merging

SESSION_KEY = "learner_id"


def learner_get(request, *, create: bool = False) -> Learner | None:
    """The learner behind this request: the account's, else the guest's from the session.

    Guests get a row only when they first write something (create=True), so a visit alone
    stores nothing. A new row keeps the seed the visitor's pages were drawn with.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        learner = Learner.objects.filter(user=user).first()
        if learner is None and create:
            try:
                with transaction.atomic():
                    learner = Learner.objects.create(user=user, seed=request_seed(request))
            except IntegrityError:  # a parallel request of the same account made it first
                learner = Learner.objects.get(user=user)
        return learner
    learner_id = request.session.get(SESSION_KEY)
    if learner_id is not None:
        learner = Learner.objects.filter(pk=learner_id, user__isnull=True).first()
        if learner is not None:
            return learner
    if not create:
        return None
    learner = _new_guest(request)
    request.session[SESSION_KEY] = learner.pk
    return learner


GUEST_JOIN_S = 60  # first writes a browser sends together (two tabs, a double submit) share one row


def _new_guest(request) -> Learner:
    """A guest's row for their first write. A page view writes nothing, so a browser's first
    writes can arrive together, each without a session: they share the browser's seed cookie,
    and at most one guest row holds a seed (a constraint), so the ones that lose the race join
    the row the first one made instead of each starting a learner of its own (whose answers the
    session, saved last by one of them, would then no longer find). An older row with that seed
    belongs to a session that is gone: the visitor starts afresh with a seed of their own."""
    seed = request_seed(request)
    try:
        with transaction.atomic():
            return Learner.objects.create(seed=seed)
    except IntegrityError:
        pass
    recent = timezone.now() - timedelta(seconds=GUEST_JOIN_S)
    sibling = Learner.objects.filter(user__isnull=True, seed=seed, created_at__gte=recent).first()
    if sibling is not None:
        return sibling
    seed = new_seed()
    request._order_seed = request._order_seed_to_set = seed  # the cookie follows (OrderSeedCookieMiddleware)
    return Learner.objects.create(seed=seed)


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
def learner_merge_guest(*, guest_id: int | None, user, seed: str = "") -> Learner:
    """Keep what a guest did when they log in or sign up.

    If the account has no learner yet, the guest's learner simply becomes the account's (or a
    new one is made with `seed`, the order the visitor saw). Otherwise everything the guest did
    moves over: every attempt (history; one whose nonce the account already used for that
    question gets a fresh nonce), reads not already there, and what the apps above this one own
    (demo runs, so a running one stays the account's to control; lab runs and their reports),
    moved by their receivers of `guest_merging`; then the guest row is deleted. The account keeps its own seed.
    """
    guest = Learner.objects.select_for_update().filter(pk=guest_id, user__isnull=True).first() if guest_id else None
    owned = Learner.objects.select_for_update().filter(user=user).first()
    if guest is None:
        return owned or Learner.objects.create(user=user, seed=seed or new_seed())
    if owned is None:
        guest.user = user
        guest.save(update_fields=["user"])
        return guest
    already = set(owned.reads.values_list("section_id", flat=True))
    guest.reads.exclude(section_id__in=already).update(learner=owned)
    taken = set(owned.attempts.values_list("question_id", "nonce"))
    for pk, question_id, nonce in guest.attempts.values_list("pk", "question_id", "nonce"):
        if (question_id, nonce) in taken:  # update(), not save(): attempts are otherwise never edited
            guest.attempts.filter(pk=pk).update(nonce=secrets.token_urlsafe(16))
    guest.attempts.update(learner=owned)
    guest_merging.send(sender=Learner, guest=guest, into=owned)  # demo runs, lab runs: their apps move them
    if owned.last_section_id is None and guest.last_section_id is not None:
        owned.last_section_id = guest.last_section_id
        owned.save(update_fields=["last_section"])
    guest.delete()
    return owned
