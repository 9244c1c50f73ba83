"""What the OpenAI-compatible API costs: the same streamed chat requests over HTTP and in-process.

    python -m bench.api [--streams 8,32] [--max-tokens 200] [--repeat 1] [--port 0] [--varied]
    python -m bench.api --quick        # 2 streams of 8 tokens: a smoke test, well under a minute

Issue #10 serves the engine behind `/v1/chat/completions` (courseapp/serving/asgi.py) so §6's
scripts can measure it the way they would measure vLLM. A measurement of the server is only a
measurement of the engine if the server adds little, so this script runs the §6 experiment 2
workload — one chat request (the model's own system prompt, `courseapp.lab.experiments.QUESTION`,
temperature 0, `max_tokens` 200, streamed) sent N times at once — two ways, side by side in one
run:

  in-process  a `courseapp.demo.host.ServingEngine` built in a process of its own (as the server's:
              courseapp/serving/engines.new_engine, then the startup's objects frozen) with the server's own
              settings (`settings.SERVING_ENGINE`: the same engine, KV pool and step thread that
              `/v1` uses), requests prepared and submitted from asyncio and their outputs
              iterated with `async for`, as the server's handler does;
  HTTP        Daphne started as `make run` starts it (`.venv/bin/daphne -b 127.0.0.1 -p PORT
              courseapp.asgi:application`, the same settings module and environment), driven by
              the official `openai` client (AsyncOpenAI, streaming, `stream_options.include_usage`).

Both sides generate exactly `max_tokens` per request (`ignore_eos`: `extra_body` over HTTP, the
SamplingParams flag in-process), so they do identical work. Each side gets one discarded warm-up
request first. The phases alternate (in-process N, HTTP N, … and the order flips on every
repeat); only one side is busy at a time — the other's engine thread sleeps — because the
machine may have as few as 2 cores. Both build the engine the same way (courseapp/serving/
engines.new_engine: torch on SERVING_TORCH_THREADS, one core fewer than the machine has).

Per side and N it prints: tok/s = all generated tokens ÷ the span from the first request sent to
the last one finished, HTTP ÷ in-process, TTFT p50/p95 (send → first text: a chunk with non-empty
`delta.content`, or an engine output whose text grew) and ITL p50/p95 (gaps between successive
text-carrying chunks / outputs), the CPU seconds each process spent, and PASS/FAIL against the
issue's targets: HTTP ≥ 85% of in-process tok/s at 8 and at 32 streams, and HTTP TTFT p95 at 8
streams ≤ 2× the in-process one. With `--repeat N`, tok/s is the median of the N runs and the
percentiles are over all N runs' samples pooled. Results: docs/benchmarks.md. Timings are never
asserted in tests (tests/bench/test_api_smoke.py only runs `--quick`).
"""
import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from bench.server import cpu_seconds, free_port, percentile, start_daphne, stop_server, wait_answering

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.85  # HTTP tok/s ÷ in-process, at 8 and at 32 streams
TARGET_TTFT = 2.0  # HTTP TTFT p95 ÷ in-process, at 8 streams


@dataclass(slots=True)
class One:
    """One request as its caller saw it (perf_counter seconds)."""

    started: float
    ended: float
    ttft: float | None
    gaps: list  # seconds between successive text-carrying chunks
    tokens: int
    engine_ttft: float | None = None  # the engine's own: the request's arrival there → its first token


@dataclass
class Phase:
    side: str  # "in-process" or "HTTP"
    streams: int
    requests: list = field(default_factory=list)
    cpu: dict = field(default_factory=dict)  # process → CPU seconds during the phase
    engine_ttft_mean: float | None = None  # the engine's arrival → first token, averaged over the phase

    @property
    def span(self) -> float:
        return max(r.ended for r in self.requests) - min(r.started for r in self.requests)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.span if self.span > 0 else 0.0



