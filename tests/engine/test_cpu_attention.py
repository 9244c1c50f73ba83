"""The C++ paged decode-attention kernel (engine/cpu_attention.py): the same result as SDPA over
each request's own context, read from scattered blocks in place; built once and cached; refused
with the reason where it cannot run, and replaced by SDPA under "auto"."""
import logging
import random

import pytest
import torch
import torch.nn.functional as F

from engine import ConfigError, EngineConfig, LLMEngine, cpu_attention
from engine import model_runner
from tests.engine.test_parity import assert_parity, prompts, run_checked


def reference(q_row, pool, table_row, position, block_size, scale, window, hkv):
    """SDPA over one request's keys 0 … position (inside the window), gathered token by token."""
    slots = torch.tensor([table_row[p // block_size] * block_size + p % block_size for p in range(position + 1)])
    if window:
        slots = slots[max(0, position + 1 - window):]
    k, v = pool[:hkv, slots], pool[hkv:, slots]  # [Hkv, n, D]
    h, d = q_row.shape
    q = q_row.reshape(hkv, h // hkv, d)
    return F.scaled_dot_product_attention(q, k, v, scale=scale).reshape(h, d)


@pytest.mark.parametrize("heads,kv_heads,dim,block_size,window", [
    (4, 2, 64, 16, None),   # the shipped model's shape
    (8, 1, 128, 4, None),   # eight query heads on one KV head, the other compiled size
    (6, 3, 40, 8, 13),      # a head size compiled generically, a sliding window
    (2, 2, 64, 16, None),   # no grouping
])
def test_the_kernel_matches_sdpa_over_each_requests_own_blocks(heads, kv_heads, dim, block_size, window):
    rng = random.Random(heads * dim + block_size)
    torch.manual_seed(0)
    num_blocks = 64
    pool = torch.randn(2 * kv_heads, num_blocks * block_size, dim)
    positions = [0, 1, block_size - 1, block_size, 3 * block_size + 5, 7 * block_size + 2, rng.randrange(1, 200)]
    free = rng.sample(range(num_blocks), num_blocks)  # scattered, out of order
    widest = max(p // block_size + 1 for p in positions)
    table = torch.zeros(len(positions), widest + 2, dtype=torch.long)  # padded rows, as the runner makes them
    for r, p in enumerate(positions):
        for b in range(p // block_size + 1):
            table[r, b] = free.pop()
    steps_tokens = len(positions) + 4
    # q as the fused forward hands it over: a view of each token's Q/K/V row
    qkv = torch.randn(steps_tokens, (heads + 2 * kv_heads) * dim)
    q = qkv[:, : heads * dim].view(steps_tokens, heads, dim)
    tokens = torch.tensor(rng.sample(range(steps_tokens), len(positions)))
    out = torch.full((steps_tokens, heads, dim), 7.0)
    scale = dim ** -0.5
    cpu_attention.decode_attention(cpu_attention.load(), q, out, tokens, pool, table, torch.tensor(positions),
                                   block_size, scale, window)
    for r, p in enumerate(positions):
        expected = reference(q[tokens[r]], pool, table[r].tolist(), p, block_size, scale, window, kv_heads)
        torch.testing.assert_close(out[tokens[r]], expected, atol=2e-5, rtol=2e-5)
    untouched = sorted(set(range(steps_tokens)) - set(tokens.tolist()))
    assert (out[untouched] == 7.0).all(), "only the requests' own rows are written"


def test_the_kernel_reads_queries_in_transformers_layout_too():
    """transformers' attention hands queries over as [1, H, T, D]; viewed [T, H, D], a token's
    heads are T · D apart, not D."""
    torch.manual_seed(1)
    heads, kv_heads, dim, bs, t = 4, 2, 64, 4, 5
    pool = torch.randn(2 * kv_heads, 32 * bs, dim)
    query = torch.randn(1, heads, t, dim)
    q = query[0].transpose(0, 1)
    table = torch.arange(12, dtype=torch.long).view(2, 6)
    tokens, positions = torch.tensor([1, 4]), torch.tensor([9, 22])
    out = torch.zeros(t, heads, dim)
    cpu_attention.decode_attention(cpu_attention.load(), q, out, tokens, pool, table, positions, bs, 0.125, None)
    for r in range(2):
        expected = reference(q[tokens[r]], pool, table[r].tolist(), int(positions[r]), bs, 0.125, None, kv_heads)
        torch.testing.assert_close(out[tokens[r]], expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", ["cpu_paged", "torch_sdpa"])
def test_both_backends_match_generate_through_chunks_and_preemption(tiny_models, backend):
    path = tiny_models["llama"]
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=18, max_num_seqs=4, max_num_batched_tokens=16,
                                    attention_backend=backend))
    assert (engine.runner.decode_kernel is not None) == (backend == "cpu_paged")
    calls = []
    if backend == "cpu_paged":  # count the kernel's calls: every layer of a step with decodes
        kernel = engine.runner.decode_kernel
        engine.runner.decode_kernel = lambda *args: calls.append(args[10]) or kernel(*args)
    ps = [(f"k{i}", p) for i, p in enumerate(prompts(5, length_range=(12, 30), seed=8))]
    run_checked(engine, {0: ps[:2], 2: ps[2:4], 5: ps[4:]})
    assert engine.scheduler.num_preemptions > 0
    assert_parity(engine, path, ps)
    if backend == "cpu_paged":
        layers = engine.loaded.shape.num_layers
        assert len(calls) >= layers * 12 and len(calls) % layers == 0
        assert max(calls) > 1, "a call attends several requests"


def test_a_prompts_few_new_tokens_over_a_cached_prefix_are_kernel_queries_and_match_generate(tiny_models):
    """8 requests with one long cached prefix (the lab's experiment 2): each step-one chunk is a
    few tokens, attended by the kernel one query per token (causal by position) rather than by
    gathering every request's whole context for SDPA; greedy answers still equal generate's."""
    path = tiny_models["llama"]
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=128, max_num_seqs=8, max_num_batched_tokens=256))
    kernel = engine.runner.decode_kernel
    assert kernel is not None
    system = prompts(1, length_range=(40, 40), seed=5)[0]
    run_checked(engine, {0: [("warm", system + [3])]})  # caches the prefix's 10 whole blocks
    rows = []
    engine.runner.decode_kernel = lambda *args: rows.append(args[10]) or kernel(*args)
    tails = [[7 + i, 11 + i, 13] for i in range(8)]  # 40 cached + 3 new tokens each
    ps = [(f"r{i}", system + tail) for i, tail in enumerate(tails)]
    run_checked(engine, {0: ps})
    assert all(engine.output(rid).metrics.num_cached_tokens == 40 for rid, _ in ps)
    assert rows[0] == 8 * 3, "the first step: each request's 3 new tokens, one kernel query each"
    assert_parity(engine, path, ps)


def test_built_once_per_source_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_KERNEL_DIR", str(tmp_path))
    first = cpu_attention.build()
    assert first.parent == tmp_path and first.exists()
    built_at = first.stat().st_mtime_ns
    assert cpu_attention.build() == first and first.stat().st_mtime_ns == built_at, "the second call builds nothing"
    changed = tmp_path / "changed.cpp"
    changed.write_text(cpu_attention.SOURCE.read_text() + "\n// changed\n")
    monkeypatch.setattr(cpu_attention, "SOURCE", changed)
    assert cpu_attention.build() != first, "a changed source builds a library of its own"


def test_a_cache_it_cannot_write_says_where(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ENGINE_KERNEL_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(cpu_attention.KernelUnavailable, match="cannot write the kernel's cache .*a-file/cache.*ENGINE_KERNEL_DIR"):
        cpu_attention.build()


def test_a_source_that_does_not_compile_says_so_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_KERNEL_DIR", str(tmp_path / "cache"))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(cpu_attention, "SOURCE", broken)
    with pytest.raises(cpu_attention.KernelUnavailable, match="failed to build broken.cpp"):
        cpu_attention.build()
    assert list((tmp_path / "cache").iterdir()) == []


def test_without_a_compiler_cpu_paged_is_refused_and_auto_falls_back(tiny_llama, monkeypatch, caplog):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="cpu_paged.*C\\+\\+ compiler"):
        EngineConfig(model=tiny_llama, attention_backend="cpu_paged")
    with pytest.raises(cpu_attention.KernelUnavailable, match="no C\\+\\+ compiler"):
        cpu_attention.build()

    def unavailable():
        raise cpu_attention.KernelUnavailable("no C++ compiler (g++ or c++) on the PATH")

    monkeypatch.setattr(cpu_attention, "load", unavailable)
    monkeypatch.setattr(model_runner, "_kernel_warned", False)
    with caplog.at_level(logging.WARNING, logger="engine.model_runner"):
        engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2))
        LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2))
    assert engine.runner.decode_kernel is None
    warnings = [r.getMessage() for r in caplog.records if "falls back to SDPA" in r.getMessage()]
    assert warnings == ["decode attention falls back to SDPA: no C++ compiler (g++ or c++) on the PATH"], "said once"
    assert engine.generate([[5, 6, 7]], {"temperature": 0, "max_tokens": 3})[0].token_ids


def test_a_backend_it_cannot_serve_is_refused(tiny_llama):
    with pytest.raises(ConfigError, match="attention_backend must be"):
        EngineConfig(model=tiny_llama, attention_backend="flash")
    with pytest.raises(ConfigError, match="float32"):
        LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2, dtype="float64",
                               attention_backend="cpu_paged"))
    sdpa = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2, dtype="float64"))
    assert sdpa.runner.decode_kernel is None  # "auto": float64 goes to SDPA
