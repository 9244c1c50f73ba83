"""A lab report (experiments.run's plain data) as §6 asks for it: the table [실험 | 조건 | 측정값 |
출력 원문], the /metrics time series, the log lines — for the page, the terminal and CSV. Words in
the active language: the page's, and Korean (the course's) for the terminal and a CSV made there;
English msgids, the Korean in locale/ko keeps §6's own terms."""
import csv
import io
import textwrap
import unicodedata

from django.utils.translation import gettext as _

from courseapp.lab.formats import ms as _ms
from courseapp.lab.formats import num as _num
from courseapp.lab.reading import reading

def columns() -> tuple[str, str, str, str]:
    """§6's table: [실험 | 조건 | 측정값 | 출력 원문] (in the reader's language)."""
    return _("Experiment"), _("Condition"), _("Measured"), _("Raw output")


def series_columns() -> list[str]:
    return [_("Time"), _("Running"), _("Waiting"), _("KV usage")]


def _none() -> str:
    return _("none")


def _outputs(measured: list[dict]) -> str:
    """Each distinct answer once, with how many requests gave it (greedy: usually one)."""
    seen: dict[str, list[str]] = {}
    for m in measured:
        seen.setdefault(m["text"], []).append(m["label"])
    if len(seen) == 1 and len(measured) > 1:
        return _("(all %(n)d gave the same output)") % {"n": len(measured)} + "\n" + next(iter(seen))
    return "\n\n".join(f"[{', '.join('#' + label for label in labels)}] {text}" for text, labels in seen.items())


def launch_command(report: dict) -> str:
    return report["settings"].get("launch_command") or _("(unknown: write down the command that started the server)")


def rows(report: dict) -> list[dict]:
    """The table's rows, in the order of §6's list; words in the reader's language (the terminal's
    and a CSV's: Korean unless another is active)."""
    s = report["settings"]
    fixed = f"temperature {s['temperature']:g}, max_tokens {s['max_tokens']}" + (", ignore_eos" if s.get("ignore_eos") else "")
    one, many = report["single"], report["concurrent"]
    per = [m["tokens_per_s"] for m in many["requests"]]
    out = [
        {"id": "1", "experiment": _("1. One request"), "condition": _("%(fixed)s, one warm-up request discarded") % {"fixed": fixed},
         "measure": _("output %(rate).1f tokens/s (%(tokens)d tokens ÷ %(s).2f s), TTFT %(ttft)s") % {
             "rate": one["tokens_per_s"], "tokens": one["completion_tokens"], "s": one["elapsed"], "ttft": _ms(one["ttft"])},
         "output": one["text"]},
        {"id": "2", "experiment": _("2. The same request %(n)d times at once") % {"n": len(per)},
         "condition": _("%(fixed)s, all %(n)d at once") % {"fixed": fixed, "n": len(per)},
         "measure": _("per request %(lo).1f ~ %(hi).1f tokens/s (mean %(mean).1f); server total %(total).1f tokens/s "
                      "(%(tokens)s tokens ÷ %(s).2f s)") % {
             "lo": min(per), "hi": max(per), "mean": sum(per) / len(per), "total": many["server_tokens_per_s"],
             "tokens": f"{many['total_tokens']:,}", "s": many["span_s"]},
         "output": _outputs(many["requests"])},
    ]
    for key, title, condition in (
        ("same", _("3a. A long shared system prompt ×2"), _("twice in a row with the same system prompt")),
        ("time", _("3b. The current time at the front ×2"), _("twice in a row with the current time (to the second) at the front of the system prompt")),
    ):
        pair = report["prefix"][key]
        tokens = pair[0]["prompt_tokens"]
        out.append({
            "id": f"3{key[0]}", "experiment": title,
            "condition": _("%(condition)s, prompt %(tokens)s tokens, %(fixed)s") % {"condition": condition, "tokens": _num(tokens), "fixed": fixed},
            "measure": "; ".join(_("TTFT #%(i)d %(ttft)s (%(cached)s tokens cached)") % {
                "i": i + 1, "ttft": _ms(m["ttft"]), "cached": _num(m["cached_tokens"])} for i, m in enumerate(pair)),
            "output": _outputs(pair)})
    series, names = report["series"], report.get("metric_names", {})
    peak = {k: max((p[k] for p in series if p[k] is not None), default=None) for k in ("running", "waiting", "kv")}
    out.append({
        "id": "4", "experiment": _("4. The /metrics time series"),
        "condition": _("every %(every)s s during experiment 2: %(names)s") % {
            "every": f"{s['sample_every_s']:g}", "names": ", ".join(names.get(k, _("(none)")) for k in ("running", "waiting", "kv"))},
        "measure": _("%(n)d samples; running at most %(running)s, waiting at most %(waiting)s, KV usage at most %(kv)s") % {
            "n": len(series), "running": _num(peak["running"]), "waiting": _num(peak["waiting"]), "kv": _num(peak["kv"], 3)},
        "output": series_text(report)})
    p = report["preemptions"]
    delta = p["delta"]
    out.append({
        "id": "5", "experiment": _("5. Preemption"),
        "condition": _("%(name)s just before and after experiment 2") % {"name": names.get("preemptions", "vllm:num_preemptions_total")},
        "measure": _("metric not found") if delta is None else _("%(before)s → %(after)s: %(n)s preemptions") % {
            "before": _num(p["before"]), "after": _num(p["after"]), "n": delta},
        "output": "\n".join(preempt_lines(report)) or _none()})
    if report.get("sweep"):  # reports from before the sweep have none
        levels = report["sweep"]
        out.append({
            "id": "6", "experiment": _("6. More and more requests at once"),
            "condition": _("the same request %(levels)s at a time, %(fixed)s") % {
                "levels": "·".join(str(lv["concurrency"]) for lv in levels), "fixed": fixed},
            "measure": "; ".join(_("%(n)d at once: per request %(per).1f, total %(total).1f tokens/s") % {
                "n": lv["concurrency"], "per": lv["per_request_tokens_per_s"], "total": lv["server_tokens_per_s"]} for lv in levels),
            "output": _("at once | per-request tokens/s | server tokens/s") + "\n" + "\n".join(
                f"{lv['concurrency']} | {lv['per_request_tokens_per_s']:.1f} | {lv['server_tokens_per_s']:.1f}" for lv in levels)})
    b = report.get("batching")
    if b:  # experiment 7 runs only where the server has a static mode (this app's lab)
        modes = ((_("continuous"), b["continuous"]), (_("static"), b["static"]))
        n = len(b["continuous"]["requests"])
        n_long = sum(1 for m in b["continuous"]["requests"] if m["completion_tokens"] == b["long"])
        out.append({
            "id": "7", "experiment": _("7. Static ↔ continuous batching"),
            "condition": _("the same %(n)d requests at once to two engines with %(seats)d seats (max_num_seqs): %(n_long)d run "
                           "to %(long)d tokens, the rest to %(short)d (ignore_eos)") % {
                "n": n, "seats": b["seats"], "n_long": n_long, "long": b["long"], "short": b["short"]},
            "measure": "; ".join(_("%(mode)s: all done in %(span).2f s, %(rate).1f tokens/s, short answers %(short).2f s on average") % {
                "mode": name, "span": m["span_s"], "rate": m["server_tokens_per_s"], "short": m["short_mean_latency_s"]} for name, m in modes),
            "output": _("mode | all done s | server tokens/s | mean latency s | short answers' mean latency s") + "\n" + "\n".join(
                f"{name} | {m['span_s']:.2f} | {m['server_tokens_per_s']:.1f} | {m['mean_latency_s']:.2f} | {m['short_mean_latency_s']:.2f}"
                for name, m in modes)})
    for row in out:
        row.update(reading(row["id"], report))
        row["part"], row["section_number"] = row["section"].split("-")[0], row["section"][1:].replace("-", ".")
    return out


