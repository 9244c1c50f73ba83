"""The one module through which Django reaches the engine.

A RunSession drives one demo run: its engines (lanes) step in lockstep, scripted and learner
requests join, pause/step/speed/stop commands apply, and coalesced frames are published. The
same session runs in a thread inside the ASGI process (embedded, the default) or inside a
Celery worker on the "engine" queue (scaled); only the host around it differs. Sessions never
touch the database: their host reports begin, heartbeat and end (courseapp/demo/keeper.py).
"""
import atexit
import functools
import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone as dt_timezone

from django.utils.functional import SimpleLazyObject

from courseapp.demo.frames import FrameBuilder, LaneState
from courseapp.demo.traces import EndedPictures, FrameStream, TraceRecorder

logger = logging.getLogger("courseapp.demo")

IDLE_CLOSE_S = 600  # an open run with nothing to do closes after this long
TICKING_WITHIN_S = 10.0  # a session whose loop has not come round for this long is hung
EXPIRED_REASONS = {"no_viewer", "never_picked_up", "lifetime", "paused_idle", "idle"}


def _engine():
    import engine  # imported lazily: pages that never start a run never load torch

    return engine


def shared_model():
    """The default model's weights, loaded once per process and shared by every lane."""
    eng = _engine()
    from engine.model_runner import load_model

    return load_model(eng.EngineConfig().model)


@functools.lru_cache(maxsize=8)
def min_prompt_tokens(system: str, question: str) -> int:
    """Tokens of the smallest prompt a learner's run serves: the system prompt and a question.
    Counted without torch (engine/chat_prompt.py): the web process checks knobs with it."""
    from engine.chat_prompt import chat_prompt_ids
    from engine.config import EngineConfig

    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return len(chat_prompt_ids(EngineConfig().model, messages))


@dataclass(slots=True)
class Lane:
    state: LaneState
    engine: object


