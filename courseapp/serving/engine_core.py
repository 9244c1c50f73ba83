"""The served engine in a process of its own beside the web server (`make run`), as vLLM V1 splits
its API server from its EngineCore process.

In one process, the engine thread's Python between torch calls and the event loop that writes the
tokens out took turns on one interpreter lock: on 2 cores HTTP streamed 75–85% of the engine's
in-process rate while neither core was full (docs/benchmarks.md, issue #10). Here the child steps
the engine and the web process only speaks HTTP; they talk over a pipe, one message per step for
every stream:

    web process (EngineCore)                          engine process (_core_main)
    open()    ──("open", id, messages, prompt, …)──▶  ServingEngine.open: prepare, submit
              ◀──("accepted", id, prompt tokens)──     or ("refused", id, message, param)
    handle    ◀──("out", [(id, text+, ids+, …), …])── one message per step, all its streams
    abort()   ──("abort", id)──▶                       frees the request's blocks
    snapshot()──("ask", n, "snapshot")──▶ ◀──("answer", n, …)──  /metrics' gauges and counters

The interface is host.ServingEngine's (what serving/asgi.py and engines.py call). If the engine
process dies, its open streams end with an error naming the exit code and the next request
starts a new one.
"""
import asyncio
import atexit
import dataclasses
import itertools
import logging
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from courseapp.serving.remote import RemoteOutput

logger = logging.getLogger("courseapp.serving")

READY_WITHIN_S = 300  # loading the model on a busy machine
ANSWER_WITHIN_S = 10


# --- the engine process ------------------------------------------------------------------------
def _core_main(conn, torch_threads: int, options: dict) -> None:
    import torch

    torch.set_num_threads(torch_threads)
    # The engine's periodic stats line ("Engine 000: Avg prompt throughput …") on the server's
    # console, as the web process's LOGGING shows it (this process has no Django settings loaded).
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from courseapp.demo.engine_process import pipe_sender

    send = pipe_sender(conn)  # if the web process is gone, the next recv below ends the loop
    try:
        from courseapp.demo.host import ServingEngine, ServingRefused

        engine = ServingEngine(**options)
    except Exception as exc:
        send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    batch: list = []  # this step's outputs; only the engine thread adds to it (under its step lock)

    def flush() -> None:
        if batch:
            items = batch[:]
            batch.clear()
            send(("out", items))

    engine.loop.after_step = flush  # in the engine thread: no other thread here wakes per step

    class PipeSink:
        """Takes one request's outputs in the engine thread: only what is new, the text's new end
        (all of it if detokenising changed its past) and the new token ids; metrics at the end."""

        loop = None

        def __init__(self, rid: str):
            self.rid, self.text, self.count = rid, "", 0

        def put(self, item) -> None:
            if isinstance(item, BaseException):
                batch.append((self.rid, "error", str(item)))
            elif hasattr(item, "token_ids"):
                grew = item.text.startswith(self.text)
                piece = item.text[len(self.text):] if grew else item.text
                metrics = dataclasses.asdict(item.metrics) if item.finished else None
                logprobs = None if item.logprobs is None else item.logprobs[self.count:]
                prompt_logprobs = item.prompt_logprobs if self.count == 0 else None  # complete by the first token
                batch.append((self.rid, grew, piece, item.token_ids[self.count:], item.finished, item.finish_reason, metrics,
                              logprobs, prompt_logprobs))
                self.text, self.count = item.text, len(item.token_ids)

    def open_request(rid: str, messages, prompt: str, max_tokens, sampling: dict) -> None:
        try:
            ids, max_tokens = engine.prepare(messages=messages, prompt=prompt, max_tokens=max_tokens)
            engine.submit(ids, {**sampling, "max_tokens": max_tokens}, rid, sink=PipeSink(rid))
            send(("accepted", rid, len(ids)))  # its first outputs may be in the pipe already
        except ServingRefused as refused:
            send(("refused", rid, str(refused), refused.param))
        except Exception as exc:
            send(("error", rid, f"{type(exc).__name__}: {exc}"))

    # Requests that arrive together are prepared and submitted together: each submit waits for the
    # step lock, and one after another the eighth of eight waited seven steps for its first token.
    opener = ThreadPoolExecutor(max_workers=options.get("max_num_seqs", 32), thread_name_prefix="engine-core-open")
    send(("ready", engine.max_model_len))
    answers = {"snapshot": engine.snapshot, "log_lines": engine.log_lines, "tokenize": engine.tokenize,
               "detokenize": engine.detokenize, "token_strings": engine.token_strings,
               "check_health": engine.check_health}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if kind == "open":
            opener.submit(open_request, *message[1:])
        elif kind == "abort":
            engine.abort(message[1])
        elif kind == "ask":
            number, what, args, kwargs = message[1], message[2], message[3], message[4]
            try:
                send(("answer", number, "ok", answers[what](*args, **kwargs)))
            except ServingRefused as refused:
                send(("answer", number, "refused", (str(refused), refused.param)))
            except Exception as exc:
                send(("answer", number, "error", f"{type(exc).__name__}: {exc}"))
        elif kind == "stop":
            break
    opener.shutdown(cancel_futures=True)
    engine.stop()  # before the interpreter finalises: an engine thread inside torch would abort it


