"""How well the served 문의봇 answers hand-written inquiries: the three-line format and the category.

    python -m bench.answer_quality [--base-url URL] [--data PATH] [--max-tokens 300] [--concurrency 4]
                                   [--limit N] [--settings none,system] [--show-wrong] [--json OUT]

The model (engine/models/munuibot-tiny, docs/model-card.md) is trained to answer every inquiry in
three lines — `분류: <category>`, `요약: <summary>`, `답변: <answer>` — behind the long
`engine.training.corpus.SYSTEM_PROMPT`, behind short ones, and without any (the chat template then
gives it its default system turn). This script asks the server what a user of `/v1` would ask:
the inquiries of a JSONL file (default bench/data/inquiries_handwritten.jsonl, one
{"id", "category", "text"} a line, written by hand rather than by the training generator; a line
that is not such an object, or names a category outside CATEGORIES below, refuses the file: exit 2),
each one in every `--settings` setting:

  none    [user: the inquiry] — no system message: what the README's curl, the openai client's
          default and a learner's first script send;
  system  [system: SYSTEM_PROMPT, user: the inquiry] — what the §6 lab sends.

Every request goes through the official `openai` client (chat.completions, not streamed,
temperature 0, `max_tokens` from the flag), `--concurrency` requests in flight at once, one setting
after the other; the model is the first of GET /v1/models. Without `--base-url` the script starts
Daphne as `make run` starts it (`.venv/bin/daphne -b 127.0.0.1 -p PORT courseapp.asgi:application`,
settings courseapp.settings.dev unless DJANGO_SETTINGS_MODULE says otherwise) on a free port, waits
until /v1/models answers, and stops its process group at the end, also on an error or Ctrl-C. With
`--base-url` (e.g. http://127.0.0.1:8000; `/v1` is appended when missing) it uses that server.
SERVING_API_KEY, when set, is sent as the key.

Each answer is judged by two pure functions:

  well_formed   finish_reason "stop" (not cut off by max_tokens), and the stripped text is exactly
                three lines starting with "분류: ", "요약: ", "답변: " in that order, each with
                something after its label, and it does not loop: no whitespace-separated 3-gram
                occurs 3 or more times;
  category      what follows "분류: " on the first line (stripped), or None; the answer is right
                when it equals the inquiry's label.

Per setting it prints n, the well-formed and right-category counts and shares, the mean completion
tokens and the setting's wall seconds; then a confusion table (rows: the labelled category; columns:
the answered one, plus "(형식 밖)" for no or an unknown category); with `--show-wrong` every wrong or
malformed answer (id, label, the first 160 characters); and last a PASS/FAIL line per setting against
the targets below: well-formed ≥ 95% and right category ≥ 85%. `--json OUT` writes every request's
result and the summaries. The exit status is 0 whatever the answers (a benchmark, not a test); 2 for
a bad data file or a server that cannot be started or reached. Results are recorded in
docs/benchmarks.md and docs/model-card.md. Accuracy and timings are never asserted in tests
(tests/bench/test_answer_quality.py runs two inquiries only).
"""
import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.server import free_port, start_daphne, stop_server, wait_answering

ROOT = Path(__file__).resolve().parent.parent
TARGET_WELL_FORMED = 0.95  # share of answers in the three-line format, per setting
TARGET_RIGHT = 0.85  # share of answers with the labelled category, per setting
DEFAULT_DATA = ROOT / "bench" / "data" / "inquiries_handwritten.jsonl"
SETTINGS = ("none", "system")
SETTINGS_MODULE = "courseapp.settings.dev"  # what `make run` uses
CATEGORIES = ("배송", "환불/반품", "결제", "계정/로그인", "제품 불량", "교환", "쿠폰/적립금", "회원 등급",
              "배송지 변경", "영수증", "기타")
LABELS = ("분류: ", "요약: ", "답변: ")
OUTSIDE = "(형식 밖)"  # the confusion table's column for no category or one outside CATEGORIES
# The confusion table's column headers (the rows keep the full names).
SHORT = {"환불/반품": "환불", "계정/로그인": "계정", "제품 불량": "불량", "쿠폰/적립금": "쿠폰", "회원 등급": "등급",
         "배송지 변경": "배송지"}
SHOW_CHARS = 160


class DataError(Exception):
    """The data file cannot be used (missing, a bad line, an unknown category)."""


class ServerError(Exception):
    """The server could not be started or reached, or answered no request."""


# --- judging -----------------------------------------------------------------------------------
def looping(text: str) -> bool:
    """Whether some whitespace-separated 3-gram occurs 3 or more times in `text`."""
    words = text.split()
    counts = Counter(zip(words, words[1:], words[2:]))
    return bool(counts) and max(counts.values()) >= 3


