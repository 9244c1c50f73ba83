"""How to read each row of a lab report: what the lesson's section predicts, what this run shows
against it, and a warning when the measurement cannot show the point (issue #30). UI text, so
translatable (English msgids, Korean in locale/ko)."""
from django.utils.translation import gettext as _

from courseapp.lab.formats import ms as _ms
from courseapp.lab.formats import num as _num

MIN_SAMPLES = 5  # experiment 4 needs this many samples during experiment 2 to show a shape


def during_2(report: dict) -> list[dict]:
    """The samples taken while experiment 2 ran (the last one is taken after it, on purpose)."""
    series = report["series"]
    return series[:-1] if len(series) > 1 else series


def reading(row_id: str, report: dict) -> dict:
    """{section, reading, warning} for a row of report.rows."""
    one, many = report["single"], report["concurrent"]
    single = one["tokens_per_s"] or 0.0
    per = [m["tokens_per_s"] for m in many["requests"]]
    if row_id == "1":
        return {"section": "s3-3", "warning": "", "reading": _(
            "The baseline: compare each request's speed and the server's total in experiment 2 with these "
            "%(rate).1f tokens/s.") % {"rate": single}}
    if row_id == "2":
        gain = many["server_tokens_per_s"] / single if single else 0.0
        share = (sum(per) / len(per)) / single if single else 0.0
        text = _("§3.3 predicts: together, the server's total throughput grows while one request's speed stays the same "
                 "or drops a little. This run: the server's total is %(gain).1f× the single request's, each request "
                 "averages %(share)s of it. The %(n)d requests are alike and end together, so this row shows batching only; "
                 "a finished request's seat going to a new one (continuous batching) is experiment 7 and the demo's 'static "
                 "vs continuous batching' scene (§3.2).") % {"gain": gain, "share": f"{share:.0%}", "n": len(per)}
        itl = many.get("server_token_interval") or {}
        if itl.get("alone_ms") and itl.get("together_ms"):
            text += " " + _("The server's own measure (%(metric)s): a token every %(alone).2f ms alone and %(together).2f ms "
                            "with %(n)d at once — each request decoded at %(server)s of its rate alone; the rest of the gap "
                            "above is this client and the HTTP layer reading and writing %(n)d streams on the same CPU.") % {
                "metric": itl.get("metric") or "inter-token latency", "alone": itl["alone_ms"], "together": itl["together_ms"],
                "n": len(per), "server": f"{itl['alone_ms'] / itl['together_ms']:.0%}"}
        warning = ""
        if gain < 1.2:
            warning = _("The server's total is only %(gain).1f× one request's: few requests may have run together "
                        "(check max_num_seqs, the KV pool, and 'running' in row 4).") % {"gain": gain}
        elif share < 0.75:
            warning = _("Each request ran at %(share)s of its speed alone. On a GPU one step barely grows with more "
                        "requests in it; on this lab server, a 2-core CPU, a step with %(n)d requests takes longer than a "
                        "step with one (each request adds its attention, sampling and text to every step), and the %(n)d "
                        "requests, sent together, reach the engine a few steps apart, so the later ones wait longer for "
                        "their first token. If the total still grew, §3.3's point (throughput, not one request's speed) "
                        "stands.") % {
                "share": f"{share:.0%}", "n": len(per)}
        return {"section": "s3-3", "reading": text, "warning": warning}
    if row_id in ("3s", "3t"):
        first, second = report["prefix"]["same" if row_id == "3s" else "time"]
        cached = second["cached_tokens"] or 0
        if row_id == "3s":
            text = _("§4.1 predicts: the shared beginning comes from the cache from the second request on, so its TTFT "
                     "drops. This run: the second request read %(cached)s of its %(prompt)s tokens from the cache; TTFT "
                     "%(t1)s → %(t2)s.") % {"cached": _num(cached), "prompt": _num(second["prompt_tokens"]),
                                             "t1": _ms(first["ttft"]), "t2": _ms(second["ttft"])}
            warning = "" if cached else _("The second request also found 0 tokens in the cache: that is what a server "
                                          "with prefix caching off (enable_prefix_caching) shows.")
            return {"section": "s4-1", "reading": text, "warning": warning}
        text = _("§4.3 predicts: the prefix cache matches only from the very first character, so a clock at the front "
                 "leaves almost nothing to match. This run: the second request found %(cached)s tokens in the cache.") % {
                     "cached": _num(cached)}
        warning = ""
        if 0 < cached <= 32:
            text += " " + _("Why not 0: the cache matches whole blocks (16 tokens). The two clocks agreed up to the "
                            "minute, so the blocks before the first differing character matched; the ~1,500 tokens "
                            "after it were all computed again.")
        elif cached > 32:  # pragma: no mutate (>= 32: 32 is taken by the branch above)
            warning = _("Many tokens matched although a clock leads the prompt: check that the two beginnings really differed.")
        return {"section": "s4-3", "reading": text, "warning": warning}
    if row_id == "4":
        samples = during_2(report)
        running = max((p["running"] or 0 for p in samples), default=0)
        text = _("What §6.3 asks you to see: 'running' at 2 or more means several requests shared a step (§3.2); "
                 "'waiting' above 0 means requests queued for a seat (max_num_seqs) or blocks. This run: %(n)d samples "
                 "during experiment 2, at most %(running)s running.") % {"n": len(samples), "running": _num(running)}
        warning = ""
        if len(samples) < MIN_SAMPLES:
            warning = _("Only %(n)d samples during experiment 2: it ended faster than the sampling interval "
                        "(%(every)s s). Sample more often or raise max_tokens and run again.") % {
                            "n": len(samples), "every": f"{report['settings']['sample_every_s']:g}"}
        elif running < 2:
            warning = _("No sample shows 2 or more running: the requests ran one at a time, or the samples missed it.")
        return {"section": "s6-3", "reading": text, "warning": warning}
    if row_id == "6":
        levels = report["sweep"]
        first, last = levels[0], levels[-1]
        gain = last["server_tokens_per_s"] / first["server_tokens_per_s"] if first["server_tokens_per_s"] else 0.0
        share = last["per_request_tokens_per_s"] / first["per_request_tokens_per_s"] if first["per_request_tokens_per_s"] else 0.0
        text = _("§3.3 as a curve: as more requests share the engine, the server's total should climb while each "
                 "request's speed stays near its speed alone, until the engine is full. This run: from %(a)d to %(b)d at "
                 "once, the total went ×%(gain).1f and each request's speed to %(share)s.") % {
                     "a": first["concurrency"], "b": last["concurrency"], "gain": gain, "share": f"{share:.0%}"}
        peak = max(levels, key=lambda lv: lv["server_tokens_per_s"])
        warning = ""
        if peak is not last:
            warning = _("The total stopped growing after %(n)d at once: the engine (or this 2-core CPU) was full there; "
                        "more requests only queue.") % {"n": peak["concurrency"]}
        return {"section": "s3-3", "reading": text, "warning": warning}
    if row_id == "7":
        b = report["batching"]
        c, st = b["continuous"], b["static"]
        text = _("§3.2 predicts: static batching keeps a batch's seats until its longest answer ends, so the short "
                 "answers queued behind it wait; continuous batching gives a freed seat to the next request at the next "
                 "step. This run: all %(n)d requests took %(c).2f s batched continuously and %(s).2f s statically; a short "
                 "answer waited %(cs).2f s and %(ss).2f s on average.") % {
                     "n": len(c["requests"]), "c": c["span_s"], "s": st["span_s"],
                     "cs": c["short_mean_latency_s"], "ss": st["short_mean_latency_s"]}
        warning = ""
        if c["short_mean_latency_s"] >= st["short_mean_latency_s"]:
            warning = _("Here the short answers did not come back sooner with continuous batching. On a busy machine "
                        "one run can be noise: run the lab again and compare.")
        return {"section": "s3-2", "reading": text, "warning": warning}
    delta = report["preemptions"]["delta"]
    text = _("§5.1 predicts: when the KV pool runs out, the latest request is set aside (preempted) and resumed when "
             "room frees. vLLM V1's scheduler writes no warning for it, so look at whether the counter "
             "vllm:num_preemptions_total grew.")
    warning = ""
    if delta == 0:
        warning = _("0 preemptions: the pool was large enough for this run. To see one, shrink the KV pool (num_blocks) "
                    "and run again. The 'smallest pool' preset changes several knobs at once: change them one at a "
                    "time to see which one brings preemption.")
    return {"section": "s5-1", "reading": text, "warning": warning}
