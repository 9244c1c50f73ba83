"""A lab report (experiments.run's plain data) as §6 asks for it: the table [실험 | 조건 | 측정값 |
출력 원문], the /metrics time series, the log lines — for the page, the terminal and CSV."""
import csv
import io
import textwrap

from django.utils.translation import gettext as _

from courseapp.lab.formats import ms as _ms
from courseapp.lab.formats import num as _num
from courseapp.lab.reading import reading

COLUMNS = ("실험", "조건", "측정값", "출력 원문")
NONE = "없음"


def _outputs(measured: list[dict]) -> str:
    """Each distinct answer once, with how many requests gave it (greedy: usually one)."""
    seen: dict[str, list[str]] = {}
    for m in measured:
        seen.setdefault(m["text"], []).append(m["label"])
    if len(seen) == 1 and len(measured) > 1:
        return f"({len(measured)}건 모두 같은 출력)\n" + next(iter(seen))
    return "\n\n".join(f"[{', '.join('#' + label for label in labels)}] {text}" for text, labels in seen.items())


def launch_command(report: dict) -> str:
    return report["settings"].get("launch_command") or "(모름: 서버를 띄운 명령을 함께 적어 두세요)"


def rows(report: dict) -> list[dict]:
    """The table's rows, in the order of §6's list."""
    s = report["settings"]
    fixed = f"temperature {s['temperature']:g}, max_tokens {s['max_tokens']}" + (", ignore_eos" if s.get("ignore_eos") else "")
    one, many = report["single"], report["concurrent"]
    per = [m["tokens_per_s"] for m in many["requests"]]
    out = [
        {"id": "1", "experiment": "1. 요청 1건", "condition": f"{fixed}, 워밍업 1회 버림",
         "measure": f"출력 {one['tokens_per_s']:.1f} 토큰/초 ({one['completion_tokens']}토큰 ÷ {one['elapsed']:.2f} s), TTFT {_ms(one['ttft'])}",
         "output": one["text"]},
        {"id": "2", "experiment": f"2. 같은 요청 {len(per)}건 동시", "condition": f"{fixed}, {len(per)}건을 한꺼번에",
         "measure": (f"요청별 {min(per):.1f} ~ {max(per):.1f} 토큰/초 (평균 {sum(per) / len(per):.1f}); "
                     f"서버 전체 {many['server_tokens_per_s']:.1f} 토큰/초 ({many['total_tokens']:,}토큰 ÷ {many['span_s']:.2f} s)"),
         "output": _outputs(many["requests"])},
    ]
    for key, title, condition in (
        ("same", "3a. 긴 공통 시스템 프롬프트 ×2", "같은 시스템 프롬프트로 연달아 2번"),
        ("time", "3b. 맨 앞에 현재 시각 ×2", "시스템 프롬프트 맨 앞에 현재 시각(초 단위)을 넣어 연달아 2번"),
    ):
        pair = report["prefix"][key]
        tokens = pair[0]["prompt_tokens"]
        out.append({
            "id": f"3{key[0]}", "experiment": title,
            "condition": f"{condition}, 프롬프트 {_num(tokens)}토큰, {fixed}",
            "measure": "; ".join(f"{i + 1}번째 TTFT {_ms(m['ttft'])} (캐시 {_num(m['cached_tokens'])}토큰)" for i, m in enumerate(pair)),
            "output": _outputs(pair)})
    series, names = report["series"], report.get("metric_names", {})
    peak = {k: max((p[k] for p in series if p[k] is not None), default=None) for k in ("running", "waiting", "kv")}
    out.append({
        "id": "4", "experiment": "4. /metrics 시계열",
        "condition": f"실험 2 동안 {s['sample_every_s']:g}초마다: " + ", ".join(names.get(k, "(없음)") for k in ("running", "waiting", "kv")),
        "measure": f"표본 {len(series)}개; 실행 중 최대 {_num(peak['running'])}, 대기 최대 {_num(peak['waiting'])}, KV 사용률 최대 {_num(peak['kv'], 3)}",
        "output": series_text(report)})
    p = report["preemptions"]
    delta = p["delta"]
    out.append({
        "id": "5", "experiment": "5. 선점",
        "condition": f"실험 2 직전·직후 {names.get('preemptions', 'vllm:num_preemptions_total')}",
        "measure": "지표를 찾지 못함" if delta is None else f"{_num(p['before'])} → {_num(p['after'])}: 선점 {delta}회",
        "output": "\n".join(preempt_lines(report)) or NONE})
    if report.get("sweep"):  # reports from before the sweep have none
        levels = report["sweep"]
        out.append({
            "id": "6", "experiment": "6. 동시 요청 수를 늘려 가며",
            "condition": f"같은 요청을 {'·'.join(str(lv['concurrency']) for lv in levels)}건씩 동시에, {fixed}",
            "measure": "; ".join(f"{lv['concurrency']}건: 요청별 {lv['per_request_tokens_per_s']:.1f}, 전체 {lv['server_tokens_per_s']:.1f} 토큰/초"
                                 for lv in levels),
            "output": "동시 | 요청별 토큰/초 | 서버 전체 토큰/초\n" + "\n".join(
                f"{lv['concurrency']} | {lv['per_request_tokens_per_s']:.1f} | {lv['server_tokens_per_s']:.1f}" for lv in levels)})
    b = report.get("batching")
    if b:  # experiment 7 runs only where the server has a static mode (this app's lab)
        modes = (("연속", b["continuous"]), ("정적", b["static"]))
        n = len(b["continuous"]["requests"])
        n_long = sum(1 for m in b["continuous"]["requests"] if m["completion_tokens"] == b["long"])
        out.append({
            "id": "7", "experiment": "7. 정적 배칭 ↔ 연속 배칭",
            "condition": (f"자리(max_num_seqs) {b['seats']}개인 엔진 둘에 같은 요청 {n}건을 한꺼번에: {n_long}건은 {b['long']}토큰, "
                          f"나머지는 {b['short']}토큰까지(ignore_eos)"),
            "measure": "; ".join(f"{name}: 전체 {m['span_s']:.2f} s, {m['server_tokens_per_s']:.1f} 토큰/초, 짧은 답 평균 {m['short_mean_latency_s']:.2f} s"
                                 for name, m in modes),
            "output": "방식 | 전체 s | 서버 토큰/초 | 요청 평균 지연 s | 짧은 답 평균 지연 s\n" + "\n".join(
                f"{name} | {m['span_s']:.2f} | {m['server_tokens_per_s']:.1f} | {m['mean_latency_s']:.2f} | {m['short_mean_latency_s']:.2f}"
                for name, m in modes)})
    for row in out:
        row.update(reading(row["id"], report))
        row["part"], row["section_number"] = row["section"].split("-")[0], row["section"][1:].replace("-", ".")
    return out


