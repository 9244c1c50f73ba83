"""The live demo under watchers: how long a step takes to reach a websocket viewer (p50/p95), what
a viewer receives per frame, and whether many viewers slow the engine — measured side by side
against 1 viewer, in one run.

    python -m bench.demo_latency [--viewers 200] [--preset preemption] [--step-delay 0.08]
    python -m bench.demo_latency --scaled [--viewers 200]   # channels-redis, two Daphnes, a Celery worker

Embedded (default): the server as `make run` starts it (engine process, a throwaway SQLite
database) on a free port. Scaled: Redis (REDIS_URL, a database of its own, flushed), a throwaway
PostgreSQL database, two Daphne processes on two ports and one engine worker, as the README's
scaled commands start them; the viewers are split over both ports, the scene is started on the
first.

Each viewer is what the page's script is (static/js/demo.js): it takes the snapshot, applies every
delta (courseapp/demo/traces.FrameMirror), and asks for a snapshot when a delta's number skips
one. Latency = receive time − the frame's `sent_at` (stamped when the engine side encoded it, right
after its step). Bytes = each message as received; "KB/frame" is the mean after the first
snapshot. steps/s = the engine's steps (the picture's step count) over the run, as the first viewer
saw them. Targets (issue #14): p95 ≤ 150 ms at the given viewers, step rate ≥ 0.95× of one
viewer's, ≤ 10 KB a frame after the snapshot. Timings are printed, never asserted in tests
(tests/bench/test_web_bench_smoke.py runs a tiny case).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import websockets

from bench.server import ROOT, free_port, start_daphne, stop_server
from bench.web_load import start_scene, start_server
from courseapp.demo.traces import FrameMirror

TARGET_P95_MS = 150.0
TARGET_RATE = 0.95
TARGET_FRAME_KB = 10.0
ENDED = ("finished", "failed", "stopped", "expired")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")


@dataclass
class Seen:
    latencies: list = field(default_factory=list)  # seconds, every frame of every viewer
    frame_bytes: list = field(default_factory=list)  # every message after each viewer's first snapshot
    snapshot_bytes: list = field(default_factory=list)  # each viewer's first snapshot
    resyncs: int = 0  # snapshots asked for after a gap, or sent to a socket that fell behind
    steps: list = field(default_factory=list)  # (time, step) as the first viewer saw them
    end: str = ""


async def viewer(ws_url: str, origin: str, seen: Seen, first: bool) -> None:
    mirror, got_first = FrameMirror(), False
    async with websockets.connect(ws_url, origin=origin, max_size=None) as sock:
        async for raw in sock:
            now = time.time()
            message = json.loads(raw)
            kind = message.get("type")
            if kind not in ("snapshot", "delta"):
                if message.get("status") == "failed":
                    seen.end = f"failed: {message.get('message')}"
                    return
                continue
            if "sent_at" in message:
                seen.latencies.append(now - message["sent_at"])
            if kind == "snapshot" and not got_first:
                seen.snapshot_bytes.append(len(raw.encode()) if isinstance(raw, str) else len(raw))
                got_first = True
            else:
                seen.frame_bytes.append(len(raw.encode()) if isinstance(raw, str) else len(raw))
                seen.resyncs += kind == "snapshot"
            if not mirror.apply(message):
                if kind == "delta" and got_first and message["seq"] > mirror.seq:
                    await sock.send(json.dumps({"type": "snapshot"}))
                continue
            state = mirror.state
            if first:
                seen.steps.append((now, max(lane["step"] for lane in state["lanes"])))
            if state.get("status") in ENDED:
                seen.end = seen.end or state["status"]
                return


async def watch(urls: list[str], preset: str, n: int) -> tuple[Seen, float]:
    run_id = await start_scene(urls[0], preset)
    seen = Seen()
    views = [viewer(urls[i % len(urls)].replace("http://", "ws://") + f"/ws/demo/runs/{run_id}/", urls[i % len(urls)],
                    seen, first=i == 0) for i in range(n)]
    began = time.monotonic()
    await asyncio.gather(*views)
    return seen, time.monotonic() - began


def step_rate(seen: Seen) -> float:
    steps = seen.steps
    if len(steps) < 2 or steps[-1][0] == steps[0][0]:
        return 0.0
    return (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0])


# --- scaled mode: Redis, PostgreSQL, two Daphnes, one engine worker -----------------------------
class Scaled:
    def __init__(self, tmp: Path, step_delay: str):
        import redis

        from bench.grading_api import Database

        redis.Redis.from_url(REDIS_URL).flushdb()
        self.db = Database("postgres", tmp)
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "REDIS_URL": REDIS_URL, "DATABASE_URL": self.db.url, "PYTHONUNBUFFERED": "1",
                    "DJANGO_SETTINGS_MODULE": "courseapp.settings.dev", "DEMO_STEP_DELAY": step_delay,
                    "DEMO_MAX_ACTIVE_RUNS": "50", "DEMO_MAX_RUNS_PER_ADDRESS": "50"}
        self.env.pop("DEBUG", None)
        python = str(Path(sys.executable))
        for command in (["manage.py", "migrate", "--noinput"], ["manage.py", "load_content"]):
            subprocess.run([python, *command], cwd=ROOT, env=self.env, check=True, capture_output=True)
        celery = str(Path(sys.executable).with_name("celery"))
        log = open(tmp / "worker.log", "w")
        self.procs.append(subprocess.Popen(
            [celery, "-A", "courseapp", "worker", "-Q", "engine", "--pool", "threads", "-c", "4", "-n", "bench@%h",
             "-l", "info", "--without-gossip", "--without-mingle"], cwd=ROOT, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True))
        self.urls = []
        for i in range(2):
            port = free_port()
            self.procs.append(start_daphne(port, self.env, tmp / f"daphne{i}.log"))
            self.urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(self.urls, self.procs[1:]):
            _wait_port(url, proc)
        deadline = time.monotonic() + 300
        while b"ready" not in (tmp / "worker.log").read_bytes():
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError("the engine worker did not start:\n" + (tmp / "worker.log").read_text()[-3000:])
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.procs:
            stop_server(proc)
        self.db.drop()


def _wait_port(url: str, proc) -> None:
    import socket

    host, port = url.removeprefix("http://").split(":")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Daphne at {url} exited")
        with socket.socket() as s:
            if s.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"Daphne at {url} did not answer")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--viewers", type=int, default=200)
    ap.add_argument("--preset", default="preemption")
    ap.add_argument("--step-delay", default="0.08", help="the demo's pacing at ×1 (DEMO_STEP_DELAY)")
    ap.add_argument("--scaled", action="store_true", help="channels-redis, two Daphne processes, one Celery worker")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.scaled:
            scaled = Scaled(Path(tmp), args.step_delay)
            urls, stop = scaled.urls, scaled.stop
        else:
            proc, url = start_server(tmp, DEMO_STEP_DELAY=args.step_delay, DEMO_MAX_ACTIVE_RUNS="50")
            urls, stop = [url], lambda: stop_server(proc)
        try:
            asyncio.run(watch(urls, args.preset, 1))  # warm-up: starts the engine, loads the model
            one = asyncio.run(watch(urls, args.preset, 1))
            many = asyncio.run(watch(urls, args.preset, args.viewers))
        except BaseException:
            for log in sorted(Path(tmp).glob("*.log")):  # what the servers said (not their access lines)
                said = [line for line in log.read_text(errors="replace").splitlines() if not line.startswith("127.0.0.1:")]
                print(f"--- {log.name}, the end:\n" + "\n".join(said[-60:]), file=sys.stderr)
            raise
        finally:
            stop()
    mode = "scaled: channels-redis, 2 Daphne processes, 1 engine worker" if args.scaled else \
        "`make run` (Daphne + engine process)"
    print(f"preset {args.preset}, step delay {args.step_delay} s, {mode}, {os.cpu_count()} CPUs")
    print(f"{'viewers':>8} {'frames':>8} {'p50 ms':>8} {'p95 ms':>8} {'steps/s':>8} {'run s':>7} "
          f"{'snap KB':>8} {'KB/frame':>8} {'resyncs':>8} end")
    for n, (seen, elapsed) in ((1, one), (args.viewers, many)):
        ms = [x * 1000 for x in seen.latencies]
        p95 = statistics.quantiles(ms, n=20)[18] if len(ms) > 1 else ms[0]
        frame_kb = statistics.mean(seen.frame_bytes) / 1024 if seen.frame_bytes else 0.0
        snap_kb = statistics.mean(seen.snapshot_bytes) / 1024 if seen.snapshot_bytes else 0.0
        print(f"{n:8d} {len(ms):8d} {statistics.median(ms):8.1f} {p95:8.1f} {step_rate(seen):8.1f} {elapsed:7.1f} "
              f"{snap_kb:8.1f} {frame_kb:8.2f} {seen.resyncs:8d} {seen.end}")
    ratio = step_rate(many[0]) / step_rate(one[0]) if step_rate(one[0]) else 0.0
    print(f"engine step rate with {args.viewers} viewers ÷ with 1: {ratio:.2f}")
    ms = [x * 1000 for x in many[0].latencies]
    p95 = statistics.quantiles(ms, n=20)[18] if len(ms) > 1 else ms[0]
    frame_kb = statistics.mean(many[0].frame_bytes) / 1024 if many[0].frame_bytes else 0.0
    print(f"target p95 ≤ {TARGET_P95_MS:.0f} ms at {args.viewers} viewers: {p95:.1f} ms {'PASS' if p95 <= TARGET_P95_MS else 'FAIL'}")
    print(f"target step rate ≥ {TARGET_RATE}× of one viewer's: {ratio:.2f} {'PASS' if ratio >= TARGET_RATE else 'FAIL'}")
    print(f"target ≤ {TARGET_FRAME_KB:.0f} KB a frame after the snapshot: {frame_kb:.2f} KB "
          f"{'PASS' if frame_kb <= TARGET_FRAME_KB else 'FAIL'}")


if __name__ == "__main__":
    main()