def workload(n: int, varied: bool) -> list[list[dict]]:
    """§6 experiment 2: the same chat request n times (or, varied, the demo's inquiries cycled)."""
    from courseapp.demo.presets import INQUIRIES
    from courseapp.lab.experiments import QUESTION
    from engine.training.corpus import SYSTEM_PROMPT

    questions = [INQUIRIES[i % len(INQUIRIES)] for i in range(n)] if varied else [QUESTION] * n
    return [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]


# --- CPU accounting ----------------------------------------------------------------------------
class CpuMeter:
    def __init__(self, server_pid: int | None, in_process_pid: int | None):
        self.server_pid, self.in_process_pid = server_pid, in_process_pid

    def read(self) -> dict:
        return {"bench": cpu_seconds(None), "server": cpu_seconds(self.server_pid) if self.server_pid else 0.0,
                "in-process": cpu_seconds(self.in_process_pid) if self.in_process_pid else 0.0}


# --- in-process --------------------------------------------------------------------------------
async def _in_process_one(engine, messages: list, max_tokens: int, tag: str) -> One:
    started = time.perf_counter()
    # Both off the event loop. The server prepares off its loop too but submits on it; submit waits
    # for the step lock (up to one step), and on this loop 32 submits in a row would hold every
    # stream's first output back until the last one (docs/benchmarks.md): the baseline would flatter HTTP.
    ids, budget = await asyncio.to_thread(engine.prepare, messages=messages, max_tokens=max_tokens)
    handle = await asyncio.to_thread(engine.submit, ids, {"temperature": 0.0, "max_tokens": budget, "ignore_eos": True},
                                     tag, loop=asyncio.get_running_loop())
    ttft, last, gaps, text_len, final = None, None, [], 0, None
    async for output in handle:
        now = time.perf_counter()
        final = output
        if len(output.text) > text_len:  # what the server would send as a content chunk
            text_len = len(output.text)
            if ttft is None:
                ttft = now - started
            else:
                gaps.append(now - last)
            last = now
    return One(started, time.perf_counter(), ttft, gaps, len(final.token_ids) if final else 0,
               final.metrics.ttft if final else None)


async def run_in_process(engine, batch: list, max_tokens: int, tag: str) -> list[One]:
    return await asyncio.gather(*[_in_process_one(engine, m, max_tokens, f"{tag}-{i}") for i, m in enumerate(batch)])


class InProcess:
    """The in-process side in a process of its own (`--in-process-worker`), built like the server's:
    the engine, an event loop reading its outputs, the startup's objects frozen — and nothing else.
    Sharing the benchmark's process, it paid for the openai client's garbage and event loop: its
    engine then spent more CPU on the same tokens than the server's did (docs/benchmarks.md)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.api", "--in-process-worker"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ})
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError(f"the in-process worker exited ({self.proc.wait()})")
        self.pid = self.proc.pid

    def _call(self, command: dict) -> list[One]:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the in-process worker exited ({self.proc.wait()})")
        return [One(**one) for one in json.loads(line)]

    async def run(self, n: int, varied: bool, max_tokens: int, tag: str) -> list[One]:
        return await asyncio.to_thread(self._call, {"n": n, "varied": varied, "max_tokens": max_tokens, "tag": tag})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def in_process_worker() -> int:
    """`--in-process-worker`: build the served engine as the server does, then answer one phase per
    line of stdin ({"n", "varied", "max_tokens", "tag"}) with its requests as one JSON line."""
    from dataclasses import asdict

    _django()
    from django.conf import settings

    from courseapp.serving.engines import new_engine

    engine = new_engine(**settings.SERVING_ENGINE)
    gc.collect()
    gc.freeze()  # as courseapp/asgi.py does once the server is built
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            ones = asyncio.run(run_in_process(engine, workload(command["n"], command["varied"]), command["max_tokens"],
                                              command["tag"]))
            print(json.dumps([asdict(one) for one in ones]), flush=True)
    finally:
        engine.stop()
    return 0


# --- HTTP --------------------------------------------------------------------------------------
async def _http_one(api, model: str, messages: list, max_tokens: int) -> One:
    started = time.perf_counter()
    stream = await api.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    ttft, last, gaps, usage = None, None, [], None
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
        if any(choice.delta.content for choice in chunk.choices):
            if ttft is None:
                ttft = now - started
            else:
                gaps.append(now - last)
            last = now
    if usage is None:
        raise RuntimeError("the stream ended without a usage chunk (stream_options.include_usage)")
    return One(started, time.perf_counter(), ttft, gaps, usage.completion_tokens)


async def run_http(api, model: str, batch: list, max_tokens: int) -> list[One]:
    return await asyncio.gather(*[_http_one(api, model, m, max_tokens) for m in batch])


async def engine_ttft_totals(http, base_url: str, model: str) -> tuple[float, float]:
    """(sum, count) of the server's vllm:time_to_first_token_seconds histogram (/metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    response = await http.get(f"{base_url}/metrics")
    response.raise_for_status()
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.labels.get("model_name", model) == model:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found.get("vllm:time_to_first_token_seconds_sum", 0.0), found.get("vllm:time_to_first_token_seconds_count", 0.0)


