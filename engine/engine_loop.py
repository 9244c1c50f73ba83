"""A thread-safe front for servers: the engine steps in its own thread; any thread or event
loop submits requests, streams their tokens, aborts them, and watches step events.

Subscribers never slow the step loop: each has a bounded buffer and, when it is full, the
oldest event is dropped (latest wins). Request streams are never dropped. A step's event reaches
the subscribers before that step's outputs reach the callers.
"""
import asyncio
import logging
import queue
import threading
import time
from collections import deque
from contextlib import contextmanager

from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.stat_logger import StatLogger

logger = logging.getLogger("engine.loop")
_DONE = object()


class _Sink:
    """Delivers items to a thread (queue.Queue) or to an asyncio loop (asyncio.Queue)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self.queue = asyncio.Queue() if loop else queue.Queue()

    def put(self, item) -> None:
        if self.loop is None:
            self.queue.put(item)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class _Outbox:
    """A step's outputs for event-loop sinks, handed over with one wake-up per loop instead of one
    per request (32 streams: one call_soon_threadsafe a step, not 32)."""

    def __init__(self):
        self.items: dict[asyncio.AbstractEventLoop, list] = {}

    def put(self, sink: _Sink, item) -> None:
        if sink.loop is None:
            sink.put(item)
        else:
            self.items.setdefault(sink.loop, []).append((sink.queue, item))

    def flush(self) -> None:
        for loop, items in self.items.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(_put_all, items)
        self.items = {}


def _put_all(items) -> None:
    for target, item in items:
        target.put_nowait(item)


class RequestHandle:
    """One submitted request: iterate (or `async for`) to get outputs as tokens arrive."""

    def __init__(self, request_id: str, loop_front: "EngineLoop", sink: _Sink):
        self.request_id = request_id
        self._front = loop_front
        self._sink = sink
        self.final: RequestOutput | None = None

    def _accept(self, item):
        """The output to hand out, or None once the stream has ended; re-raises engine failures."""
        if item is _DONE:
            return None
        if isinstance(item, BaseException):
            raise item
        if item.finished:
            self.final = item
        return item

    def __iter__(self):
        while (item := self._accept(self._sink.queue.get())) is not None:
            yield item

    async def __aiter__(self):
        q = self._sink.queue
        while (item := self._accept(await q.get())) is not None:
            # Outputs are cumulative: of those that arrived while the caller was busy, the latest
            # says it all (vLLM V1's RequestOutputCollector keeps one pending output the same way).
            while not item.finished and not q.empty():
                latest = self._accept(q.get_nowait())
                if latest is None:  # the stream ended (an abort) after this output
                    yield item
                    return
                item = latest
            yield item

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finishes; on timeout it is aborted and TimeoutError raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.final is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.abort()
                raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s")
            try:
                item = self._sink.queue.get(timeout=left)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            if item is not _DONE and item.finished:
                self.final = item
        return self.final

    def abort(self) -> bool:
        return self._front.abort(self.request_id)


class Subscription:
    """Step events for one watcher: bounded, latest wins."""

    def __init__(self, maxsize: int, loop: asyncio.AbstractEventLoop | None = None):
        self.buffer: deque = deque(maxlen=maxsize)
        self.dropped = 0
        self._cond = threading.Condition()
        self._loop = loop
        self._ready = asyncio.Event() if loop else None
        self.closed = False

    def put(self, event) -> None:
        with self._cond:
            if len(self.buffer) == self.buffer.maxlen:
                self.dropped += 1
            self.buffer.append(event)
            self._cond.notify_all()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._ready.set)

    def get(self, timeout: float | None = None):
        with self._cond:
            if not self._cond.wait_for(lambda: self.buffer or self.closed, timeout):
                return None
            return self.buffer.popleft() if self.buffer else None

    def drain(self) -> list:
        with self._cond:
            items = list(self.buffer)
            self.buffer.clear()
            return items

    async def aget(self):
        while not self.buffer and not self.closed:
            self._ready.clear()
            await self._ready.wait()
        return self.buffer.popleft() if self.buffer else None


class EngineLoop:
    def __init__(self, engine: LLMEngine, idle_wait: float = 0.05, stat_logger: StatLogger | None = None):
        self.engine = engine
        self.stat_logger = stat_logger  # the server log: V1's periodic line (engine/stat_logger.py)
        self.idle_wait = idle_wait
        self.step_delay = 0.0  # seconds between steps (the demo's speed control)
        self._lock = threading.RLock()  # held while stepping; submit/abort/snapshot take it briefly (_turn)
        self._waiters = 0  # threads waiting in _turn for the lock
        self._waiters_cond = threading.Condition()
        self._wake = threading.Event()
        self._paused = threading.Event()
        self._step_once = threading.Event()
        self._handles: dict[str, RequestHandle] = {}
        self._sent: dict[str, int] = {}
        self._subs: list[Subscription] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.after_step = None  # called in the engine thread once a step's outputs are delivered
        self.error: BaseException | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "EngineLoop":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for sub in self._subs:
            sub.closed = True

    # --- requests ------------------------------------------------------------------------------
    def submit(self, prompt, params=None, request_id: str | None = None, loop: asyncio.AbstractEventLoop | None = None,
               sink=None) -> RequestHandle:
        """Queue a request from any thread. Bad input raises here, before any work. `sink`: an
        object with `loop = None` and `put(item)` that takes the outputs in the engine thread
        itself (then the handle is not iterated; `after_step` marks the end of each step)."""
        sink = sink or _Sink(loop)
        with self._turn():
            if self.error is not None:  # nobody would ever step it
                raise RuntimeError(f"the engine stopped: {self.error}")
            rid = self.engine.add_request(prompt, params, request_id)
            handle = RequestHandle(rid, self, sink)
            self._handles[rid] = handle
            self._sent[rid] = 0
        self._wake.set()
        return handle

    async def submit_async(self, prompt, params=None, request_id: str | None = None) -> RequestHandle:
        return self.submit(prompt, params, request_id, loop=asyncio.get_running_loop())

    def abort(self, request_id: str) -> bool:
        with self._turn():
            aborted = self.engine.abort_request(request_id)
            if aborted:
                self._deliver(request_id)
                if self.after_step is not None:
                    self.after_step()
        return aborted

    # --- watching and pacing -------------------------------------------------------------------
    def subscribe(self, maxsize: int = 64, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        sub = Subscription(maxsize, loop)
        self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.closed = True
        if sub in self._subs:
            self._subs.remove(sub)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()
        self._wake.set()

    def step_once(self) -> None:
        """While paused, run exactly one step."""
        self._step_once.set()
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def snapshot(self):
        with self._turn():
            return self.engine.metrics_snapshot()

    # --- the lock, shared fairly ----------------------------------------------------------------
    @contextmanager
    def _turn(self):
        """The step lock for a caller (submit, abort, snapshot). A plain lock would starve it: the
        stepping thread releases and takes it again at once, so an event loop asking for a
        snapshot mid-burst would block until the engine went idle (every stream stalled)."""
        with self._waiters_cond:
            self._waiters += 1
        try:
            self._lock.acquire()
        finally:
            with self._waiters_cond:
                self._waiters -= 1
                self._waiters_cond.notify_all()
        try:
            yield
        finally:
            self._lock.release()

    def _let_waiters_in(self) -> None:
        """Between steps: wait (briefly) until every caller waiting for the lock has had it."""
        if self._waiters:
            with self._waiters_cond:
                self._waiters_cond.wait_for(lambda: self._waiters == 0, timeout=0.05)

    # --- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._steps()
        except Exception as exc:  # a broken step (or log line) must not leave callers waiting forever
            logger.exception("engine loop failed")
            with self._lock:  # submit checks `error` under the same lock: no request slips in after
                self.error = exc
                self._fail_all(exc)

    def _steps(self) -> None:
        while not self._stopping:
            if self._paused.is_set() and not self._step_once.is_set():
                self._wake.wait(self.idle_wait)
                self._wake.clear()
                continue
            with self._lock:
                busy = self.engine.has_unfinished_requests()
                if busy:
                    self._step_once.clear()
                    # the pool's picture only when someone watches (the served demo view)
                    event = self.engine.step(picture=bool(self._subs))
                    # The step's event goes to every subscriber before its outputs go to the
                    # callers: whoever holds a request's output (its final one above all) finds
                    # the step that produced it already in each subscription. Published after the
                    # outputs, a watcher that read its events once the request finished missed the
                    # last step now and then (a race under CPU load). A put never blocks (a
                    # bounded deque), so subscribers still cannot slow the loop.
                    for sub in list(self._subs):
                        sub.put(event)
                    outbox = _Outbox()
                    for rid in list(self._handles):
                        self._deliver(rid, outbox)
                    outbox.flush()
                    if self.after_step is not None:
                        self.after_step()
                self._log(event if busy else None)
            self._let_waiters_in()
            if busy:
                if self.step_delay:
                    time.sleep(self.step_delay)
            else:
                self._wake.wait(self.idle_wait)
                self._wake.clear()

    def _log(self, event) -> None:
        if self.stat_logger is None:
            return
        if event is not None and event.preempted:
            self.stat_logger.on_preempted(event.preempted)
        if self.stat_logger.due():
            self.stat_logger.log_stats(self.engine.metrics_snapshot())

    def _deliver(self, rid: str, outbox: "_Outbox | None" = None) -> None:
        req = self.engine.requests.get(rid)
        handle = self._handles.get(rid)
        if req is None or handle is None:
            return
        send = outbox.put if outbox is not None else (lambda sink, item: sink.put(item))
        if len(req.output_token_ids) != self._sent[rid] or req.status.finished:
            self._sent[rid] = len(req.output_token_ids)
            send(handle._sink, self.engine.output(rid))
        if req.status.finished:
            send(handle._sink, _DONE)
            del self._handles[rid]
            del self._sent[rid]
            self.engine.release(rid)

    def _fail_all(self, exc: BaseException) -> None:
        for handle in self._handles.values():
            handle._sink.put(RuntimeError(f"the engine stopped: {exc}"))
        self._handles.clear()
        if self.after_step is not None:
            self.after_step()
        for sub in self._subs:
            sub.closed = True
