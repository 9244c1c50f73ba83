"""The one door to an engine process: the demo's runs, the API's served engines and the live view
of those engines all go through it (`make run`; vLLM V1 splits its API server from its
EngineCore process the same way).

In the web process, two things went wrong with engines in threads: every page view took the
interpreter lock from the engine (the demo stepped at 0.15× its idle rate under 50 learners;
HTTP streamed 75–85% of the engine's in-process rate), and anything native that aborts —
torch's C++ runtime, say — took the whole site down with it. Here a child process (started on
first use, with `spawn`, so nothing of the web process is forked) hosts the engines in its own
threads and talks to this process over a pipe:

    web process (EngineProcess)                       engine process (_child_main)
    demo     start(run, spec) ──("start", run, spec)──▶ RunSession thread per run
             command ──────────("command", run, cmd)──▶ session.command
             reader ◀──("frame" | "state" | "end", run, …)── coalesced frames; twice a second; the end
    served   engine(key) ─("ask", n, "engine_open", key, options)──▶ a ServingEngine under that key
             open ─────────("open", key, id, messages, prompt, …)──▶ prepare, submit
                  ◀──("accepted", key, id, prompt tokens) or ("refused", key, id, message, param)
             stream ◀──("out", key, [(id, text+, ids+, …), …])── one message per step, all its streams
             abort ────────("abort", key, id)──▶ frees the request's blocks
             snapshot… ────("ask", n, what, key, …)──▶ ◀──("answer", n, …)── /metrics, /tokenize, /health
    live view watch ───────("watch", key, on)──▶ served_view.ServedView: the engine's step events
                  ◀──("frame", "served:<key>", …)── as a scene's frames, FPS a second at most

Django (the database, the channel layer) stays in the web process. If the engine process dies,
every run it hosted ends as failed with its exit code, every open stream ends with an error
naming it, and the next use starts a new process (a served engine is opened again there). One
class, one instance per purpose (engines.py: the served engines; host.py: the demo's runs), so a
class's scenes and the API never share an interpreter lock.
"""
import asyncio
import atexit
import dataclasses
import itertools
import logging
import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from courseapp.demo.host import TICKING_WITHIN_S
from courseapp.demo.traces import EndedPictures, FrameMirror

logger = logging.getLogger("courseapp.demo")

STATE_EVERY_S = 0.5
READY_WITHIN_S = 300  # loading a model on a busy machine
ANSWER_WITHIN_S = 10
SERVED_PREFIX = "served:"
# What the web process may ask a served engine (host.ServingEngine's read calls).
ENGINE_ASKS = frozenset({"snapshot", "log_lines", "tokenize", "detokenize", "token_strings", "check_health"})


# --- the engine process ------------------------------------------------------------------------
def pipe_sender(conn, on_gone=lambda: None):
    """send(message) for the threads of an engine process: one message at a time on the pipe;
    `on_gone()` once the web process has gone (the pipe is broken)."""
    lock = threading.Lock()

    def send(message) -> None:
        with lock:
            try:
                conn.send(message)
            except (OSError, EOFError):
                on_gone()

    return send


class _PipeSink:
    """Takes one request's outputs in the engine thread: only what is new, the text's new end (all
    of it if detokenising changed its past) and the new token ids; metrics at the end."""

    loop = None

    def __init__(self, rid: str, batch: list):
        self.rid, self.batch, self.text, self.count = rid, batch, "", 0

    def put(self, item) -> None:
        if isinstance(item, BaseException):
            self.batch.append((self.rid, "error", str(item)))
        elif hasattr(item, "token_ids"):
            grew = item.text.startswith(self.text)
            piece = item.text[len(self.text):] if grew else item.text
            metrics = dataclasses.asdict(item.metrics) if item.finished else None
            logprobs = None if item.logprobs is None else item.logprobs[self.count:]
            prompt_logprobs = item.prompt_logprobs if self.count == 0 else None  # complete by the first token
            self.batch.append((self.rid, grew, piece, item.token_ids[self.count:], item.finished, item.finish_reason,
                               metrics, logprobs, prompt_logprobs))
            self.text, self.count = item.text, len(item.token_ids)