# --- the server --------------------------------------------------------------------------------
def wait_ready(proc, base_url: str, log_path: Path, timeout: float = 180.0) -> str:
    """Until GET /v1/models answers (it builds the served engine: the model loads); the model's id."""
    response = wait_answering(proc, f"{base_url}/v1/models", log_path=log_path, timeout=timeout,
                              headers={"Authorization": f"Bearer {os.environ.get('SERVING_API_KEY') or 'EMPTY'}"})
    return response.json()["data"][0]["id"]


# --- the report --------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1000:.1f}"  # nan → —


def summarize(phases: list[Phase]) -> dict:
    """One side at one N over its repeats: median tok/s, pooled percentiles."""
    ones = [r for ph in phases for r in ph.requests]
    ttfts = [r.ttft for r in ones if r.ttft is not None]
    gaps = [g for r in ones for g in r.gaps]
    return {
        "tok_s": statistics.median(ph.tok_s for ph in phases),
        "runs": [ph.tok_s for ph in phases],
        "tokens": phases[0].tokens,
        "ttft50": percentile(ttfts, 50), "ttft95": percentile(ttfts, 95),
        "itl50": percentile(gaps, 50), "itl95": percentile(gaps, 95),
        "cpu_bench": statistics.median(ph.cpu.get("bench", 0.0) for ph in phases),
        "cpu_server": statistics.median(ph.cpu.get("server", 0.0) for ph in phases),
        "engine_ttft": statistics.median(ph.engine_ttft_mean for ph in phases)
        if all(ph.engine_ttft_mean is not None for ph in phases) else float("nan"),
    }


def run_ratios(results: dict, n: int) -> list[float]:
    """HTTP ÷ in-process tok/s of each repeat (neighbouring phases: the machine's load was alike)."""
    return [h / i for h, i in zip(results[(n, "HTTP")]["runs"], results[(n, "in-process")]["runs"])]


def paired_ratio(results: dict, n: int) -> float:
    return statistics.median(run_ratios(results, n))


