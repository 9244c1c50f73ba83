"""A run's frames as deltas: what viewers receive live and what replay reads from storage. Pure
data, no Django.

A viewer gets one full picture (a snapshot) when it connects, then one delta per frame: only what
changed since the frame before (issue #14: a frame of the preemption scene is ~25 KB, its delta
~3 KB). A stored trace is the same encoding: the first picture in full, then one delta per step,
as gzip-compressed JSON.

A delta is a small JSON array:
  [0, value]                 replace with value
  [1, {key: delta}, [keys]]  dict: change these keys, delete those
  [2, length, {index: delta}] list: resize to length, change these items
  [3, suffix]                string: append (timelines grow one character a step)
  [4, dropped, suffix]       string: drop that many characters from the front, append (a timeline
                             past its kept length)
static/js/demo.js applies the same deltas, live and in replay.
"""
import gzip
import json
import threading
from collections import OrderedDict

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
    if isinstance(old, str) and isinstance(new, str):
        if new.startswith(old):
            return [3, new[len(old):]]
        dropped = _shifted(old, new)
        if dropped:
            return [4, dropped, new[len(old) - dropped:]]
    return [0, new]


def _shifted(old: str, new: str) -> int:
    """How many characters dropped from old's front make it a prefix of new (0: none does). The
    few likely shifts are tried, a timeline's one to a few steps."""
    # (from 0 would be the same: a new that starts with old never gets here)
    for dropped in range(1, min(len(old) - 1, 64) + 1):
        if new.startswith(old[dropped:]):
            return dropped
    return 0


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
    if kind == 4:
        return value[delta[1]:] + delta[2]
    raise ValueError(f"unknown delta kind {kind!r}")


def _snapshot(value):
    """A deep, JSON-shaped copy: frames share live, mutable state with the engine's lane."""
    return json.loads(json.dumps(value, ensure_ascii=False))  # pragma: no mutate (ASCII escapes read back the same)


class FrameStream:
    """The engine side of a run's live frames: encode() turns each frame into the message that
    goes to every viewer — the first a snapshot, then deltas, numbered by `seq` so that a viewer
    that missed one notices and asks for a snapshot (snapshot_text()). Encoded once per frame,
    whatever the number of viewers. The state kept is a JSON-shaped copy, never patched: a
    snapshot may be read from another thread while the next frame is encoded."""

    def __init__(self):
        # (seq, picture), replaced in one assignment: a reader on another thread never pairs a
        # new seq with the picture before it (the viewer would then drift from the deltas).
        self._latest: tuple[int, dict] | None = None
        self._text: tuple[int, str] | None = None

    def encode(self, frame: dict, sent_at: float) -> dict:
        body = _snapshot(frame)
        if self._latest is None:
            seq = 1
            message = {**body, "type": "snapshot", "seq": seq, "sent_at": sent_at}
        else:
            seq = self._latest[0] + 1
            message = {"type": "delta", "seq": seq, "sent_at": sent_at, "d": diff(self._latest[1], body)}
        self._latest = (seq, body)
        return message

    def snapshot(self) -> dict | None:
        latest = self._latest
        return None if latest is None else {**latest[1], "type": "snapshot", "seq": latest[0]}

    def snapshot_text(self) -> tuple[int, str] | None:
        """(seq, the latest picture as JSON text), made at most once per frame however many ask."""
        latest = self._latest
        if latest is None:
            return None
        self._text = _snapshot_text(self._text, *latest)
        return self._text


class FrameMirror:
    """A viewer's side: applies a run's messages in order and holds the latest full picture (the
    web process keeps one per run of its engine process, to answer a new viewer at once). A
    delta that does not follow the last seq is refused until the next snapshot."""

    def __init__(self):
        self.seq = 0  # pragma: no mutate (while state is None every delta is refused, whatever seq says)
        self.state: dict | None = None
        self._text: tuple[int, str] | None = None

    def apply(self, message: dict) -> bool:
        """True if the message was applied; False for a gap (the mirror waits for a snapshot)."""
        if message.get("type") == "snapshot":
            self.state = {k: v for k, v in message.items() if k not in ("type", "seq", "sent_at")}
            self.seq = message["seq"]
            return True
        if message.get("type") != "delta":
            return False
        if self.state is None or message["seq"] != self.seq + 1:
            self.state = None  # broken: only a snapshot repairs it
            return False
        self.state = patch(self.state, message["d"])
        self.seq = message["seq"]
        return True

    def snapshot_text(self) -> tuple[int, str] | None:
        """(seq, snapshot JSON). Call it from the thread that applies (or under its lock):
        patching changes the state in place."""
        if self.state is None:
            return None
        self._text = _snapshot_text(self._text, self.seq, self.state)
        return self._text


class EndedPictures:
    """The final pictures of the runs that ended lately, by run id: a socket that was behind when
    its run ended (its session gone from the host) still ends on the last picture."""

    def __init__(self, kept: int = 100):
        self.kept = kept
        self._pictures: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, run_id: str, latest: tuple[int, str] | None) -> None:
        if latest is None:
            return
        with self._lock:
            self._pictures[run_id] = latest
            self._pictures.move_to_end(run_id)  # kept again: it is the latest to end
            while len(self._pictures) > self.kept:
                self._pictures.popitem(last=False)  # pragma: no mutate (last=None is false too)

    def get(self, run_id: str) -> tuple[int, str] | None:
        return self._pictures.get(run_id)


def _snapshot_text(cached: tuple[int, str] | None, seq: int, state: dict) -> tuple[int, str]:
    """(seq, the picture as a snapshot message in JSON): the cached one while seq has not moved."""
    if cached is not None and cached[0] == seq:
        return cached
    return seq, encode_text({**state, "type": "snapshot", "seq": seq})


def encode_text(message: dict) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))  # pragma: no mutate (ensure_ascii=None is false too)


class TraceRecorder:
    """Collects a run's frames as deltas while it runs; packed() gives the stored bytes."""

    def __init__(self, max_frames: int = MAX_FRAMES):
        self.max_frames = max_frames
        self.base = None
        self.deltas: list = []
        self._last = None  # pragma: no mutate (read only after the first frame has set it)

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
    body = json.dumps({"v": 1, "base": base, "deltas": deltas}, ensure_ascii=False, separators=(",", ":"))  # pragma: no mutate (ensure_ascii=None is false too)
    # level 6: a speed/size trade-off (any level reads back the same); mtime 0: the same run, the same bytes
    return gzip.compress(body.encode(), compresslevel=6, mtime=0)  # pragma: no mutate (any level reads back the same; 6 is zlib's balance)


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
