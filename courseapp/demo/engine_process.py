"""Embedded mode's engine in a process of its own beside the web server (`make run`).

The demo's sessions (host.RunSession) used to run as threads of the web process. Two things
went wrong there with a class on the server: every page view took the interpreter lock from
the engine (bench/web_load.py: the demo stepped at 0.15× its idle rate under 50 learners), and
anything native that aborts — torch's C++ runtime, say — took the whole site down with it.

Here one child process (started on the first run, with `spawn`, so nothing of the web process
is forked) hosts every session in its own threads and talks to this process over a pipe:

    web process                                       engine process
    ProcessHost.start  ──("start", run, spec)──▶      RunSession thread per run
    ProcessHost.command ─("command", run, cmd)─▶      session.command
    reader thread  ◀──("frame", run, frame)───        every coalesced frame
                   ◀──("state", run, ticking, idle)─  twice a second
                   ◀──("end", run, end)───────────    status/reason or error, packed trace

Django (the database, the channel layer) stays in the web process: the reader thread publishes
frames (events.publish) and hands each run's end to services.run_finish. If the engine process
dies, every run it hosted ends as failed with its exit code, and the next run starts a new one.
The interface is EmbeddedHost's, so services, the keeper and the consumer do not change.
"""
import atexit
import logging
import multiprocessing
import threading
import time
from datetime import datetime

from courseapp.demo.host import TICKING_WITHIN_S
from courseapp.demo.traces import EndedPictures, FrameMirror

logger = logging.getLogger("courseapp.demo")

STATE_EVERY_S = 0.5


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


def _child_main(conn, torch_threads: int) -> None:
    import torch

    torch.set_num_threads(torch_threads)  # the web process needs the other core
    from courseapp.demo.host import RunSession

    sessions: dict[str, RunSession] = {}
    threads: dict[str, threading.Thread] = {}
    done = threading.Event()  # the web process is gone, or everything has stopped
    stopping = threading.Event()
    send = pipe_sender(conn, on_gone=done.set)

    def serve(run_id: str, session: RunSession) -> None:
        end = session.run_to_end(lambda: stopping.is_set() or done.is_set())
        sessions.pop(run_id, None)
        threads.pop(run_id, None)
        send(("end", run_id, end))

    def report() -> None:
        while not done.wait(STATE_EVERY_S):
            for run_id, session in list(sessions.items()):
                send(("state", run_id, session.is_ticking(), session.idle_until(), session.has_started()))

    threading.Thread(target=report, name="demo-engine-state", daemon=True).start()
    while not done.is_set():
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind, run_id = message[0], message[1] if len(message) > 1 else None
        if kind == "start":
            session = RunSession(run_id, message[2], publish=lambda message, r=run_id: send(("frame", r, message)))
            sessions[run_id] = session
            threads[run_id] = threading.Thread(target=serve, args=(run_id, session), name=f"demo-run-{run_id[:8]}")
            threads[run_id].start()
        elif kind == "command" and run_id in sessions:
            sessions[run_id].command(message[2])
        elif kind == "shutdown":
            break
    # Stop and join every engine thread before the interpreter finalises (host.EmbeddedHost.shutdown says why).
    stopping.set()
    for session in list(sessions.values()):
        session.command({"type": "stop", "reason": "shutdown"})
    for thread in list(threads.values()):
        thread.join(10)
    done.set()


# --- the web process's side --------------------------------------------------------------------
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


class ProcessHost:
    def __init__(self, torch_threads: int = 1):
        self.torch_threads = torch_threads
        self.runs: dict[str, _Run] = {}
        self.ended = EndedPictures()  # the last picture of runs that ended lately
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._reader: threading.Thread | None = None
        self._finishing: list[threading.Thread] = []  # ends being written (joined at exit)

    # EmbeddedHost's interface ------------------------------------------------------------------
    def start(self, run_id: str, spec: dict, publish, on_begin, on_finish) -> None:
        """on_begin() → False if the run ended before it could start; on_finish(end) gets
        {"trace", "status", "reason"} or {"trace", "error"}."""
        with self._lock:
            self.runs[run_id] = _Run(publish, on_finish)

        def begin():
            try:
                if not on_begin():
                    self.runs.pop(run_id, None)
                    return
                self._send(("start", run_id, spec))
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
            self._send(("command", run_id, cmd))
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
        with self._lock:
            return list(self.runs.items())

    def shutdown(self, timeout: float = 10.0) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            self._send(("shutdown",), start=False)
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

    # the engine process -------------------------------------------------------------------------
    def _send(self, message, start: bool = True) -> None:
        with self._send_lock:
            if start and (self._proc is None or not self._proc.is_alive()):
                self._spawn()
            if self._conn is None:
                raise OSError("no engine process")
            self._conn.send(message)

    def _spawn(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child_main, args=(child, self.torch_threads), name="demo-engine", daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self._reader = threading.Thread(target=self._read, args=(proc, parent), name="demo-engine-reader", daemon=True)
        self._reader.start()
        atexit.register(self.shutdown)
        logger.info("demo engine process %s started", proc.pid)

    def _read(self, proc, conn) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            kind, run_id = message[0], message[1]
            run = self.runs.get(run_id)
            if run is None:
                continue
            if kind == "frame":
                with run.mirror_lock:
                    run.mirror.apply(message[2])
                run.publish(message[2])
            elif kind == "state":
                run.ticking, run._idle_until, run.started, run.state_at = message[2], message[3], message[4], time.monotonic()
            elif kind == "end":
                self._end(run_id, message[2])
        proc.join(5)
        with self._send_lock:
            if self._proc is proc:
                self._proc, self._conn = None, None
        reason = f"the engine process stopped (exit code {proc.exitcode})"
        if proc.exitcode not in (0, None):
            logger.error("demo engine process %s: %s", proc.pid, reason)
        for run_id, _run in self.live():
            self._end(run_id, {"trace": None, "error": reason})

    def _end(self, run_id: str, end: dict) -> None:
        """The run's end goes to the database from a thread of its own: a write waiting on a lock
        must not hold up the frames of the other runs."""
        with self._lock:
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


def _close_db() -> None:
    from django.db import connections

    connections.close_all()  # this short thread's connections; they would outlive it otherwise