def malformed_reason(text: str, finish_reason: str | None) -> str | None:
    """Why the answer is not well formed (see well_formed), or None when it is."""
    if finish_reason != "stop":
        return f"finish_reason {finish_reason}"
    lines = (text or "").strip().split("\n")
    if len(lines) != 3:
        return f"{len(lines)} lines"
    for line, label in zip(lines, LABELS):
        if not line.startswith(label):
            return f"a line does not start with {label.strip()!r}"
        if not line[len(label):].strip():
            return f"empty {label.strip()!r}"
    if looping(text):
        return "a 3-gram occurs 3 or more times"
    return None


def well_formed(text: str, finish_reason: str | None) -> bool:
    """finish_reason "stop", the stripped text exactly three lines starting with "분류: ", "요약: ",
    "답변: " in that order, each with content, and no whitespace-separated 3-gram 3 or more times."""
    return malformed_reason(text, finish_reason) is None


def category(text: str) -> str | None:
    """The value after "분류: " on the first line (stripped), or None."""
    first = (text or "").strip().split("\n", 1)[0]
    if not first.startswith(LABELS[0]):
        return None
    return first[len(LABELS[0]):].strip() or None


# --- data --------------------------------------------------------------------------------------
def load_inquiries(path: Path) -> list[dict]:
    """The inquiries of a JSONL file, in order: one {"id", "category", "text"} object a line (blank
    lines skipped). DataError for a missing file, a line that is not such an object, a duplicate id,
    an empty text or a category outside CATEGORIES."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read it ({e})") from None
    inquiries, seen = [], set()
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: not JSON ({e})") from None
        if not isinstance(item, dict) or set(item) != {"id", "category", "text"}:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise DataError(f'{where}: expected an object with exactly "id", "category" and "text", got {keys}')
        ident, label, text = item["id"], item["category"], item["text"]
        if isinstance(ident, bool) or not isinstance(ident, (str, int)) or ident == "":
            raise DataError(f"{where}: the id must be a non-empty string or an integer, got {ident!r}")
        if ident in seen:
            raise DataError(f"{where}: id {ident!r} occurs twice")
        if label not in CATEGORIES:
            raise DataError(f"{where}: unknown category {label!r} (known: {', '.join(CATEGORIES)})")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{where}: the text must be a non-empty string")
        seen.add(ident)
        inquiries.append({"id": ident, "category": label, "text": text})
    if not inquiries:
        raise DataError(f"{path}: no inquiries")
    return inquiries


def messages_for(setting: str, text: str) -> list[dict]:
    if setting == "none":
        return [{"role": "user", "content": text}]
    from engine.training.corpus import SYSTEM_PROMPT  # standard library only

    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]


# --- requests ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Result:
    """One inquiry in one setting, judged."""

    setting: str
    id: str | int
    label: str
    text: str  # the answer
    finish_reason: str | None
    completion_tokens: int | None
    seconds: float
    error: str | None = None  # the request failed (then text is "")
    well_formed: bool = False
    malformed: str | None = None  # why not well formed
    category: str | None = None
    right: bool = False


def judge(result: Result) -> Result:
    result.malformed = result.error and f"error: {result.error}" or malformed_reason(result.text, result.finish_reason)
    result.well_formed = result.malformed is None
    result.category = category(result.text)
    result.right = result.category == result.label
    return result


async def ask(api, model: str, setting: str, inquiry: dict, max_tokens: int, gate: asyncio.Semaphore) -> Result:
    import openai

    async with gate:
        started = time.perf_counter()
        try:
            response = await api.chat.completions.create(model=model, messages=messages_for(setting, inquiry["text"]),
                                                         temperature=0, max_tokens=max_tokens)
        except openai.APIConnectionError as e:
            raise ServerError(f"the server cannot be reached: {e}") from None
        except openai.APIError as e:  # an HTTP error answer: recorded, counted as malformed
            return judge(Result(setting, inquiry["id"], inquiry["category"], "", None, None,
                                time.perf_counter() - started, error=f"{type(e).__name__}: {e}"[:300]))
        seconds = time.perf_counter() - started
    choice = response.choices[0]
    tokens = response.usage.completion_tokens if response.usage is not None else None
    return judge(Result(setting, inquiry["id"], inquiry["category"], choice.message.content or "",
                        choice.finish_reason, tokens, seconds))


async def run_setting(api, model: str, setting: str, inquiries: list, max_tokens: int, concurrency: int):
    """Every inquiry in one setting, `concurrency` at once; (results in the data's order, wall seconds)."""
    gate = asyncio.Semaphore(concurrency)
    started = time.perf_counter()
    tasks = [asyncio.create_task(ask(api, model, setting, q, max_tokens, gate)) for q in inquiries]
    try:
        results = await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return list(results), time.perf_counter() - started


async def measure(args, base_url: str, inquiries: list) -> tuple[str, dict]:
    """(the model, {setting: (results, wall seconds)})."""
    import openai
    from openai import AsyncOpenAI

    api = AsyncOpenAI(base_url=base_url, api_key=os.environ.get("SERVING_API_KEY") or "EMPTY", max_retries=0,
                      timeout=600)
    try:
        try:
            models = [m.id async for m in api.models.list()]
        except openai.APIError as e:
            raise ServerError(f"GET {base_url}/models failed: {e}") from None
        if not models:
            raise ServerError(f"GET {base_url}/models lists no model")
        model = models[0]
        print(f"model {model} at {base_url}; {len(inquiries)} inquiries; settings {', '.join(args.setting_list)}; "
              f"temperature 0, max_tokens {args.max_tokens}, concurrency {args.concurrency}", flush=True)
        runs = {}
        for setting in args.setting_list:
            results, wall = await run_setting(api, model, setting, inquiries, args.max_tokens, args.concurrency)
            runs[setting] = (results, wall)
            print(f"  {setting}: {len(results)} answers in {wall:.1f} s", flush=True)
    finally:
        await api.close()
    return model, runs


# --- the report --------------------------------------------------------------------------------
def summarize(results: list[Result], wall: float) -> dict:
    n = len(results)
    tokens = [r.completion_tokens for r in results if r.completion_tokens is not None]
    good = sum(r.well_formed for r in results)
    right = sum(r.right for r in results)
    return {"n": n, "well_formed": good, "well_formed_share": good / n if n else 0.0,
            "right": right, "right_share": right / n if n else 0.0,
            "mean_completion_tokens": sum(tokens) / len(tokens) if tokens else None,
            "wall_s": wall, "errors": sum(r.error is not None for r in results),
            "passed": bool(n) and good / n >= TARGET_WELL_FORMED and right / n >= TARGET_RIGHT}


def confusion(results: list[Result]) -> dict:
    """{label: {answered category or OUTSIDE: count}}."""
    table: dict = {}
    for r in results:
        answered = r.category if r.category in CATEGORIES else OUTSIDE
        row = table.setdefault(r.label, {})
        row[answered] = row.get(answered, 0) + 1
    return table


def width(s: str) -> int:
    """Terminal columns: Hangul and other wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def ljust(s: str, n: int) -> str:
    return s + " " * max(0, n - width(s))


def rjust(s: str, n: int) -> str:
    return " " * max(0, n - width(s)) + s


def confusion_lines(setting: str, table: dict) -> list[str]:
    """The table, compact: rows only for the labels present, columns only for the categories that
    occur as a label or an answer (abbreviated, see SHORT), then OUTSIDE and the row's n."""
    answered = {c for row in table.values() for c in row}
    rows = [c for c in CATEGORIES if c in table]
    columns = [c for c in CATEGORIES if c in table or c in answered] + [OUTSIDE]
    heads = [SHORT.get(c, c) for c in columns] + ["n"]
    widths = [max(width(h), 3) for h in heads]
    first = max([width(c) for c in rows] + [width("라벨 \\ 답")])
    lines = [f"confusion table, {setting}: rows = labelled category, columns = answered category",
             ljust("라벨 \\ 답", first) + " " + " ".join(rjust(h, w) for h, w in zip(heads, widths))]
    for label in rows:
        row = table[label]
        cells = [str(row[c]) if row.get(c) else "·" for c in columns] + [str(sum(row.values()))]
        lines.append(ljust(label, first) + " " + " ".join(rjust(v, w) for v, w in zip(cells, widths)))
    shortened = [f"{SHORT[c]} = {c}" for c in columns if c in SHORT]
    if shortened:
        lines.append("  columns: " + ", ".join(shortened) + f"; {OUTSIDE}: no category or an unknown one")
    return lines


def one_line(text: str, limit: int = SHOW_CHARS) -> str:
    return text[:limit].replace("\n", " ⏎ ")


def report(runs: dict, show_wrong: bool) -> list[str]:
    summaries = {s: summarize(results, wall) for s, (results, wall) in runs.items()}
    lines = ["", f"{'setting':<8} {'n':>5} {'well-formed':>16} {'right category':>16} {'tokens (mean)':>14} "
                 f"{'wall s':>8} {'errors':>6}"]
    for setting, s in summaries.items():
        mean = "—" if s["mean_completion_tokens"] is None else f"{s['mean_completion_tokens']:.1f}"
        lines.append(f"{setting:<8} {s['n']:>5} {s['well_formed']:>8} {s['well_formed_share']:>6.1%} "
                     f"{s['right']:>8} {s['right_share']:>6.1%} {mean:>14} {s['wall_s']:>8.1f} {s['errors']:>6}")
    for setting, (results, _) in runs.items():
        lines += ["", *confusion_lines(setting, confusion(results))]
        if show_wrong:
            wrong = [r for r in results if not (r.well_formed and r.right)]
            lines.append(f"wrong or malformed, {setting}: {len(wrong)}")
            for r in wrong:
                why = "; ".join(x for x in (r.malformed, None if r.right else f"answered {r.category!r}") if x)
                lines.append(f"  [{r.id}] {r.label} ({why}): {one_line(r.text)}")
    lines.append("")
    for setting, s in summaries.items():
        lines.append(f"target, {setting}: well-formed {s['well_formed_share']:.1%} ≥ {TARGET_WELL_FORMED:.0%} and "
                     f"right category {s['right_share']:.1%} ≥ {TARGET_RIGHT:.0%}: {'PASS' if s['passed'] else 'FAIL'}")
    return lines


def write_json(path: Path, args, base_url: str, model: str, runs: dict) -> None:
    document = {
        "config": {"data": str(args.data), "base_url": base_url, "model": model, "max_tokens": args.max_tokens,
                   "temperature": 0, "concurrency": args.concurrency, "limit": args.limit,
                   "settings": args.setting_list,
                   "targets": {"well_formed": TARGET_WELL_FORMED, "right": TARGET_RIGHT}},
        "summaries": {s: {**summarize(results, wall), "confusion": confusion(results)}
                      for s, (results, wall) in runs.items()},
        "results": [asdict(r) for results, _ in runs.values() for r in results],
    }
    Path(path).write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


# --- main --------------------------------------------------------------------------------------
def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", help="a running server (e.g. http://127.0.0.1:8000; /v1 appended when missing); "
                                       "default: start one as `make run` does")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="JSONL of {id, category, text}")
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    ap.add_argument("--limit", type=int, help="only the first N inquiries")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated, of: none, system")
    ap.add_argument("--show-wrong", action="store_true", help="print every wrong or malformed answer")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write every result and the summaries here")
    args = ap.parse_args(argv)
    args.setting_list = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not args.setting_list or any(s not in SETTINGS for s in args.setting_list):
        ap.error(f"--settings: comma-separated, of: {', '.join(SETTINGS)}")
    if len(set(args.setting_list)) != len(args.setting_list):
        ap.error("--settings: a setting named twice")
    if args.max_tokens < 1 or args.concurrency < 1 or (args.limit is not None and args.limit < 1):
        ap.error("--max-tokens, --concurrency and --limit must be positive")
    return args


