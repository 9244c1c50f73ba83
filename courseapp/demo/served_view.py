"""The live view of a served engine: its real requests (the lab's, a learner's script's, the
site's) drawn as the demo scenes draw theirs — block pool, block tables, queues, timeline.

The engine loop hands every step's event to a bounded subscription (engine/engine_loop.py): a
put never blocks, and when this view falls behind the oldest events are dropped, so watching can
never slow the engine. A thread of its own turns the events into one lane's picture
(frames.LaneState) and sends a frame at most FPS times a second (traces.FrameStream: a snapshot,
then deltas), the same messages demo.js draws for a scene. No Django here: the engine process
runs it, and so does the web process when the engine is in-process (tests, SERVING_ENGINE_PROCESS=0).
"""
import logging
import threading
import time

from courseapp.demo.frames import LABELS, LaneState, FrameBuilder
from courseapp.demo.traces import FrameStream

logger = logging.getLogger("courseapp.demo")

FPS = 8  # a browser needs no more to follow a pool; fewer frames cost the engine's process less
BUFFER_STEPS = 2048  # step events kept for the view before the oldest are dropped
KEEP_FINISHED = 24  # finished requests still drawn (a site engine serves thousands)
TEXT_TOKENS = 160  # the end of each answer shown, in tokens
PREVIEW_TOKENS = 40  # the end of each prompt shown (the user's turn; the system prompt is before it)


class ServedView:
    def __init__(self, serving_engine, publish, title: str = "munuibot"):
        self.loop = serving_engine.loop
        self.engine = serving_engine.engine
        self.publish = publish  # callable(message): a snapshot or a delta, to every viewer
        cfg = self.engine.config
        config = {"num_blocks": self.engine.num_blocks, "block_size": cfg.block_size, "max_num_seqs": cfg.max_num_seqs,
                  "max_num_batched_tokens": cfg.max_num_batched_tokens, "enable_prefix_caching": cfg.enable_prefix_caching}
        self.lane = LaneState("served", title, config)  # the lane's heading: the served model's name
        self.builder = FrameBuilder("served", [self.lane], scene="served")
        self.stream = FrameStream()
        self._count = 0  # requests seen, for their labels
        self._out: dict[str, list[int]] = {}  # each request's tokens, as the step events gave them
        self._changed: set[str] = set()  # requests with new tokens since the last frame
        self._stop = threading.Event()
        self._sub = None
        self._thread: threading.Thread | None = None

    def start(self) -> "ServedView":
        self._sub = self.loop.subscribe(maxsize=BUFFER_STEPS)
        self._thread = threading.Thread(target=self._run, name="served-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._sub is not None:
            self.loop.unsubscribe(self._sub)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2)

    def snapshot_text(self) -> tuple[int, str] | None:
        return self.stream.snapshot_text()

    @property
    def dropped(self) -> int:
        """Steps this view fell too far behind to draw."""
        return self._sub.dropped if self._sub is not None else 0

    # --- the view's thread -------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._emit()  # the pool as it is now, before any step
            last = time.monotonic()
            while not self._stop.is_set():
                event = self._sub.get(timeout=0.25)
                for ev in ([event] if event is not None else []) + self._sub.drain():
                    self._apply(ev.to_dict())
                if self.builder._dirty and time.monotonic() - last >= 1 / FPS:
                    self._emit()
                    last = time.monotonic()
        except Exception:  # a view that cannot draw stops; the engine goes on either way
            logger.exception("the live view of a served engine stopped")
            self.loop.unsubscribe(self._sub)

    def _apply(self, event: dict) -> None:
        if not event["metrics"]:  # the step under way when the view subscribed ran without the pool's picture
            return
        lane = self.lane
        seen = [*event["waiting"], *event["running"], *event["swapped"], *(i["request_id"] for i in event["scheduled"]),
                *(f["request_id"] for f in event["finished"])]
        for rid in seen:
            if rid not in lane.requests:
                self._add(rid)
        lane.apply(event, None)
        for rid, token in event["new_tokens"].items():
            self._out.setdefault(rid, []).append(token)
        self._changed.update(event["new_tokens"])
        self._prune()
        self.builder.touch()

    def _add(self, rid: str) -> None:
        req = self.engine.requests.get(rid)
        prompt_tokens = req.num_prompt_tokens if req is not None else 0
        max_tokens = req.params.max_tokens if req is not None else 0
        preview = ""
        if req is not None and self.engine.tokenizer is not None:
            preview = self.engine.tokenizer.decode(req.prompt_token_ids[-PREVIEW_TOKENS:], skip_special_tokens=True).strip()
        self.lane.add_request(rid, prompt_preview=preview[-120:], prompt_tokens=prompt_tokens, max_tokens=max_tokens)
        n = self._count
        self.lane.requests[rid]["label"] = LABELS[n % 26] + ("" if n < 26 else str(n // 26))
        self._count += 1

    def _prune(self) -> None:
        """Only the newest KEEP_FINISHED finished requests stay in the picture."""
        done = [rid for rid, r in self.lane.requests.items() if r["status"] == "finished"]
        for rid in done[: max(0, len(done) - KEEP_FINISHED)]:
            del self.lane.requests[rid]
            self.lane.timeline.pop(rid, None)
            self.lane.block_text.pop(rid, None)
            self._out.pop(rid, None)
            self._changed.discard(rid)

    def _texts(self) -> None:
        """The answers so far (their ends), decoded here, at most once per frame per request. From
        the events' own tokens: the engine forgets a request once its caller has the last output."""
        tokenizer = self.engine.tokenizer
        for rid in self._changed:
            if rid in self.lane.requests and tokenizer is not None:
                self.lane.requests[rid]["text"] = tokenizer.decode(self._out[rid][-TEXT_TOKENS:], skip_special_tokens=True)
        self._changed.clear()

    def _emit(self) -> None:
        self._texts()
        self.publish(self.stream.encode(self.builder.frame(), sent_at=time.time()))
