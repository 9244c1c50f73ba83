"""Writes for the grading API: who is calling (a token), who a submission is for (the client's
own learner id, made into a learner of the client's class on first sight), and grading it once
per Idempotency-Key."""
import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from courseapp.api.models import ApiClient, IdempotentAnswer, LearnerIdentity, token_hash
from courseapp.instructor.models import Membership
from courseapp.learners.models import Learner

LAST_USED_EVERY = timedelta(minutes=1)  # "last used" is written at most this often per client


@dataclass
class Problem(Exception):
    """An answer in the API's one error shape: {"error": {"code", "message", "details"}}."""

    status: int
    code: str
    message: str
    details: object = None
    retry_after: int | None = None


def client_authenticate(*, token: str) -> ApiClient | None:
    client = ApiClient.objects.filter(token_hash=token_hash(token), revoked_at__isnull=True).first()
    if client is not None and (client.last_used_at is None or timezone.now() - client.last_used_at > LAST_USED_EVERY):
        ApiClient.objects.filter(pk=client.pk).update(last_used_at=timezone.now())
    return client


def learner_for(*, client: ApiClient, external_id: str, cohort) -> Learner:
    """The learner this client calls `external_id`; on first sight a new learner in `cohort`."""
    source = f"client:{client.pk}"
    identity = LearnerIdentity.objects.select_related("learner").filter(source=source, external_id=external_id).first()
    if identity is not None:
        return identity.learner
    try:
        with transaction.atomic():
            learner = Learner.objects.create()
            LearnerIdentity.objects.create(source=source, external_id=external_id, learner=learner)
            Membership.objects.create(cohort=cohort, learner=learner, via=Membership.Via.API)
            return learner
    except IntegrityError:  # the same new learner in two requests at once
        return LearnerIdentity.objects.get(source=source, external_id=external_id).learner


def body_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def idempotent(*, client: ApiClient, key: str | None, body: dict, answer):
    """(status, body): `answer()`'s the first time; the kept one for the same key and body again;
    409 for the same key with another body. Without a key, answered afresh."""
    if not key:
        return answer()
    digest = body_hash(body)
    kept = IdempotentAnswer.objects.filter(client=client, key=key).first()
    if kept is None:
        status, data = answer()
        if status >= 500:
            return status, data
        try:
            with transaction.atomic():
                IdempotentAnswer.objects.create(client=client, key=key, body_hash=digest, status=status, body=data)
            return status, data
        except IntegrityError:  # a retry raced the first request: theirs was kept
            kept = IdempotentAnswer.objects.get(client=client, key=key)
    if kept.body_hash != digest:
        raise Problem(409, "idempotency_key_reused", "This Idempotency-Key was used with a different request body.")
    return kept.status, kept.body
