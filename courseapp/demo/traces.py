"""A run's frames for replay, stored compactly: the first picture in full, then one delta per
step (only what changed), as gzip-compressed JSON. Pure data, no Django.

A delta is a small JSON array:
  [0, value]                 replace with value
  [1, {key: delta}, [keys]]  dict: change these keys, delete those
  [2, length, {index: delta}] list: resize to length, change these items
  [3, suffix]                string: append (timelines grow one character a step)
static/js/demo.js applies the same deltas when it replays a run.
"""
import gzip
import json

MAX_FRAMES = 600  # frames kept per run


def diff(old, new):
    """The delta that turns `old` into `new` (None when they are equal)."""
    if old == new:
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {k: (diff(old[k], v) if k in old else [0, v]) for k, v in new.items() if k not in old or old[k] != v}
        return [1, changed, [k for k in old if k not in new]]
    if isinstance(old, list) and isinstance(new, list):
        changed = {str(i): (diff(old[i], v) if i < len(old) else [0, v])
                   for i, v in enumerate(new) if i >= len(old) or old[i] != v}
        if len(changed) > len(new) // 2 + 1:  # mostly new (e.g. block ids shifted): whole list is shorter
            return [0, new]
        return [2, len(new), changed]
    if isinstance(old, str) and isinstance(new, str) and new.startswith(old):
        return [3, new[len(old):]]
    return [0, new]


def patch(value, delta):
    """Apply a delta from diff(); returns the new value (containers are changed in place)."""
    if delta is None:
        return value
    kind = delta[0]
    if kind == 0:
        return delta[1]
    if kind == 1:
        for key in delta[2]:
            value.pop(key, None)
        for key, sub in delta[1].items():
            value[key] = patch(value.get(key), sub)
        return value
    if kind == 2:
        del value[delta[1]:]
        value.extend([None] * (delta[1] - len(value)))
        for index, sub in delta[2].items():
            value[int(index)] = patch(value[int(index)], sub)
        return value
    if kind == 3:
        return value + delta[1]
    raise ValueError(f"unknown delta kind {kind!r}")


def _snapshot(value):
    """A deep, JSON-shaped copy: frames share live, mutable state with the engine's lane."""
    return json.loads(json.dumps(value, ensure_ascii=False))


class TraceRecorder:
    """Collects a run's frames as deltas while it runs; packed() gives the stored bytes."""

    def __init__(self, max_frames: int = MAX_FRAMES):
        self.max_frames = max_frames
        self.base = None
        self.deltas: list = []
        self._last = None

    def __len__(self) -> int:
        return 0 if self.base is None else 1 + len(self.deltas)

    def add(self, frame: dict) -> None:
        if len(self) >= self.max_frames:
            return
        snap = _snapshot(frame)
        if self.base is None:
            self.base = snap
        else:
            self.deltas.append(diff(self._last, snap))
        self._last = snap

    def packed(self) -> bytes | None:
        if self.base is None:
            return None
        return pack(self.base, self.deltas)


def pack(base, deltas) -> bytes:
    body = json.dumps({"v": 1, "base": base, "deltas": deltas}, ensure_ascii=False, separators=(",", ":"))
    return gzip.compress(body.encode(), compresslevel=6, mtime=0)


def unpack(data: bytes | memoryview | None) -> dict:
    """The stored JSON ({"v", "base", "deltas"}), as the replay endpoint serves it."""
    if not data:
        return {"v": 1, "base": None, "deltas": []}
    return json.loads(gzip.decompress(bytes(data)))


def frames(data: bytes | memoryview | None) -> list:
    """Every frame, decoded (tests and the last picture of a finished run)."""
    stored = unpack(data)
    if stored["base"] is None:
        return []
    current = stored["base"]
    out = [_snapshot(current)]
    for delta in stored["deltas"]:
        current = patch(current, delta)
        out.append(_snapshot(current))
    return out


def last_frame(data: bytes | memoryview | None):
    stored = unpack(data)
    current = stored["base"]
    for delta in stored["deltas"]:
        current = patch(current, delta)
    return current
