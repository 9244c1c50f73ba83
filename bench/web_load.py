"""A class on `make run`: 50 learners reading, answering and marking sections at once while one
demo scene streams to a websocket viewer.

    python -m bench.web_load [--clients 50] [--seconds 30] [--preset preemption]

Starts the server exactly as `make run` does (`make run` with DATABASE_URL pointing at a
throwaway SQLite file, so migrate, load_content and the Daphne command are the real ones),
then measures, side by side in one run:
  1. the demo's engine step rate with the server otherwise idle;
  2. the same under load: each client has its own cookie jar (its own session), opens a
     section, answers a card and marks the section read, then picks section pages 70 %,
     self-check submits 20 % (htmx POSTs with a real answer and nonce from the card), read
     marks 10 %.
Prints req/s, p50/p95/p99, errors (5xx, refused or timed-out requests) and steps/s under
load ÷ idle. Targets (DESIGN.md): 0 errors, p95 ≤ 250 ms, ≥ 150 req/s, ratio ≥ 0.8.
"""
import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import websockets

from bench.server import free_port, stop_server
from courseapp.demo.traces import FrameMirror

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "appendix-a", "appendix-b", "appendix-c"]
CARD = re.compile(r'<div class="question" id="q-([\w-]+)"[^>]*data-type="(\w+)"(.*?)</form>', re.S)
NONCE = re.compile(r'name="nonce"[^>]*value="([^"]+)"')
CHOICE = re.compile(r'name="choice" value="([^"]+)"')


def start_server(tmp: str, **settings: str):
    """`make run` on a throwaway database (and any settings given, as environment variables);
    returns (process, base url)."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3", "PORT": str(port), **settings}
    env.pop("DEBUG", None)
    log = open(Path(tmp) / "server.log", "w")
    proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"make run exited: {(Path(tmp) / 'server.log').read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.2)
    raise RuntimeError("the server did not start")


@dataclass
class Tally:
    latencies: dict = field(default_factory=lambda: {"page": [], "submit": [], "read": []})
    errors: list = field(default_factory=list)
    client_errors: list = field(default_factory=list)

    def record(self, kind: str, path: str, began: float, status: int) -> None:
        self.latencies[kind].append(time.perf_counter() - began)
        if status >= 500:
            self.errors.append(f"{kind} {path} → {status}")
        elif status >= 400:
            self.client_errors.append(f"{kind} {path} → {status}")


def _answer(card_type: str, body: str, rng: random.Random) -> dict | None:
    """A plausible answer for a card, as the browser's form would send it."""
    nonce = NONCE.search(body)
    if nonce is None:
        return None
    data = [("nonce", nonce.group(1))]
    choices = CHOICE.findall(body)
    if card_type == "single" and choices:
        data.append(("choice", rng.choice(choices)))
    elif card_type == "multi" and choices:
        data += [("choice", c) for c in rng.sample(choices, k=rng.randint(1, len(choices)))]
    elif card_type == "numeric":
        data.append(("value", str(rng.choice([3, 16, 4096, 2.5]))))
    elif card_type == "short":
        data.append(("text", rng.choice(["외부 단편화", "preemption", "블록 테이블"])))
    else:
        return None
    return data


class AiohttpLearner:
    """A learner's browser as aiohttp: a cookie jar of its own, one connection pool."""

    errors = (aiohttp.ClientError, asyncio.TimeoutError)

    def __init__(self, url: str):
        self.url = url
        self.session = aiohttp.ClientSession(base_url=url, timeout=aiohttp.ClientTimeout(total=30),
                                             cookie_jar=aiohttp.CookieJar(unsafe=True))

    def htmx(self) -> dict:
        csrf = next((c.value for c in self.session.cookie_jar if c.key == "csrftoken"), "")
        return {"HX-Request": "true", "X-CSRFToken": csrf, "Referer": self.url + "/"}

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(path) as r:
            return r.status, await r.text()

    async def post(self, path: str, data=None) -> int:
        async with self.session.post(path, data=data, headers=self.htmx()) as r:
            await r.read()
            return r.status

    async def close(self) -> None:
        await self.session.close()