def report(results: dict, streams: list[int], args, config: dict, model: str) -> list[str]:
    from django.conf import settings

    lines = [
        f"§6 experiment 2 workload: {'the demo inquiries, cycled' if args.varied else 'one chat request'} "
        f"(SYSTEM_PROMPT + {'INQUIRIES' if args.varied else 'QUESTION'}), temperature 0, max_tokens {args.max_tokens}, "
        f"streamed, ignore_eos (every request generates exactly {args.max_tokens} tokens on both sides)",
        f"engine (settings.SERVING_ENGINE, both sides): {config}  model {model}; torch threads {settings.SERVING_TORCH_THREADS}, "
        f"{os.cpu_count()} CPUs; repeats {args.repeat}"
        + (" (tok/s: median of the runs; HTTP/in-proc: median of each run's ratio; TTFT/ITL: percentiles over all "
           "runs' samples)" if args.repeat > 1 else ""),
        "",
        f"{'streams':>7}  {'side':<10} {'tok/s':>8} {'HTTP/in-proc':>12} {'TTFT p50':>9} {'TTFT p95':>9} "
        f"{'ITL p50':>8} {'ITL p95':>8} {'engine TTFT':>11} {'tokens':>7} {'CPU s bench/server':>19}",
    ]
    for n in streams:
        for side in ("in-process", "HTTP"):
            s = results[(n, side)]
            ratio = "" if side == "in-process" else f"{paired_ratio(results, n):.1%}"
            lines.append(
                f"{n:>7}  {side:<10} {s['tok_s']:>8.1f} {ratio:>12} {_ms(s['ttft50']):>6} ms {_ms(s['ttft95']):>6} ms "
                f"{_ms(s['itl50']):>5} ms {_ms(s['itl95']):>5} ms {_ms(s['engine_ttft']):>8} ms {s['tokens']:>7} "
                f"{s['cpu_bench']:>9.2f}/{s['cpu_server']:<9.2f}")
        if args.repeat > 1:
            for side in ("in-process", "HTTP"):
                runs = " / ".join(f"{x:.1f}" for x in results[(n, side)]["runs"])
                lines.append(f"{'':>7}  {side:<10} tok/s per run: {runs}")
            ratios = " / ".join(f"{x:.1%}" for x in run_ratios(results, n))
            lines.append(f"{'':>7}  HTTP ÷ in-process per run: {ratios}")
    lines += [
        "",
        "TTFT, ITL: as the caller sees them (send → first text; gaps between text chunks). engine TTFT: the mean of",
        "the engine's own arrival → first token (in-process: each output's metrics; HTTP: /metrics' histogram),",
        "so TTFT − engine TTFT is what happens before the request reaches the engine. CPU s: seconds of CPU in",
        "the side's own process (in-process phases: the engine's process; HTTP phases: the openai client's) and in the server's.",
        "",
    ]
    judged = False
    for n in (8, 32):
        if n in streams:
            judged = True
            ratio = paired_ratio(results, n)
            lines.append(f"target: HTTP tok/s ≥ {TARGET_RATIO:.0%} of in-process at {n} streams: {ratio:.1%} "
                         f"{'PASS' if ratio >= TARGET_RATIO else 'FAIL'}")
    if 8 in streams:
        http, base = results[(8, "HTTP")]["ttft95"], results[(8, "in-process")]["ttft95"]
        times = http / base if base > 0 else float("inf")
        lines.append(f"target: HTTP TTFT p95 ≤ {TARGET_TTFT:g}× in-process at 8 streams: {_ms(http)} ms vs "
                     f"{_ms(base)} ms = {times:.2f}× {'PASS' if times <= TARGET_TTFT else 'FAIL'}")
    if not judged:
        lines.append("targets: judged at 8 and 32 streams only (not run here)")
    return lines


