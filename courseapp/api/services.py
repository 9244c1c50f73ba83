"""Reads and writes for the grading API: who is calling (a token, with its classes), who a
submission is for (the client's own learner id, made into a learner of the client's class on
first sight), and the answers kept per Idempotency-Key.

A submission is the API's hot path (a class's LMS posts every answer at once), so its statements
are few and cheap: the token with its classes in one SELECT, the kept answer and the learner in
one more, and the writes — learner, attempt, kept answer — in one short transaction without
savepoints. The reads are written out once per process from the models' tables and columns
(building the same SELECT with the ORM cost five times as much); the INSERTs are written here
too, with the values the ORM itself would write. A unique constraint that fails in that transaction (a parallel request
made the same learner or kept the same key first) rolls it back whole; the caller then looks
again and finds the other request's rows (api.submit).
"""
import fcntl
import hashlib
import json
import os
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.db import connection, transaction
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from courseapp.api.models import ApiClient, IdempotentAnswer, LearnerIdentity, token_hash
from courseapp.instructor.models import Cohort, Membership
from courseapp.learners.models import Learner
from courseapp.lessons.models import Lesson

LAST_USED_EVERY = timedelta(minutes=1)  # "last used" is written at most this often per client


@dataclass
class Problem(Exception):
    """An answer in the API's one error shape: {"error": {"code", "message", "details"}}."""

    status: int
    code: str
    message: str
    details: object = None
    retry_after: int | None = None


@dataclass(frozen=True, slots=True)
class TokenClass:
    """One class a token may use: the class (cohort) and its lesson."""

    pk: int
    lesson_id: int
    lesson_number: int


@dataclass(frozen=True, slots=True)
class Seen:
    """What a submission finds before it writes: the answer kept for its key, its learner."""

    kept: tuple[int, str, object] | None  # (status, the body's hash, body)
    learner: Learner | None  # only its id is read here (the rest loads if asked for)


# --- statements ----------------------------------------------------------------------------------
def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model, field: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(field).column)


@cache
def _sql(name: str) -> str:
    """The hot path's reads, written once per process."""
    if name == "client":  # a live token's client (is its "last used" due?), once per class it may use (or once, with none)
        cohorts = ApiClient._meta.get_field("cohorts")
        through, q, last_used = cohorts.remote_field.through, connection.ops.quote_name, _column(ApiClient, "last_used_at")
        return (f"SELECT c.{_column(ApiClient, 'id')}, c.{_column(ApiClient, 'name')}, c.{_column(ApiClient, 'scope')}, "
                f"(c.{last_used} IS NULL OR c.{last_used} < %s), "
                f"t.{q(cohorts.m2m_reverse_name())}, k.{_column(Cohort, 'lesson')}, l.{_column(Lesson, 'number')} "
                f"FROM {_table(ApiClient)} c "
                f"LEFT JOIN {_table(through)} t ON t.{q(cohorts.m2m_column_name())} = c.{_column(ApiClient, 'id')} "
                f"LEFT JOIN {_table(Cohort)} k ON k.{_column(Cohort, 'id')} = t.{q(cohorts.m2m_reverse_name())} "
                f"LEFT JOIN {_table(Lesson)} l ON l.{_column(Lesson, 'id')} = k.{_column(Cohort, 'lesson')} "
                f"WHERE c.{_column(ApiClient, 'token_hash')} = %s AND c.{_column(ApiClient, 'revoked_at')} IS NULL "
                f"ORDER BY k.{_column(Cohort, 'created_at')} DESC, k.{_column(Cohort, 'id')}")  # Cohort.Meta.ordering
    if name == "seen":  # one row: the answer kept for a client's key (or NULLs), the learner its id names (or NULL)
        return (f"SELECT k.{_column(IdempotentAnswer, 'status')}, k.{_column(IdempotentAnswer, 'body_hash')}, "
                f"k.{_column(IdempotentAnswer, 'body')}, "
                f"(SELECT i.{_column(LearnerIdentity, 'learner')} FROM {_table(LearnerIdentity)} i "
                f"WHERE i.{_column(LearnerIdentity, 'source')} = %s AND i.{_column(LearnerIdentity, 'external_id')} = %s) "
                f"FROM (SELECT 1 AS one) x LEFT JOIN {_table(IdempotentAnswer)} k "
                f"ON k.{_column(IdempotentAnswer, 'client')} = %s AND k.{_column(IdempotentAnswer, 'key')} = %s")
    raise KeyError(name)


