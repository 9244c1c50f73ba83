"""The §6 lab's own figure for "8 at once", measured as a learner gets it: experiment 2's mean
per-request tokens/s ÷ experiment 1's, for several server settings side by side.

    python -m bench.lab_streams [--rounds 3] [--setting NAME=ENV ...]

For each setting Daphne is started as `make run` starts it (with the setting's environment), one
lab run is started from the lab page as a browser would (GET /lab/, POST /lab/runs/ with the page's
CSRF token and the default knobs), the run's page is polled until it has ended, its report.json
read, and the server stopped. The settings take turns in every round, so a busy minute on this
shared machine falls on all of them alike; medians over the rounds are printed last. Defaults:

  process     SERVING_ENGINE_PROCESS=1: the lab's engine in the engine process (make run's)
  web         SERVING_ENGINE_PROCESS=0: the lab's engine in the web process (before issue #30)

Beside it, the server's own view: its mean time between a request's tokens (the
`vllm:inter_token_latency_seconds` histogram the lab scrapes around experiments 1 and 2) alone ÷
with 8 at once. Issue #30 asks for ≥ 75 %; results in docs/benchmarks.md. Timings are never
asserted in tests.
"""
import argparse
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from bench.server import free_port, start_daphne, stop_server, wait_answering

DEFAULT_SETTINGS = {"process": {"SERVING_ENGINE_PROCESS": "1"}, "web": {"SERVING_ENGINE_PROCESS": "0"}}
KNOBS = {"num_blocks": "512", "max_num_seqs": "32", "max_num_batched_tokens": "512", "enable_prefix_caching": "on"}


def one_lab(base: str, timeout: float = 600) -> dict:
    """Start a lab run from the page and return its report once it has ended."""
    import httpx2 as httpx

    with httpx.Client(base_url=base, timeout=60) as client:
        page = client.get("/lab/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        started = client.post("/lab/runs/", data={"csrfmiddlewaretoken": token, **KNOBS}, headers={"Referer": base + "/lab/"})
        if started.status_code != 302:
            raise RuntimeError(f"the lab refused to start ({started.status_code})")
        run = started.headers["location"]
        deadline = time.monotonic() + timeout
        while client.get(run + "progress/").status_code != 204:
            if time.monotonic() > deadline:
                raise RuntimeError("the lab run did not end")
            time.sleep(0.5)
        answer = client.get(run + "report.json")
        if answer.status_code != 200:
            raise RuntimeError(f"no report ({answer.status_code}): the run failed; see the run page {base}{run}")
        return json.loads(answer.text)


def figures(report: dict) -> dict:
    alone = report["single"]["tokens_per_s"]
    per = statistics.mean(m["tokens_per_s"] for m in report["concurrent"]["requests"])
    itl = report["concurrent"].get("server_token_interval") or {}
    # The server's own view: its mean time between a request's tokens alone ÷ with 8 at once.
    engine = itl["alone_ms"] / itl["together_ms"] if itl.get("alone_ms") and itl.get("together_ms") else None
    return {"alone": alone, "per_request_8": per, "ratio": per / alone, "server_8": report["concurrent"]["server_tokens_per_s"],
            "engine_ratio": engine}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--setting", action="append", default=[],
                        help="NAME=VAR=VALUE[,VAR=VALUE]: a server setting to compare (replaces the defaults)")
    args = parser.parse_args(argv)
    settings = DEFAULT_SETTINGS
    if args.setting:
        settings = {}
        for item in args.setting:
            name, _, env = item.partition("=")
            settings[name] = dict(pair.split("=", 1) for pair in env.split(",") if pair)
    results = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for name, extra in settings.items():
                port = free_port()
                log = Path(tmp) / f"{name}-{rnd}.log"
                proc = start_daphne(port, {**os.environ, **extra, "PORT": str(port)}, log)
                try:
                    wait_answering(proc, f"http://127.0.0.1:{port}/lab/", {}, log, timeout=120)
                    f = figures(one_lab(f"http://127.0.0.1:{port}"))
                finally:
                    stop_server(proc)
                results[name].append(f)
                engine = f"; the server's own token interval: {f['engine_ratio']:.1%}" if f["engine_ratio"] else ""
                print(f"round {rnd + 1} {name}: alone {f['alone']:.1f} tok/s; 8 at once {f['per_request_8']:.1f} a request "
                      f"= {f['ratio']:.1%}; server {f['server_8']:.1f} tok/s{engine}", flush=True)
    print("\nsetting      alone tok/s  8 at once, a request  ratio (median; per round)  server's own (median)")
    for name, runs in results.items():
        ratios = [r["ratio"] for r in runs]
        engine = [r["engine_ratio"] for r in runs if r["engine_ratio"]]
        print(f"{name:<12} {statistics.median(r['alone'] for r in runs):>11.1f}  {statistics.median(r['per_request_8'] for r in runs):>20.1f}  "
              f"{statistics.median(ratios):.1%} ({' / '.join(f'{x:.1%}' for x in ratios)})"
              + (f"  {statistics.median(engine):.1%}" if engine else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
