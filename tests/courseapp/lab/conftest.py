import pytest


def measured(label, *, tokens=200, elapsed=2.0, ttft=0.05, text="분류: 배송", prompt=670, cached=0, started=0.0):
    return {"label": label, "started": started, "ttft": ttft, "elapsed": elapsed, "prompt_tokens": prompt,
            "completion_tokens": tokens, "cached_tokens": cached, "text": text, "tokens_per_s": tokens / elapsed}


@pytest.fixture
def sample_report():
    """A report of experiments.run's shape, with numbers chosen so every figure can be checked."""
    many = [measured(str(i + 1), elapsed=4.0 if i < 4 else 5.0, started=0.1 * i) for i in range(8)]
    return {
        "settings": {"base_url": "http://127.0.0.1:8000", "model": "munuibot", "concurrency": 8, "max_tokens": 200,
                     "temperature": 0.0, "sample_every_s": 1.0, "ignore_eos": False, "launch_command": "vllm serve x --max-num-seqs 8",
                     "timeout_s": 300.0},
        "started_at": "2026-12-01T10:00:00+09:00", "finished_at": "2026-12-01T10:00:30+09:00",
        "warmup": measured("warm-up"), "single": measured("1", elapsed=1.25, ttft=0.02),
        "concurrent": {"requests": many, "span_s": 5.7, "total_tokens": 1600, "server_tokens_per_s": 1600 / 5.7},
        "prefix": {"same": [measured("same-1", ttft=0.2, prompt=1545, cached=0), measured("same-2", ttft=0.02, prompt=1545, cached=1536)],
                   "time": [measured("time-1", ttft=0.21, prompt=1565, cached=0), measured("time-2", ttft=0.22, prompt=1565, cached=16)]},
        "series": [{"time": "10:00:05.00", "t": 0.0, "running": 0.0, "waiting": 0.0, "kv": 0.0},
                   {"time": "10:00:06.00", "t": 1.0, "running": 8.0, "waiting": 2.0, "kv": 0.95},
                   {"time": "10:00:07.00", "t": 2.0, "running": 0.0, "waiting": 0.0, "kv": 0.0}],
        "preemptions": {"before": 3.0, "after": 5.0, "delta": 2},
        "logs": [{"time": 1.0, "kind": "stats", "during_2": True, "line": "INFO 12-01 10:00:06 [loggers.py] Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 8 reqs"},
                 {"time": 9.0, "kind": "stats", "during_2": False, "line": "INFO 12-01 10:00:20 [loggers.py] Engine 000: Avg prompt throughput: 9.0 tokens/s, Running: 1 reqs"},
                 {"time": 1.5, "kind": "v0_preemption", "during_2": True, "line": "WARNING 12-01 10:00:06 [scheduler.py] Sequence group a is preempted by PreemptionMode.RECOMPUTE mode"}],
        "metric_names": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
                         "kv": "vllm:gpu_cache_usage_perc", "preemptions": "vllm:num_preemptions_total"},
        "script": ["[1] alone: ttft 20 ms", "[2] server: 1600 tokens / 5.70 s = 280.7 tok/s"],
    }
