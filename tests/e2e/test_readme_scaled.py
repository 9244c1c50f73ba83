"""The README's scaled-mode commands, run as written on this machine's PostgreSQL and Redis: a
database made by its `createdb` line, the web process with the prod settings behind a (pretend)
HTTPS proxy, one worker from its command line; a learner starts a scene and it finishes on that
worker. The test supplies only the values: the variables' values, a database name of its own
and a free port."""
import os
import re
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.aio import run_in_fresh_loop
from tests.e2e import clients
from tests.e2e.conftest import free_port, wait_for_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/11"  # an index no other test uses


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- scaled-commands:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


async def watch_to_the_end(ws_url: str, cookie: str, timeout: float = 300) -> tuple[dict, bool]:
    """Watch the run as its page does (a run nobody watches ends after a minute), its owner
    turning the speed up to ×8 as the page's control does (the prod pace is 0.08 s a step).
    Returns the last frame and whether a frame at ×8 came (the command reached the worker's run;
    the end's own picture is rebuilt from the database at ×1)."""
    speeds = set()

    def until(message: dict) -> bool:
        speeds.add(message.get("speed"))
        return clients.ended(message)

    last = await clients.watch(ws_url, until=until, timeout=timeout, origin="https://127.0.0.1", cookie=cookie,
                               send={"type": "speed", "value": 8})
    return last, 8 in speeds


def _postgres_up() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432"], capture_output=True).returncode == 0


class Site:
    """Requests as the HTTPS proxy in front of Daphne sends them."""

    def __init__(self, port: int):
        self.base, self.cookies = f"http://127.0.0.1:{port}", {}
        self.headers = {"Host": "127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}

    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def request(self, path: str, data: bytes | None = None, **headers) -> tuple[int, str]:
        request = urllib.request.Request(self.base + path, data=data,
                                         headers={**self.headers, "Cookie": self.cookie_header(), **headers})
        try:
            response = urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as error:
            response = error
        for header in response.headers.get_all("Set-Cookie") or []:  # Secure cookies: kept by hand
            name, value = header.split(";", 1)[0].split("=", 1)
            self.cookies[name] = value
        return response.status, response.read().decode()


@pytest.mark.skipif(not _postgres_up(), reason="needs the machine's PostgreSQL on 127.0.0.1:5432")
def test_the_readme_scaled_mode_commands_serve_a_scene_on_a_named_worker(tmp_path):
    database = f"courseapp_readme_{secrets.token_hex(4)}"
    port = free_port()
    env = {**os.environ, "REDIS_URL": REDIS_URL, "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
           "DJANGO_SETTINGS_MODULE": "courseapp.settings.prod", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    for name in ("TEST_DB_NAME", "DEBUG", "HTTP_WORKERS"):
        env.pop(name, None)
    redis.Redis.from_url(REDIS_URL).flushdb()
    lines = readme_block()
    assert [line.split("=")[0] for line in lines if line.startswith("export ")] == [
        "export REDIS_URL", "export DATABASE_URL", "export DJANGO_SETTINGS_MODULE", "export DJANGO_SECRET_KEY",
        "export DJANGO_ALLOWED_HOSTS"], "the test gives these their values"
    commands = [line.split("   #")[0].strip() for line in lines if not line.startswith("export ")]
    web = next(c for c in commands if "daphne" in c)
    worker = next(c for c in commands if "celery" in c)
    once = [c for c in commands if c not in (web, worker)]
    procs = []
    try:
        for command in once:
            command = re.sub(r"(createdb .*) courseapp\b", rf"\1 {database}", command)
            out = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, (command, out.stdout[-1500:], out.stderr[-1500:])
        for command, log in ((web.replace("-p 8000", f"-p {port}"), "web"), (worker, "worker")):
            with open(tmp_path / f"{log}.log", "w") as out:
                procs.append(subprocess.Popen(command, shell=True, cwd=ROOT, env=env, stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        wait_for_port(port, timeout=60)

        site = Site(port)
        status, page = site.request("/demo/?preset=reservation")
        assert status == 200, page[:500]
        status, body = site.request("/demo/runs/", b"preset=reservation&paused=0", **{
            "X-CSRFToken": site.cookies["csrftoken"], "Origin": "https://127.0.0.1", "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 201, body[:500]
        run_id = re.search(r'"run"\s*:\s*"([0-9a-f-]{36})"', body).group(1)
        last, sped_up = run_in_fresh_loop(lambda: watch_to_the_end(f"ws://127.0.0.1:{port}/ws/demo/runs/{run_id}/",
                                                                   site.cookie_header()))
        assert last["status"] == "finished", last
        assert sped_up, "the owner's speed command reached the worker's run"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status, summary = site.request(f"/demo/runs/{run_id}/summary/")
            if status == 286:  # the run has ended
                break
            time.sleep(0.5)
        assert 'data-run-status="finished"' in summary, summary
        assert "engine1@" in summary, "the page names the worker that served it"
        assert "Demo engines: Celery workers" in (tmp_path / "web.log").read_text()
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", database], capture_output=True)
