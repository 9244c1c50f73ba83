"""A served engine in the engine process (courseapp/demo/engine_process.py), as vLLM V1 runs its
EngineCore beside the API server: the site's engine and each lab run's, one key each.

In one process, the engine thread's Python between torch calls and the event loop that writes the
tokens out took turns on one interpreter lock: on 2 cores HTTP streamed 75–85% of the engine's
in-process rate while neither core was full (docs/benchmarks.md, issue #10). Here the web process
only speaks HTTP; `ServedEngine` answers host.ServingEngine's calls (what serving/asgi.py and
engines.py make) by messages to the engine `key` of an EngineProcess.
"""
import asyncio
from types import SimpleNamespace

from courseapp.demo.engine_process import ANSWER_WITHIN_S, READY_WITHIN_S, EngineProcess, Stream
from courseapp.serving.remote import RemoteOutput


class _Handle:
    def __init__(self, stream: Stream):
        self.stream = stream
        self.output = RemoteOutput()

    async def __aiter__(self):
        out, items = self.output, self.stream.items
        while not out.finished:
            self._apply(await items.get())
            # What arrived while the caller was busy writing the last piece goes out as one, as
            # vLLM V1's RequestOutputCollector merges outputs its consumer has not taken yet: a
            # stream that falls behind sends fewer, longer chunks instead of falling further behind.
            while not out.finished and not items.empty():
                self._apply(items.get_nowait())
            yield out

    def _apply(self, item) -> None:
        out = self.output
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


class ServedEngine:
    def __init__(self, process: EngineProcess, key: str, options: dict):
        self.process, self.key, self.options = process, key, options
        self.max_model_len = 0
        self._generation = -1  # pragma: no mutate (the process it was opened in; processes count from 1: any value below reads "none")
        self._closed = False  # pragma: no mutate (None reads as False)

    def ensure_open(self) -> "ServedEngine":
        """Open in the process that runs now (again, if the one before died): loads the model."""
        if self._closed:
            raise RuntimeError("the engine is shutting down")
        process = self.process
        if not self._live():
            process.ensure_running()
            self.max_model_len = process.ask("engine_open", self.key, self.options, wait_s=READY_WITHIN_S)
            self._generation = process.generation
        return self

    def _live(self) -> bool:
        return self._generation == self.process.generation and self.process.running()

    async def open(self, *, messages, prompt, max_tokens, sampling: dict, request_id: str):
        from courseapp.demo.host import ServingRefused
        from courseapp.serving.protocol import ApiError

        if not self._live():
            await asyncio.to_thread(self.ensure_open)  # a new process loads the model: seconds
        process, sid = self.process, (self.key, request_id)
        stream = Stream(asyncio.get_running_loop())
        with process.lock:
            process.streams[sid] = process.opening[sid] = stream
        try:
            process.send(("open", self.key, request_id, messages, prompt, max_tokens, sampling))
            kind, *rest = await stream.accepted
        except BaseException:  # the caller went away (cancelled) before the engine answered
            process.forget(sid)
            self.abort(request_id)  # the engine may have taken it meanwhile: free its blocks
            raise
        if kind == "accepted":
            return _Handle(stream), rest[0]
        process.forget(sid)
        if kind == "refused":
            raise ServingRefused(rest[0], rest[1])
        raise ApiError(500, f"The engine failed: {rest[0]}", type="internal_server_error")

    def abort(self, request_id: str) -> None:
        try:
            self.process.send(("abort", self.key, request_id))
        except OSError:  # the engine process is gone, and its requests with it
            pass

    def _ask(self, what: str, *args, **kwargs):
        self.ensure_open()
        return self.process.ask(what, self.key, *args, **kwargs)

    def snapshot(self):
        return self._ask("snapshot") if self._live() else None

    def log_lines(self, since: float = 0.0) -> list[dict]:  # pragma: no mutate (wall-clock times: 0 and 1 are both long ago)
        return self._ask("log_lines", since) if self._live() else []

    def check_health(self) -> None:
        """Its process answers (one that died is started again here, as the next request would)."""
        if self.process.stopped:
            raise RuntimeError("the engine is shutting down")
        self._ask("check_health")

    def tokenize(self, **kwargs) -> list[int]:
        return self._ask("tokenize", **kwargs)

    def detokenize(self, ids: list[int]) -> str:
        return self._ask("detokenize", ids)

    def token_strings(self, ids: list[int]) -> dict[int, str]:
        return self._ask("token_strings", ids)

    def view_open(self, publish) -> bool:
        """Its steps drawn for the live view (engines.view_open counts the viewers)."""
        return self._live() and self.process.view_open(self.key, publish)

    def view_close(self) -> None:
        self.process.view_close(self.key)

    def view_snapshot(self) -> tuple[int, str] | None:
        return self.process.view_snapshot(self.key)

    def stop(self) -> None:
        """Close this engine (its pool, its thread); the process goes on serving the others."""
        if self._closed:
            return
        self._closed = True
        self.process.view_close(self.key)
        if self._live():
            try:
                self.process.ask("engine_close", self.key, wait_s=ANSWER_WITHIN_S)
            except (OSError, RuntimeError, TimeoutError):
                pass
