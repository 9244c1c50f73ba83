"""The live demo under watchers: how long a step takes to reach a websocket viewer (p50/p95),
and whether 20 viewers slow the engine, measured side by side against 1 viewer.

    python -m bench.demo_latency [--viewers 20] [--preset preemption]

Starts the server as `make run` does (engine process, a throwaway SQLite database) on a free port.
"""
import argparse
import asyncio
import json
import statistics
import tempfile
import time

import websockets

from bench.web_load import start_scene, start_server, stop_server


async def viewer(url: str, run_id: str, latencies: list, steps: list):
    ws_url = url.replace("http://", "ws://") + f"/ws/demo/runs/{run_id}/"
    async with websockets.connect(ws_url, origin=url, max_size=None) as sock:
        while True:
            frame = json.loads(await sock.recv())
            now = time.time()
            if frame.get("type") == "frame":
                latencies.append(now - frame["sent_at"])
                steps.append((now, frame["lanes"][0]["step"]))
            if frame.get("status") in ("finished", "failed", "stopped", "expired"):
                return


async def watch(url: str, preset: str, n: int):
    run_id = await start_scene(url, preset)
    latencies, steps = [], []
    views = [viewer(url, run_id, latencies, s) for s in [steps] + [[] for _ in range(n - 1)]]
    began = time.monotonic()
    await asyncio.gather(*views)
    elapsed = time.monotonic() - began
    rate = (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0]) if len(steps) > 1 else 0.0
    return latencies, rate, elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--viewers", type=int, default=20)
    ap.add_argument("--preset", default="preemption")
    ap.add_argument("--step-delay", default="0.08", help="the demo's pacing at ×1 (DEMO_STEP_DELAY)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(tmp, DEMO_STEP_DELAY=args.step_delay, DEMO_MAX_ACTIVE_RUNS="50")
        try:
            asyncio.run(watch(url, args.preset, 1))  # warm-up: starts the engine process, loads the model
            one = asyncio.run(watch(url, args.preset, 1))
            many = asyncio.run(watch(url, args.preset, args.viewers))
        finally:
            stop_server(proc)
    print(f"preset {args.preset}, step delay {args.step_delay} s, `make run` (Daphne + engine process) on this machine")
    print(f"{'viewers':>8} {'frames':>8} {'p50 ms':>8} {'p95 ms':>8} {'steps/s':>8} {'run s':>7}")
    for n, (lat, rate, elapsed) in ((1, one), (args.viewers, many)):
        q = statistics.quantiles([x * 1000 for x in lat], n=20)
        print(f"{n:8d} {len(lat):8d} {statistics.median(lat) * 1000:8.1f} {q[18]:8.1f} {rate:8.1f} {elapsed:7.1f}")
    print(f"engine step rate with {args.viewers} viewers ÷ with 1: {many[1] / one[1]:.2f}")


if __name__ == "__main__":
    main()
