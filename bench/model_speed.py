"""Single-stream decode speed of model folders through `/v1`, measured side by side.

    python -m bench.model_speed MODEL_DIR [MODEL_DIR ...] [--rounds 3] [--max-tokens 200]

What a learner's script sees when it streams one answer from `make run`'s server: for each
folder (ENGINE_MODEL) Daphne is started as `make run` starts it, one streamed chat request with
no system message (`ignore_eos`, `max_tokens` tokens, temperature 0) is sent through the official
`openai` client after one discarded warm-up, and the server is stopped. The folders take turns
in every round (the order flips each round), so a busy minute on this shared machine falls on
all of them alike. Per folder it prints the median over the rounds of:

  decode tok/s   tokens after the first ÷ (last chunk − first chunk), the client's clock;
  TTFT           send → first text chunk;
  server CPU s   process CPU seconds the server's whole process group spent on the request,
                 beside the wall seconds it took.

Issue #28 asks for ≥ 60 tok/s on 2 cores with the shipped model; results in docs/benchmarks.md.
Timings are never asserted in tests (tests/bench/test_model_speed.py runs one tiny round).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.server import cpu_seconds, free_port, start_daphne, stop_server, wait_answering

INQUIRY = "지난주에 주문한 운동화가 아직 안 왔어요. 언제쯤 받을 수 있을까요?"


def one_stream(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    """(decode tok/s, TTFT s, completion tokens) of one streamed answer."""
    sent = time.perf_counter()
    stamps = []
    tokens = 0
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": INQUIRY}], temperature=0, max_tokens=max_tokens,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    if len(stamps) < 2 or tokens < 2:
        raise RuntimeError(f"the answer was too short to time ({tokens} tokens)")
    return (tokens - 1) / (stamps[-1] - stamps[0]), stamps[0] - sent, tokens


def measure(model_dir: str, max_tokens: int, workdir: Path) -> dict:
    from openai import OpenAI

    port = free_port()
    log = workdir / f"server-{port}.log"
    env = {**os.environ, "ENGINE_MODEL": str(Path(model_dir).resolve()), "PORT": str(port),
           "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "courseapp.settings.dev")}
    proc = start_daphne(port, env, log)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        key = os.environ.get("SERVING_API_KEY") or "none"
        models = wait_answering(proc, f"{base}/models", {"Authorization": f"Bearer {key}"}, log, 180).json()
        client = OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
        name = models["data"][0]["id"]
        one_stream(client, name, 16)  # warm-up: the first request builds what the engine caches
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        rate, ttft, tokens = one_stream(client, name, max_tokens)
        return {"tok_s": rate, "ttft": ttft, "tokens": tokens,
                "cpu": cpu_seconds(proc.pid) - cpu0, "wall": time.perf_counter() - wall0}
    finally:
        stop_server(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="model folders (ENGINE_MODEL)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=200)
    args = p.parse_args(argv)
    for m in args.models:
        if not (Path(m) / "config.json").is_file():
            print(f"not a model folder: {m}", file=sys.stderr)
            return 2
    runs: dict[str, list[dict]] = {m: [] for m in args.models}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = args.models if r % 2 == 0 else args.models[::-1]
            for m in order:
                runs[m].append(measure(m, args.max_tokens, Path(tmp)))
                x = runs[m][-1]
                print(f"round {r + 1} {m}: {x['tok_s']:.1f} tok/s, TTFT {x['ttft'] * 1000:.0f} ms, "
                      f"{x['tokens']} tokens, server CPU {x['cpu']:.2f} s / wall {x['wall']:.2f} s", flush=True)
    print(f"\n{'model':40} {'decode tok/s':>12} {'TTFT ms':>8} {'CPU s':>6} {'wall s':>7}  (medians of {args.rounds})")
    for m, xs in runs.items():
        med = {k: statistics.median(x[k] for x in xs) for k in ("tok_s", "ttft", "cpu", "wall")}
        print(f"{m:40} {med['tok_s']:12.1f} {med['ttft'] * 1000:8.0f} {med['cpu']:6.2f} {med['wall']:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