@cache
def _insert_fields(model) -> list:
    """The fields an INSERT of a new `model` row writes: all but a generated id."""
    return [f for f in model._meta.local_concrete_fields if not f.primary_key and not f.generated]


def _values(obj, fields) -> list:
    """What the ORM would write for these fields of a new row: defaults, auto_now_add, JSON,
    datetimes (each field's pre_save and get_db_prep_save)."""
    return [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]


def _signalled(*models) -> bool:
    return any(pre_save.has_listeners(m) or post_save.has_listeners(m) for m in models)


def _saved(obj, pk) -> None:
    obj.pk = pk
    obj._state.adding, obj._state.db = False, connection.alias


def _insert(obj):
    """`obj.save()` for a new row, as an INSERT written here rather than compiled by the ORM
    for every row (a third of its cost). A model with a save signal connected is saved the
    usual way."""
    model = type(obj)
    if _signalled(model):
        obj.save(force_insert=True)
        return obj
    fields, q, returning = _insert_fields(model), connection.ops.quote_name, connection.features.can_return_columns_from_insert
    sql = (f"INSERT INTO {_table(model)} ({', '.join(q(f.column) for f in fields)}) VALUES ({', '.join(['%s'] * len(fields))})"
           + (f" RETURNING {q(model._meta.pk.column)}" if returning else ""))
    with connection.cursor() as cursor:
        cursor.execute(sql, _values(obj, fields))
        _saved(obj, cursor.fetchone()[0] if returning else
               connection.ops.last_insert_id(cursor, model._meta.db_table, model._meta.pk.column))
    return obj


def _insert_family(parent, *children) -> None:
    """INSERT `parent` and `children`, whose foreign key to `parent`'s model is set here. On
    PostgreSQL in one statement (INSERTs chained in a WITH: one round trip, not one a row);
    elsewhere one INSERT each."""
    links = [next(f for f in type(child)._meta.concrete_fields if f.is_relation and f.related_model is type(parent))
             for child in children]
    if connection.vendor != "postgresql" or _signalled(type(parent), *map(type, children)):
        _insert(parent)
        for child, link in zip(children, links):
            setattr(child, link.name, parent)
            _insert(child)
        return
    q = connection.ops.quote_name
    pk, fields = q(type(parent)._meta.pk.column), _insert_fields(type(parent))
    parts = [f"p AS (INSERT INTO {_table(type(parent))} ({', '.join(q(f.column) for f in fields)}) "
             f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {pk})"]
    params = _values(parent, fields)
    for n, (child, link) in enumerate(zip(children, links)):
        fields = [f for f in _insert_fields(type(child)) if f is not link]
        parts.append(f"c{n} AS (INSERT INTO {_table(type(child))} ({', '.join(q(f.column) for f in [*fields, link])}) "
                     f"SELECT {', '.join(['%s'] * len(fields))}, {pk} FROM p)")
        params += _values(child, fields)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(parts)} SELECT {pk} FROM p", params)
        _saved(parent, cursor.fetchone()[0])
    for child, link in zip(children, links):
        setattr(child, link.name, parent)
        child._state.adding, child._state.db = False, connection.alias  # (their own ids are not read back)


