"""`python manage.py run_lab --base-url URL`: §6's lab against any OpenAI-compatible server — this
app (`make run`) or a learner's own vLLM — printed as the report table."""
import json
import re
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from courseapp.lab import experiments, report
from courseapp.lab.formats import progress_text


class Command(BaseCommand):
    help = "Run §6's five experiments against an OpenAI-compatible server and print the report table."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", required=True, help="the server's root, e.g. http://127.0.0.1:8000")
        parser.add_argument("--model", default="munuibot", help="the served model name (default: munuibot)")
        parser.add_argument("--api-key", default="", help="sent as Authorization: Bearer KEY (vLLM's --api-key)")
        parser.add_argument("--concurrency", type=int, default=8, help="requests at once in experiment 2 (default 8)")
        parser.add_argument("--max-tokens", type=int, default=200, help="fixed answer length cap (default 200)")
        parser.add_argument("--sample-every", type=float, default=0.1, help="seconds between /metrics samples (default 0.1)")
        parser.add_argument("--ignore-eos", action="store_true", help="every answer runs to max_tokens (vLLM's extension)")
        parser.add_argument("--launch-command", default="", help="how the server was started, quoted in the report")
        parser.add_argument("--log-file", type=Path, help="the server's log file: its new lines go in the report")
        parser.add_argument("--out", type=Path, help="also write the whole report as JSON here")

    def handle(self, *args, **o):
        if not 1 <= o["concurrency"] <= 256:
            raise CommandError("--concurrency must be between 1 and 256")
        if not 1 <= o["max_tokens"] <= 32768:
            raise CommandError("--max-tokens must be between 1 and 32768")
        if not 0.05 <= o["sample_every"] <= 60:
            raise CommandError("--sample-every must be between 0.05 and 60 seconds")
        settings = experiments.LabSettings(
            base_url=o["base_url"], model=o["model"], api_key=o["api_key"], concurrency=o["concurrency"],
            max_tokens=o["max_tokens"], sample_every_s=o["sample_every"], ignore_eos=o["ignore_eos"],
            launch_command=o["launch_command"])
        read_logs = _log_file_reader(o["log_file"]) if o["log_file"] else None

        def progress(p):
            self.stderr.write(f"  [{p.done}/{p.total}] {progress_text(p.message, p.params)}")

        try:
            result = experiments.run(settings, read_logs=read_logs, on_progress=progress)
        except experiments.LabError as exc:
            for line in getattr(exc, "script", []):
                self.stdout.write(line)
            raise CommandError(f"the lab stopped: {exc}") from None
        self.stdout.write(report.as_text(result))
        if o["out"]:
            o["out"].write_text(json.dumps(result, ensure_ascii=False, indent=2), encoding="utf-8")
            self.stderr.write(f"report written to {o['out']}")


def _log_file_reader(path: Path):
    """Lines the server appends to its log file while the lab runs (vLLM's stats lines and any
    preemption warning), read from where the file ended when the lab began."""
    if not path.is_file():
        raise CommandError(f"--log-file: no such file {path}")
    start = path.stat().st_size

    def read(_since: float) -> list[dict]:
        with path.open("rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
        return [{"time": _logged_at(line), "kind": "stats" if "throughput" in line else "other", "line": line}
                for line in text.splitlines() if "throughput" in line or "preempt" in line.lower()]

    return read


_STAMP = re.compile(r"^(?:INFO|WARNING|DEBUG|ERROR)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def _logged_at(line: str) -> float | None:
    """When vLLM wrote a line (`INFO 12-01 15:08:25 …`, local time, no year), or None."""
    match = _STAMP.search(line)
    if match is None:
        return None
    month, day, hour, minute, second = map(int, match.groups())
    return datetime.now().replace(month=month, day=day, hour=hour, minute=minute, second=second, microsecond=0).timestamp()