class HttpxLearner(AiohttpLearner):
    """The same learner as httpx (httpx2, the client the official openai package uses): a client
    the server was not tuned against (issue #33)."""

    def __init__(self, url: str):
        import httpx2

        self.url = url
        self.errors = (httpx2.HTTPError, asyncio.TimeoutError)
        self.session = httpx2.AsyncClient(base_url=url, timeout=30)

    def htmx(self) -> dict:
        return {"HX-Request": "true", "X-CSRFToken": self.session.cookies.get("csrftoken", ""), "Referer": self.url + "/"}

    async def get(self, path: str) -> tuple[int, str]:
        r = await self.session.get(path)
        return r.status_code, r.text

    async def post(self, path: str, data=None) -> int:
        form: dict[str, list] = {}
        for key, value in data or []:  # httpx takes repeated fields as a list per name
            form.setdefault(key, []).append(value)
        r = await self.session.post(path, data=form, headers=self.htmx())
        return r.status_code

    async def close(self) -> None:
        await self.session.aclose()


CLIENTS = {"aiohttp": AiohttpLearner, "httpx": HttpxLearner}


async def learner(url: str, deadline: float, tally: Tally, seed: int, client: str = "aiohttp") -> None:
    """One learner with a cookie jar of their own (their own session once they write)."""
    rng = random.Random(seed)
    session = CLIENTS[client](url)
    try:
        cards: list = []
        section = rng.choice(SECTIONS)
        # A section, an answer, a read mark first (finished even past the deadline), then the mix
        # until the deadline: however short the run or slow the machine, it measures all three.
        opening = ["page", "submit", "read"]
        while opening or time.perf_counter() < deadline:
            if opening:
                kind = opening[0]
            else:
                roll = rng.random()
                kind = "page" if roll < 0.7 else "submit" if roll < 0.9 else "read"
            if not cards:
                kind = "page"
            try:
                began = time.perf_counter()
                if kind == "page":
                    # Mostly sections; one page in ten is the course page or the lesson's contents.
                    section = rng.choice(SECTIONS)
                    path = f"/lessons/21/{section}/" if opening or rng.random() < 0.9 else rng.choice(["/", "/lessons/21/"])
                    status, text = await session.get(path)
                    cards = CARD.findall(text) or cards
                elif kind == "submit":
                    card = slug, card_type, body = rng.choice(cards)
                    data = _answer(card_type, body, rng)
                    if data is None:  # a type the benchmark does not answer: not this card again
                        cards.remove(card)
                        continue
                    path = f"/questions/{slug}/submit/"
                    began = time.perf_counter()
                    status = await session.post(path, data=data)
                else:
                    path = f"/lessons/21/{section}/read/"
                    status = await session.post(path)
                tally.record(kind, path, began, status)
                if opening and opening[0] == kind:
                    opening.pop(0)
            except session.errors as exc:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await session.close()


async def start_scene(url: str, preset: str) -> str:
    """Open a scene as a learner does: the page, then the POST its script sends to start it."""
    browser = AiohttpLearner(url)
    try:
        session = browser.session
        async with session.get(f"/demo/?preset={preset}") as page:
            html = await page.text()
        start = re.search(r'data-start-url="([^"]+)"', html)
        async with session.post(start.group(1) if start else "/demo/runs/", data={"preset": preset},
                                headers={**browser.htmx(), "Accept": "application/json"}) as r:
            text = await r.text()
        found = re.search(r'"run"\s*:\s*"([0-9a-f-]{36})"', text) or re.search(r'data-run="([0-9a-f-]{36})"', text) \
            or re.search(r'/demo/runs/([0-9a-f-]{36})/', str(r.url))
        if found is None:
            raise RuntimeError(f"could not start the scene: {r.status} {text[:300]}")
        return found.group(1)
    finally:
        await browser.close()


async def watch_demo(url: str, preset: str, stop: asyncio.Event, steps: list) -> None:
    """One viewer; scenes restart back to back until `stop`. Records (time, steps advanced)."""
    while not stop.is_set():
        run_id = await start_scene(url, preset)
        ws_url = url.replace("http://", "ws://") + f"/ws/demo/runs/{run_id}/"
        last, mirror = None, FrameMirror()  # the picture, as the page builds it from snapshot and deltas
        async with websockets.connect(ws_url, origin=url, max_size=None) as sock:
            while not stop.is_set():
                try:
                    message = json.loads(await asyncio.wait_for(sock.recv(), 1.0))
                except asyncio.TimeoutError:
                    continue
                frame = message
                if message.get("type") in ("snapshot", "delta"):
                    if not mirror.apply(message):
                        continue
                    frame = mirror.state
                if frame.get("lanes"):
                    step = max(lane["step"] for lane in frame["lanes"])
                    if last is not None and step > last:
                        steps.append((time.perf_counter(), step - last))
                    last = step
                if frame.get("status") in ("finished", "failed", "stopped", "expired"):
                    break