class RunSession:
    def __init__(self, run_id: str, spec: dict, publish):
        self.run_id = run_id
        self.spec = spec
        self.publish = publish  # callable(message dict): a snapshot or a delta, to every viewer
        self.commands: queue.Queue = queue.Queue()
        self.builder: FrameBuilder | None = None  # pragma: no mutate (made by _build before any use)
        self.lanes: list[Lane] = []
        self.trace = TraceRecorder()
        self.stream = FrameStream()  # what viewers get: a snapshot, then deltas
        self.step_delay = float(spec.get("step_delay", 0.08))
        self.paused_idle_s = float(spec.get("paused_idle_s", 600))
        self._step_once = False
        self._stop = False  # pragma: no mutate (None is as false)
        self._submitted = 0
        self.status, self.reason = "finished", ""  # how it ended
        self.started = False  # its engines are built and its loop goes round (the host reports starting → running)
        self.last_tick = time.monotonic()  # the loop came round (the heartbeat reports only a ticking loop)
        self._idle_deadline: float | None = None  # monotonic; ends then unless something happens

    # --- what the host reports -----------------------------------------------------------------
    def is_ticking(self) -> bool:
        """Alive: still building its engines (how long that may take is the reaper's
        DEMO_START_WITHIN_S), or its loop came round lately."""
        return not self.started or time.monotonic() - self.last_tick < TICKING_WITHIN_S  # pragma: no mutate (< or <= on a float clock)

    def has_started(self) -> bool:
        return self.started

    def idle_until(self) -> datetime | None:
        """When the run will end for idleness unless something happens (wall clock)."""
        if self._idle_deadline is None:
            return None
        return datetime.fromtimestamp(time.time() + self._idle_deadline - time.monotonic(), tz=dt_timezone.utc)

    def end(self) -> dict:
        return {"status": self.status, "reason": self.reason}

    def run_to_end(self, shutting_down, shutdown_reason: str = "shutdown") -> dict:
        """Run; then how it ended, with the packed trace: {"status", "reason"} or {"error"}. A
        failure while the host is shutting down (e.g. the model still loading as the interpreter
        exits) is the shutdown's doing, not the run's."""
        try:
            self.run()
            end = self.end()
        except Exception as exc:  # the run ends with the reason; the host goes on
            if shutting_down():
                end = {"status": "stopped", "reason": shutdown_reason}
            else:
                logger.exception("demo run %s failed", self.run_id)
                end = {"error": f"{type(exc).__name__}: {exc}"}
        return {"trace": self.trace.packed(), **end}

    # --- setup ---------------------------------------------------------------------------------
    def _build(self) -> None:
        eng = _engine()
        loaded = shared_model()
        for lane_spec in self.spec["lanes"]:
            config = eng.EngineConfig(**lane_spec["config"])
            engine = eng.LLMEngine(config, loaded=loaded)
            state = LaneState(lane_spec["name"], lane_spec.get("label", lane_spec["name"]), lane_spec["config"])
            self.lanes.append(Lane(state, engine))
        self.builder = FrameBuilder(self.run_id, [lane.state for lane in self.lanes], scene=self.spec.get("preset", ""))
        self.builder.paused = bool(self.spec.get("start_paused"))  # a teacher may step from the start
        self.last_tick, self.started = time.monotonic(), True

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
        preview = (item.get("preview") or item.get("user") or item.get("prompt", ""))[:120]
        for lane in lanes:
            rid = lane.engine.add_request(ids, params, request_id=key)
            lane.state.add_request(rid, owner=owner, prompt_preview=preview, prompt_tokens=len(ids), max_tokens=params.max_tokens)
        self.builder.touch()

    # --- commands ------------------------------------------------------------------------------
    def command(self, cmd: dict) -> None:
        self.commands.put(cmd)

    def _apply(self, cmd: dict) -> bool:
        """Apply one command; True if it was something a person did (it resets the idle clock)."""
        kind = cmd.get("type")
        if kind == "pause":
            self.builder.paused = True
        elif kind == "resume":
            self.builder.paused = False
        elif kind == "step":
            self._step_once = True
        elif kind == "speed":
            self.builder.speed = min(8.0, max(0.125, float(cmd.get("value", 1))))
        elif kind == "stop":  # from the owner, or from outside with the status the database now has
            self._stop = True
            self.reason = cmd.get("reason") or "owner"
            default = "expired" if self.reason in EXPIRED_REASONS else "stopped"
            self.status = cmd.get("status") if cmd.get("status") in ("stopped", "expired", "failed") else default
            if cmd.get("message"):
                self.builder.message = str(cmd["message"])
        elif kind == "submit":
            self._submitted += 1
            key = f"u{self._submitted}"
            try:
                self._add({"system": self.spec.get("system"), "user": cmd["prompt"],
                           "max_tokens": int(cmd.get("max_tokens", 64))}, key, owner=cmd.get("owner", ""))
                self.builder.message = ""
            except ValueError as exc:  # the engine's RequestError/SamplingError: say why, keep running
                self.builder.message = str(exc)
        else:  # "snapshot": the frame below goes out anyway
            self.builder.touch()
            return False
        self.builder.touch()
        return True

    # --- the loop ------------------------------------------------------------------------------
    def _emit(self) -> None:
        self.publish(self.stream.encode(self.builder.frame(), sent_at=time.time()))

    def snapshot_text(self) -> tuple[int, str] | None:
        """(seq, the latest picture) for a viewer that just connected (any thread may ask)."""
        return self.stream.snapshot_text()

    def _end_idle(self, reason: str) -> None:
        self._stop = True
        self.status, self.reason = "expired", reason

    def run(self) -> None:
        """Run to the end (the scene's, a stop command's, or an idle limit's); self.trace has the frames."""
        self._build()
        script = [(item.get("at", 0), f"s{i}", item, None) for i, item in enumerate(self.spec.get("requests", []))]
        for lane_name, items in self.spec.get("lane_requests", {}).items():
            script += [(item.get("at", 0), f"{lane_name}{i}", item, lane_name) for i, item in enumerate(items)]
        script.sort(key=lambda entry: entry[0])
        tick, last_activity = 0, time.monotonic()
        deadline = last_activity + float(self.spec["max_run_s"]) if self.spec.get("max_run_s") else None
        self._emit()  # the first picture: a snapshot
        while not self._stop:
            now = self.last_tick = time.monotonic()
            if deadline is not None and now >= deadline:  # pragma: no mutate (> or >= on a float clock)
                self._end_idle("lifetime")
                break
            while True:
                try:
                    if self._apply(self.commands.get_nowait()):
                        last_activity = now
                except queue.Empty:
                    break
            if self._stop:
                break
            while script and script[0][0] <= tick:
                _, key, item, lane_name = script.pop(0)
                self._add(item, item.get("key", key), lane_name=lane_name)
            busy = any(lane.engine.has_unfinished_requests() for lane in self.lanes)
            if busy and (not self.builder.paused or self._step_once):
                self._step_once = False
                self._idle_deadline = None
                self._step_all()
                tick += 1
                last_activity = now
                if self.builder.due():
                    self._emit()
                time.sleep(self.step_delay / self.builder.speed)
                continue
            if self.builder.due():
                self._emit()
            if not busy and not script and not self.spec.get("open"):
                break
            if self.builder.paused:
                self._idle_deadline = last_activity + self.paused_idle_s
                if now >= self._idle_deadline:  # pragma: no mutate (> or >= on a float clock)
                    self._end_idle("paused_idle")
            elif not busy and script:
                self._idle_deadline = None
                tick += 1  # nothing running: let time pass until the next scripted arrival
            elif not busy:  # an open run waiting for prompts
                self._idle_deadline = last_activity + IDLE_CLOSE_S
                if now >= self._idle_deadline:  # pragma: no mutate (> or >= on a float clock)
                    self._end_idle("idle")
            time.sleep(0.02)
        self._idle_deadline = None
        self.builder.status, self.builder.reason = self.status, self.reason
        self._emit()

    def _block_text(self, lane: Lane, rid: str) -> None:
        """What each of a request's blocks holds, as text (shown when a block is hovered or focused).
        Full blocks never change, so only new ones and the last, partial one are decoded."""
        if lane.engine.tokenizer is None:
            return
        req = lane.engine.requests[rid]  # a scheduled request: the engine keeps it (finished too)
        size = lane.state.block_size
        ids = req.all_token_ids[: req.num_computed_tokens]
        texts = lane.state.block_text.setdefault(rid, [])
        del texts[max(0, len(texts) - 1):]  # the last one may have grown; the full ones never change
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
        self.trace.add({"lanes": [lane.state.to_dict() for lane in self.lanes]})


