"""Prefix caching: TTFT of a second request that shares a ~1,500-token system prompt, against
the first; and the same pair with the current time at the front (no hits), side by side.

    python -m bench.prefix_cache [--repeats 3]
"""
import argparse
import logging
import statistics
from datetime import datetime, timedelta

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.training.corpus import LONG_SYSTEM_PROMPT

QUESTIONS = ["지난주에 주문한 운동화가 아직 안 왔어요.", "환불은 언제 되나요?"]


def ttft(engine, system: str, question: str) -> tuple[float, int]:
    ids = engine.encode_chat([{"role": "system", "content": system}, {"role": "user", "content": question}])
    out = engine.generate(ids, SamplingParams(temperature=0, max_tokens=1))[0]
    return out.metrics.ttft, out.metrics.num_cached_tokens


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    rows = {"shared prefix": [], "time at the front": []}
    prompt_len = None
    for r in range(args.repeats):
        # A fresh engine each time, the whole prompt in one step (budget ≥ prompt), caching on.
        engine = LLMEngine(EngineConfig(block_size=16, num_blocks=512, max_num_seqs=8, max_num_batched_tokens=2048))
        prompt_len = len(engine.encode_chat([{"role": "system", "content": LONG_SYSTEM_PROMPT}, {"role": "user", "content": QUESTIONS[0]}]))
        first = ttft(engine, LONG_SYSTEM_PROMPT, QUESTIONS[0])
        second = ttft(engine, LONG_SYSTEM_PROMPT, QUESTIONS[1])
        rows["shared prefix"].append((first, second))
        now = datetime(2026, 11, 30, 15, 0, r)
        stamped = [f"[{(now + timedelta(seconds=i)):%H:%M:%S}] 현재 시각\n{LONG_SYSTEM_PROMPT}" for i in (0, 1)]
        rows["time at the front"].append((ttft(engine, stamped[0], QUESTIONS[0]), ttft(engine, stamped[1], QUESTIONS[1])))
    print(f"prompt: {prompt_len} tokens (system prompt + question), {args.repeats} repeats, medians")
    print(f"{'pair':20} {'1st TTFT ms':>12} {'2nd TTFT ms':>12} {'2nd hits':>9} {'2nd ÷ 1st':>10}")
    for name, pairs in rows.items():
        a = statistics.median(p[0][0] for p in pairs) * 1000
        b = statistics.median(p[1][0] for p in pairs) * 1000
        hits = pairs[-1][1][1]
        print(f"{name:20} {a:12.1f} {b:12.1f} {hits:9d} {b / a:9.0%}")


if __name__ == "__main__":
    main()