def step_rate(steps: list, since: float, until: float) -> float:
    window = [(t, n) for t, n in steps if since <= t <= until]
    if len(window) < 2:
        return 0.0
    return sum(n for _, n in window[1:]) / (window[-1][0] - window[0][0])


def group_cpu_seconds(session_id: int) -> float:
    """CPU seconds (user + system) of every live process in a session: `make run` is started in
    a session of its own, so this is Daphne, its page workers and the engine process, not the
    load generator. (A process that exited meanwhile is not counted.)"""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session_id:  # field 6, the session id (after pid, comm, state, ppid, pgrp)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


async def measure(url: str, clients: int, seconds: float, preset: str | None, idle_seconds: float,
                  client: str = "aiohttp", server_session: int | None = None) -> dict:
    stop, steps = asyncio.Event(), []
    idle_from = idle_until = 0.0
    demo = None
    if preset:
        demo = asyncio.create_task(watch_demo(url, preset, stop, steps))
        for _ in range(1200):  # the first scene starts the engine process and loads the model
            if len(steps) >= 3 or demo.done():
                break
            await asyncio.sleep(0.1)
        if demo.done():
            demo.result()  # raises what went wrong
        idle_from = time.perf_counter()
        await asyncio.sleep(idle_seconds)
        idle_until = time.perf_counter()
    tally = Tally()
    cpu_before = group_cpu_seconds(server_session) if server_session else None
    began = time.perf_counter()
    deadline = began + seconds
    await asyncio.gather(*(learner(url, deadline, tally, seed, client) for seed in range(clients)))
    elapsed = time.perf_counter() - began
    cpu = group_cpu_seconds(server_session) - cpu_before if server_session else None
    stop.set()
    if demo is not None:
        await demo
    return {"tally": tally, "elapsed": elapsed, "idle": step_rate(steps, idle_from, idle_until),
            "load": step_rate(steps, began, began + elapsed), "server_cpu_s": cpu, "client": client}


def report(result: dict, clients: int) -> None:
    tally, elapsed = result["tally"], result["elapsed"]
    every = [x for xs in tally.latencies.values() for x in xs]
    total = len(every)
    print(f"{clients} clients ({result['client']}) × {elapsed:.1f} s on `make run` (Daphne, SQLite, embedded engine), "
          f"this machine: {os.cpu_count()} cores")
    print(f"{'kind':>8} {'requests':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for kind, xs in [*tally.latencies.items(), ("all", every)]:
        if len(xs) < 2:
            continue
        q = statistics.quantiles([x * 1000 for x in xs], n=100)
        print(f"{kind:>8} {len(xs):9d} {statistics.median(xs) * 1000:8.1f} {q[94]:8.1f} {q[98]:8.1f}")
    print(f"throughput: {total / elapsed:.1f} req/s")
    if result.get("server_cpu_s") is not None and total:
        print(f"server CPU (Daphne, page workers, engine process; not the client): {result['server_cpu_s']:.2f} s, "
              f"{result['server_cpu_s'] / total * 1000:.2f} ms per request")
    print(f"errors: {len(tally.errors)} (5xx, refused, timed out); 4xx: {len(tally.client_errors)}")
    for line in sorted(set(tally.errors + tally.client_errors))[:10]:
        print("   ", line)
    idle, load = result["idle"], result["load"]
    ratio = load / idle if idle else 0.0
    print(f"demo steps/s: idle {idle:.2f}, under load {load:.2f}; under load ÷ idle: {ratio:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--preset", default="preemption", help="the demo scene streamed meanwhile ('' for none)")
    ap.add_argument("--url", help="measure a server that is already running instead of starting one")
    ap.add_argument("--client", choices=sorted(CLIENTS), nargs="+", default=["aiohttp"],
                    help="the HTTP client(s) the learners use; several: one run each, in turn, on the same server")
    args = ap.parse_args(argv)
    if args.url:
        for client in args.client:
            report(asyncio.run(measure(args.url, args.clients, args.seconds, args.preset, args.idle_seconds, client)), args.clients)
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(tmp)
        try:
            results = [asyncio.run(measure(url, args.clients, args.seconds, args.preset, args.idle_seconds, client, proc.pid))
                       for client in args.client]
        finally:
            stop_server(proc)
        for result in results:
            report(result, args.clients)


if __name__ == "__main__":
    main()
