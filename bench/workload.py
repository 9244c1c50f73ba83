"""The seeded workload and the measuring helpers the benchmarks share."""
import random
import time
from dataclasses import dataclass

import torch

from engine.fused_llama import Linear


@dataclass(frozen=True, slots=True)
class Job:
    prompt: list[int]
    max_tokens: int


def make_jobs(n: int, vocab: list[int], prompt_range=(16, 384), output_range=(16, 256), seed: int = 0) -> list[Job]:
    """Prompts of random real token ids and output lengths drawn from a wide range (fixed seed)."""
    rng = random.Random(seed)
    return [
        Job([rng.choice(vocab) for _ in range(rng.randint(*prompt_range))], rng.randint(*output_range))
        for _ in range(n)
    ]


def ordinary_token_ids(tokenizer, vocab_size: int) -> list[int]:
    special = set(getattr(tokenizer, "all_special_ids", None) or []) if tokenizer is not None else set()
    return [i for i in range(vocab_size) if i not in special]


def matmul_flops(seconds: float = 1.0, n: int = 1024, dtype=torch.float32, device="cpu") -> float:
    """This machine's measured dense GEMM rate (FLOP/s) for the model's dtype: the best of the
    libraries torch has for it. On a CPU in float32 that is torch.mm (MKL) and oneDNN's packed
    matmul, which the engine's linears use (engine/fused_llama.py) and which on some CPUs runs
    twice as fast; the reference is the faster of the two, so the engine is held to the best."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    candidates = [lambda: a @ b]
    packed = Linear.of(b.t().contiguous())  # the engine's own packed matmul (None off a CPU in float32)
    if packed.packed is not None:
        candidates.append(lambda: packed(a))
    return max(_rate(run, seconds / len(candidates), n, a.device) for run in candidates)


def _rate(run, seconds: float, n: int, device) -> float:
    for _ in range(3):
        run()
    synchronize(device)
    iters, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        run()
        iters += 1
    synchronize(device)
    return 2 * n**3 * iters / (time.perf_counter() - began)


def synchronize(device) -> None:
    """Wait for queued GPU work, so a timer read after it counts that work."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def count_params(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
