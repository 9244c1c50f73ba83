"""The quiz grading API under a class's load: 50 API clients posting submissions at once.

    python -m bench.grading_api [--backend sqlite|postgres|both] [--seconds 30] [--clients 50]
                                [--retry-share 0.1] [--client lean|httpx]
                                [--profile DIR [--profile-gil] [--profile-idle]] [--settings MODULE]
    python -m bench.grading_api --quick      # 5 clients × 3 s, SQLite only: a smoke test

Issue #11: "50 concurrent API clients for 30 s posting submissions of all six question types (each
with its own learner and Idempotency-Key; 10% retries of an earlier key), against the server as
`make run` starts it and again on PostgreSQL. Prints submissions/s, p50/p95/p99 and errors.
Targets on the 2-core machine: 0 errors, every retry answered with its original result, ≥ 150
graded submissions/s, p95 ≤ 200 ms."

Per backend, in a database of its own (SQLite: a file in a temporary folder; PostgreSQL: a fresh
database `bench_grading_<pid>` on 127.0.0.1:5432, dropped at the end):

  1. setup, in a child process with the same environment as the server (`--prepare`, Django
     pointed at that DATABASE_URL): migrate, load_content, an instructor and a class of lesson 21,
     a grade-scoped token (`manage.py create_api_token … --scope grade`), and a pool of (question,
     response) pairs: every question of the lesson, answered rightly and wrongly
     (tests/answers.py `api_response`, the responses the API's own tests send);
  2. Daphne as `make run` starts it (`.venv/bin/daphne -b 127.0.0.1 -p PORT courseapp.asgi:application`,
     DJANGO_SETTINGS_MODULE=courseapp.settings.dev, this environment plus DATABASE_URL), in a
     process group of its own, stopped (SIGTERM, then SIGKILL) at the end, also on error;
  3. a warm-up that is also a check of the pool: every pair posted once (no key); a right
     response must come back correct with score 1, a wrong one with score < 1;
  4. the load: `--clients` coroutines, each with one keep-alive HTTP/1.1 connection of its own
     (`--client lean`, the default: a minimal client, LeanHttp below, so that the load generator,
     which shares the server's cores, costs ~0.4 ms of CPU a request instead of httpx's 1.6–2;
     `--client httpx`: httpx, as the first measurements), posting back to back for `--seconds`. A new submission draws a question type uniformly, then
     a pair of that type; it names a learner never seen before (`bench-<client>-<n>`: the server
     makes a learner of the class for it) and sends a fresh Idempotency-Key. With probability
     `--retry-share` (only once the client has an answer to retry) it instead re-sends one of its
     own earlier (key, body) pairs, and the answer must equal the original's: status and JSON;
  5. after the server has stopped, the attempts in the database are counted (`--count`): each graded
     submission must have written exactly one, every retry none.

Errors: a non-2xx answer, a transport error or timeout (30 s), a new submission answered with
anything but 201 `created: true`. Retry mismatches: a retry whose status or JSON differs from the
original's. graded/s = new submissions answered 2xx ÷ the run's span (first request sent → last
answer); req/s counts the retries too. Latency = send → whole answer read, in this process;
p50/p95/p99 over every request (graded and retries) and also per kind. Each backend prints one
machine-readable `RESULT backend=… errors=N retry_mismatches=N …` line. The load generator runs on
the same machine as the server: its CPU is printed beside the server's (process tree, and Daphne's
own process apart from its HTTP workers) and, for PostgreSQL, its server processes' (all
databases); the load average before and after, too. Lines of the server's log with a traceback or
a 500 are counted, and the first traceback is printed.

`--profile DIR` records the Daphne process and its HTTP workers with py-spy (`--threads
--subprocesses`, raw collapsed stacks, 100 Hz; `--profile-gil`: only samples holding the GIL;
`--profile-idle`: idle threads too) for the length of the load and prints a summary. `--settings MODULE` serves with another settings module (default
courseapp.settings.dev, as `make run`): for experiments such as a module outside the repository
that adds `api/` to HTTP_WORKER_PATHS (with PYTHONPATH pointing at it). Environment variables the
settings read (HTTP_THREADS, HTTP_WORKERS, GRADING_API_RATE_PER_MINUTE…) reach the server as given.
Results: docs/benchmarks.md. Timings are never asserted in tests (tests/bench/test_grading_api_smoke.py
only runs `--quick`).
"""
import argparse
import asyncio
import io
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.server import cpu_seconds, free_port, percentile, start_daphne, stop_server, wait_answering

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "courseapp.settings.dev"  # what `make run` uses
TYPES = ("single", "multi", "numeric", "short", "ordering", "matching")
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")

