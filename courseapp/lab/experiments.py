"""§6's five experiments, run against any OpenAI-compatible server over HTTP — this app's, a lab
run's own engine, or a learner's real vLLM — the way a learner's measuring script would:

    0. one warm-up request, discarded
    1. one request alone: its output tokens per second
    2. the same request `concurrency` times at once: each one's tokens/s, and the server's
       (all output tokens ÷ the whole span)
    3. a ~1,500-token shared system prompt, twice in a row: each TTFT; then with the current time
       (to the second) at its front, twice: each TTFT
    4. during 2, /metrics every `sample_every_s` (0.1 s: §6 says every second, but on a small
       model experiment 2 can be over in one): running, waiting, KV cache usage (0–1)
    5. vllm:num_preemptions_total just before and after 2, and the server's log lines
    and, beyond §6's five: 6. a sweep, the request sent 1, 2, 4, 8 and 16 times at once, each
    level's per-request and server tokens/s (the latency–throughput picture of §3.3); 7. where the
    server has a static mode (this app's lab: `batching_urls`), twelve requests of mixed answer
    lengths to an engine batching statically and to one batching continuously (§3.2)

Temperature 0 and `max_tokens` fixed; TTFT is measured from the stream (the first chunk that
carries text). No Django here: the lab page and `manage.py run_lab` both call `run()`.
"""
import asyncio
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

import httpx2 as httpx  # what the openai client itself uses
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from engine.training.corpus import LONG_SYSTEM_PROMPT, SYSTEM_PROMPT

SWEEP_LEVELS = (1, 2, 4, 8, 16)
QUESTION = ("지난주 화요일에 주문한 러닝화(주문번호 20261124-0457)가 아직 도착하지 않았습니다. 송장 조회를 하면 "
            "사흘째 '배송 중'으로만 나와요. 이번 주 토요일에 마라톤 대회가 있어서 그 전에 꼭 받아야 하는데, 언제쯤 "
            "받을 수 있을까요? 늦어진다면 배송지를 회사로 바꾸는 것도 가능한지 알려 주세요.")
SHORT_QUESTION = "이 지침에 따르면 환불은 며칠 안에 처리되나요?"


def shared_prefix_messages(tag: str, stamp: str = "") -> list[dict]:
    """Experiment 3's request: the long system prompt (after the time, when stamped) and a short question."""
    return [{"role": "system", "content": stamp + tag + LONG_SYSTEM_PROMPT}, {"role": "user", "content": SHORT_QUESTION}]


def longest_messages() -> list[dict]:
    """Experiment 3's longest request, as the pool must hold it whole (services.min_num_blocks)."""
    return shared_prefix_messages("[세션 99999999]\n", "현재 시각: 2099-12-31 23:59:59\n")

# What each series is called in vLLM's /metrics, current name first, then older aliases
# (V0 and early V1 said gpu_cache_usage_perc and gpu_prefix_cache_*).
METRIC_NAMES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    # The server's own time between a request's tokens (V1's histogram; its older name before it).
    "itl_sum": ("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"),
    "itl_count": ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"),
}


def token_interval_ms(before: dict, after: dict) -> float | None:
    """The server's mean time between a request's tokens over the requests that ran between two
    scrapes, in ms (None: the server has no such histogram, or no token came)."""
    if not all("itl_sum" in d and "itl_count" in d for d in (before, after)):
        return None
    count = after["itl_count"] - before["itl_count"]
    return (after["itl_sum"] - before["itl_sum"]) / count * 1000 if count > 0 else None


BATCHING_SEATS = 4  # experiment 7: seats (max_num_seqs) of both engines, so that requests wait for them
BATCHING_REQUESTS = 12  # every third runs to max_tokens, the others stop at an eighth of it