# --- the web process's side --------------------------------------------------------------------
class _Stream:
    """One request's outputs, as its event loop reads them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.accepted: asyncio.Future = loop.create_future()
        self.items: asyncio.Queue = asyncio.Queue()


class CoreHandle:
    def __init__(self, stream: _Stream):
        self.stream = stream
        self.output = RemoteOutput()

    async def __aiter__(self):
        out = self.output
        while not out.finished:
            item = await self.stream.items.get()
            if item[1] == "error":
                raise RuntimeError(f"the engine process failed: {item[2]}")
            _rid, grew, piece, new_ids, out.finished, out.finish_reason, metrics, logprobs, prompt_logprobs = item
            out.text = out.text + piece if grew else piece
            out.token_ids.extend(new_ids)
            if logprobs is not None:
                out.logprobs = (out.logprobs or []) + logprobs
            if prompt_logprobs is not None:
                out.prompt_logprobs = prompt_logprobs
            if metrics is not None:
                out.metrics = SimpleNamespace(**metrics)
            yield out


class EngineCore:
    """host.ServingEngine's calls, answered by the engine in its own process."""

    def __init__(self, torch_threads: int = 1, **options):
        self.torch_threads, self.options = torch_threads, options
        self.max_model_len = 0
        self._streams: dict[str, _Stream] = {}  # until their last output
        self._opening: dict[str, _Stream] = {}  # until the engine process accepts or refuses them
        self._answers: dict[int, list] = {}
        self._numbers = itertools.count()
        self._lock = threading.Lock()  # the maps above
        self._send_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._proc = self._conn = None
        self._stopped = False
        self._ensure_running()
        atexit.register(self.stop)

    # ServingEngine's interface -----------------------------------------------------------------
    async def open(self, *, messages, prompt: str, max_tokens, sampling: dict, request_id: str):
        from courseapp.demo.host import ServingRefused
        from courseapp.serving.protocol import ApiError

        if not self._running():
            await asyncio.to_thread(self._ensure_running)  # a new process loads the model: seconds
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            self._streams[request_id] = self._opening[request_id] = stream
        try:
            self._send(("open", request_id, messages, prompt, max_tokens, sampling))
            kind, *rest = await stream.accepted
        except BaseException:  # the caller went away (cancelled) before the engine answered
            self._forget(request_id)
            self.abort(request_id)  # the engine may have taken it meanwhile: free its blocks
            raise
        if kind == "accepted":
            return CoreHandle(stream), rest[0]
        self._forget(request_id)
        if kind == "refused":
            raise ServingRefused(rest[0], rest[1])
        raise ApiError(500, f"The engine failed: {rest[0]}", type="internal_server_error")

    def abort(self, request_id: str) -> bool:
        try:
            self._send(("abort", request_id))
        except OSError:
            return False
        return True

    def snapshot(self):
        return self._ask("snapshot") if self._running() else None

    def log_lines(self, since: float = 0.0) -> list[dict]:
        return self._ask("log_lines", since) if self._running() else []

    def check_health(self) -> None:
        """Its process answers (one that died is started again here, as the next request would)."""
        if self._stopped:
            raise RuntimeError("the engine is shutting down")
        self._ask("check_health")

    def tokenize(self, **kwargs) -> list[int]:
        return self._ask("tokenize", **kwargs)

    def detokenize(self, ids: list[int]) -> str:
        return self._ask("detokenize", ids)

    def token_strings(self, ids: list[int]) -> dict[int, str]:
        return self._ask("token_strings", ids)

    def stop(self) -> None:
        self._stopped = True
        proc = self._proc
        if proc is None:
            return
        try:
            self._send(("stop",))
        except OSError:
            pass
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)

    # the process -------------------------------------------------------------------------------
    def _running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _ensure_running(self) -> None:
        with self._start_lock:
            if self._running() or self._stopped:
                return
            ctx = multiprocessing.get_context("spawn")  # nothing of the web process is forked
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_core_main, args=(child, self.torch_threads, self.options),
                               name="engine-core", daemon=True)
            proc.start()
            child.close()
            if not parent.poll(READY_WITHIN_S):
                proc.terminate()
                raise RuntimeError(f"the engine process did not start within {READY_WITHIN_S} s")
            try:
                first = parent.recv()
            except EOFError:
                proc.join(5)
                raise RuntimeError(f"the engine process exited while starting (exit code {proc.exitcode})") from None
            if first[0] != "ready":
                proc.join(5)
                raise RuntimeError(f"the engine process could not start: {first[1]}")
            self.max_model_len = first[1]
            self._proc, self._conn = proc, parent
            threading.Thread(target=self._read, args=(proc, parent), name="engine-core-reader", daemon=True).start()
            logger.info("engine process %s serves the API", proc.pid)

    def _send(self, message) -> None:
        with self._send_lock:
            if self._conn is None:
                raise OSError("no engine process")
            self._conn.send(message)

    def _ask(self, what: str, *args, **kwargs):
        from courseapp.demo.host import ServingRefused

        if not self._running():
            self._ensure_running()
        number = next(self._numbers)
        slot = self._answers[number] = [threading.Event(), None]
        try:
            self._send(("ask", number, what, args, kwargs))
            if not slot[0].wait(ANSWER_WITHIN_S):
                raise TimeoutError(f"the engine process did not answer {what} within {ANSWER_WITHIN_S} s")
        finally:
            self._answers.pop(number, None)
        kind, value = slot[1]
        if kind == "refused":
            raise ServingRefused(*value)
        if kind == "error":
            raise RuntimeError(value)
        return value

    def _read(self, proc, conn) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "out":
                self._deliver(message[1])
            elif kind in ("accepted", "refused", "error"):
                with self._lock:
                    stream = self._opening.pop(message[1], None)
                if stream is not None:
                    stream.loop.call_soon_threadsafe(_resolve, stream.accepted, (kind, *message[2:]))
            elif kind == "answer":
                slot = self._answers.get(message[1])
                if slot is not None:
                    slot[1] = (message[2], message[3])
                    slot[0].set()
        proc.join(5)
        with self._send_lock:
            if self._proc is proc:
                self._conn = None
        reason = f"the engine process stopped (exit code {proc.exitcode})"
        if proc.exitcode not in (0, None) and not self._stopped:
            logger.error("engine process %s: %s", proc.pid, reason)
        with self._lock:
            streams = {**self._streams, **self._opening}
            self._streams, self._opening = {}, {}
        for rid, stream in streams.items():
            stream.loop.call_soon_threadsafe(_fail, stream, rid, reason)

    def _deliver(self, items: list) -> None:
        """One step's outputs: one wake-up per event loop for all of its streams."""
        by_loop: dict = {}
        with self._lock:
            for item in items:
                stream = self._streams.get(item[0])
                if stream is None:
                    continue
                by_loop.setdefault(stream.loop, []).append((stream, item))
                if item[1] == "error" or item[4]:  # its last output
                    del self._streams[item[0]]
        for loop, pairs in by_loop.items():
            loop.call_soon_threadsafe(_put_all, pairs)

    def _forget(self, request_id: str) -> None:
        with self._lock:
            self._streams.pop(request_id, None)
            self._opening.pop(request_id, None)


def _resolve(future: asyncio.Future, value) -> None:
    if not future.done():
        future.set_result(value)


def _put_all(pairs) -> None:
    for stream, item in pairs:
        stream.items.put_nowait(item)


def _fail(stream: _Stream, rid: str, reason: str) -> None:
    _resolve(stream.accepted, ("error", reason))
    stream.items.put_nowait((rid, "error", reason))
