"""A lab report (experiments.run's plain data) as §6 asks for it: the table [실험 | 조건 | 측정값 |
출력 원문], the /metrics time series, the log lines — for the page, the terminal and CSV."""
import csv
import io
import textwrap

COLUMNS = ("실험", "조건", "측정값", "출력 원문")
NONE = "없음"
MIN_SAMPLES = 5  # experiment 4 needs this many samples during experiment 2 to show a shape


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


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
    for row in out:
        row.update(_reading(row["id"], report))
        row["part"], row["section_number"] = row["section"].split("-")[0], row["section"][1:].replace("-", ".")
    return out


def _during_2(report: dict) -> list[dict]:
    """The samples taken while experiment 2 ran (the last one is taken after it, on purpose)."""
    series = report["series"]
    return series[:-1] if len(series) > 1 else series


def _reading(row_id: str, report: dict) -> dict:
    """How to read a row: what the lesson predicts (its section) and what this run shows against
    it, and a warning when this measurement cannot show the point."""
    one, many = report["single"], report["concurrent"]
    single = one["tokens_per_s"] or 0.0
    per = [m["tokens_per_s"] for m in many["requests"]]
    warning = ""
    if row_id == "1":
        return {"section": "s3-3", "warning": "",
                "reading": f"기준선입니다. 2번의 요청별 속도와 서버 전체 처리량을 이 {single:.1f} 토큰/초와 비교합니다."}
    if row_id == "2":
        mean = sum(per) / len(per)
        gain = many["server_tokens_per_s"] / single if single else 0.0
        share = mean / single if single else 0.0
        reading = (f"§3.3의 예측: 함께 돌리면 서버 전체 처리량은 늘고, 한 건의 속도는 그대로이거나 조금 느려진다. "
                   f"이번 실행: 서버 전체는 1건일 때의 {gain:.1f}배, 요청별 평균은 1건일 때의 {share:.0%}. "
                   f"{len(per)}건이 같은 길이라 함께 끝나므로 이 표는 '묶어 돌리기'까지만 보여 줍니다. 끝난 자리에 새 요청이 "
                   f"들어가는 연속 배칭은 데모의 '정적 배칭 vs 연속 배칭' 장면(§3.2)에서 보세요.")
        if gain < 1.2:
            warning = (f"서버 전체 처리량이 1건일 때의 {gain:.1f}배에 그쳤습니다: 동시에 돈 요청이 적었을 수 있습니다 "
                       "(max_num_seqs, KV 풀 크기, 4번의 '실행 중'을 확인하세요).")
        elif share < 0.75:
            warning = (f"요청별 속도가 1건일 때의 {share:.0%}로 떨어졌습니다. GPU에서는 한 스텝에 여럿을 태워도 한 스텝 "
                       "시간이 거의 늘지 않지만, 이 실습 서버는 2코어 CPU라 요청이 늘수록 한 스텝도 길어집니다. "
                       "그래도 서버 전체 처리량이 늘었다면 §3.3의 요점(처리량이지 한 건의 속도가 아니다)은 그대로입니다.")
        return {"section": "s3-3", "reading": reading, "warning": warning}
    if row_id in ("3s", "3t"):
        pair = report["prefix"]["same" if row_id == "3s" else "time"]
        first, second = pair
        cached = second["cached_tokens"] or 0
        if row_id == "3s":
            reading = (f"§4.1의 예측: 같은 앞부분은 두 번째 요청부터 캐시에서 꺼내 쓰므로 TTFT가 줄어든다. 이번 실행: 두 번째 요청은 "
                       f"{_num(second['prompt_tokens'])}토큰 중 {_num(cached)}토큰을 캐시에서 읽었고, TTFT는 {_ms(first['ttft'])} → {_ms(second['ttft'])}.")
            if not cached:
                warning = "두 번째 요청도 캐시 0토큰입니다: 프리픽스 캐싱이 꺼져 있으면(enable_prefix_caching) 이렇게 나옵니다."
            return {"section": "s4-1", "reading": reading, "warning": warning}
        reading = (f"§4.3의 예측: 프리픽스 캐시는 앞에서부터 한 글자까지 같아야 맞으므로, 맨 앞의 시각이 바뀌면 거의 아무것도 맞지 "
                   f"않는다. 이번 실행: 두 번째 요청의 캐시 {_num(cached)}토큰.")
        if 0 < cached <= 32:
            reading += (" 0이 아닌 까닭: 캐시는 블록(16토큰) 단위로 맞춥니다. 두 요청의 시각이 앞자리(날짜, 시, 분)까지 같아서, "
                        "처음 글자가 달라지는 블록 앞의 블록만 맞았습니다. 그 뒤 1,500토큰은 모두 다시 계산했습니다.")
        elif cached > 32:
            warning = "시각을 앞에 넣었는데도 캐시가 많이 맞았습니다: 두 요청의 앞부분이 정말 달랐는지 확인하세요."
        return {"section": "s4-3", "reading": reading, "warning": warning}
    if row_id == "4":
        during = _during_2(report)
        running = max((p["running"] or 0 for p in during), default=0)
        reading = (f"§6.3에서 볼 것: '실행 중'이 2 이상이면 여러 요청이 한 스텝에 함께 돈 것이고(§3.2), '대기'가 0보다 크면 "
                   f"자리(max_num_seqs)나 블록이 모자라 줄을 선 것입니다. 이번 실행: 실험 2 동안 표본 {len(during)}개, 실행 중 최대 {_num(running)}.")
        if len(during) < MIN_SAMPLES:
            warning = (f"실험 2 동안 표본이 {len(during)}개뿐입니다: 실험 2가 표본 간격({report['settings']['sample_every_s']:g}초)보다 "
                       "빨리 끝났습니다. 간격을 줄이거나 max_tokens를 늘려 다시 돌리세요.")
        elif running < 2:
            warning = "실행 중이 2 이상인 표본이 없습니다: 요청들이 한 번에 하나씩 돌았거나, 표본이 그 순간을 놓쳤습니다."
        return {"section": "s6-3", "reading": reading, "warning": warning}
    delta = report["preemptions"]["delta"]
    reading = ("§5.1의 예측: KV 풀이 바닥나면 가장 늦게 들어온 요청을 잠시 빼고(선점), 자리가 나면 다시 잇는다. vLLM V1은 이때 "
               "로그 줄을 쓰지 않으니 카운터(vllm:num_preemptions_total)가 늘었는지로 봅니다.")
    if delta == 0:
        warning = ("선점 0회: 이번 설정에서는 풀이 충분했습니다. 선점을 보려면 KV 풀을 줄여(num_blocks) 다시 돌리세요. "
                   "'작은 풀' 프리셋은 손잡이 여러 개를 함께 바꾸니, 무엇이 선점을 불렀는지는 하나씩 바꿔 확인하세요.")
    return {"section": "s5-1", "reading": reading, "warning": warning}


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
        out.append(f"  읽는 법 {row['reading']} (§{row['section_number']})")
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
