"""The web benchmarks run end to end against the server as `make run` starts it, on a tiny load:
bench.web_load (learners reading and answering while a scene streams) and bench.demo_latency
(viewers of one run). Their tables are checked for shape and for zero errors; timings are
printed by the benchmarks, never asserted (a shared machine)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _run(*args) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmark's own default: `make run`'s settings
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_web_load_serves_every_kind_of_request_without_errors():
    out = _run("bench.web_load", "--clients", "2", "--seconds", "2", "--idle-seconds", "1", "--client", "aiohttp", "httpx")
    runs = out.split("clients (")[1:]
    assert [run.split(")")[0] for run in runs] == ["aiohttp", "httpx"], out  # one run per client, same server
    for run in runs:
        for kind in ("page", "submit", "read", "all"):
            assert re.search(rf"^\s+{kind}\s+[1-9]\d*\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+$", run, re.M), (kind, out)
        assert re.search(r"^errors: 0 \(", run, re.M), out
        assert re.search(r"under load ÷ idle: \d+\.\d+$", run, re.M), out
        # The server's own CPU per request, from its process group (not the load generator's).
        assert re.search(r"^server CPU \(.*\): \d+\.\d+ s, \d+\.\d+ ms per request$", run, re.M), out


def test_demo_latency_measures_one_viewer_beside_several():
    out = _run("bench.demo_latency", "--viewers", "2", "--step-delay", "0.001", "--preset", "concurrency")
    number = r"\s+\d+\.\d+"
    rows = re.findall(rf"^\s+([12])\s+([1-9]\d*){number * 6}\s+\d+ finished$", out, re.M)
    assert [viewers for viewers, _ in rows] == ["1", "2"], out
    assert int(rows[1][1]) > int(rows[0][1])  # two viewers receive about twice the frames
    assert re.search(r"with 2 viewers ÷ with 1: \d+\.\d+$", out, re.M), out
    assert re.search(r"^target ≤ 10 KB a frame after the snapshot: \d+\.\d+ KB (PASS|FAIL)$", out, re.M), out
