"""The engine against HF static batching as a user runs both: `LLMEngine.generate()` on a list of
prompts vs `model.generate()` in static batches, timed end to end, interleaved over rounds.

    python -m bench.generate_ratio [--rounds 3] [--requests 48] [--headroom 0,0.5] [--quick]

Three workloads that differ in prompt : answer ratio and spread, on two model widths (the shipped
model, and a random-initialised Llama twice as wide with its vocabulary). Each round runs every
side once, alternating which goes first; a side is timed in process CPU time at one torch thread
(what a shared machine cannot steal) and, in separate rounds, in wall time at two threads. The
ratio printed is the median of the per-round ratios. Every side gets the same KV budget in
tokens: HF static reserves each request's longest job (prompt + max_tokens of the longest) up
front, so a batch holds budget // longest requests and runs until its longest member ends; the
engine gets the budget as blocks. Also printed: the engine's steps, its preemptions and the
prompt tokens it computed twice (recompute preemptions), as a share of the workload's tokens.
"""
import argparse
import copy
import logging
import statistics
import time
from dataclasses import dataclass

import torch
from transformers import LlamaConfig

from bench.gpu_check import build, config_folder
from bench.throughput import run_hf_static
from bench.workload import Job, count_params, make_jobs, ordinary_token_ids
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.config import DEFAULT_MODEL
from engine.model_runner import load_model, wrap_model

WORKLOADS = {  # name: (prompt range, answer range)
    "mixed": ((16, 320), (8, 160)),
    "long prompts": ((256, 640), (8, 48)),
    "long answers": ((8, 64), (128, 320)),
}


@dataclass(slots=True)
class Model:
    name: str
    folder: str
    engine_model: object  # the engine's LoadedModel
    hf: object  # the same weights with transformers' own attention
    vocab: list[int]
    pad_id: int


def shipped_model() -> Model:
    loaded = load_model(DEFAULT_MODEL)
    hf = copy.deepcopy(loaded.model)
    hf.set_attn_implementation("sdpa")
    pad = loaded.tokenizer.pad_token_id or 0
    return Model(f"munuibot-tiny ({count_params(hf) / 1e6:.1f} M)", DEFAULT_MODEL, loaded, hf,
                 ordinary_token_ids(loaded.tokenizer, loaded.model.config.vocab_size), pad)


def wide_model(vocab_size: int) -> Model:
    """A Llama twice as wide as the shipped one (512, 8 heads, 4 layers), random weights (seed 0)."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=True)
    model = build(config, "cpu", torch.float32)
    hf = copy.deepcopy(model)
    return Model(f"random Llama 512 wide ({count_params(hf) / 1e6:.1f} M)", config_folder(config), wrap_model(model),
                 hf, list(range(3, vocab_size)), 0)


def engine_run(model: Model, jobs: list[Job], kv_tokens: int, headroom: float) -> dict:
    engine = LLMEngine(EngineConfig(model=model.folder, block_size=16, num_blocks=kv_tokens // 16, max_num_seqs=64,
                                    max_num_batched_tokens=1024, admission_headroom=headroom), loaded=model.engine_model)
    params = [SamplingParams(temperature=0, max_tokens=j.max_tokens, ignore_eos=True) for j in jobs]
    wall, cpu = time.perf_counter(), time.process_time()
    outputs = engine.generate([j.prompt for j in jobs], params)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert [len(o.token_ids) for o in outputs] == [j.max_tokens for j in jobs]
    s = engine.scheduler
    return {"cpu": cpu, "wall": wall, "steps": engine.step_count, "preemptions": s.num_preemptions,
            "recomputed": s.recomputed_tokens}


def hf_run(model: Model, jobs: list[Job], kv_tokens: int) -> dict:
    """bench.throughput's HF static batches, each request reserving the longest job's KV up front."""
    longest = max(len(j.prompt) for j in jobs) + max(j.max_tokens for j in jobs)
    cpu = time.process_time()
    static = run_hf_static(model.hf, jobs, kv_tokens, longest, model.pad_id)
    return {"cpu": time.process_time() - cpu, "wall": static["seconds"], "batch": static["batch"]}


def measure(model: Model, jobs: list[Job], kv_tokens: int, headrooms: list[float], rounds: int, threads: int,
            clock: str) -> dict:
    """Per headroom: the per-round ratios (HF ÷ engine) on `clock`, and the engine's last run."""
    torch.set_num_threads(threads)
    engine_run(model, jobs[:4], kv_tokens, 0.0)  # warm-up: the kernel, the first shapes
    ratios = {h: [] for h in headrooms}
    last = {}
    for r in range(rounds):
        order = ["hf", *headrooms] if r % 2 == 0 else [*reversed(headrooms), "hf"]
        times = {}
        for side in order:
            if side == "hf":
                hf = hf_run(model, jobs, kv_tokens)
                times["hf"] = hf[clock]
            else:
                last[side] = engine_run(model, jobs, kv_tokens, side)
                times[side] = last[side][clock]
        for h in headrooms:
            ratios[h].append(times["hf"] / times[h])
    return {"ratios": ratios, "last": last, "batch": hf["batch"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--kv-tokens", type=int, default=8 * 480, help="the KV budget every side gets, in tokens")
    ap.add_argument("--headroom", default="0,0.5", help="EngineConfig.admission_headroom values, side by side")
    ap.add_argument("--quick", action="store_true", help="the shipped model, one thread, CPU time only")
    args = ap.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    headrooms = [float(h) for h in args.headroom.split(",")]
    shipped = shipped_model()
    models = [shipped] if args.quick else [shipped, wide_model(shipped.engine_model.model.config.vocab_size)]
    clocks = [(1, "cpu")] if args.quick else [(1, "cpu"), (2, "wall")]
    print(f"{args.requests} requests a workload, KV budget {args.kv_tokens} tokens, {args.rounds} interleaved rounds; "
          f"ratio = HF static time ÷ engine time, median of the rounds")
    for model in models:
        for name, (prompts, answers) in WORKLOADS.items():
            jobs = make_jobs(args.requests, model.vocab, prompt_range=prompts, output_range=answers, seed=7)
            needed = sum(len(j.prompt) + j.max_tokens for j in jobs)
            for threads, clock in clocks:
                got = measure(model, jobs, args.kv_tokens, headrooms, args.rounds, threads, clock)
                for h in headrooms:
                    ratios, last = got["ratios"][h], got["last"][h]
                    print(f"{model.name:32} {name:13} {clock:4} {threads} thread{'s' if threads > 1 else ' '} "
                          f"headroom {h:<4g} {statistics.median(ratios):5.2f}×  "
                          f"(rounds {' / '.join(f'{x:.2f}' for x in ratios)}; HF batch {got['batch']}; "
                          f"{last['steps']} steps, {last['preemptions']} preemptions, "
                          f"{100 * last['recomputed'] / needed:.1f}% recomputed)", flush=True)


if __name__ == "__main__":
    main()