def v1_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def _terminate(signum, frame):
    raise KeyboardInterrupt  # so that `finally` stops the server on SIGTERM too


def main(argv=None) -> int:
    args = parse(argv)
    try:
        inquiries = load_inquiries(args.data)
    except DataError as e:
        print(f"answer_quality: bad data: {e}", file=sys.stderr)
        return 2
    if args.limit is not None:
        inquiries = inquiries[:args.limit]
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)

    proc = tmp = log_path = None
    try:
        if args.base_url:
            base_url = v1_url(args.base_url)
        else:
            port = free_port()
            tmp = tempfile.TemporaryDirectory(prefix="bench-answer-quality-")
            log_path = Path(tmp.name) / "daphne.log"
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            env.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
            proc = start_daphne(port, env, log_path)
            base_url = f"http://127.0.0.1:{port}/v1"
            key = os.environ.get("SERVING_API_KEY") or "EMPTY"
            wait_answering(proc, f"{base_url}/models", headers={"Authorization": f"Bearer {key}"},
                           log_path=log_path, timeout=180)
            print(f"server: {' '.join(proc.args)} (pid {proc.pid}, settings {env['DJANGO_SETTINGS_MODULE']})",
                  flush=True)
        model, runs = asyncio.run(measure(args, base_url, inquiries))
        if all(r.error for results, _ in runs.values() for r in results):
            raise ServerError("every request failed: " + next(iter(runs.values()))[0][0].error)
    except (ServerError, RuntimeError) as e:  # RuntimeError: wait_answering's (the server exited or never answered)
        print(f"answer_quality: server: {e}", file=sys.stderr)
        if isinstance(e, ServerError) and log_path is not None and log_path.exists():
            print(f"--- server log (tail) ---\n{log_path.read_text()[-3000:]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("answer_quality: interrupted", file=sys.stderr)
        return 130
    finally:
        if proc is not None:
            stop_server(proc)
        if tmp is not None:
            tmp.cleanup()

    print("\n".join(report(runs, args.show_wrong)))
    if args.json:
        write_json(args.json, args, base_url, model, runs)
        print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
