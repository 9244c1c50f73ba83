"""`python -m bench.model_speed` runs end to end on the shipped model: Daphne started as `make run`
starts it, one streamed answer with no system message, a row per folder. Timings are printed,
never asserted (a shared machine)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_one_round_prints_a_row_per_model():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "bench.model_speed", "engine/models/munuibot-tiny",
                           "--rounds", "1", "--max-tokens", "12"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^round 1 engine/models/munuibot-tiny: \d+\.\d tok/s, TTFT \d+ ms, 12 tokens", done.stdout, re.M), done.stdout
    assert re.search(r"^engine/models/munuibot-tiny\s+\d+\.\d\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d$", done.stdout, re.M), done.stdout


def test_a_folder_without_a_model_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.model_speed", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a model folder" in done.stderr
