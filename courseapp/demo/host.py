"""The one module through which Django reaches the engine.

A RunSession drives one demo run: its engines (lanes) step in lockstep, scripted and learner
requests join, pause/step/speed commands apply, and coalesced frames are published. The same
session runs in a thread inside the ASGI process (embedded, the default) or inside a Celery
worker on the "engine" queue (scaled); only the host around it differs.
"""
import logging
import queue
import threading
import time
from dataclasses import dataclass

from courseapp.demo.frames import FrameBuilder, LaneState

logger = logging.getLogger("courseapp.demo")

HEARTBEAT_S = 1.0
IDLE_CLOSE_S = 600  # an open run with nothing to do closes after this long
MAX_TRACE = 600  # frames kept for replay


def _engine():
    import engine  # imported lazily: pages that never start a run never load torch

    return engine


def shared_model():
    """The default model's weights, loaded once per process and shared by every lane."""
    eng = _engine()
    from engine.model_runner import load_model

    return load_model(eng.EngineConfig().model)


@dataclass(slots=True)
class Lane:
    state: LaneState
    engine: object


class RunSession:
    def __init__(self, run_id: str, spec: dict, publish, heartbeat=None):
        self.run_id = run_id
        self.spec = spec
        self.publish = publish  # callable(frame dict)
        self.heartbeat = heartbeat or (lambda: None)
        self.commands: queue.Queue = queue.Queue()
        self.builder: FrameBuilder | None = None
        self.lanes: list[Lane] = []
        self.trace: list[dict] = []
        self.step_delay = float(spec.get("step_delay", 0.08))
        self._step_once = False
        self._stop = False
        self._submitted = 0
        self.latest: dict | None = None

    # --- setup ---------------------------------------------------------------------------------
    def _build(self) -> None:
        eng = _engine()
        loaded = shared_model()
        for lane_spec in self.spec["lanes"]:
            config = eng.EngineConfig(**lane_spec["config"])
            engine = eng.LLMEngine(config, loaded=loaded)
            state = LaneState(lane_spec["name"], lane_spec.get("label", lane_spec["name"]), lane_spec["config"])
            self.lanes.append(Lane(state, engine))
        self.builder = FrameBuilder(self.run_id, [lane.state for lane in self.lanes])
        self.builder.paused = bool(self.spec.get("start_paused"))  # a teacher may step from the start

    def _prompt_ids(self, engine, item: dict) -> list[int]:
        if "user" in item:
            messages = [{"role": "user", "content": item["user"]}]
            if item.get("system"):
                messages.insert(0, {"role": "system", "content": item["system"]})
            return engine.encode_chat(messages)
        return engine.tokenizer.encode(item["prompt"])

    def _add(self, item: dict, key: str, owner: str = "", lane_name: str | None = None) -> None:
        eng = _engine()
        lanes = [lane for lane in self.lanes if lane_name is None or lane.state.name == lane_name]
        ids = self._prompt_ids(lanes[0].engine, item)  # every lane shares the one tokenizer
        params = eng.SamplingParams(temperature=item.get("temperature", 0.0), max_tokens=item.get("max_tokens", 64),
                                    ignore_eos=item.get("ignore_eos", False), seed=item.get("seed"))
        preview = (item.get("user") or item.get("prompt", ""))[:120]
        for lane in lanes:
            rid = lane.engine.add_request(ids, params, request_id=key)
            lane.state.add_request(rid, owner=owner, prompt_preview=preview, prompt_tokens=len(ids))
        self.builder.touch()

    # --- commands ------------------------------------------------------------------------------
    def command(self, cmd: dict) -> None:
        self.commands.put(cmd)

    def _apply(self, cmd: dict) -> None:
        kind = cmd.get("type")
        if kind == "pause":
            self.builder.paused = True
        elif kind == "resume":
            self.builder.paused = False
        elif kind == "step":
            self._step_once = True
        elif kind == "speed":
            self.builder.speed = min(8.0, max(0.125, float(cmd.get("value", 1))))
        elif kind == "stop":
            self._stop = True
        elif kind == "snapshot":
            pass  # the frame below goes out anyway
        elif kind == "submit":
            self._submitted += 1
            key = f"u{self._submitted}"
            try:
                self._add({"system": self.spec.get("system", ""), "user": cmd["prompt"],
                           "max_tokens": int(cmd.get("max_tokens", 64))}, key, owner=cmd.get("owner", ""))
                self.builder.message = ""
            except ValueError as exc:  # the engine's RequestError/SamplingError: say why, keep running
                self.builder.message = str(exc)
        self.builder.touch()

    # --- the loop ------------------------------------------------------------------------------
    def _emit(self, kind: str = "frame") -> None:
        frame = self.builder.frame(kind)
        self.latest = frame
        self.publish(frame)

    def run(self) -> list[dict]:
        """Run to the end; returns the trace (one lane picture per step) for replay."""
        self._build()
        script = [(item.get("at", 0), f"s{i}", item, None) for i, item in enumerate(self.spec.get("requests", []))]
        for lane_name, items in self.spec.get("lane_requests", {}).items():
            script += [(item.get("at", 0), f"{lane_name}{i}", item, lane_name) for i, item in enumerate(items)]
        script.sort(key=lambda entry: entry[0])
        tick, last_beat, idle_since = 0, 0.0, time.monotonic()
        self._emit("snapshot")
        while not self._stop:
            while True:
                try:
                    self._apply(self.commands.get_nowait())
                except queue.Empty:
                    break
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                self.heartbeat()
                last_beat = now
            while script and script[0][0] <= tick:
                _, key, item, lane_name = script.pop(0)
                self._add(item, item.get("key", key), lane_name=lane_name)
            busy = any(lane.engine.has_unfinished_requests() for lane in self.lanes)
            if busy and (not self.builder.paused or self._step_once):
                self._step_once = False
                self._step_all()
                tick += 1
                idle_since = now
                if self.builder.due():
                    self._emit()
                time.sleep(self.step_delay / self.builder.speed)
                continue
            if self.builder.due():
                self._emit()
            if not busy and not script and not self.spec.get("open"):
                break
            if not busy and script and not self.builder.paused:
                tick += 1  # nothing running: let time pass until the next scripted arrival
            if self.spec.get("open") and now - idle_since > IDLE_CLOSE_S:
                break
            time.sleep(0.02)
        self.builder.status = "finished"
        self._emit()
        return self.trace

    def _block_text(self, lane: Lane, rid: str) -> None:
        """What each of a request's blocks holds, as text (shown when a block is hovered or focused).
        Full blocks never change, so only new ones and the last, partial one are decoded."""
        req = lane.engine.requests.get(rid)
        if req is None or lane.engine.tokenizer is None:
            return
        size = lane.state.block_size
        ids = req.all_token_ids[: req.num_computed_tokens]
        texts = lane.state.block_text.setdefault(rid, [])
        del texts[max(0, len(texts) - 1):]  # the last one may have grown
        for start in range(len(texts) * size, len(ids), size):
            texts.append(lane.engine.tokenizer.decode(ids[start : start + size]))

    def _step_all(self) -> None:
        for lane in self.lanes:
            if not lane.engine.has_unfinished_requests():
                continue
            event = lane.engine.step().to_dict()
            texts = {rid: lane.engine.output(rid).text for rid in event["new_tokens"]}
            lane.state.apply(event, texts)
            for item in event["scheduled"]:
                self._block_text(lane, item["request_id"])
        self.builder.touch()
        if len(self.trace) < MAX_TRACE:
            self.trace.append({"lanes": [lane.state.to_dict() for lane in self.lanes]})


