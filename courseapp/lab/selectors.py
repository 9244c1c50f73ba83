"""Reads for the §6 lab: a learner's runs (never anyone else's), where a queued run stands, and
a report's /metrics series as chart geometry for the page's SVG."""
from dataclasses import dataclass

from courseapp.chart_frame import ChartFrame
from courseapp.lab import report as lab_report
from courseapp.lab.models import LabRun


def runs_of(learner, limit: int = 20) -> list[LabRun]:
    if learner is None:
        return []
    return list(LabRun.objects.filter(learner=learner).defer("report", "script")[:limit])


def run_of(learner, run_id) -> LabRun | None:
    """The learner's own run, or None (someone else's is as good as missing)."""
    if learner is None:
        return None
    return LabRun.objects.filter(pk=run_id, learner=learner).first()


def queue_place(run: LabRun) -> int:
    """1 = next. Counted among every learner's queued runs (their turn comes in order)."""
    if run.status != LabRun.Status.QUEUED:
        return 0
    return LabRun.objects.filter(status=LabRun.Status.QUEUED, created_at__lt=run.created_at).count() + 1


@dataclass
class Chart(ChartFrame):
    count_max: int
    t_max: float
    running: str  # polyline points
    waiting: str
    kv: str
    x_ticks: list  # (x, label)
    count_ticks: list  # (y, label)
    kv_ticks: list  # (y, label)


def chart(report: dict, width: int = 640, height: int = 240) -> Chart | None:
    """Running and waiting (left axis, requests) and KV usage (right axis, 0–1) over experiment 2."""
    series = report.get("series") or []
    if not series:
        return None
    left, right, top, bottom = 44, width - 48, 12, height - 34
    t_max = max(p["t"] for p in series) or 1.0
    count_max = max(1, *(int(p[k] or 0) for p in series for k in ("running", "waiting")))

    def x(t):
        return left + (right - left) * t / t_max

    def y(value, top_value):
        return bottom - (bottom - top) * (value or 0) / top_value

    def points(key, top_value):
        return " ".join(f"{x(p['t']):.1f},{y(p[key], top_value):.1f}" for p in series)

    steps = 4
    return Chart(
        width, height, left, right, top, bottom, count_max, t_max,
        running=points("running", count_max), waiting=points("waiting", count_max), kv=points("kv", 1.0),
        x_ticks=[(x(t_max * i / steps), f"{t_max * i / steps:.1f}s") for i in range(steps + 1)],
        count_ticks=[(y(count_max * i / steps, count_max), f"{count_max * i / steps:g}") for i in range(steps + 1)],
        kv_ticks=[(y(i / steps, 1.0), f"{i / steps:.2f}") for i in range(steps + 1)],
    )


@dataclass
class SweepChart(ChartFrame):
    server: str  # polyline points: the server's total tokens/s
    per_request: str  # each request's tokens/s
    points: list  # (x, y server, y per request, level, server, per request) for the markers
    x_ticks: list  # (x, label)
    y_ticks: list  # (y, label)


def sweep_chart(report: dict, width: int = 640, height: int = 240) -> SweepChart | None:
    """The sweep's two lines over the number of requests at once (evenly spaced: 1, 2, 4, 8, 16)."""
    levels = report.get("sweep") or []
    if not levels:
        return None
    left, right, top, bottom = 56, width - 16, 12, height - 34
    y_max = max(lv["server_tokens_per_s"] for lv in levels) or 1.0

    def x(i):
        return left + (right - left) * i / max(1, len(levels) - 1)

    def y(value):
        return bottom - (bottom - top) * value / y_max

    marks = [(x(i), y(lv["server_tokens_per_s"]), y(lv["per_request_tokens_per_s"]), lv["concurrency"],
              lv["server_tokens_per_s"], lv["per_request_tokens_per_s"]) for i, lv in enumerate(levels)]
    return SweepChart(
        width, height, left, right, top, bottom,
        server=" ".join(f"{m[0]:.1f},{m[1]:.1f}" for m in marks),
        per_request=" ".join(f"{m[0]:.1f},{m[2]:.1f}" for m in marks),
        points=marks,
        x_ticks=[(m[0], str(m[3])) for m in marks],
        y_ticks=[(y(y_max * i / 4), f"{y_max * i / 4:,.0f}") for i in range(5)],
    )


@dataclass
class ReportView:
    run: LabRun
    rows: list
    chart: Chart | None
    sweep_chart: SweepChart | None
    stats_log: str  # the lines, as the log shows them ("" when none)
    preempt_log: str
    script: str
    launch_command: str


def report_view(run: LabRun) -> ReportView | None:
    if not run.report:
        return None
    r = run.report
    return ReportView(run, lab_report.rows(r), chart(r), sweep_chart(r), "\n".join(lab_report.stats_lines(r)),
                      "\n".join(lab_report.preempt_lines(r)), "\n".join(r["script"]), lab_report.launch_command(r))