class EmbeddedHost:
    """Runs sessions in threads of this process (the default, single-process mode)."""

    def __init__(self):
        self.sessions: dict[str, RunSession] = {}
        self.ended = EndedPictures()  # the last picture of runs that ended lately
        self.threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._atexit = False  # pragma: no mutate (None is as false)
        self._shutting_down = False  # pragma: no mutate (None is as false)

    def start(self, run_id: str, spec: dict, publish, on_begin, on_finish) -> None:
        """on_begin() → False if the run ended before its thread started; on_finish(end) gets
        {"trace", "status", "reason"} or {"trace", "error"}."""
        session = RunSession(run_id, spec, publish)

        def target():
            end: dict = {}  # pragma: no mutate (None is as false below)
            try:
                if on_begin():
                    end = session.run_to_end(lambda: self._shutting_down)
            finally:
                with self._lock:
                    self.ended.keep(run_id, session.snapshot_text())
                    del self.sessions[run_id], self.threads[run_id]  # this thread alone removes them
                try:
                    if end:
                        on_finish(end)
                finally:
                    from django.db import connections

                    connections.close_all()  # this thread's connections; they would outlive it otherwise

        thread = threading.Thread(target=target, name=f"demo-run-{run_id[:8]}", daemon=True)
        with self._lock:
            self.sessions[run_id] = session
            self.threads[run_id] = thread
            if not self._atexit:
                atexit.register(self.shutdown)
                self._atexit = True
        thread.start()

    def command(self, run_id: str, cmd: dict) -> bool:
        session = self.sessions.get(run_id)
        if session is None:
            return False
        session.command(cmd)
        return True

    def latest_snapshot(self, run_id: str) -> tuple[int, str] | None:
        """(seq, the run's latest picture as a snapshot message in JSON), or None."""
        session = self.sessions.get(run_id)
        return session.snapshot_text() if session else self.ended.get(run_id)

    def is_alive(self, run_id: str) -> bool:
        return run_id in self.sessions

    def is_ticking(self, run_id: str) -> bool:
        session = self.sessions.get(run_id)
        return session is not None and session.is_ticking()

    def live(self) -> list[tuple[str, RunSession]]:
        with self._lock:
            return list(self.sessions.items())

    def shutdown(self, timeout: float = 10.0) -> None:  # pragma: no mutate (the default wait: only timing tells 10 s from 11)
        """Stop every run and wait for its thread (at exit). An engine thread still inside torch
        while the interpreter finalises is stopped at its next GIL hand-over by a forced unwind
        through torch's C++ frames: `terminate called without an active exception`, the process
        aborts (exit 134) instead of exiting. Stopping Daphne (Ctrl-C, SIGTERM) mid-scene did that."""
        self._shutting_down = True
        with self._lock:
            threads = list(self.threads.items())
        for run_id, _thread in threads:
            self.command(run_id, {"type": "stop", "reason": "shutdown"})
        deadline = time.monotonic() + timeout
        for _run_id, thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))  # pragma: no mutate (a floor of 1 s: only timing tells)