class _Hosted:
    """A ServingEngine in the engine process: each step's outputs go up the pipe in one message;
    while someone watches, its steps are drawn (ServingEngine.view_open)."""

    def __init__(self, key: str, engine, send):
        self.key, self.engine, self.send = key, engine, send
        self.batch: list = []  # this step's outputs; only the engine thread adds to it (under its step lock)
        engine.loop.after_step = self.flush  # in the engine thread: no other thread here wakes per step

    def flush(self) -> None:
        if self.batch:
            items = self.batch[:]
            self.batch.clear()
            self.send(("out", self.key, items))

    def watch(self, on: bool) -> None:
        if on:
            self.engine.view_open(lambda m: self.send(("frame", SERVED_PREFIX + self.key, m)))
        else:
            self.engine.view_close()


def _child_main(conn, torch_threads: int) -> None:
    import torch

    torch.set_num_threads(torch_threads)  # the web process needs the other core
    # The engine's periodic stats line ("Engine 000: Avg prompt throughput …") on the server's
    # console, as the web process's LOGGING shows it (this process has no Django settings loaded).
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from courseapp.demo.host import RunSession, ServingEngine, ServingRefused

    sessions: dict[str, RunSession] = {}
    threads: dict[str, threading.Thread] = {}
    hosted: dict[str, _Hosted] = {}
    done = threading.Event()  # the web process is gone, or everything has stopped
    stopping = threading.Event()
    send = pipe_sender(conn, on_gone=done.set)

    # --- the demo's runs
    def serve(run_id: str, session: RunSession) -> None:
        end = session.run_to_end(lambda: stopping.is_set() or done.is_set())
        sessions.pop(run_id, None)
        threads.pop(run_id, None)
        send(("end", run_id, end))

    def report() -> None:
        while not done.wait(STATE_EVERY_S):
            for run_id, session in list(sessions.items()):
                send(("state", run_id, session.is_ticking(), session.idle_until(), session.has_started()))

    # --- the served engines
    loading = threading.Lock()  # two first requests of one engine ask to open it twice: one engine

    def engine_open(key: str, options: dict) -> int:
        with loading:
            if key not in hosted:
                hosted[key] = _Hosted(key, ServingEngine(**options), send)
        return hosted[key].engine.max_model_len

    def engine_close(key: str) -> None:
        entry = hosted.pop(key, None)
        if entry is not None:
            entry.engine.stop()

    # An abort can overtake its own open (opens run on the pool below): it is kept until the open
    # has submitted, then applied, so a client gone early never leaves its request running.
    opening: set = set()  # (key, id) whose open is under way
    cancelled: set = set()  # of those, aborted meanwhile
    guard = threading.Lock()

    def open_request(key: str, rid: str, messages, prompt, max_tokens, sampling: dict) -> None:
        entry = hosted.get(key)
        try:
            if entry is None:
                raise RuntimeError(f"no engine {key!r} in this process")
            ids, max_tokens = entry.engine.prepare(messages=messages, prompt=prompt, max_tokens=max_tokens)
            entry.engine.submit(ids, {**sampling, "max_tokens": max_tokens}, rid, sink=_PipeSink(rid, entry.batch))
            send(("accepted", key, rid, len(ids)))  # its first outputs may be in the pipe already
        except ServingRefused as refused:
            send(("refused", key, rid, str(refused), refused.param))
        except Exception as exc:
            send(("error", key, rid, f"{type(exc).__name__}: {exc}"))
        finally:
            with guard:
                opening.discard((key, rid))
                late = (key, rid) in cancelled
                cancelled.discard((key, rid))
            if late and entry is not None:
                entry.engine.abort(rid)

    def abort(key: str, rid: str) -> None:
        with guard:
            if (key, rid) in opening:
                cancelled.add((key, rid))
                return
        hosted[key].engine.abort(rid)

    def answer(number: int, what: str, args, kwargs) -> None:
        try:
            if what == "engine_open":
                value = engine_open(*args)
            elif what == "engine_close":
                value = engine_close(*args)
            elif what in ENGINE_ASKS:
                key, *rest = args
                value = getattr(hosted[key].engine, what)(*rest, **kwargs)
            else:
                raise ValueError(f"no such question: {what!r}")
            send(("answer", number, "ok", value))
        except ServingRefused as refused:
            send(("answer", number, "refused", (str(refused), refused.param)))
        except Exception as exc:
            send(("answer", number, "error", f"{type(exc).__name__}: {exc}"))

    # Requests that arrive together are prepared and submitted together: each submit waits for the
    # step lock, and one after another the eighth of eight waited seven steps for its first token.
    opener = ThreadPoolExecutor(max_workers=32, thread_name_prefix="engine-open")
    slow = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engine-load")  # loading a model: not on this loop
    threading.Thread(target=report, name="demo-engine-state", daemon=True).start()
    while not done.is_set():
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if kind == "start":
            run_id, spec = message[1], message[2]
            session = RunSession(run_id, spec, publish=lambda m, r=run_id: send(("frame", r, m)))
            sessions[run_id] = session
            threads[run_id] = threading.Thread(target=serve, args=(run_id, session), name=f"demo-run-{run_id[:8]}")
            threads[run_id].start()
        elif kind == "command" and message[1] in sessions:
            sessions[message[1]].command(message[2])
        elif kind == "open":
            with guard:
                opening.add((message[1], message[2]))
            opener.submit(open_request, *message[1:])
        elif kind == "abort" and message[1] in hosted:
            abort(message[1], message[2])
        elif kind == "watch" and message[1] in hosted:
            hosted[message[1]].watch(message[2])
        elif kind == "ask":
            (slow if message[2] in ("engine_open", "engine_close") else opener).submit(answer, *message[1:])
        elif kind == "shutdown":
            break
    # Stop and join every engine thread before the interpreter finalises (host.EmbeddedHost.shutdown says why).
    stopping.set()
    opener.shutdown(cancel_futures=True)
    slow.shutdown(cancel_futures=True)
    for session in list(sessions.values()):
        session.command({"type": "stop", "reason": "shutdown"})
    for thread in list(threads.values()):
        thread.join(10)
    for entry in list(hosted.values()):
        entry.engine.stop()
    done.set()