# --- main --------------------------------------------------------------------------------------
def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="8,32", help="concurrent streams, comma-separated (default 8,32)")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1, help="runs of every phase (tok/s: their median)")
    ap.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    ap.add_argument("--varied", action="store_true",
                    help="the demo's inquiries cycled instead of one question N times (both sides)")
    ap.add_argument("--quick", action="store_true", help="2 streams of 8 tokens, once: a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.streams, args.max_tokens, args.repeat = "2", 8, 1
    args.stream_counts = [int(x) for x in args.streams.split(",") if x.strip()]
    if not args.stream_counts or min(args.stream_counts) < 1 or args.max_tokens < 1 or args.repeat < 1:
        ap.error("--streams, --max-tokens and --repeat must be positive")
    return args


async def measure(args, engine: InProcess, base_url: str, model: str, meter: "CpuMeter") -> dict:
    """Every phase, interleaved, in one event loop; {(streams, side): [Phase, …]}."""
    import httpx2 as httpx  # what the openai client itself uses
    from openai import AsyncOpenAI

    key = os.environ.get("SERVING_API_KEY") or "EMPTY"
    api = AsyncOpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=600)
    phases: dict = {}
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as http:
        try:
            # One discarded warm-up on each side (torch's first steps, the prefix cache, a connection).
            await engine.run(1, args.varied, args.max_tokens, "warm")
            await run_http(api, model, workload(1, args.varied), args.max_tokens)
            for rep in range(args.repeat):
                for n in args.stream_counts:
                    order = ("in-process", "HTTP") if rep % 2 == 0 else ("HTTP", "in-process")
                    for side in order:
                        if side == "in-process":
                            before = meter.read()
                            ones = await engine.run(n, args.varied, args.max_tokens, f"r{rep}n{n}")
                            after = meter.read()
                            engine_ttfts = [o.engine_ttft for o in ones if o.engine_ttft is not None]
                            engine_ttft = sum(engine_ttfts) / len(engine_ttfts) if engine_ttfts else None
                        else:
                            ttft_before = await engine_ttft_totals(http, base_url, model)
                            before = meter.read()
                            ones = await run_http(api, model, workload(n, args.varied), args.max_tokens)
                            after = meter.read()
                            ttft_after = await engine_ttft_totals(http, base_url, model)
                            count = ttft_after[1] - ttft_before[1]
                            engine_ttft = (ttft_after[0] - ttft_before[0]) / count if count else None
                        # CPU: the side's own process (the in-process worker, or this one's openai client), and the server's.
                        own = "in-process" if side == "in-process" else "bench"
                        cpu = {"bench": after[own] - before[own], "server": after["server"] - before["server"]}
                        phase = Phase(side, n, ones, cpu, engine_ttft)
                        phases.setdefault((n, side), []).append(phase)
                        print(f"  run {rep + 1}/{args.repeat}, {n} streams, {side}: {phase.tokens} tokens in "
                              f"{phase.span:.2f} s = {phase.tok_s:.1f} tok/s", flush=True)
                        if phase.tokens != n * args.max_tokens:
                            print(f"  warning: {phase.tokens} tokens, expected {n * args.max_tokens}", flush=True)
        finally:
            await api.close()
    return phases


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")  # what `make run` uses
    os.chdir(ROOT)
    import django

    django.setup()
    import logging

    # Django's logging config prints one INFO line per request, and the engine's periodic stats
    # line (the server's goes to its log).
    for name in ("httpx", "httpx2", "openai", "engine.stats"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv=None) -> int:
    if argv is None and sys.argv[1:] == ["--in-process-worker"]:
        return in_process_worker()
    args = parse(argv)
    _django()

    from django.conf import settings

    config = dict(settings.SERVING_ENGINE)
    port = args.port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    tmp = tempfile.TemporaryDirectory(prefix="bench-api-")
    log_path = Path(tmp.name) / "daphne.log"
    engine = proc = None
    try:
        engine = InProcess()  # the engine as the server builds it (SERVING_TORCH_THREADS), in its own process
        proc = start_daphne(port, {**os.environ, "PYTHONUNBUFFERED": "1"}, log_path)  # this process's settings and SERVING_*
        model = wait_ready(proc, base_url, log_path)
        print(f"server: {' '.join(proc.args)} (pid {proc.pid}, settings {os.environ['DJANGO_SETTINGS_MODULE']})",
              flush=True)
        phases = asyncio.run(measure(args, engine, base_url, model, CpuMeter(proc.pid, engine.pid)))
    except BaseException:
        if log_path.exists():
            print(f"--- server log (tail) ---\n{log_path.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        if proc is not None:
            stop_server(proc)
        if engine is not None:
            engine.stop()
        tmp.cleanup()

    results = {key: summarize(value) for key, value in phases.items()}
    print()
    print("\n".join(report(results, args.stream_counts, args, config, model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