TARGET_RATE = 150.0  # graded submissions/s
TARGET_P95_MS = 200.0


# --- the children: setup and counting, with Django on the benchmark's DATABASE_URL -------------
def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def prepare(out_path: str) -> int:
    """`--prepare OUT`: migrate, load the content, make an instructor, a class and a grade token,
    and write {token, pool, settings} as JSON to OUT."""
    _django()
    from django.conf import settings
    from django.core.management import call_command
    from django.db.models import Count

    from courseapp.instructor.services import cohort_create, instructor_make
    from courseapp.lessons.models import Lesson
    from courseapp.quizzes.models import Question
    from tests.answers import api_response

    call_command("migrate", interactive=False, verbosity=0)
    call_command("load_content", stdout=io.StringIO())
    lesson = Lesson.objects.filter(number=21).first() or \
        Lesson.objects.annotate(n=Count("questions")).order_by("-n").first()
    teacher, _ = instructor_make(username="bench-teacher")
    cohort = cohort_create(instructor=teacher, name="bench class", lesson=lesson)
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "bench", "--scope", "grade", "--class", str(cohort.pk), stdout=out, stderr=err)
    token = out.getvalue().strip()
    pool = [{"question": q.slug, "type": q.type, "right": right, "response": api_response(q, right=right)}
            for q in Question.objects.filter(lesson=lesson).order_by("order", "pk") for right in (True, False)]
    missing = set(TYPES) - {p["type"] for p in pool}
    if missing:
        raise SystemExit(f"lesson {lesson.number} has no question of type {', '.join(sorted(missing))}")
    db = settings.DATABASES["default"]
    info = {"token": token, "pool": pool, "lesson": lesson.number,
            "settings": {"engine": db["ENGINE"].rsplit(".", 1)[-1], "HTTP_THREADS": settings.HTTP_THREADS,
                         "HTTP_WORKERS": settings.HTTP_WORKERS, "HTTP_WORKER_PATHS": settings.HTTP_WORKER_PATHS,
                         "api_in_workers": bool(re.match(settings.HTTP_WORKER_PATHS, "/api/v1/submissions")),
                         "GRADING_API_RATE_PER_MINUTE": settings.GRADING_API_RATE_PER_MINUTE,
                         "CONN_MAX_AGE": db.get("CONN_MAX_AGE"), "OPTIONS": db.get("OPTIONS", {})}}
    Path(out_path).write_text(json.dumps(info))
    return 0


def count(out_path: str) -> int:
    """`--count OUT`: {attempts, kept answers, learners made through the API} as JSON to OUT."""
    _django()
    from courseapp.api.models import IdempotentAnswer, LearnerIdentity
    from courseapp.quizzes.models import Attempt

    Path(out_path).write_text(json.dumps({"attempts": Attempt.objects.count(), "kept": IdempotentAnswer.objects.count(),
                                          "identities": LearnerIdentity.objects.count()}))
    return 0