# --- the API's reads and writes ------------------------------------------------------------------
def client_authenticate(*, token: str) -> ApiClient | None:
    """The live client holding this token (its id, name and scope; other fields load if asked
    for), with its classes as `client.classes` (TokenClass, newest first), in one statement."""
    due = connection.ops.adapt_datetimefield_value(timezone.now() - LAST_USED_EVERY)
    with connection.cursor() as cursor:
        cursor.execute(_sql("client"), [due, token_hash(token)])
        rows = cursor.fetchall()
    if not rows:
        return None
    pk, name, scope, stale = rows[0][:4]
    client = ApiClient.from_db(connection.alias, ["id", "name", "scope"], [pk, name, scope])
    client.classes = [TokenClass(*row[4:]) for row in rows if row[4] is not None]
    if stale:
        ApiClient.objects.filter(pk=pk).update(last_used_at=timezone.now())
    return client


def identity_source(client: ApiClient) -> str:
    return f"client:{client.pk}"


def submission_seen(*, client: ApiClient, key: str | None, external_id: str) -> Seen:
    """In one statement: the answer kept for this client's Idempotency-Key, and the learner it
    calls `external_id`."""
    with connection.cursor() as cursor:
        cursor.execute(_sql("seen"), [identity_source(client), external_id, client.pk, key])
        status, digest, body, learner_id = cursor.fetchone()
    kept = None
    if status is not None:
        kept = (status, digest, IdempotentAnswer._meta.get_field("body").from_db_value(body, None, connection))
    return Seen(kept, None if learner_id is None else Learner.from_db(connection.alias, ["id"], [learner_id]))


def learner_make(*, client: ApiClient, external_id: str, cohort_id: int) -> Learner:
    """A new learner, known to this client as `external_id`, in its class. In the caller's
    transaction: if another request made them first, IntegrityError (and the transaction is
    spoilt: the caller rolls it back and looks again)."""
    learner = Learner()
    _insert_family(learner, LearnerIdentity(source=identity_source(client), external_id=external_id),
                   Membership(cohort_id=cohort_id, via=Membership.Via.API))
    return learner


def membership_ensure(*, learner: Learner, cohort_id: int) -> None:
    """The learner is in the class (joined now, by the API, if not yet): a grade filed under a
    class shows in that class's gradebook. In the caller's transaction."""
    if not Membership.objects.filter(cohort_id=cohort_id, learner=learner).exists():
        _insert(Membership(cohort_id=cohort_id, learner=learner, via=Membership.Via.API))


def body_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def answer_keep(*, client: ApiClient, key: str, digest: str, status: int, body: dict) -> None:
    """Keep an answer under its key, in the caller's transaction (with the attempt it tells of).
    A parallel request that kept one first: IntegrityError, as for learner_make."""
    _insert(IdempotentAnswer(client=client, key=key, body_hash=digest, status=status, body=body))


# --- SQLite: writers take turns ------------------------------------------------------------------
_lock_files = threading.local()  # per thread: a lock is held by an open file, and threads must not share one


def _writers_lock() -> int | None:
    """This thread's handle on the SQLite database's writers' lock file (None: not SQLite, or a
    database in memory)."""
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return None
    name = str(connection.settings_dict["NAME"])
    handles = _lock_files.__dict__.setdefault("handles", {})
    if name not in handles:
        digest = hashlib.sha256(os.path.abspath(name).encode()).hexdigest()[:20]
        handles[name] = os.open(os.path.join(tempfile.gettempdir(), f"courseapp-writers-{digest}.lock"),
                                os.O_RDWR | os.O_CREAT, 0o600)
    return handles[name]


@contextmanager
def write_transaction():
    """transaction.atomic() for a short burst of writes; on SQLite, after waiting for a turn.

    SQLite lets one transaction write at a time; another one waiting for the lock sleeps and
    tries again after 1, 2, 5, 10, 15, 20, 25 … ms (its busy handler), so with two HTTP worker
    processes grading at once a submission waited 2.4 ms on average for a lock held about half
    a millisecond, and up to 100 ms. Here the server's processes (and threads) queue for a lock
    file instead (flock), and the next in line starts the moment it is let go. Writers that do
    not take turns (pages, management commands) still meet SQLite's own lock and wait as before.
    Inside a transaction already (a test's), nothing more."""
    lock = None if connection.in_atomic_block else _writers_lock()
    if lock is None:
        with transaction.atomic():
            yield
        return
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with transaction.atomic():
            yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