# --- the web process's side: the demo's runs ---------------------------------------------------
class _Run:
    """What the web process knows of a run in the engine process."""

    def __init__(self, publish, on_finish):
        self.publish, self.on_finish = publish, on_finish
        self.mirror = FrameMirror()  # the latest picture, for viewers that connect (deltas applied)
        self.mirror_lock = threading.Lock()
        self.ticking, self.state_at = True, time.monotonic()  # it is starting
        self.started = False
        self._idle_until: datetime | None = None

    def is_ticking(self) -> bool:
        return self.ticking and time.monotonic() - self.state_at < TICKING_WITHIN_S

    def has_started(self) -> bool:
        return self.started

    def idle_until(self) -> datetime | None:
        return self._idle_until


class Stream:
    """One served request's outputs, as its event loop reads them (serving/engine_core.py)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.accepted: asyncio.Future = loop.create_future()
        self.items: asyncio.Queue = asyncio.Queue()


# --- the web process's side: the process -------------------------------------------------------
class EngineProcess:
    def __init__(self, torch_threads: int = 1, name: str = "engine"):
        self.torch_threads, self.name = torch_threads, name
        self.generation = 0  # counts the processes started
        self.stopped = False
        self.lock = threading.Lock()  # the maps below
        # demo runs
        self.runs: dict[str, _Run] = {}
        self.ended = EndedPictures()  # the last picture of runs that ended lately
        self._finishing: list[threading.Thread] = []  # ends being written (joined at exit)
        # served engines' requests, by (engine key, request id)
        self.streams: dict[tuple[str, str], Stream] = {}  # until their last output
        self.opening: dict[tuple[str, str], Stream] = {}  # until the engine process accepts or refuses them
        self.views: dict[str, tuple] = {}  # key → (publish, FrameMirror) while someone watches
        self._answers: dict[int, list] = {}
        self._numbers = itertools.count()
        self._send_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._reader: threading.Thread | None = None
        self._atexit = False

    # the demo's interface (host.EmbeddedHost's) --------------------------------------------------
    def start(self, run_id: str, spec: dict, publish, on_begin, on_finish) -> None:
        """on_begin() → False if the run ended before it could start; on_finish(end) gets
        {"trace", "status", "reason"} or {"trace", "error"}."""
        with self.lock:
            self.runs[run_id] = _Run(publish, on_finish)

        def begin():
            try:
                if not on_begin():
                    self.runs.pop(run_id, None)
                    return
                self.ensure_running()
                self.send(("start", run_id, spec))
            except Exception as exc:  # e.g. the engine process could not start
                logger.exception("demo run %s could not start", run_id)
                self._end(run_id, {"trace": None, "error": f"{type(exc).__name__}: {exc}"})
            finally:
                _close_db()

        threading.Thread(target=begin, name=f"demo-begin-{run_id[:8]}", daemon=True).start()

    def command(self, run_id: str, cmd: dict) -> bool:
        if run_id not in self.runs:
            return False
        try:
            self.send(("command", run_id, cmd))
        except OSError:
            return False
        return True

    def latest_snapshot(self, run_id: str) -> tuple[int, str] | None:
        """(seq, the run's latest picture as a snapshot message in JSON), or None."""
        run = self.runs.get(run_id)
        if run is None:
            return self.ended.get(run_id)
        with run.mirror_lock:
            return run.mirror.snapshot_text()

    def is_alive(self, run_id: str) -> bool:
        return run_id in self.runs

    def is_ticking(self, run_id: str) -> bool:
        run = self.runs.get(run_id)
        return run is not None and run.is_ticking()

    def live(self) -> list[tuple[str, _Run]]:
        with self.lock:
            return list(self.runs.items())

    # the served engines' live view ----------------------------------------------------------
    def view_open(self, key: str, publish) -> bool:
        """Draw engine `key`'s steps: publish(message) gets every frame (a scene's messages).
        False when no process runs (the engine is not open)."""
        if not self.running():
            return False
        with self.lock:
            self.views[key] = (publish, FrameMirror(), threading.Lock())
        self.send(("watch", key, True))
        return True

    def view_close(self, key: str) -> None:
        with self.lock:
            view = self.views.pop(key, None)
        if view is not None and self.running():
            try:
                self.send(("watch", key, False))
            except OSError:
                pass

    def view_snapshot(self, key: str) -> tuple[int, str] | None:
        view = self.views.get(key)
        if view is None:
            return None
        with view[2]:
            return view[1].snapshot_text()

    # the process -------------------------------------------------------------------------------
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def ensure_running(self) -> None:
        with self._start_lock:
            if self.running():
                return
            if self.stopped:
                raise RuntimeError("the engine process is shutting down")
            ctx = multiprocessing.get_context("spawn")  # nothing of the web process is forked
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child_main, args=(child, self.torch_threads), name=self.name, daemon=True)
            proc.start()
            child.close()
            with self._send_lock:
                self._proc, self._conn = proc, parent
                self.generation += 1
            self._reader = threading.Thread(target=self._read, args=(proc, parent), name=f"{self.name}-reader", daemon=True)
            self._reader.start()
            if not self._atexit:
                atexit.register(self.shutdown)
                self._atexit = True
            logger.info("%s process %s started", self.name, proc.pid)

    def send(self, message) -> None:
        with self._send_lock:
            if self._conn is None:
                raise OSError("no engine process")
            self._conn.send(message)

    def ask(self, what: str, *args, wait_s: float = ANSWER_WITHIN_S, **kwargs):
        from courseapp.demo.host import ServingRefused

        number = next(self._numbers)
        slot = self._answers[number] = [threading.Event(), None]
        try:
            self.send(("ask", number, what, args, kwargs))
            if not slot[0].wait(wait_s):
                raise TimeoutError(f"the engine process did not answer {what} within {wait_s} s")
        finally:
            self._answers.pop(number, None)
        kind, value = slot[1]
        if kind == "refused":
            raise ServingRefused(*value)
        if kind == "error":
            raise RuntimeError(value)
        return value

    def forget(self, sid: tuple[str, str]) -> None:
        with self.lock:
            self.streams.pop(sid, None)
            self.opening.pop(sid, None)

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stopped = True
        proc = self._proc
        if proc is None:
            return
        try:
            self.send(("shutdown",))
        except OSError:
            pass
        proc.join(timeout)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        # The runs' ends ("stopped: the server restarted") reach the database before we exit.
        if self._reader is not None:
            self._reader.join(5)
        for thread in list(self._finishing):
            thread.join(5)

    def _read(self, proc, conn) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "out":
                self._deliver(message[1], message[2])
            elif kind in ("accepted", "refused", "error"):
                with self.lock:
                    stream = self.opening.pop((message[1], message[2]), None)
                if stream is not None:
                    stream.loop.call_soon_threadsafe(_resolve, stream.accepted, (kind, *message[3:]))
            elif kind == "answer":
                slot = self._answers.get(message[1])
                if slot is not None:
                    slot[1] = (message[2], message[3])
                    slot[0].set()
            elif kind == "frame" and message[1].startswith(SERVED_PREFIX):
                self._view_frame(message[1][len(SERVED_PREFIX):], message[2])
            elif kind in ("frame", "state", "end"):
                self._run_message(kind, message[1], message[2:])
        proc.join(5)
        with self._send_lock:
            if self._proc is proc:
                self._conn = None
        self._lost(proc)

    def _lost(self, proc) -> None:
        """Everything the process held ends, saying why."""
        reason = f"the engine process stopped (exit code {proc.exitcode})"
        if proc.exitcode not in (0, None) and not self.stopped:
            logger.error("%s process %s: %s", self.name, proc.pid, reason)
        with self.lock:
            streams = {**self.streams, **self.opening}
            self.streams, self.opening = {}, {}
            self.views = {}
        for (_key, rid), stream in streams.items():
            stream.loop.call_soon_threadsafe(_fail, stream, rid, reason)
        for run_id, _run in self.live():
            self._end(run_id, {"trace": None, "error": reason})

    def _deliver(self, key: str, items: list) -> None:
        """One step's outputs: one wake-up per event loop for all of its streams."""
        by_loop: dict = {}
        with self.lock:
            for item in items:
                stream = self.streams.get((key, item[0]))
                if stream is None:
                    continue
                by_loop.setdefault(stream.loop, []).append((stream, item))
                if item[1] == "error" or item[4]:  # its last output
                    del self.streams[(key, item[0])]
        for loop, pairs in by_loop.items():
            loop.call_soon_threadsafe(_put_all, pairs)

    def _view_frame(self, key: str, frame: dict) -> None:
        view = self.views.get(key)
        if view is None:
            return
        publish, mirror, lock = view
        with lock:
            mirror.apply(frame)
        publish(frame)

    def _run_message(self, kind: str, run_id: str, rest: tuple) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        if kind == "frame":
            with run.mirror_lock:
                run.mirror.apply(rest[0])
            run.publish(rest[0])
        elif kind == "state":
            run.ticking, run._idle_until, run.started = rest
            run.state_at = time.monotonic()
        else:
            self._end(run_id, rest[0])

    def _end(self, run_id: str, end: dict) -> None:
        """The run's end goes to the database from a thread of its own: a write waiting on a lock
        must not hold up the frames of the other runs."""
        with self.lock:
            run = self.runs.pop(run_id, None)
        if run is None:
            return
        with run.mirror_lock:
            self.ended.keep(run_id, run.mirror.snapshot_text())

        def finish():
            try:
                run.on_finish(end)
            except Exception:
                logger.exception("demo run %s: could not record its end", run_id)
            finally:
                _close_db()
                self._finishing.remove(thread)

        thread = threading.Thread(target=finish, name=f"demo-end-{run_id[:8]}", daemon=True)
        self._finishing.append(thread)
        thread.start()


def _resolve(future: asyncio.Future, value) -> None:
    if not future.done():
        future.set_result(value)


def _put_all(pairs) -> None:
    for stream, item in pairs:
        stream.items.put_nowait(item)


def _fail(stream: Stream, rid: str, reason: str) -> None:
    _resolve(stream.accepted, ("error", reason))
    stream.items.put_nowait((rid, "error", reason))


def _close_db() -> None:
    from django.db import connections

    connections.close_all()  # this short thread's connections; they would outlive it otherwise
