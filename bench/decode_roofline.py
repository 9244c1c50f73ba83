"""Where a decode step's time goes, against the share of the GEMM rate issue #12 asks for:
the whole step, the forward, its matmuls alone and its attention alone, each best of several
repeats on one engine holding `--requests` requests of `--context` tokens.

    python -m bench.decode_roofline [--requests 17] [--context 249] [--share 0.25]
"""
import argparse
import random
import time

import torch

from bench.workload import count_params, matmul_flops
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.attention import paged_attention
from engine.config import DEFAULT_MODEL
from engine.fused_llama import rows_bucket


def best_ms(fn, calls=100, rounds=5) -> float:
    for _ in range(5):
        fn()
    fastest = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        fastest = min(fastest, (time.perf_counter() - began) / calls)
    return fastest * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--requests", type=int, default=17)
    ap.add_argument("--context", type=int, default=249, help="prompt tokens per request")
    ap.add_argument("--blocks", type=int, default=384)
    ap.add_argument("--share", type=float, default=0.25, help="the share of the GEMM rate to hold the step to")
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args(argv)

    engine = LLMEngine(EngineConfig(model=args.model, block_size=16, num_blocks=args.blocks, max_num_seqs=64,
                                    max_num_batched_tokens=1024))
    fused = engine.loaded.fused
    if fused is None:
        raise SystemExit(f"{args.model}: not an architecture the engine's own forward covers")
    rng = random.Random(0)
    vocab = engine.loaded.model.config.vocab_size
    for i in range(args.requests):
        engine.add_request([rng.randrange(10, vocab - 10) for _ in range(args.context)],
                           SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True), f"r{i}")
    while engine.scheduler.waiting or any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running):
        engine.step(picture=False)
    step = best_ms(lambda: engine.step(picture=False), calls=max(1, args.calls // 5))

    batch = [(r, 1) for r in engine.scheduler.running]  # the next decode step, run again and again
    runner = engine.runner
    meta, ids, positions, _, sample_rows, _ = runner.prepare(batch)
    forward = best_ms(lambda: fused(ids, positions, meta, sample_rows), args.calls)
    rows, t = len(batch), ids.shape[0]
    x = {n: torch.randn(rows_bucket(rows), n) for n in {fused.lm_head.weight.shape[1], fused.layers[0].down.weight.shape[1]}}

    def matmuls():
        for layer in fused.layers:
            for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
                lin(x[lin.weight.shape[1]])
        fused.lm_head(x[fused.lm_head.weight.shape[1]][:rows])

    mm = best_ms(matmuls, args.calls)
    q = torch.randn(t, fused.num_heads, fused.head_dim)
    kv = torch.randn(t, 2 * fused.num_kv_heads, fused.head_dim).transpose(0, 1)
    attention = best_ms(lambda: [paged_attention(meta, i, q, kv, fused.scaling, layer.window)
                                 for i, layer in enumerate(fused.layers)], args.calls)
    context = sum(r.num_computed_tokens for r, _ in batch)
    gemm = matmul_flops()
    flops = 2 * count_params(engine.loaded.model) * rows

    def share(ms):
        return f"{100 * flops / (ms / 1e3) / gemm:.0f}%"

    print(f"decode step of {rows} requests over {context} context tokens; GEMM rate {gemm / 1e9:.0f} GFLOP/s")
    print(f"  whole step {step:.2f} ms ({share(step)} of the GEMM rate), forward {forward:.2f} ms ({share(forward)})")
    print(f"  matmuls alone {mm:.2f} ms ({share(mm)}), attention alone {attention:.2f} ms, "
          f"the two together {mm + attention:.2f} ms ({share(mm + attention)})")
    print(f"  {100 * args.share:.0f}% of the GEMM rate needs the whole step in {flops / (args.share * gemm) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
