"""What the browser sees of a question's options: their ids and their order.

The database keeps the ids as authored (`Question.public` and `key`, attempts too); the page
never sees them. Each id is shown as an HMAC keyed with SECRET_KEY and scoped to the question,
so it is neither a guessable word nor a hash anyone can recompute. Choices and the right-hand
side of a matching appear in an order drawn for each learner from their seed (decided on the
server, stable for that learner and question): the first option is the key for some learners
and not for others. Ordering items keep the loader's fixed order, which is never the right one.
"""
import random
from functools import lru_cache

from django.conf import settings
from django.utils.crypto import salted_hmac

# public group → the kind its ids are scoped to
KINDS = {"choices": "choice", "items": "item", "left": "left", "right": "right"}
PER_LEARNER = ("choices", "right")


def opaque_id(slug: str, kind: str, raw_id) -> str:
    return _opaque_id(settings.SECRET_KEY, slug, kind, str(raw_id))


@lru_cache(maxsize=8192)
def _opaque_id(secret: str, slug: str, kind: str, raw_id: str) -> str:
    """Memoised: every card on every page view maps all its ids (the secret is part of the key)."""
    return salted_hmac("courseapp.quizzes.opaque_id", f"{slug}/{kind}/{raw_id}", secret=secret, algorithm="sha256").hexdigest()[:16]


def _order(seed: str, slug: str, group: str) -> random.Random:
    return random.Random(salted_hmac("courseapp.quizzes.order", f"{seed}/{slug}/{group}", algorithm="sha256").digest())


def shown(question, seed: str) -> dict:
    """`question.public` as the page shows it to the learner with this seed."""
    out = dict(question.public)
    for group, kind in KINDS.items():
        if group not in out:
            continue
        entries = [{"id": opaque_id(question.slug, kind, e["id"]), "text": e["text"]} for e in out[group]]
        if group in PER_LEARNER:
            _order(seed, question.slug, group).shuffle(entries)
        out[group] = entries
    return out


def raw_ids(question, group: str) -> dict[str, str]:
    """opaque id → authored id, for one group of the question's options."""
    kind = KINDS[group]
    return {opaque_id(question.slug, kind, e["id"]): e["id"] for e in question.public.get(group, [])}
