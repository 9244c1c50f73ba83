"""`python -m bench.grading_api --quick` runs end to end: a throwaway SQLite database set up, Daphne
started as `make run` starts it, a few API clients posting every question type with retries, and
one RESULT line with no errors and every retry answered with its original result. Timings are
printed by the benchmark, never asserted here (a shared machine)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_grades_every_type_without_errors_and_retries_match():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmark's own: `make run`'s settings
    env.pop("DATABASE_URL", None)  # it makes its own throwaway database
    done = subprocess.run([sys.executable, "-m", "bench.grading_api", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    results = re.findall(r"^RESULT backend=sqlite .*$", out, re.M)
    assert len(results) == 1, out
    fields = dict(pair.split("=", 1) for pair in results[0].split()[1:])
    assert fields["errors"] == "0" and fields["retry_mismatches"] == "0", out
    assert int(fields["graded"]) > 0, out
    for kind in ("single", "multi", "numeric", "short", "ordering", "matching", "retry"):
        assert re.search(rf"^\s*{kind}\s+[1-9]\d*\s", out, re.M), f"no {kind} requests:\n{out}"
    assert "warm-up: " in out and "graded as expected" in out
