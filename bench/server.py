"""What the benchmarks share (no torch): a free port, Daphne started as `make run` starts it in a
process group of its own, waiting for it to answer, stopping the whole group, CPU seconds of a
process tree, and percentiles."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daphne(port: int, env: dict, log_path: Path) -> subprocess.Popen:
    """Daphne as `make run` starts it, in a process group of its own (its HTTP worker processes
    are its children), its output in `log_path`."""
    daphne = Path(sys.executable).with_name("daphne")
    with open(log_path, "w") as log:
        return subprocess.Popen([str(daphne), "-b", "127.0.0.1", "-p", str(port), "courseapp.asgi:application"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_answering(proc: subprocess.Popen, url: str, headers: dict, log_path: Path, timeout: float):
    """Until GET `url` answers 200 (the response); the server's log tail if it exits or never does."""
    import httpx2 as httpx  # what the openai client itself uses

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            response = httpx.get(url, headers=headers, timeout=60)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer {url} in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to its process group, then SIGKILL to whatever of the group is left after 10 s
    (worker processes that outlived the server too)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def cpu_seconds(pid: int | None, tree: bool = True) -> float:
    """CPU seconds (user + system) of a process and (`tree`) its live descendants; this process's
    when None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)] if pid is not None and tree else [proc]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def percentile(values, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); nan for no values."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