def series_text(report: dict) -> str:
    lines = [" | ".join(series_columns())]
    lines += [f"{p['time']} | {_num(p['running'])} | {_num(p['waiting'])} | {_num(p['kv'], 3)}" for p in report["series"]]
    return "\n".join(lines)


def stats_lines(report: dict, during_2: bool = False) -> list[str]:
    return [e["line"] for e in report.get("logs") or [] if e["kind"] == "stats" and (e.get("during_2") is not False or not during_2)]


def preempt_lines(report: dict) -> list[str]:
    """Log lines about preemption (V1 writes none; V0's warning only with its option on)."""
    return [e["line"] for e in report.get("logs") or [] if "preempt" in e["line"].lower()]


def _display_width(text: str) -> int:
    """Columns a terminal gives the text: Hangul and other wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def as_text(report: dict, width: int = 100) -> str:
    """The report for a terminal: the launch command, the table (one block per row), the series,
    the log lines and the script's output."""
    experiment, condition, measured, output = columns()
    reading = _("How to read it")
    column = max(_display_width(label) for label in (condition, measured, reading)) + 2

    def labelled(label: str, value: str) -> str:
        return f"  {label}{' ' * (column - _display_width(label))}{value}"

    out = [f"{_('Launch command')}: {launch_command(report)}", ""]
    for row in rows(report):
        out.append(f"■ {row['experiment']}")
        out.append(labelled(condition, row["condition"]))
        out.append(labelled(measured, row["measure"]))
        out.append(labelled(reading, f"{row['reading']} (§{row['section_number']})"))
        if row["warning"]:
            out.append(labelled("⚠", row["warning"]))
        out.append(f"  {output}")
        for para in row["output"].splitlines() or [""]:
            out += textwrap.wrap(para, width, initial_indent="    ", subsequent_indent="    ") or ["    "]
        out.append("")
    logs = report.get("logs")
    out.append(_("Server log (the stats lines while experiment 2 ran):"))
    if logs is None:
        out.append("  " + _("(this server's log cannot be read from here: name its log file with --log-file)"))
    else:
        out += [f"  {line}" for line in stats_lines(report, during_2=True)] or [f"  {_none()}"]
        out.append(_("The server log's preempt lines:"))
        out += [f"  {line}" for line in preempt_lines(report)] or [f"  {_none()}"]
    out += ["", _("The measuring script's raw output:")] + [f"  {line}" for line in report["script"]]
    return "\n".join(out)


def as_csv(report: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns())
    for row in rows(report):
        writer.writerow([row["experiment"], row["condition"], row["measure"], row["output"]])
    writer.writerow([])
    writer.writerow(series_columns())
    for p in report["series"]:
        writer.writerow([p["time"], p["running"], p["waiting"], p["kv"]])
    writer.writerow([])
    writer.writerow([_("Server log")])
    for entry in report.get("logs") or []:
        writer.writerow([entry["line"]])
    writer.writerow([])
    writer.writerow([_("Launch command"), launch_command(report)])
    return buffer.getvalue()