def _child(flag: str, env: dict, tmp: Path) -> dict:
    out = tmp / f"{flag.strip('-')}.json"
    done = subprocess.run([sys.executable, "-m", "bench.grading_api", flag, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{flag} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())


# --- databases ---------------------------------------------------------------------------------
class Database:
    """A throwaway database: its DATABASE_URL, and drop() at the end."""

    def __init__(self, backend: str, tmp: Path):
        self.backend, self.name = backend, None
        if backend == "sqlite":
            self.url = f"sqlite:///{tmp / 'bench-grading.sqlite3'}"  # an absolute path: sqlite:////tmp/…
        else:
            import psycopg

            self.name = f"bench_grading_{os.getpid()}"
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{self.name}"

    def drop(self) -> None:
        if self.name is None:
            return
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# --- the server --------------------------------------------------------------------------------
def wait_ready(proc, base_url: str, token: str, log_path: Path, timeout: float = 120.0) -> None:
    wait_answering(proc, f"{base_url}/api/v1/questions", headers={"Authorization": f"Bearer {token}"},
                   log_path=log_path, timeout=timeout)


def postgres_cpu_seconds() -> float:
    """CPU seconds of every PostgreSQL server process on this machine (all databases: another
    suite using the same server counts too)."""
    import psutil

    total = 0.0
    for p in psutil.process_iter(["name"]):
        try:
            if (p.info["name"] or "").startswith("postgres"):
                t = p.cpu_times()
                total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


# --- the load ----------------------------------------------------------------------------------
@dataclass
class Tally:
    latencies: dict = field(default_factory=lambda: defaultdict(list))  # "graded"/"retry"/type → seconds
    graded: int = 0
    retries: int = 0
    errors: list = field(default_factory=list)
    mismatches: list = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    first_sent: float = math.inf
    last_done: float = 0.0
    answered_at: list = field(default_factory=list)  # when each answer was read (perf_counter)


def _sent(tally: Tally, began: float) -> None:
    tally.first_sent = min(tally.first_sent, began)


def _done(tally: Tally) -> float:
    now = time.perf_counter()
    tally.last_done = max(tally.last_done, now)
    return now


class LeanResponse:
    def __init__(self, status_code: int, headers: dict, content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class LeanHttp:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads the answer (Content-Length or
    chunked), and nothing more: the load generator shares the server's two cores, and httpx
    took 1.6–2 ms of CPU a request (a quarter of the machine at the target rate), this about a
    tenth of it. `--client httpx` measures with httpx as before. Any failure (refused, reset,
    malformed, `timeout` seconds without the whole answer) raises LeanHttp.Error and drops the
    connection; the next request opens a new one."""

    class Error(Exception):
        pass

    def __init__(self, base_url: str, headers: dict, timeout: float):
        host_port = base_url.split("://", 1)[1].rstrip("/")
        self.host, _, port = host_port.partition(":")
        self.port, self.timeout = int(port or 80), timeout
        self.fixed = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host_port, **headers}.items())
        self.reader = self.writer = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self._drop()

    def _drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, json: dict, headers: dict) -> LeanResponse:
        body = _json_bytes(json)
        head = (f"POST {path} HTTP/1.1\r\n{self.fixed}" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        try:
            return await asyncio.wait_for(self._exchange(head.encode() + body), self.timeout)
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError) as exc:
            self._drop()
            raise LeanHttp.Error(f"{type(exc).__name__}: {exc}") from None

    async def _exchange(self, request: bytes) -> LeanResponse:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(request)
        reader = self.reader
        status_line = await reader.readline()
        if not status_line:
            raise EOFError("the server closed the connection")
        status = int(status_line.split(None, 2)[1])
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            while await reader.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            content = b"".join(chunks)
        elif "content-length" in headers:
            content = await reader.readexactly(int(headers["content-length"]))
        else:
            content = await reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self._drop()
        return LeanResponse(status, headers, content)


def _json_bytes(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def http_client(kind: str, base_url: str, token: str):
    """The client's one connection: the lean one, or httpx (`--client httpx`)."""
    if kind == "httpx":
        import httpx2 as httpx

        return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30,
                                 limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
    return LeanHttp(base_url, {"Authorization": f"Bearer {token}"}, timeout=30)


async def api_client(index: int, base_url: str, token: str, by_type: dict, deadline: float, retry_share: float,
                     tally: Tally, seed: int, client_kind: str = "lean") -> None:
    import httpx2 as httpx

    rng = random.Random(seed * 1000 + index)
    history: list = []  # (key, body, status, json) of this client's answered submissions
    n = 0
    async with http_client(client_kind, base_url, token) as http:
        while time.perf_counter() < deadline:
            retry = history and rng.random() < retry_share
            if retry:
                key, body, status, original = rng.choice(history)
                kind = "retry"
            else:
                n += 1
                pair = rng.choice(by_type[rng.choice(TYPES)])
                key = uuid.uuid4().hex
                body = {"learner": f"bench-{index}-{n}", "question": pair["question"], "response": pair["response"]}
                kind = pair["type"]
            began = time.perf_counter()
            _sent(tally, began)
            try:
                r = await http.post("/api/v1/submissions", json=body, headers={"Idempotency-Key": key})
                data = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
            except (httpx.HTTPError, LeanHttp.Error, ValueError) as exc:
                _done(tally)
                tally.errors.append(f"{kind}: {type(exc).__name__}: {exc}"[:300])
                continue
            took = _done(tally) - began
            tally.statuses[r.status_code] += 1
            tally.latencies["all"].append(took)
            tally.answered_at.append(began + took)
            tally.latencies["retry" if retry else "graded"].append(took)
            if not retry:
                tally.latencies[kind].append(took)
            if not 200 <= r.status_code < 300:
                tally.errors.append(f"{kind} → {r.status_code} {str(data)[:200]}")
                continue
            if retry:
                tally.retries += 1
                if r.status_code != status or data != original:
                    tally.mismatches.append(f"key {key}: {status} {original} ≠ {r.status_code} {data}"[:400])
            elif r.status_code != 201 or not isinstance(data, dict) or data.get("created") is not True:
                tally.errors.append(f"{kind}: a new key answered {r.status_code} {str(data)[:200]}"[:300])
            else:
                tally.graded += 1
                history.append((key, body, r.status_code, data))


async def warm_up(base_url: str, token: str, pool: list) -> list[str]:
    """Every pair once (no key), 8 at a time; the problems found (wrong grading, errors)."""
    import httpx2 as httpx

    problems, gate = [], asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async def one(i, pair):
            async with gate:
                r = await http.post("/api/v1/submissions", json={"learner": f"warm-{i}", "question": pair["question"],
                                                                 "response": pair["response"]})
            if r.status_code != 201:
                problems.append(f"{pair['question']} ({pair['type']}): {r.status_code} {r.text[:200]}")
                return
            body = r.json()
            if pair["right"] and not (body["correct"] and body["score"] == 1.0):
                problems.append(f"{pair['question']} ({pair['type']}): a right response scored {body['score']}")
            if not pair["right"] and body["score"] >= 1.0:
                problems.append(f"{pair['question']} ({pair['type']}): a wrong response scored {body['score']}")

        await asyncio.gather(*(one(i, pair) for i, pair in enumerate(pool)))
    return problems


async def load(base_url: str, token: str, pool: list, clients: int, seconds: float, retry_share: float,
               seed: int, client_kind: str = "lean") -> Tally:
    by_type = defaultdict(list)
    for pair in pool:
        by_type[pair["type"]].append(pair)
    tally = Tally()
    deadline = time.perf_counter() + seconds
    await asyncio.gather(*(api_client(i, base_url, token, by_type, deadline, retry_share, tally, seed, client_kind)
                           for i in range(clients)))
    return tally


# --- profiles ----------------------------------------------------------------------------------
def start_profile(pid: int, seconds: float, out: Path, gil: bool, idle: bool) -> subprocess.Popen:
    py_spy = Path(sys.executable).with_name("py-spy")
    args = [str(py_spy), "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", "100", "-f", "raw",
            "--threads", "--subprocesses", "--nonblocking", "-o", str(out)]
    if gil:
        args.append("--gil")
    if idle:
        args.append("--idle")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


LEAF_RULES = [  # (label, pattern on the sample's innermost frame)
    ("event loop idle (epoll wait)", re.compile(r"^[\w.]*select \(selectors\.py")),
    ("pool thread idle (waiting for a request)", re.compile(r"^(get \(queue\.py|wait \(threading\.py|_worker \(concurrent)")),
    ("pool thread waking the event loop (call_soon_threadsafe: socket send, GIL)",
     re.compile(r"_write_to_self \(asyncio")),
    ("HTTP worker passing a request or an answer through its socket (waking the other side)",
     re.compile(r"^(_worker_main|_recv_exactly) \(courseapp/http_workers")),
    ("HTTP worker waiting for its turn to write (SQLite: the writers' lock file)",
     re.compile(r"^write_transaction \(courseapp/api/services")),
    ("database driver in C (sqlite3: the query, the write-lock wait, the GIL after it)",
     re.compile(r"^(SQLiteCursorWrapper\.execute|BaseDatabaseWrapper\._commit|DatabaseErrorWrapper\.__call__|"
                r"DatabaseWrapper\._rollback)")),
]
STACK_RULES = [  # (label, pattern): the innermost frame that matches one of these decides
    ("psycopg (PostgreSQL round trips, the driver)", re.compile(r"psycopg")),
    ("grading (courseapp/quizzes/grading, responses)", re.compile(r"courseapp/quizzes/(grading|responses)")),
    ("Django ORM (building queries, model instances)", re.compile(r"django/db/")),
    ("django-ninja / pydantic (parsing, validation, rendering)", re.compile(r"ninja/|pydantic")),
    ("Django (handler, middleware, request/response)", re.compile(r"django/")),
    ("this app's code (courseapp)", re.compile(r"courseapp/")),
    ("event loop: Twisted / Daphne / asyncio (HTTP parsing, socket writes, access log)",
     re.compile(r"twisted/|daphne/|asyncio/")),
]


def classify(frames: list) -> str:
    leaf = frames[-1]
    for label, pattern in LEAF_RULES:
        if pattern.search(leaf):
            return label
    for frame in reversed(frames):
        for label, pattern in STACK_RULES:
            if pattern.search(frame):
                return label
    return "other"


def summarize_profile(path: Path) -> list[str]:
    """Shares of the samples by thread and by what they were doing (raw collapsed stacks)."""
    if not path.exists():
        return [f"  (no profile at {path})"]
    processes, threads, kinds, leaves, total = Counter(), Counter(), Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread ("))]
        thread = next((f for f in stack.split(";") if f.startswith("thread (")), "?")
        pids = re.findall(r'process (\d+):"', stack)  # py-spy --subprocesses: the parent's, then the child's
        total += n
        processes[f"Daphne (pid {pids[0]})" if len(pids) == 1 else f"HTTP worker (pid {pids[-1]})" if pids else "?"] += n
        threads[thread] += n
        if frames:
            kinds[classify(frames)] += n
            leaves[re.sub(r":\d+\)$", ")", frames[-1])] += n
    if not total:
        return ["  (empty profile)"]
    lines = [f"  py-spy: {total} samples at 100 Hz ({path})", "  by process:"]
    lines += [f"    {n / total:6.1%}  {name}" for name, n in processes.most_common(8)]
    lines.append("  by thread:")
    lines += [f"    {n / total:6.1%}  {name[:90]}" for name, n in threads.most_common(8)]
    lines.append("  by what the sample shows:")
    lines += [f"    {n / total:6.1%}  {name}" for name, n in kinds.most_common()]
    lines.append("  top innermost frames:")
    lines += [f"    {n / total:6.1%}  {name[:100]}" for name, n in leaves.most_common(10)]
    return lines


# --- one backend -------------------------------------------------------------------------------
def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all processes, kernel too), over all cores."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_backend(backend: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp_name:
        tmp = Path(tmp_name)
        db = Database(backend, tmp)
        proc = None
        log_path = tmp / "daphne.log"
        try:
            env = {**os.environ, "DJANGO_SETTINGS_MODULE": args.settings, "DATABASE_URL": db.url, "PYTHONUNBUFFERED": "1"}
            env.pop("DEBUG", None)
            t0 = time.perf_counter()
            info = _child("--prepare", env, tmp)
            print(f"[{backend}] set up {db.url} in {time.perf_counter() - t0:.1f} s: lesson {info['lesson']}, "
                  f"{len(info['pool'])} (question, response) pairs: "
                  + ", ".join(f"{t} {sum(p['type'] == t for p in info['pool'])}" for t in TYPES), flush=True)
            port = args.port or free_port()
            base_url = f"http://127.0.0.1:{port}"
            proc = start_daphne(port, env, log_path)
            wait_ready(proc, base_url, info["token"], log_path)
            s = info["settings"]
            print(f"[{backend}] server: {' '.join(proc.args[1:])} (pid {proc.pid}; {args.settings}; HTTP_THREADS "
                  f"{s['HTTP_THREADS']}, HTTP_WORKERS {s['HTTP_WORKERS']}, /api in the workers: {s['api_in_workers']}; "
                  f"rate limit {s['GRADING_API_RATE_PER_MINUTE']}/min per token)", flush=True)
            problems = asyncio.run(warm_up(base_url, info["token"], info["pool"]))
            if problems:
                raise RuntimeError("the warm-up found responses the server did not grade as expected:\n  "
                                   + "\n  ".join(problems[:20]))
            print(f"[{backend}] warm-up: {len(info['pool'])} pairs graded as expected (right → 1.0, wrong → < 1)",
                  flush=True)
            profiler = None
            if args.profile:
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                suffix = ("-gil" if args.profile_gil else "") + ("-idle" if args.profile_idle else "")
                profile_path = Path(args.profile) / f"{backend}{suffix}.txt"
                profiler = start_profile(proc.pid, args.seconds, profile_path, args.profile_gil, args.profile_idle)
            load_before = loadavg()
            cpu_before = (cpu_seconds(proc.pid), cpu_seconds(None), postgres_cpu_seconds(), cpu_seconds(proc.pid, tree=False),
                          machine_busy_seconds())
            tally = asyncio.run(load(base_url, info["token"], info["pool"], args.clients, args.seconds,
                                     args.retry_share, args.seed, args.client))
            cpu_after = (cpu_seconds(proc.pid), cpu_seconds(None), postgres_cpu_seconds(), cpu_seconds(proc.pid, tree=False),
                         machine_busy_seconds())
            load_after = loadavg()
            if profiler is not None:
                try:
                    _, err = profiler.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    profiler.kill()
                    err = "(py-spy did not finish)"
                if profiler.returncode:
                    print(f"[{backend}] py-spy failed ({profiler.returncode}): {err[-500:]}", flush=True)
            stop_server(proc)
            counts = _child("--count", env, tmp)  # before the database goes
        except BaseException:
            if log_path.exists():
                print(f"--- server log (tail) ---\n{log_path.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if proc is not None:
                stop_server(proc)  # a no-op when it has stopped already
            db.drop()
        log_lines = log_path.read_text().splitlines()
        server_errors = [line for line in log_lines if "Traceback" in line or " 500 " in line]
        first = next((i for i, line in enumerate(log_lines) if "Traceback" in line), None)
        server_traceback = log_lines[max(0, first - 2):first + 40] if first is not None else []
    span = tally.last_done - tally.first_sent if tally.last_done else 0.0
    expected_attempts = len(info["pool"]) + tally.graded  # warm-up + graded; retries write nothing
    result = {"backend": backend, "tally": tally, "span": span, "cpu_server": cpu_after[0] - cpu_before[0],
              "cpu_bench": cpu_after[1] - cpu_before[1], "cpu_postgres": cpu_after[2] - cpu_before[2],
              "cpu_daphne": cpu_after[3] - cpu_before[3], "cpu_machine": cpu_after[4] - cpu_before[4],
              "load_before": load_before, "load_after": load_after,
              "counts": counts, "expected_attempts": expected_attempts, "settings": info["settings"],
              "server_errors": server_errors, "server_traceback": server_traceback}
    if args.profile:
        result["profile"] = summarize_profile(profile_path)
    return result


# --- the report --------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1000:.1f}"


def figures(result: dict) -> dict:
    tally, span = result["tally"], result["span"]
    every = tally.latencies["all"]
    counts = result["counts"] or {}
    db_mismatch = counts.get("attempts") != result["expected_attempts"]
    return {"graded_s": tally.graded / span if span else 0.0, "req_s": len(every) / span if span else 0.0,
            "p50": percentile(every, 50), "p95": percentile(every, 95), "p99": percentile(every, 99),
            "errors": len(tally.errors), "mismatches": len(tally.mismatches) + (1 if db_mismatch else 0),
            "db_mismatch": db_mismatch}


def report(result: dict, args) -> list[str]:
    tally, backend = result["tally"], result["backend"]
    f = figures(result)
    lines = [
        "",
        f"== {backend}: {args.clients} API clients ({args.client}) × {args.seconds:g} s, {args.retry_share:.0%} retries; "
        f"{os.cpu_count()} CPUs, load average {result['load_before']} before, {result['load_after']} after",
        f"{'kind':>9} {'requests':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}",
    ]
    for kind in (*TYPES, "graded", "retry", "all"):
        xs = tally.latencies.get(kind, [])
        if xs:
            lines.append(f"{kind:>9} {len(xs):9d} {_ms(percentile(xs, 50)):>8} {_ms(percentile(xs, 95)):>8} "
                         f"{_ms(percentile(xs, 99)):>8} {_ms(max(xs)):>8}")
    counts = result["counts"] or {}
    per_second = Counter(int(t - tally.first_sent) for t in tally.answered_at)
    whole = sorted(per_second[s] for s in range(1, int(result["span"])))  # whole seconds, not the first
    if whole:
        lines.append(f"answers per second over the run: min {whole[0]}, median {whole[len(whole) // 2]}, "
                     f"max {whole[-1]} (each whole second after the first)")
    lines += [
        f"graded submissions: {tally.graded} in {result['span']:.2f} s = {f['graded_s']:.1f}/s; all requests "
        f"{len(tally.latencies['all'])} = {f['req_s']:.1f}/s (retries answered: {tally.retries})",
        f"statuses: {dict(sorted(tally.statuses.items()))}; errors: {f['errors']}; retry mismatches: "
        f"{len(tally.mismatches)}",
        f"database afterwards: {counts.get('attempts')} attempts (expected {result['expected_attempts']}: "
        f"warm-up + graded, none for retries), {counts.get('kept')} kept answers, {counts.get('identities')} API learners",
        f"CPU seconds during the load: server {result['cpu_server']:.1f} (Daphne's own process {result['cpu_daphne']:.1f}, "
        f"its workers {result['cpu_server'] - result['cpu_daphne']:.1f}), this benchmark "
        f"{result['cpu_bench']:.1f} (of {result['span'] * (os.cpu_count() or 1):.0f} core-seconds); the server's "
        f"per request: {result['cpu_server'] / max(1, len(tally.latencies['all'])) * 1000:.1f} ms (Daphne "
        f"{result['cpu_daphne'] / max(1, len(tally.latencies['all'])) * 1000:.1f})"
        + (f"; PostgreSQL's processes (all databases) {result['cpu_postgres']:.1f}" if backend == "postgres" else ""),
        f"the whole machine was busy {result['cpu_machine']:.1f} core-seconds of {result['span'] * (os.cpu_count() or 1):.0f}, "
        f"{result['cpu_machine'] - result['cpu_server'] - result['cpu_bench'] - (result['cpu_postgres'] if backend == 'postgres' else 0):.1f} "
        f"of them outside the server, this benchmark{' and PostgreSQL' if backend == 'postgres' else ''} (other work, the kernel)",
    ]
    for line in sorted(set(tally.errors))[:8] + sorted(set(tally.mismatches))[:5]:
        lines.append(f"    {line}")
    if result["server_errors"]:
        lines.append(f"server log: {len(result['server_errors'])} lines with a traceback or a 500, e.g. "
                     f"{result['server_errors'][0][:200]}")
        lines += [f"    | {line[:200]}" for line in result["server_traceback"]]
    lines += result.get("profile", [])
    verdict = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    lines += [
        f"target 0 errors: {f['errors']} {verdict(f['errors'] == 0)}",
        f"target every retry answered with its original result: {len(tally.mismatches)} mismatches of "
        f"{tally.retries + len(tally.mismatches)} retries"
        f"{'; attempts in the database ≠ graded + warm-up' if f['db_mismatch'] else ''} {verdict(f['mismatches'] == 0)}",
        f"target ≥ {TARGET_RATE:g} graded submissions/s: {f['graded_s']:.1f} {verdict(f['graded_s'] >= TARGET_RATE)}",
        f"target p95 ≤ {TARGET_P95_MS:g} ms: {_ms(f['p95'])} ms {verdict(f['p95'] * 1000 <= TARGET_P95_MS)}",
        f"RESULT backend={backend} clients={args.clients} seconds={args.seconds:g} graded={tally.graded} "
        f"graded_per_s={f['graded_s']:.1f} requests_per_s={f['req_s']:.1f} retries={tally.retries} "
        f"p50_ms={_ms(f['p50'])} p95_ms={_ms(f['p95'])} p99_ms={_ms(f['p99'])} errors={f['errors']} "
        f"retry_mismatches={f['mismatches']}",
    ]
    return lines


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--retry-share", type=float, default=0.1, help="share of requests that retry an earlier key")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--client", choices=["lean", "httpx"], default="lean",
                    help="the API clients' HTTP: a lean keep-alive HTTP/1.1 connection (default) or httpx")
    ap.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    ap.add_argument("--profile", metavar="DIR", help="record the Daphne process and its HTTP workers with py-spy into DIR/<backend>.txt")
    ap.add_argument("--profile-gil", action="store_true", help="with --profile: only samples holding the GIL")
    ap.add_argument("--profile-idle", action="store_true", help="with --profile: idle threads' samples too")
    ap.add_argument("--settings", default=SETTINGS,
                    help=f"the server's settings module (default {SETTINGS}, as `make run`); for experiments")
    ap.add_argument("--quick", action="store_true", help="5 clients × 3 s on SQLite: a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.seconds, args.backend = 5, 3.0, "sqlite"
    if args.clients < 1 or args.seconds <= 0 or not 0 <= args.retry_share < 1:
        ap.error("--clients ≥ 1, --seconds > 0, 0 ≤ --retry-share < 1")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--prepare":
        return prepare(argv[1])
    if len(argv) == 2 and argv[0] == "--count":
        return count(argv[1])
    args = parse(argv)
    # Stopped with SIGTERM (a CI timeout, `kill`): unwind like Ctrl-C, so the server and the database go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = []
    for backend in backends:
        result = run_backend(backend, args)
        results.append(result)
        print("\n".join(report(result, args)), flush=True)
    if len(results) > 1:
        print(f"\n{'backend':<9} {'graded/s':>9} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'errors':>6} "
              f"{'retry mismatches':>16}")
        for result in results:
            f = figures(result)
            print(f"{result['backend']:<9} {f['graded_s']:9.1f} {f['req_s']:7.1f} {_ms(f['p50']):>7} {_ms(f['p95']):>7} "
                  f"{_ms(f['p99']):>7} {f['errors']:6d} {f['mismatches']:16d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
