"""A viewer of a RunSession for tests, as the browser is one: it applies each message the session
publishes (a snapshot, then deltas) and keeps every picture it drew, whole."""
import copy

from courseapp.demo.traces import FrameMirror


class Watcher:
    def __init__(self, session_of=None):
        self.mirror = FrameMirror()
        self.messages: list[dict] = []
        self.frames: list[dict] = []  # the picture after each message, with its type and seq
        self.session_of = session_of  # () → the RunSession, to compare with its own snapshot
        self.mismatches: list[int] = []  # seqs where the applied picture differed from a fresh snapshot

    def __call__(self, message: dict) -> None:
        self.messages.append(message)
        assert self.mirror.apply(message), f"message {message.get('seq')} did not follow {self.mirror.seq}"
        frame = copy.deepcopy(self.mirror.state)
        frame.update(type=message["type"], seq=message["seq"])
        self.frames.append(frame)
        if self.session_of is not None:
            fresh = self.session_of().stream.snapshot()
            if fresh["seq"] == message["seq"] and {**fresh, "type": message["type"]} != frame:
                self.mismatches.append(message["seq"])