def short_answer_tokens(max_tokens: int) -> int:
    """Experiment 7's short answers: an eighth of the long ones, at least 4 tokens (a short
    max_tokens would otherwise leave them 1 or 2 tokens, too short to wait behind anything)."""
    return max(4, max_tokens // 8)


class LabError(RuntimeError):
    """The lab could not go on (the server refused, went away, or speaks another protocol)."""


@dataclass(slots=True)
class LabSettings:
    base_url: str  # the server's root: /v1/… and /metrics hang below it
    model: str = "munuibot"
    api_key: str = ""
    concurrency: int = 8
    max_tokens: int = 200
    temperature: float = 0.0
    sample_every_s: float = 0.1  # on this small model experiment 2 can end within a second
    ignore_eos: bool = False  # vLLM's extension: every answer runs to max_tokens
    launch_command: str = ""  # how the server was started, quoted in the report
    timeout_s: float = 300.0
    # Experiment 7 (optional): two engines of this server with BATCHING_SEATS seats each, one
    # batching continuously, one statically: {"continuous": base URL, "static": base URL}. vLLM has
    # no static mode, so `run_lab` against another server leaves it out.
    batching_urls: dict | None = None


@dataclass(slots=True)
class Measured:
    """One request as the client saw it."""

    label: str
    started: float  # seconds since the lab began
    ttft: float | None
    elapsed: float
    prompt_tokens: int | None
    completion_tokens: int
    cached_tokens: int | None
    text: str

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed if self.elapsed > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


@dataclass(slots=True)
class Progress:
    done: int = 0
    total: int = 0
    message: str = ""  # an English msgid with %(name)s params, translated where it is shown
    params: dict = field(default_factory=dict)


def gettext_noop(message: str) -> str:
    """Marks a msgid for makemessages (no Django here); translated where it is shown."""
    return message


@dataclass
class Lab:
    settings: LabSettings
    read_logs: object = None  # callable(wall_since) → [{time, kind, line}] or None when unknown
    on_progress: object = None  # callable(Progress)
    progress: Progress = field(default_factory=Progress)
    script: list = field(default_factory=list)  # the script's own output lines
    metric_names: dict = field(default_factory=dict)  # series → the name found in /metrics

    # --- output --------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        self.script.append(line)

    def _advance(self, message: str, by: int = 1, **params) -> None:
        """`message`: an English msgid (gettext_noop) with %(name)s `params`, translated where it
        is shown (LabRun.progress_text): the page in its reader's language, the terminal in Korean."""
        self.progress.done += by
        self.progress.message, self.progress.params = message, params
        if self.on_progress:
            self.on_progress(self.progress)

    # --- HTTP ----------------------------------------------------------------------------------
    def _client(self, base: str) -> AsyncOpenAI:
        """The official client for a server's root (no retries: a refusal is the lab's to report)."""
        s = self.settings
        return AsyncOpenAI(base_url=f"{base}/v1", api_key=s.api_key or "EMPTY", max_retries=0, timeout=s.timeout_s)

    async def _ask(self, api: AsyncOpenAI, label: str, messages: list, t0: float, max_tokens: int | None = None,
                   ignore_eos: bool | None = None) -> Measured:
        s = self.settings
        extra = {"ignore_eos": True} if (s.ignore_eos if ignore_eos is None else ignore_eos) else None
        start = time.perf_counter()
        ttft, text, usage, chunks = None, "", None, 0
        stream = await api.chat.completions.create(
            model=s.model, messages=messages, temperature=s.temperature, max_tokens=max_tokens or s.max_tokens, stream=True,
            stream_options={"include_usage": True}, extra_body=extra)
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                piece = choice.delta.content or ""
                if piece:
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
                    text += piece
        elapsed = time.perf_counter() - start
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        return Measured(label, start - t0, ttft, elapsed, usage.prompt_tokens if usage else None,
                        usage.completion_tokens if usage else chunks,  # without usage, chunks ≈ tokens
                        getattr(details, "cached_tokens", None) if details else None, text)

    async def _scrape(self, http: httpx.AsyncClient) -> dict:
        response = await http.get(self.settings.base_url.rstrip("/") + "/metrics")  # pragma: no mutate (tidy only: httpx sends //x as /x)
        if response.status_code != 200:
            raise LabError(f"GET /metrics answered {response.status_code}")
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                model = sample.labels.get("model_name")
                if model is not None and model != self.settings.model:
                    continue
                found.setdefault(sample.name, {})
                key = tuple(sorted(sample.labels.items()))
                found[sample.name][key] = sample.value
        values = {}
        for series, names in METRIC_NAMES.items():
            for name in names:
                if name in found:
                    self.metric_names[series] = name
                    values[series] = sum(found[name].values())  # engines of a scaled server, added up
                    break
        return values

    # --- the experiments -----------------------------------------------------------------------
    async def run(self) -> dict:
        s = self.settings
        if s.concurrency < 1 or s.max_tokens < 1:
            raise LabError("concurrency and max_tokens must be at least 1")
        self.progress.total = 2 + s.concurrency + 4 + len(SWEEP_LEVELS) + (2 if s.batching_urls else 0)
        report = {"settings": {k: v for k, v in asdict(s).items() if k != "api_key"},
                  "started_at": datetime.now().astimezone().isoformat(timespec="seconds")}
        base = s.base_url.rstrip("/")  # pragma: no mutate (tidy only: httpx sends //x as /x)
        api = self._client(base)
        headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
        t0, lab_wall_start = time.perf_counter(), time.time()
        # The model's own system prompt (it was trained with it) and a customer's question.
        user = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
        async with httpx.AsyncClient(timeout=s.timeout_s, headers=headers) as http:  # the lab's timeout bounds a scrape too
            self.say(f"server {base}  model {s.model}  temperature {s.temperature:g}  max_tokens {s.max_tokens}"
                     + ("  ignore_eos" if s.ignore_eos else ""))
            warm = await self._ask(api, "warm-up", user, t0)
            self.say(f"[0] warm-up: {warm.completion_tokens} tokens in {warm.elapsed:.2f} s (discarded)")
            self._advance(gettext_noop("warm-up, 1 request (discarded)"))

            alone_from = await self._scrape(http)
            one = await self._ask(api, "1", user, t0)
            self.say(f"[1] alone: ttft {_s(one.ttft)}, {one.completion_tokens} tokens in {one.elapsed:.2f} s "
                     f"→ {one.tokens_per_s:.1f} tok/s")
            self._advance(gettext_noop("experiment 1: one request"))

            window = [time.time()]
            before = await self._scrape(http)
            series, many, span = await self._concurrent(api, http, user, t0)
            after = await self._scrape(http)
            window.append(time.time())
            total = sum(m.completion_tokens for m in many)
            for m in many:
                self.say(f"[2] #{m.label}: ttft {_s(m.ttft)}, {m.completion_tokens} tokens in {m.elapsed:.2f} s "
                         f"→ {m.tokens_per_s:.1f} tok/s")
            self.say(f"[2] server: {total} tokens / {span:.2f} s = {total / span:.1f} tok/s")
            # What the server itself measured between tokens, alone and together: the engine's
            # side of experiment 2, without this client's and the HTTP layer's share.
            itl = {"alone_ms": token_interval_ms(alone_from, before), "together_ms": token_interval_ms(before, after),
                   "metric": self.metric_names.get("itl_sum", "").removesuffix("_sum") or None}
            if itl["alone_ms"] is not None and itl["together_ms"] is not None:
                self.say(f"[2] {itl['metric']}: a token every {itl['alone_ms']:.2f} ms alone, "
                         f"{itl['together_ms']:.2f} ms with {len(many)} at once")
            preempted = None
            if "preemptions" in before and "preemptions" in after:
                preempted = int(after["preemptions"] - before["preemptions"])
                self.say(f"[5] {self.metric_names['preemptions']}: before {before['preemptions']:g}, "
                         f"after {after['preemptions']:g} → {preempted} preemption(s)")

            pairs = await self._shared_prefix(api, t0)
            sweep = await self._sweep(api, user, t0)
            batching = await self._batching(user, t0) if s.batching_urls else None
            logs = self._logs(lab_wall_start, window)

        report.update(
            finished_at=datetime.now().astimezone().isoformat(timespec="seconds"),
            warmup=warm.to_dict(), single=one.to_dict(),
            concurrent={"requests": [m.to_dict() for m in many], "span_s": span, "total_tokens": total,
                        "server_tokens_per_s": total / span if span else 0.0,  # pragma: no mutate (requests never take 0 s)
                        "server_token_interval": itl},
            prefix=pairs, series=series, sweep=sweep, batching=batching,
            preemptions={"before": before.get("preemptions"), "after": after.get("preemptions"), "delta": preempted},
            logs=logs, metric_names=dict(self.metric_names), script=list(self.script))
        return report

    def _logs(self, since: float, window: list[float]) -> list[dict] | None:
        """The server's log lines since the lab began (None: this server's log is not readable
        from here), each marked whether it fell during experiment 2 (None: the line has no time).
        A second either side counts: a log's clock has whole seconds, and a periodic line written
        just after covers the interval before it."""
        if self.read_logs is None:
            return None
        return [{**entry, "during_2": None if entry["time"] is None else window[0] - 1.0 <= entry["time"] <= window[1] + 1.0}
                for entry in self.read_logs(since)]

    async def _concurrent(self, api, http, user, t0) -> tuple[list, list[Measured], float]:
        s = self.settings
        series: list[dict] = []
        done = asyncio.Event()

        async def point() -> dict:
            values = await self._scrape(http)
            return {"time": datetime.now().astimezone().strftime("%H:%M:%S.%f")[:-4], "t": round(time.perf_counter() - start, 3),
                    "running": values.get("running"), "waiting": values.get("waiting"), "kv": values.get("kv")}

        async def sample():
            while True:
                series.append(await point())
                try:
                    await asyncio.wait_for(done.wait(), s.sample_every_s)
                    return
                except TimeoutError:
                    continue

        async def one(i: int) -> Measured:
            measured = await self._ask(api, str(i + 1), user, t0)
            self._advance(gettext_noop("experiment 2: %(i)d of %(n)d at once done"), i=i + 1, n=s.concurrency)
            return measured

        start = time.perf_counter()
        sampler = asyncio.create_task(sample())
        try:
            many = await asyncio.gather(*(one(i) for i in range(s.concurrency)))
        finally:
            done.set()
            await sampler
        span = _span(many)
        series.append(await point())  # once more after the last answer: the queue has drained
        return series, list(many), span

    async def _sweep(self, api, user, t0) -> list[dict]:
        """The same request 1, 2, 4, 8, 16 times at once: how one request's speed and the
        server's total move as more share the engine (§3.3's picture, measured)."""
        levels = []
        for n in SWEEP_LEVELS:
            many = await asyncio.gather(*(self._ask(api, f"x{n}-{i + 1}", user, t0) for i in range(n)))
            span = _span(many)
            total = sum(m.completion_tokens for m in many)
            per = sum(m.tokens_per_s for m in many) / n
            levels.append({"concurrency": n, "per_request_tokens_per_s": per,
                           "server_tokens_per_s": total / span if span else 0.0,  # pragma: no mutate (requests never take 0 s)
                           "span_s": span})
            self.say(f"[sweep] {n} at once: {per:.1f} tok/s per request, {levels[-1]['server_tokens_per_s']:.1f} tok/s in all")
            self._advance(gettext_noop("%(n)d requests at once"), n=n)
        return levels

    async def _batching(self, user, t0) -> dict:
        """§3.2 measured: the same mixed batch — a few long answers, many short ones, all sent at
        once — to an engine that batches continuously and to one that batches statically, both
        with BATCHING_SEATS seats. Static batching keeps a batch's seats until its longest answer
        ends, so the short ones queued behind wait; continuous batching gives a freed seat to the
        next request at the next step."""
        s = self.settings
        long, short = s.max_tokens, short_answer_tokens(s.max_tokens)
        lengths = [long if i % 3 == 0 else short for i in range(BATCHING_REQUESTS)]
        result = {"seats": BATCHING_SEATS, "long": long, "short": short}
        for mode in ("continuous", "static"):
            base = s.batching_urls[mode].rstrip("/")  # pragma: no mutate (tidy only: the client sends //v1 as /v1)
            api = self._client(base)
            many = await asyncio.gather(*(self._ask(api, f"{mode[0]}{i + 1}", user, t0, max_tokens=n, ignore_eos=True)
                                          for i, n in enumerate(lengths)))
            span = _span(many)
            total = sum(m.completion_tokens for m in many)
            shorts = [m.elapsed for m, n in zip(many, lengths) if n == short]
            result[mode] = {"span_s": span, "server_tokens_per_s": total / span if span else 0.0,  # pragma: no mutate (the guard: 12 requests never take 0 s)
                            "mean_latency_s": sum(m.elapsed for m in many) / len(many),
                            "short_mean_latency_s": sum(shorts) / len(shorts), "total_tokens": total,
                            "requests": [m.to_dict() for m in many]}
            r = result[mode]
            self.say(f"[7] {mode}: {total} tokens / {span:.2f} s = {r['server_tokens_per_s']:.1f} tok/s; "
                     f"mean latency {r['mean_latency_s']:.2f} s, short answers {r['short_mean_latency_s']:.2f} s")
            self._advance(gettext_noop("experiment 7: continuous batching") if mode == "continuous"
                          else gettext_noop("experiment 7: static batching"))
        return result

    async def _shared_prefix(self, api, t0) -> dict:
        """Two requests with the same long system prompt, then two with the time at its front.
        The shared prompt opens with this run's own tag, so its first request meets a cold cache
        even on a server that ran the lab before."""
        tag = f"[세션 {time.time_ns() % 10**8:08d}]\n"
        same, stamped, last_second = [], [], None
        for i in range(2):
            messages = shared_prefix_messages(tag)
            same.append(await self._ask(api, f"same-{i + 1}", messages, t0))
            self._advance(gettext_noop("experiment 3: the same system prompt, %(i)d/2"), i=i + 1)
        for i in range(2):
            while (now := datetime.now()).replace(microsecond=0) == last_second:  # a new second, a new prefix
                await asyncio.sleep(0.05)  # pragma: no mutate (how often to look: any wait under a second)
            last_second = now.replace(microsecond=0)
            stamp = f"현재 시각: {last_second:%Y-%m-%d %H:%M:%S}\n"
            messages = shared_prefix_messages(tag, stamp)
            stamped.append(await self._ask(api, f"time-{i + 1}", messages, t0))
            self._advance(gettext_noop("experiment 3: the current time at the front, %(i)d/2"), i=i + 1)
        for m in same + stamped:
            self.say(f"[3] {m.label}: prompt {m.prompt_tokens} tokens, cached {m.cached_tokens}, ttft {_s(m.ttft)}")
        return {"same": [m.to_dict() for m in same], "time": [m.to_dict() for m in stamped]}


def _span(many: list[Measured]) -> float:
    """From the first request's start to the last one's end: requests sent together overlap."""
    return max(m.started + m.elapsed for m in many) - min(m.started for m in many)


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def run(settings: LabSettings, *, read_logs=None, on_progress=None) -> dict:
    """The whole lab, synchronously (from a thread or a command); its report as plain data.
    A failure raises LabError naming what went wrong; the partial script is on the exception."""
    lab = Lab(settings, read_logs=read_logs, on_progress=on_progress)
    try:
        return asyncio.run(lab.run())
    except LabError as exc:
        exc.script = lab.script
        raise
    except Exception as exc:  # the server's answer or the network, in the learner's words
        error = LabError(_explain(exc))
        error.script = lab.script
        raise error from exc


def _explain(exc: Exception) -> str:
    """The failure in the learner's words. Only an OpenAI-style error's message is quoted (what
    this server, or vLLM, says went wrong); any other body is not shown, and every way of not
    reaching the server reads the same — the report never echoes a stranger's answer, nor tells
    one closed port from another."""
    from openai import APIConnectionError, APIStatusError

    if isinstance(exc, APIStatusError):
        try:
            message = str(exc.response.json()["error"]["message"])[:300]
        except Exception:  # not OpenAI's error shape: not an OpenAI-compatible server's answer
            return f"the server answered {exc.status_code}, not with an OpenAI-style error (is the base URL right?)"
        return f"the server answered {exc.status_code}: {message}"
    if isinstance(exc, (APIConnectionError, httpx.HTTPError, OSError)):
        return "could not reach the server (is it running, and is the base URL right?)"
    return f"{type(exc).__name__}: {exc}"
