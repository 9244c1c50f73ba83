"""Before/after for the engine alone: the same workload run by two source trees, interleaved
(A, B, A, B, …) in fresh processes, so a noisy machine's drift hits both alike.

    git worktree add /tmp/before <commit>
    python -m bench.engine_ab --before /tmp/before [--after .] [--rounds 3] [--requests 64]

Each run: bench.throughput's workload (seed 0), 16-token blocks, the given KV budget, 64 seats,
1,024 tokens a step, greedy with ignore_eos; prints seconds and pure-decode tokens/s per round,
then the medians and their ratio.
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()


def child(requests: int, kv_tokens: int, model: str | None) -> None:
    """Runs inside the tree under test (its `engine` and `bench` come first on sys.path), with
    that tree's own bench.throughput.run_engine."""
    from bench.throughput import run_engine
    from bench.workload import make_jobs, ordinary_token_ids
    from engine.config import DEFAULT_MODEL
    from engine.model_runner import load_model

    path = model or DEFAULT_MODEL
    loaded = load_model(path)
    jobs = make_jobs(requests, ordinary_token_ids(loaded.tokenizer, loaded.model.config.vocab_size), seed=0)
    result = run_engine(path, jobs, kv_tokens, 16, "continuous", 64, 1024)
    print(f"{result['seconds']:.3f} {result['decode_tok_s']:.1f}")


def run(tree: Path, args) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(HERE), "--child", "--requests", str(args.requests), "--kv-tokens", str(args.kv_tokens)]
    if args.model:
        cmd += ["--model", args.model]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the run in {tree} failed:\n{done.stderr[-2000:]}")
    seconds, decode = done.stdout.split()[-2:]
    return float(seconds), float(decode)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a checkout of the version to compare against (required)")
    ap.add_argument("--after", default=str(HERE.parents[1]))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--kv-tokens", type=int, default=6144)
    ap.add_argument("--model", default=None, help="default: each tree's own munuibot-tiny")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.requests, args.kv_tokens, args.model)
    if not args.before:
        ap.error("--before is required: a checkout of the version to compare against")
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    results = {name: [] for name in trees}
    print(f"{'round':>5} {'tree':6} {'seconds':>8} {'decode tok/s':>13}")
    for r in range(1, args.rounds + 1):
        for name, tree in trees.items():
            seconds, decode = run(tree, args)
            results[name].append((seconds, decode))
            print(f"{r:5d} {name:6} {seconds:8.2f} {decode:13.1f}", flush=True)
    med = {name: (statistics.median(s for s, _ in rs), statistics.median(d for _, d in rs)) for name, rs in results.items()}
    print(f"\nmedian seconds: before {med['before'][0]:.2f}, after {med['after'][0]:.2f} "
          f"(after ÷ before {med['after'][0] / med['before'][0]:.2f}); "
          f"decode tok/s: before {med['before'][1]:.1f}, after {med['after'][1]:.1f} "
          f"({med['after'][1] / med['before'][1]:.2f}×)")


if __name__ == "__main__":
    main()
