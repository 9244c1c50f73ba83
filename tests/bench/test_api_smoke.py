"""`python -m bench.api --quick` runs end to end: Daphne started as `make run` starts it, the same
requests in-process and over HTTP, and a table with both sides' rows. Timings are printed by the
benchmark, never asserted here (a shared machine)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_both_sides():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmark's own default: `make run`'s settings
    done = subprocess.run([sys.executable, "-m", "bench.api", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = re.findall(r"^\s*2\s+(in-process|HTTP)\s+\d+\.\d+\b.*\b16\s+\d", done.stdout, re.M)
    assert rows == ["in-process", "HTTP"], done.stdout
    assert "ignore_eos" in done.stdout
