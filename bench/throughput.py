"""Throughput at one KV memory budget: this engine (continuous, static) vs HF generate with
max-length reservation vs transformers' own continuous batching; plus KV waste and the
fraction of the measured matmul rate that decode reaches.

    python -m bench.throughput [--requests 64] [--kv-tokens 4096] [--model PATH] [--compile]
"""
import argparse
import copy
import dataclasses
import logging
import random
import time

import torch
from transformers import GenerationConfig

from bench.workload import count_params, make_jobs, matmul_flops, ordinary_token_ids, synchronize
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.config import DEFAULT_MODEL
from engine.model_runner import load_model


def run_engine(path, jobs, kv_tokens, block_size, scheduling, max_num_seqs, budget, loaded=None, compile=False,
               attention_backend="auto"):
    """`loaded`: weights already in memory (bench.gpu_check's random ones); else from `path`."""
    engine = LLMEngine(EngineConfig(
        model=path, block_size=block_size, num_blocks=kv_tokens // block_size, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget, scheduling=scheduling, compile=compile, attention_backend=attention_backend,
    ), loaded=loaded)
    for i, job in enumerate(jobs):
        engine.add_request(job.prompt, SamplingParams(temperature=0, max_tokens=job.max_tokens, ignore_eos=True), f"j{i}")
    allocated = wasted = 0
    decode_tokens = decode_time = elapsed = 0.0
    steps = 0
    while engine.has_unfinished_requests():
        # Only the steps are timed: the waste measured below is the bench's, not the engine's
        # work. As the API serves it (nobody watching), the steps leave the pool's picture out.
        began = time.perf_counter()
        event = engine.step(picture=False)
        elapsed += time.perf_counter() - began
        steps += 1
        snap = engine.metrics_snapshot()
        allocated += snap.kv_tokens_allocated
        wasted += snap.wasted_slots
        if event.scheduled and all(s.decode_tokens == 1 and s.prefill_tokens == 0 for s in event.scheduled):
            decode_tokens += len(event.scheduled)
            decode_time += event.duration_ms / 1000
    generated = sum(len(engine.output(f"j{i}").token_ids) for i in range(len(jobs)))
    return {
        "tokens": generated, "seconds": elapsed, "steps": steps,
        "waste": wasted / allocated if allocated else 0.0,
        "decode_tok_s": decode_tokens / decode_time if decode_time else 0.0,
        "preemptions": engine.scheduler.num_preemptions,
    }


def run_prefill(path, hf, vocab, prompts=8, length=512, block_size=16, repeats=3, loaded=None):
    """Prompt throughput: `prompts` prompts of `length` tokens in one engine step (max_tokens 1)
    against one plain forward of the HF model over the same tokens as a [prompts, length] batch.
    Best of `repeats` each; a new engine every time (no prefix-cache hits)."""
    rng = random.Random(1)
    batch = [[rng.choice(vocab) for _ in range(length)] for _ in range(prompts)]
    engine_s, hf_s = [], []
    for _ in range(repeats):
        engine = LLMEngine(EngineConfig(
            model=path, block_size=block_size, num_blocks=prompts * (length // block_size + 1), max_num_seqs=prompts,
            max_num_batched_tokens=prompts * length, enable_prefix_caching=False,
        ), loaded=loaded)
        for i, prompt in enumerate(batch):
            engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), f"p{i}")
        began = time.perf_counter()
        while engine.has_unfinished_requests():
            engine.step()
        engine_s.append(time.perf_counter() - began)
        ids = torch.tensor(batch, device=hf.device)
        began = time.perf_counter()
        with torch.inference_mode():
            hf(input_ids=ids, use_cache=False)
        synchronize(hf.device)
        hf_s.append(time.perf_counter() - began)
    tokens = prompts * length
    return {"tokens": tokens, "engine_tok_s": tokens / min(engine_s), "hf_tok_s": tokens / min(hf_s)}


