"""Rate limits (the demo's, the lab's, class joins, the grading API's tokens), counted in the
"limits" cache: this process's memory with one process, files shared by the server's HTTP worker
processes, or Redis when scaled (settings: CACHES).

A sliding window, approximated the usual way from two fixed windows: the previous window's
count, weighted by how much of it still lies within the last `window` seconds, plus the
current window's count. A single fixed window would let twice the limit through around its
boundary (12 prompts in 3 s against "6 a minute").

With the file-based cache (HTTP worker processes, no Redis) a count is not kept through the
cache's own get/add/incr — five file operations, a temporary file and a directory listing per
hit, and an increment that two processes can both lose — but in a small file of its own in the
cache's folder, read and written under an exclusive lock (flock): exact across processes and a
few system calls a hit (the grading API counts every request). Its name ends like the cache's
files, so clearing or culling the cache forgets these counts too.
"""
import fcntl
import hashlib
import math
import os
import random
import struct
import time

from django.core.cache import caches
from django.db import connection
from django.core.cache.backends.filebased import FileBasedCache

_COUNTS = struct.Struct("<qqq")  # window index, its count, the previous window's count


def _cache():
    return caches["limits"]


def _keys(key: str, window: int, now: float) -> tuple[str, str, float]:
    index = int(now // window)
    return f"demo-rate:{key}:{index}", f"demo-rate:{key}:{index - 1}", (now % window) / window


def _carried(previous: int, elapsed: float) -> int:
    """The previous window's count, weighted by how much of it still lies in the last `window`
    seconds, rounded up: just after a boundary ten guesses are still ten, not 9.99 (which let
    the eleventh through)."""
    return math.ceil(previous * (1 - elapsed))


def _estimate(key: str, window: int, now: float) -> tuple[str, int]:
    current, previous, elapsed = _keys(key, window, now)
    return current, _carried(_cache().get(previous, 0), elapsed)


def _count_file(key: str, window: int) -> str | None:
    """The counts' file when the cache is a folder of files (None otherwise)."""
    cache = _cache()
    if not isinstance(cache, FileBasedCache):
        return None
    digest = hashlib.sha256(f"{key}/{window}".encode()).hexdigest()
    return os.path.join(cache._dir, f"rate-{window}-{digest}{cache.cache_suffix}")


def _file_counts(path: str, window: int, now: float, *, limit: float | None = None, add: int = 0) -> int:
    """Under the file's lock: the sliding count before this event; `add` is counted unless the
    count would then pass `limit`."""
    index, elapsed = int(now // window), (now % window) / window
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:  # the cache makes its folder only on its first write
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if add else fcntl.LOCK_SH)
        data = os.pread(fd, _COUNTS.size, 0)
        stored, current, previous = _COUNTS.unpack(data) if len(data) == _COUNTS.size else (index, 0, 0)
        if stored != index:  # a new window: the one that ended is the previous one, or both are over
            current, previous = 0, (current if stored == index - 1 else 0)
        count = _carried(previous, elapsed) + current
        if add and (limit is None or count + add <= limit):
            os.pwrite(fd, _COUNTS.pack(index, current + add, previous), 0)
    finally:
        os.close(fd)  # and the lock with it
    if not data and random.random() < 0.01:  # a new file: now and then, forget the keys gone quiet
        _sweep(os.path.dirname(path), now)
    return count


def _sweep(folder: str, now: float) -> None:
    """Remove count files untouched for two of their windows (both their windows are over)."""
    for name in os.listdir(folder):
        if name.startswith("rate-"):
            try:
                window = int(name.split("-")[1])
                path = os.path.join(folder, name)
                if os.stat(path).st_mtime < now - 2 * window:
                    os.remove(path)
            except (ValueError, IndexError, OSError):
                pass


def hit(*, key: str, limit: int, window: int) -> bool:
    """Count one event if it keeps within `limit` per `window` seconds; False (and not
    counted) if it would go over."""
    now = time.time()
    path = _count_file(key, window)
    if path is not None:
        return _file_counts(path, window, now, limit=limit, add=1) + 1 <= limit
    current, earlier = _estimate(key, window, now)
    _cache().add(current, 0, timeout=2 * window)
    count = _cache().incr(current)
    if earlier + count > limit:
        _cache().decr(current)
        return False
    return True


def over(*, key: str, limit: int, window: int) -> bool:
    """Whether `limit` events already happened in the last `window` seconds (nothing counted)."""
    now = time.time()
    path = _count_file(key, window)
    if path is not None:
        return _file_counts(path, window, now) >= limit
    current, earlier = _estimate(key, window, now)
    return earlier + _cache().get(current, 0) >= limit


def add(*, key: str, window: int) -> None:
    """Count an event that is refused anyway (e.g. a wrong join code)."""
    now = time.time()
    path = _count_file(key, window)
    if path is not None:
        _file_counts(path, window, now, add=1)
        return
    current, _, _ = _keys(key, window, now)
    _cache().add(current, 0, timeout=2 * window)
    _cache().incr(current)


def serialise_starts(lock_id: int) -> None:
    """Inside a transaction: counting the places taken and taking one must not interleave with
    another start. SQLite's IMMEDIATE transactions already take the write lock at BEGIN;
    PostgreSQL needs a lock of its own (released at the transaction's end)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id])
