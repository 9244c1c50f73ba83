"""GPU-ready check: greedy parity with `model.generate` on random-init Llama, Qwen2 and Mistral
configs, then the throughput comparison with a ~0.5B-parameter random-init Qwen2 in bfloat16,
ending in one summary table. Meant to finish within 5 minutes on one GPU.

    python -m bench.gpu_check          # on CUDA (refuses to run without one)
    python -m bench.gpu_check --cpu    # the same steps on the CPU with small sizes (the suite runs this)

Parity runs in float32 (TF32 off): greedy decoding of random weights meets near-ties, and only
matching arithmetic makes "token-identical" a fair test. Throughput runs in the GPU's dtype.
"""
import argparse
import copy
import logging
import random
import sys
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

from bench.throughput import run_engine, run_hf_static
from bench.workload import count_params, make_jobs, matmul_flops
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.model_runner import wrap_model

# Small enough for a CPU run of the suite, wide enough to have GQA and several blocks per request.
PARITY_CONFIGS = {
    "llama": lambda: LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024),
    "qwen2": lambda: Qwen2Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024),
    "mistral": lambda: MistralConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=1024,
                                     sliding_window=48),
}


def qwen2_half_billion() -> Qwen2Config:
    """Qwen2.5-0.5B's shape (494 M parameters with its 151,936-token vocabulary)."""
    return Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                       tie_word_embeddings=True)


def qwen2_small() -> Qwen2Config:
    return Qwen2Config(vocab_size=2048, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)


def build(config, device, dtype, seed=0):
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


_scratch = tempfile.TemporaryDirectory(prefix="gpu-check-")  # removed when the process exits


def config_folder(config) -> str:
    """EngineConfig wants a checkpoint folder; the weights themselves are handed over in memory."""
    folder = tempfile.mkdtemp(dir=_scratch.name)
    config.save_pretrained(folder)
    return folder


def parity(arch: str, device: str, requests: int, max_tokens: int) -> tuple[int, int]:
    """Staggered arrivals through the engine vs. `generate` one request at a time: (equal, total)."""
    config = PARITY_CONFIGS[arch]()
    reference = build(config, device, torch.float32)
    engine_model = copy.deepcopy(reference)
    engine = LLMEngine(
        EngineConfig(model=config_folder(config), block_size=16, num_blocks=256, max_num_seqs=8,
                     max_num_batched_tokens=256),
        loaded=wrap_model(engine_model),
    )
    rng = random.Random(arch)
    prompts = [[rng.randrange(1, config.vocab_size) for _ in range(rng.randint(8, 200))] for _ in range(requests)]
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    step = 0
    pending = list(enumerate(prompts))
    while pending or engine.has_unfinished_requests():
        if pending and step % 3 == 0:  # a new arrival every third step, while others decode
            i, prompt = pending.pop(0)
            engine.add_request(prompt, greedy, f"r{i}")
        if engine.has_unfinished_requests():
            engine.step()
        step += 1
    equal = 0
    with torch.inference_mode():
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([prompt], device=device)
            out = reference.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                                     pad_token_id=0)
            equal += out[0, len(prompt):].tolist() == engine.output(f"r{i}").token_ids
    return equal, len(prompts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="run on the CPU with small sizes (no GPU needed)")
    args = ap.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    if args.cpu:
        device, dtype, shape = "cpu", torch.float32, qwen2_small
        requests, kv_tokens, max_num_seqs, budget, parity_requests = 16, 2048, 16, 512, 4
        lengths = {"prompt_range": (16, 128), "output_range": (8, 64)}
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --cpu for the CPU version of this check", file=sys.stderr)
            return 2
        device, dtype, shape = "cuda", torch.bfloat16, qwen2_half_billion
        requests, kv_tokens, max_num_seqs, budget, parity_requests = 256, 65536, 256, 4096, 12
        lengths = {}  # bench.throughput's: prompts of 16–383 tokens, outputs of 16–255
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    began = time.perf_counter()
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {name}, torch {torch.__version__}")

    rows = []
    for arch in PARITY_CONFIGS:
        equal, total = parity(arch, device, parity_requests, max_tokens=24)
        rows.append((f"greedy parity, {arch} (float32)", f"{equal}/{total} requests token-identical", equal == total))
        print(rows[-1][0], rows[-1][1], flush=True)

    config = shape()
    model = build(config, device, dtype)
    folder = config_folder(config)
    hf = copy.deepcopy(model)  # transformers' own attention for the baseline
    loaded = wrap_model(model)
    vocab = list(range(1, config.vocab_size))
    jobs = make_jobs(requests, vocab, seed=0, **lengths)
    longest = max(len(j.prompt) for j in jobs) + max(j.max_tokens for j in jobs)
    params = count_params(hf)
    print(f"throughput model: random-init Qwen2, {params / 1e6:.0f} M parameters, {dtype}; {requests} requests; "
          f"KV budget {kv_tokens} tokens", flush=True)
    run_engine(folder, jobs[:4], kv_tokens, 16, "continuous", max_num_seqs, budget, loaded=loaded)  # warm-up
    engine = run_engine(folder, jobs, kv_tokens, 16, "continuous", max_num_seqs, budget, loaded=loaded)
    static = run_hf_static(hf, jobs, kv_tokens, longest, pad_id=0)
    engine_rate = engine["tokens"] / engine["seconds"]
    static_rate = static["tokens"] / static["seconds"]
    flops = matmul_flops(dtype=dtype, device=device, n=4096 if device == "cuda" else 1024)
    decode_share = 2 * params * engine["decode_tok_s"] / flops
    rows += [
        ("engine, continuous batching", f"{engine_rate:,.0f} tok/s ({engine['steps']} steps)", None),
        (f"HF generate, static batches of {static['batch']} (longest job)", f"{static_rate:,.0f} tok/s", None),
        ("engine ÷ HF static", f"{engine_rate / static_rate:.2f}×", None),
        ("decode FLOP rate ÷ measured GEMM rate", f"{100 * decode_share:.1f}% of {flops / 1e12:.2f} TFLOP/s", None),
    ]
    # Only parity passes or fails; speeds are measurements, read by a person.
    print(f"\n{'check':48} {'result':44} ok")
    for check, result, ok in rows:
        print(f"{check:48} {result:44} {'' if ok is None else '✔' if ok else '✘'}")
    print(f"\nfinished in {time.perf_counter() - began:.0f} s")
    return 0 if all(ok is not False for _, _, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