class ServingRefused(ValueError):
    """A request the served engine cannot take (too long for the context, bad parameters):
    the message names the limit; `param` the OpenAI parameter at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def check_token_ids(ids: list[int], vocab: int, param: str) -> None:
    """ServingRefused naming `param` for the first id outside 0 … vocab − 1."""
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise ServingRefused(f"token id {bad} is out of the vocabulary (0 to {vocab - 1})", param)


class ServingEngine:
    """The engine behind the OpenAI-compatible API (courseapp/serving): the served model with a
    KV pool of its own, stepping in its own thread (engine.engine_loop.EngineLoop); requests come
    from any thread or event loop and stream their outputs back."""

    def __init__(self, log_interval_s: float = 10.0, v0_preemption_warnings: bool = False, served_name: str = "munuibot",
                 **config):
        eng = _engine()
        from engine.engine_loop import EngineLoop
        from engine.stat_logger import StatLogger

        self.config = eng.EngineConfig(**config)
        self.served_name = served_name  # what /v1/models calls it (the live view's heading)
        # load_model keeps one copy of each model per process: this is shared_model()'s copy
        # when the model is the default one, which the demo's lanes use too.
        self.engine = eng.LLMEngine(self.config)
        self.stat_logger = StatLogger(log_interval_s, v0_preemption_warnings=v0_preemption_warnings)
        self.loop = EngineLoop(self.engine, stat_logger=self.stat_logger).start()
        self._view = None  # served_view.ServedView while someone watches

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    # (no mutate: the prompt's default is read only when no messages come, and every such caller names a prompt)
    def prepare(self, *, messages: list | None = None, prompt: str | list = "", max_tokens: int | None = None) -> tuple[list, int]:  # pragma: no mutate
        """(token ids, max_tokens): a chat through the model's template, or a plain prompt (text
        or token ids); the answer's room is what the context leaves when the caller names none
        (as vLLM does)."""
        eng = _engine()
        try:
            ids = self.tokenize(messages=messages, prompt=prompt)
        except eng.RequestError as exc:
            raise ServingRefused(str(exc)) from None
        what = "messages" if messages is not None else "prompt"
        room = self.max_model_len - len(ids)
        if room <= 0 or (max_tokens is not None and max_tokens > room):
            asked = max_tokens if max_tokens is not None else 1
            raise ServingRefused(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(ids) + asked} tokens ({len(ids)} in the {what}, {asked} in the completion). "
                f"Please reduce the length of the {what} or completion.", what)
        return ids, max_tokens if max_tokens is not None else room

    # The tokenizer, as vLLM's /tokenize and /detokenize and the logprobs' token strings need it.
    def tokenize(self, *, messages: list | None = None, prompt: str | list = "", add_special_tokens: bool = True,
                 add_generation_prompt: bool = True) -> list[int]:
        engine = self.engine
        if messages is not None:
            return engine.encode_chat(messages, add_generation_prompt=add_generation_prompt)
        if isinstance(prompt, list):
            check_token_ids(prompt, engine.vocab_size, "prompt")
            return list(prompt)
        return engine.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)

    def detokenize(self, ids: list[int]) -> str:
        check_token_ids(ids, self.engine.vocab_size, "tokens")
        return self.engine.tokenizer.decode(ids)

    def token_strings(self, ids: list[int]) -> dict[int, str]:
        from engine.logits_processors import token_strings

        return token_strings(self.engine.tokenizer, ids)

    async def open(self, *, messages: list | None, prompt: str | list, max_tokens: int | None, sampling: dict, request_id: str):
        """Prepare and submit from an event loop: (a handle to `async for`, the prompt's tokens).
        The same call a Celery worker answers in scaled mode (courseapp/serving/remote.py)."""
        import asyncio

        ids, max_tokens = await asyncio.to_thread(self.prepare, messages=messages, prompt=prompt, max_tokens=max_tokens)
        # Off the loop too: submitting waits for the step lock (up to one step), and 32 requests
        # arriving at once would otherwise hold every stream's tokens back one step each.
        handle = await asyncio.to_thread(self.submit, ids, {**sampling, "max_tokens": max_tokens}, request_id,
                                         asyncio.get_running_loop())
        return handle, len(ids)

    def submit(self, ids: list, sampling: dict, request_id: str, loop=None, sink=None):
        """A handle to iterate (or `async for`) for outputs as tokens arrive (or, with `sink`, the
        outputs handed to it in the engine thread: EngineLoop.submit)."""
        eng = _engine()
        try:
            return self.loop.submit(ids, eng.SamplingParams(**sampling), request_id=request_id, loop=loop, sink=sink)
        except (eng.RequestError, eng.SamplingError) as exc:
            raise ServingRefused(str(exc), exc.param) from None

    def abort(self, request_id: str) -> bool:
        return self.loop.abort(request_id)

    def snapshot(self):
        return self.loop.snapshot()

    def log_lines(self, since: float = 0.0) -> list[dict]:  # pragma: no mutate (wall-clock times: 0 and 1 are both long ago)
        """The server log's lines written since a wall-clock time ({time, kind, line})."""
        return [entry.to_dict() for entry in self.stat_logger.since(since)]

    def check_health(self) -> None:
        """Raises, saying why, when the engine cannot take a request (/health's 503)."""
        if self.loop.error is not None:
            raise RuntimeError(f"the engine stopped: {self.loop.error}")
        if self.loop._stopping:
            raise RuntimeError("the engine is shutting down")

    # The live view: its real requests drawn as a scene's (served_view.py).
    def view_open(self, publish) -> bool:
        """publish(message) gets a frame of this engine at most served_view.FPS times a second."""
        from courseapp.demo.served_view import ServedView

        if self._view is None:
            self._view = ServedView(self, publish, title=self.served_name).start()
        return True

    def view_close(self) -> None:
        view, self._view = self._view, None
        if view is not None:
            view.stop()

    def view_snapshot(self) -> tuple[int, str] | None:
        view = self._view
        return None if view is None else view.snapshot_text()

    def stop(self) -> None:
        self.view_close()
        self.loop.stop()


def _embedded_host():
    """`make run` hosts the engine in a process of its own (engine_process.py); the test settings
    keep it in threads of this process so tests can reach into a session."""
    from django.conf import settings

    if settings.DEMO_ENGINE_PROCESS:
        from courseapp.demo.engine_process import EngineProcess

        return EngineProcess(torch_threads=settings.DEMO_ENGINE_THREADS, name="demo-engine")
    return EmbeddedHost()


# Chosen on first use, not at import: the engine process imports this module without Django.
embedded = SimpleLazyObject(_embedded_host)