class EmbeddedHost:
    """Runs sessions in threads of this process (the default, single-process mode)."""

    def __init__(self):
        self.sessions: dict[str, RunSession] = {}
        self._lock = threading.Lock()

    def start(self, run_id: str, spec: dict, publish, on_heartbeat, on_finish) -> None:
        session = RunSession(run_id, spec, publish, on_heartbeat)
        with self._lock:
            self.sessions[run_id] = session

        def target():
            try:
                trace = session.run()
                on_finish(trace, None)
            except Exception as exc:  # the page must hear about it, not spin forever
                logger.exception("demo run %s failed", run_id)
                on_finish(session.trace, f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self.sessions.pop(run_id, None)
                from django.db import connections

                connections.close_all()  # this thread's connections; they would outlive it otherwise

        threading.Thread(target=target, name=f"demo-run-{run_id[:8]}", daemon=True).start()

    def command(self, run_id: str, cmd: dict) -> bool:
        session = self.sessions.get(run_id)
        if session is None:
            return False
        session.command(cmd)
        return True

    def latest(self, run_id: str) -> dict | None:
        session = self.sessions.get(run_id)
        return session.latest if session else None

    def is_alive(self, run_id: str) -> bool:
        return run_id in self.sessions


embedded = EmbeddedHost()