def series_text(report: dict) -> str:
    lines = ["시각 | 실행 중 | 대기 | KV 사용률"]
    lines += [f"{p['time']} | {_num(p['running'])} | {_num(p['waiting'])} | {_num(p['kv'], 3)}" for p in report["series"]]
    return "\n".join(lines)


def stats_lines(report: dict, during_2: bool = False) -> list[str]:
    return [e["line"] for e in report.get("logs") or [] if e["kind"] == "stats" and (e.get("during_2") is not False or not during_2)]


def preempt_lines(report: dict) -> list[str]:
    """Log lines about preemption (V1 writes none; V0's warning only with its option on)."""
    return [e["line"] for e in report.get("logs") or [] if "preempt" in e["line"].lower()]


def as_text(report: dict, width: int = 100) -> str:
    """The report for a terminal: the launch command, the table (one block per row), the series,
    the log lines and the script's output."""
    out = [f"기동 명령 원문: {launch_command(report)}", ""]
    for row in rows(report):
        out.append(f"■ {row['experiment']}")
        out.append(f"  조건    {row['condition']}")
        out.append(f"  측정값  {row['measure']}")
        out.append(f"  {_('How to read it')} {row['reading']} (§{row['section_number']})")
        if row["warning"]:
            out.append(f"  ⚠ {row['warning']}")
        out.append("  출력 원문")
        for para in row["output"].splitlines() or [""]:
            out += textwrap.wrap(para, width, initial_indent="    ", subsequent_indent="    ") or ["    "]
        out.append("")
    logs = report.get("logs")
    out.append("서버 로그 (실험 2 구간의 통계 줄):")
    if logs is None:
        out.append("  (이 서버의 로그는 여기서 읽을 수 없음: --log-file로 로그 파일을 알려 주세요)")
    else:
        out += [f"  {line}" for line in stats_lines(report, during_2=True)] or [f"  {NONE}"]
        out.append("서버 로그의 preempt 줄:")
        out += [f"  {line}" for line in preempt_lines(report)] or [f"  {NONE}"]
    out += ["", "측정 스크립트 출력 원문:"] + [f"  {line}" for line in report["script"]]
    return "\n".join(out)


def as_csv(report: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for row in rows(report):
        writer.writerow([row["experiment"], row["condition"], row["measure"], row["output"]])
    writer.writerow([])
    writer.writerow(["시각", "실행 중", "대기", "KV 사용률"])
    for p in report["series"]:
        writer.writerow([p["time"], p["running"], p["waiting"], p["kv"]])
    writer.writerow([])
    writer.writerow(["서버 로그"])
    for entry in report.get("logs") or []:
        writer.writerow([entry["line"]])
    writer.writerow([])
    writer.writerow(["기동 명령 원문", launch_command(report)])
    return buffer.getvalue()