def run_hf_static(model, jobs, kv_tokens, reserve_len, pad_id):
    """HF generate in FIFO batches padded to the longest prompt, each request reserving
    `reserve_len` KV slots up front, as many per batch as the KV budget fits."""
    max_len = reserve_len
    batch = max(1, kv_tokens // max_len)
    useful = 0
    began = time.perf_counter()
    for start in range(0, len(jobs), batch):
        group = jobs[start : start + batch]
        width = max(len(j.prompt) for j in group)
        ids = torch.full((len(group), width), pad_id, device=model.device)
        mask = torch.zeros((len(group), width), dtype=torch.long, device=model.device)
        for row, job in enumerate(group):
            ids[row, width - len(job.prompt) :] = torch.tensor(job.prompt, device=model.device)
            mask[row, width - len(job.prompt) :] = 1
        longest = max(j.max_tokens for j in group)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
                           do_sample=False, pad_token_id=pad_id)
        useful += sum(j.max_tokens for j in group)  # a static batch runs to its longest member
    synchronize(model.device)
    return {"tokens": useful, "seconds": time.perf_counter() - began, "batch": batch, "max_len": max_len}


def run_hf_continuous(model, jobs, kv_tokens, block_size, max_num_seqs, budget, pad_id):
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=max(j.max_tokens for j in jobs), pad_token_id=pad_id)
    cb = ContinuousBatchingConfig(page_size=block_size, num_blocks=kv_tokens // block_size, max_batch_tokens=budget,
                                  max_requests_per_batch=max_num_seqs, allow_block_sharing=False)
    began = time.perf_counter()
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb, warmup=False) as manager:
        ids = [manager.add_request(j.prompt, max_new_tokens=j.max_tokens, eos_token_id=-1) for j in jobs]
        results = {}
        while len(results) < len(ids):
            out = manager.get_result(timeout=600)
            if out is None:
                raise RuntimeError("transformers' continuous batching stopped without finishing")
            if out.is_finished():
                results[out.request_id] = out
    generated = sum(len(r.generated_tokens) for r in results.values())
    return {"tokens": generated, "seconds": time.perf_counter() - began}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--kv-tokens", type=int, default=6144, help="the KV memory budget every system gets, in tokens")
    ap.add_argument("--max-model-len", type=int, default=None, help="what max-length reservation reserves (default: the model's context)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--budget", type=int, default=1024, help="max_num_batched_tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefill-prompts", type=int, default=8)
    ap.add_argument("--prefill-length", type=int, default=512)
    ap.add_argument("--skip", default="", help="comma-separated: hf-static,hf-cb,static,prefill")
    ap.add_argument("--attention-backend", default="auto", choices=["auto", "cpu_paged", "torch_sdpa"],
                    help="EngineConfig.attention_backend of the engine rows")
    ap.add_argument("--plain-linears", action="store_true",
                    help="also the engine with every matmul through F.linear instead of oneDNN's packed weights")
    ap.add_argument("--sdpa", action="store_true", help="also the engine with attention_backend='torch_sdpa', side by side")
    ap.add_argument("--compile", action="store_true", help="also the engine with EngineConfig.compile (after a warm-up run that compiles)")
    args = ap.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)
    skip = set(filter(None, args.skip.split(",")))

    loaded = load_model(args.model)
    vocab = ordinary_token_ids(loaded.tokenizer, loaded.model.config.vocab_size)
    jobs = make_jobs(args.requests, vocab, seed=args.seed)
    pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer is not None and loaded.tokenizer.pad_token_id is not None else 0
    hf = copy.deepcopy(loaded.model)  # its own copy, with transformers' own attention
    hf.set_attn_implementation("sdpa")
    print(f"model {args.model}: {count_params(hf) / 1e6:.2f} M parameters, {loaded.device}, {loaded.dtype}")
    print(f"workload: {len(jobs)} requests, prompts {min(len(j.prompt) for j in jobs)}–{max(len(j.prompt) for j in jobs)} "
          f"tokens, outputs {min(j.max_tokens for j in jobs)}–{max(j.max_tokens for j in jobs)} tokens, seed {args.seed}; "
          f"KV budget {args.kv_tokens} tokens for every system")

    max_model_len = args.max_model_len or loaded.max_model_len
    longest = max(len(j.prompt) for j in jobs) + max(j.max_tokens for j in jobs)
    rows = {}
    # A short warm-up of each system right before its timed runs (its first steps in a process pay
    # one-off costs: allocations, the pool's first touch, the attention kernel's load).
    warm = jobs[:8]

    def engine(job_list, scheduling="continuous", **kw):
        """One engine run on this bench's budget and knobs; kw: loaded, compile, attention_backend."""
        kw.setdefault("attention_backend", args.attention_backend)
        return run_engine(args.model, job_list, args.kv_tokens, args.block_size, scheduling, args.max_num_seqs,
                          args.budget, **kw)

    engine(warm)
    rows["engine continuous"] = engine(jobs)
    if args.plain_linears and loaded.fused is not None:
        plain = copy.copy(loaded.fused)  # the same weights; its matmuls through F.linear
        plain.packed_linears = False
        rows["engine continuous, matmuls through F.linear"] = engine(jobs, loaded=dataclasses.replace(loaded, fused=plain))
    if args.sdpa:
        rows["engine continuous, SDPA decode attention"] = engine(jobs, attention_backend="torch_sdpa")
    if args.compile:
        began = time.perf_counter()  # compiling happens in the first steps of each kind: not counted below
        engine(warm, compile=True)
        print(f"compiled path: compile and warm-up ({len(warm)} requests) {time.perf_counter() - began:.1f} s")
        rows["engine continuous, compiled"] = engine(jobs, compile=True)
    if "static" not in skip:
        rows["engine static"] = engine(jobs, "static")
    if "hf-static" not in skip:
        run_hf_static(hf, warm, args.kv_tokens, longest, pad_id)  # its warm-up, right before its runs
        rows["HF generate, static, reserving max-model-len"] = run_hf_static(hf, jobs, args.kv_tokens, max_model_len, pad_id)
        rows["HF generate, static, reserving the longest job"] = run_hf_static(hf, jobs, args.kv_tokens, longest, pad_id)
    if "hf-cb" not in skip:
        rows["transformers continuous batching"] = run_hf_continuous(hf, jobs, args.kv_tokens, args.block_size, args.max_num_seqs, args.budget, pad_id)

    base = rows["engine continuous"]["tokens"] / rows["engine continuous"]["seconds"]
    print(f"\n{'system':48} {'tokens':>7} {'seconds':>8} {'tok/s':>8} {'engine ÷ it':>12}")
    for name, r in rows.items():
        rate = r["tokens"] / r["seconds"]
        print(f"{name:48} {r['tokens']:7d} {r['seconds']:8.1f} {rate:8.1f} {base / rate:11.2f}×")
    for name, r in rows.items():
        if "batch" in r:
            print(f"  ({name}: {r['batch']} requests per batch = {args.kv_tokens} // {r['max_len']} reserved tokens)")
    if "engine static" in rows:
        print(f"steps: continuous {rows['engine continuous']['steps']}, static {rows['engine static']['steps']}")

    ec = rows["engine continuous"]
    mean_len = sum(len(j.prompt) + j.max_tokens for j in jobs) / len(jobs)
    print(f"\nKV waste, paged (empty slots in allocated blocks, averaged over steps): {100 * ec['waste']:.2f}%")
    for label, reserve in (("max-model-len", max_model_len), ("longest job", longest)):
        print(f"KV waste, reserving {label} ({reserve} tokens), at each request's end (its best moment): "
              f"{100 * (1 - mean_len / reserve):.1f}%")

    if "prefill" not in skip:
        pf = run_prefill(args.model, hf, vocab, args.prefill_prompts, args.prefill_length)
        print(f"\nprefill, {args.prefill_prompts} prompts × {args.prefill_length} tokens: engine (one step) {pf['engine_tok_s']:,.0f} tok/s, one plain HF "
              f"forward {pf['hf_tok_s']:,.0f} tok/s = {100 * pf['engine_tok_s'] / pf['hf_tok_s']:.0f}% of it")

    flops = matmul_flops(dtype=loaded.dtype, device=str(loaded.device))
    params = count_params(hf)
    print(f"\nmeasured GEMM rate: {flops / 1e9:.1f} GFLOP/s")
    for name in ("engine continuous", "engine continuous, matmuls through F.linear", "engine continuous, SDPA decode attention",
                 "engine continuous, compiled"):
        if name in rows:
            reached = 2 * params * rows[name]["decode_tok_s"]
            print(f"{name} decode: {rows[name]['decode_tok_s']:.1f} tok/s in pure-decode steps "
                  f"= {reached / 1e9:.2f} GFLOP/s = {100 * reached / flops:.1f}% of it")


if __name__ == "__main__":
    main()
