"""The engine benchmarks run end to end on a tiny workload and print the rows their docs quote
(a broken benchmark is found here, not on the day someone measures). Timings are printed by the
benchmarks, never asserted (a shared machine)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_throughput_compares_the_systems_on_one_budget(tiny_llama):
    """Without `--compile`: the compiled path's first compile costs 30–130 s on a loaded 2-core
    machine with a cold cache (every fresh clone), and tests/engine/test_compiled.py runs that
    path already; its row is `run_engine(..., compile=True)`, the same function as the others."""
    out = _run("bench.throughput", "--model", tiny_llama, "--requests", "4", "--kv-tokens", "256",
               "--max-num-seqs", "4", "--budget", "64", "--prefill-prompts", "2", "--prefill-length", "64",
               "--sdpa", "--plain-linears")
    assert "compiled" not in out, "the compiled path runs only when asked"
    for system in ("engine continuous", "engine continuous, SDPA decode attention",
                   "engine continuous, matmuls through F.linear", "engine static", "HF generate, static, reserving max-model-len",
                   "HF generate, static, reserving the longest job", "transformers continuous batching"):
        assert re.search(rf"^{re.escape(system)}\s+\d+\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+×$", out, re.M), (system, out)
    assert re.search(r"KV waste, paged .*: \d+\.\d+%", out)
    assert re.search(r"engine continuous decode: .* = \d+\.\d+% of it", out)
    assert re.search(r"^prefill, 2 prompts × 64 tokens: engine \(one step\) [\d,]+ tok/s, one plain HF forward [\d,]+ tok/s = \d+% of it$", out, re.M), out


def test_decode_roofline_splits_a_decode_step(tiny_llama):
    out = _run("bench.decode_roofline", "--model", tiny_llama, "--requests", "3", "--context", "20", "--blocks", "64",
               "--calls", "2")
    assert re.search(r"^decode step of 3 requests over \d+ context tokens; GEMM rate \d+ GFLOP/s$", out, re.M), out
    assert re.search(r"^  whole step \d+\.\d+ ms \(\d+% of the GEMM rate\), forward \d+\.\d+ ms", out, re.M), out
    assert re.search(r"^  matmuls alone \d+\.\d+ ms \(\d+%\), attention alone \d+\.\d+ ms, the two together", out, re.M), out
    assert re.search(r"^  25% of the GEMM rate needs the whole step in \d+\.\d+ ms$", out, re.M), out


def test_prefix_cache_shows_the_hits_of_a_shared_prompt_and_none_behind_a_timestamp():
    out = _run("bench.prefix_cache", "--repeats", "1")
    shared = re.search(r"^shared prefix\s+\S+\s+\S+\s+(\d+)\s+\d+%$", out, re.M)
    stamped = re.search(r"^time at the front\s+\S+\s+\S+\s+(\d+)\s+\d+%$", out, re.M)
    assert shared and stamped, out
    assert int(shared.group(1)) > 1000 and int(stamped.group(1)) == 0  # hits are counted, not timed


def test_gpu_check_runs_on_the_cpu_with_its_flag_and_prints_one_table():
    out = _run("bench.gpu_check", "--cpu")
    for arch in ("llama", "qwen2", "mistral"):
        assert re.search(rf"^greedy parity, {arch} \(float32\)\s+(\d+)/\1 requests token-identical\s+✔$", out, re.M), out
    for row in ("engine, continuous batching", r"HF generate, static batches of \d+ \(longest job\)"):
        assert re.search(rf"^{row}\s+[\d,]+ tok/s", out, re.M), (row, out)
    assert re.search(r"^engine ÷ HF static\s+\d+\.\d+×", out, re.M), out
    assert re.search(r"^decode FLOP rate ÷ measured GEMM rate\s+\d+\.\d+% of \d+\.\d+ TFLOP/s", out, re.M), out


def test_engine_ab_interleaves_two_trees_and_prints_the_medians(tiny_llama):
    out = _run("bench.engine_ab", "--before", str(ROOT), "--rounds", "1", "--requests", "3",
               "--kv-tokens", "1024", "--model", tiny_llama)
    assert re.search(r"^\s+1 before\s+\d+\.\d+\s+\d+\.\d+$", out, re.M) and re.search(r"^\s+1 after\s+\d+\.\d+", out, re.M), out
    assert re.search(r"^median seconds: before \d+\.\d+, after \d+\.\d+ \(after ÷ before \d+\.\d+\); decode tok/s", out, re.M), out


def test_generate_ratio_times_both_sides_end_to_end_on_every_workload():
    out = _run("bench.generate_ratio", "--quick", "--rounds", "2", "--requests", "4", "--headroom", "0,1")
    for workload in ("mixed", "long prompts", "long answers"):
        for headroom in ("0", "1"):
            assert re.search(rf"^munuibot-tiny .* {workload} +cpu  1 thread  headroom {headroom} +\d+\.\d+×  "
                             rf"\(rounds \d+\.\d+ / \d+\.\d+; HF batch \d+; \d+ steps, \d+ preemptions, \d+\.\d% recomputed\)$",
                             out, re.M), (workload, headroom, out)
