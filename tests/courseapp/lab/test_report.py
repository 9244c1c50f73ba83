"""The report as §6 asks for it: [실험 | 조건 | 측정값 | 출력 원문], the series, the log lines."""
import csv
import os
import io
from pathlib import Path

import pytest

from courseapp.lab import report
from tests.courseapp.lab.conftest import measured


def test_the_table_has_the_five_experiments_with_their_figures(sample_report):
    rows = {row["id"]: row for row in report.rows(sample_report)}
    assert list(rows) == ["1", "2", "3s", "3t", "4", "5"]
    assert "160.0 토큰/초 (200토큰 ÷ 1.25 s)" in rows["1"]["measure"] and "TTFT 20 ms" in rows["1"]["measure"]
    assert "요청별 40.0 ~ 50.0 토큰/초 (평균 45.0)" in rows["2"]["measure"]
    assert "서버 전체 280.7 토큰/초 (1,600토큰 ÷ 5.70 s)" in rows["2"]["measure"]
    assert rows["2"]["output"].startswith("(8건 모두 같은 출력)\n분류: 배송")
    assert "1번째 TTFT 200 ms (캐시 0토큰); 2번째 TTFT 20 ms (캐시 1,536토큰)" == rows["3s"]["measure"]
    assert "프롬프트 1,565토큰" in rows["3t"]["condition"]
    # The names found in /metrics, as found (here an older alias for KV usage), and the peaks.
    assert "vllm:gpu_cache_usage_perc" in rows["4"]["condition"]
    assert "표본 3개; 실행 중 최대 8, 대기 최대 2, KV 사용률 최대 0.950" == rows["4"]["measure"]
    assert "10:00:06.00 | 8 | 2 | 0.950" in rows["4"]["output"]
    assert rows["5"]["measure"] == "3 → 5: 선점 2회"
    assert rows["5"]["output"].startswith("WARNING") and "preempted" in rows["5"]["output"]


def test_different_answers_are_each_shown_with_who_gave_them(sample_report):
    sample_report["concurrent"]["requests"][3]["text"] = "다른 답"
    output = next(r for r in report.rows(sample_report) if r["id"] == "2")["output"]
    assert "[#4] 다른 답" in output and "[#1, #2, #3, #5, #6, #7, #8] 분류: 배송" in output


def test_no_preempt_line_reads_none_and_unknown_logs_say_so(sample_report):
    sample_report["logs"] = [entry for entry in sample_report["logs"] if entry["kind"] == "stats"]
    assert next(r for r in report.rows(sample_report) if r["id"] == "5")["output"] == "없음"
    sample_report["logs"] = None
    text = report.as_text(sample_report)
    assert "--log-file" in text


def test_terminal_text_has_the_launch_command_rows_log_during_2_and_script(sample_report):
    text = report.as_text(sample_report)
    assert text.startswith("기동 명령 원문: vllm serve x --max-num-seqs 8")
    for title in ("1. 요청 1건", "2. 같은 요청 8건 동시", "3a. 긴 공통 시스템 프롬프트 ×2", "3b. 맨 앞에 현재 시각 ×2", "4. /metrics 시계열", "5. 선점"):
        assert f"■ {title}" in text
    log = text.split("서버 로그 (실험 2 구간의 통계 줄):")[1].split("서버 로그의 preempt 줄:")[0]
    assert "Running: 8 reqs" in log and "Running: 1 reqs" not in log, "only the lines written during experiment 2"
    assert "[2] server: 1600 tokens / 5.70 s = 280.7 tok/s" in text


def test_csv_has_the_table_the_series_and_the_log(sample_report):
    rows = list(csv.reader(io.StringIO(report.as_csv(sample_report))))
    assert rows[0] == ["실험", "조건", "측정값", "출력 원문"]
    assert [r[0] for r in rows[1:7]] == [r["experiment"] for r in report.rows(sample_report)]
    assert ["시각", "실행 중", "대기", "KV 사용률"] in rows
    assert ["10:00:06.00", "8.0", "2.0", "0.95"] in rows
    assert rows[-1] == ["기동 명령 원문", "vllm serve x --max-num-seqs 8"]


def _row(rep, row_id):
    return next(r for r in report.rows(rep) if r["id"] == row_id)


def test_every_row_says_how_to_read_it_and_which_section_it_checks(sample_report):
    rows = {r["id"]: r for r in report.rows(sample_report)}
    assert {k: r["section"] for k, r in rows.items()} == {"1": "s3-3", "2": "s3-3", "3s": "s4-1", "3t": "s4-3", "4": "s6-3", "5": "s5-1"}
    assert "서버 전체는 1건일 때의 1.8배, 요청별 평균은 1건일 때의 28%" in rows["2"]["reading"]
    assert "정적 배칭 ↔ 연속 배칭" in rows["2"]["reading"]  # 8 equal requests end together: the scene shows the rest
    assert "2코어 CPU" in rows["2"]["warning"], "per-request speed fell below 75 %: the page says why"
    assert "1,536토큰을 캐시에서" in rows["3s"]["reading"] and not rows["3s"]["warning"]
    assert "블록(16토큰) 단위" in rows["3t"]["reading"], "16 cached tokens after the time stamp are explained"
    assert not rows["5"]["warning"]
    text = report.as_text(sample_report)
    assert "읽는 법  §3.3의 예측" in text and "(§4.3)" in text


def test_experiment_2_shows_the_servers_own_token_interval_beside_the_clients_when_the_server_has_it(sample_report):
    assert "서버가 직접 잰 값" not in _row(sample_report, "2")["reading"]  # an older report, or a server without it
    sample_report["concurrent"]["server_token_interval"] = {
        "alone_ms": 1.89, "together_ms": 2.48, "metric": "vllm:inter_token_latency_seconds"}
    reading = _row(sample_report, "2")["reading"]
    assert "서버가 직접 잰 값(vllm:inter_token_latency_seconds)" in reading
    assert "혼자일 때 1.89 ms, 8건이 함께일 때 2.48 ms" in reading and "속도의 76%로" in reading


def test_a_measurement_that_cannot_show_the_point_is_flagged(sample_report):
    assert "표본이 2개뿐" in _row(sample_report, "4")["warning"]  # experiment 2 shorter than the sampling
    sample_report["series"] = [{"time": f"10:00:05.{i}0", "t": i / 10, "running": 1.0, "waiting": 0.0, "kv": 0.1}
                               for i in range(7)]
    assert "실행 중이 2 이상인 표본이 없습니다" in _row(sample_report, "4")["warning"]
    sample_report["series"][3]["running"] = 8.0
    assert _row(sample_report, "4")["warning"] == ""
    sample_report["preemptions"] = {"before": 5.0, "after": 5.0, "delta": 0}
    assert "선점 0회" in _row(sample_report, "5")["warning"]
    sample_report["prefix"]["same"][1]["cached_tokens"] = 0
    assert "프리픽스 캐싱이 꺼져" in _row(sample_report, "3s")["warning"]
    sample_report["concurrent"]["server_tokens_per_s"] = 170.0
    assert "1.1배에 그쳤습니다" in _row(sample_report, "2")["warning"]


def test_the_reading_lines_follow_the_interface_language(sample_report):
    from django.utils import translation

    with translation.override("en"):
        row = _row(sample_report, "2")
        assert row["reading"].startswith("§3.3 predicts:") and "2-core CPU" in row["warning"]
        assert "How to read it  §3.3 predicts" in report.as_text(sample_report)
    assert _row(sample_report, "2")["reading"].startswith("§3.3의 예측")


def test_the_whole_report_follows_the_interface_language_and_the_terminal_stays_korean(sample_report):
    """An English reader got every row, column and the series in Korean (issue #33); the
    terminal's and a CSV's report stays §6's Korean unless another language is active."""
    from django.utils import translation

    with translation.override("en"):
        rows = {row["id"]: row for row in report.rows(sample_report)}
        assert rows["1"]["experiment"] == "1. One request" and "one warm-up request discarded" in rows["1"]["condition"]
        assert rows["2"]["output"].startswith("(all 8 gave the same output)")
        assert rows["3s"]["measure"].startswith("TTFT #1 200 ms (0 tokens cached)")
        assert rows["5"]["measure"] == "3 → 5: 2 preemptions"
        assert rows["4"]["output"].startswith("Time | Running | Waiting | KV usage")
        assert next(csv.reader(io.StringIO(report.as_csv(sample_report)))) == ["Experiment", "Condition", "Measured", "Raw output"]
        every = " ".join(f"{r['experiment']} {r['condition']} {r['measure']}" for r in rows.values())
        assert not any("\uac00" <= ch <= "\ud7a3" for ch in every), every
    assert "측정값" in report.as_text(sample_report) and report.columns() == ("실험", "조건", "측정값", "출력 원문")


def _with_sweep(rep, servers=(160.0, 290.0, 520.0, 900.0, 1100.0), pers=(160.0, 150.0, 140.0, 120.0, 70.0)):
    rep["sweep"] = [{"concurrency": n, "server_tokens_per_s": s, "per_request_tokens_per_s": p, "span_s": 1.0}
                    for n, s, p in zip((1, 2, 4, 8, 16), servers, pers)]
    return rep


def test_the_sweep_is_a_sixth_row_with_its_reading_and_a_chart(sample_report):
    from courseapp.lab.selectors import sweep_chart

    rep = _with_sweep(sample_report)
    row = _row(rep, "6")
    assert row["condition"].startswith("같은 요청을 1·2·4·8·16건씩 동시에")
    assert "16건: 요청별 70.0, 전체 1100.0 토큰/초" in row["measure"] and "16 | 70.0 | 1100.0" in row["output"]
    assert "×6.9" in row["reading"] and "44%" in row["reading"] and not row["warning"]
    chart = sweep_chart(rep)
    assert [label for _, label in chart.x_ticks] == ["1", "2", "4", "8", "16"]
    assert len(chart.server.split()) == 5 and chart.points[-1][1] == chart.top  # the highest total at the top
    rep = _with_sweep(sample_report, servers=(160.0, 290.0, 520.0, 600.0, 580.0))
    assert "8" in _row(rep, "6")["warning"], "the total stopped growing at 8: the page says so"
    assert sweep_chart({"series": []}) is None


def _with_batching(rep, continuous=(3.0, 1.1), static=(4.5, 2.9)):
    """Experiment 7's shape: 12 requests, every third to max_tokens (200), the rest to 25."""
    def mode(prefix, span, short):
        requests = [measured(f"{prefix}{i + 1}", tokens=200 if i % 3 == 0 else 25) for i in range(12)]
        return {"span_s": span, "server_tokens_per_s": 1000 / span, "mean_latency_s": span * 0.6, "short_mean_latency_s": short,
                "total_tokens": 1000, "requests": requests}
    rep["batching"] = {"seats": 4, "long": 200, "short": 25, "continuous": mode("c", *continuous), "static": mode("s", *static)}
    return rep


def test_static_against_continuous_batching_is_a_seventh_row_that_reads_section_3_2(sample_report):
    row = _row(_with_batching(sample_report), "7")
    assert row["experiment"] == "7. 정적 배칭 ↔ 연속 배칭" and row["section"] == "s3-2"
    assert row["condition"].startswith("자리(max_num_seqs) 4개인 엔진 둘에 같은 요청 12건을 한꺼번에: 4건은 200토큰, 나머지는 25토큰까지")
    assert "연속: 전체 3.00 s" in row["measure"] and "정적: 전체 4.50 s" in row["measure"]
    assert "연속 | 3.00 | 333.3 | 1.80 | 1.10" in row["output"] and "정적 | 4.50 | 222.2 | 2.70 | 2.90" in row["output"]
    assert "3.00" in row["reading"] and "4.50" in row["reading"] and "2.90" in row["reading"] and not row["warning"]
    flipped = _row(_with_batching(sample_report, continuous=(4.6, 3.0), static=(4.5, 2.9)), "7")
    assert flipped["warning"], "continuous no better than static here: the page says a run can be noise"
    assert all(r["id"] != "7" for r in report.rows(sample_report | {"batching": None})), "run_lab against vLLM has none"


GOLDEN = Path(__file__).parent / "data"


@pytest.fixture
def english():
    from django.utils import translation

    with translation.override("en"):
        yield


@pytest.mark.parametrize("language", ["ko", "en"])
def test_the_downloaded_report_is_word_for_word_the_reviewed_one(sample_report, language):
    """The text and CSV a learner downloads (§6.3's checklist is filled from them), every row,
    reading line, warning, series and log line, word for word as reviewed in
    tests/courseapp/lab/data/. A change of wording changes those files: run this test with
    UPDATE_GOLDEN=1 to rewrite them, and review their diff like any other change."""
    from django.utils import translation

    rep = _with_batching(_with_sweep(sample_report))
    with translation.override(language):
        made = {"txt": report.as_text(rep), "csv": report.as_csv(rep)}
    for kind, text in made.items():
        path = GOLDEN / f"report-{language}.{kind}"
        if os.environ.get("UPDATE_GOLDEN"):
            path.write_text(text, encoding="utf-8", newline="")
        assert text == path.read_bytes().decode(), f"{path.name} differs (UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.usefixtures("english")
def test_the_reading_lines_hold_at_their_limits(sample_report):
    """Each warning starts just past its limit, and a run that produced nothing reads without failing."""
    from courseapp.lab.reading import during_2, reading

    def per_request(rate):  # the 8 requests of experiment 2 at this many tokens/s each
        sample_report["concurrent"]["requests"] = [measured(str(i + 1), elapsed=200 / rate) for i in range(8)]
        sample_report["concurrent"]["server_tokens_per_s"] = 8 * rate
        return reading("2", sample_report)["warning"]

    assert per_request(120.0) == "", "75 % of 160 tokens/s alone: not flagged"
    assert "2-core CPU" in per_request(119.0)
    sample_report["single"]["tokens_per_s"] = 0.0  # the first experiment measured nothing
    assert "only 0.0×" in reading("2", sample_report)["warning"]
    assert "This run: the server's total is 0.0× the single request's, each request averages 0% of it" in reading("2", sample_report)["reading"]

    def cached(n):
        sample_report["prefix"]["time"][1]["cached_tokens"] = n
        return reading("3t", sample_report)

    assert "whole blocks" in cached(32)["reading"] and not cached(32)["warning"]
    assert "whole blocks" in cached(1)["reading"], "any hit at all is explained"
    assert "whole blocks" not in cached(33)["reading"]
    assert cached(33)["warning"] == ("Many tokens matched although a clock leads the prompt: check that the two "
                                     "beginnings really differed.")
    assert "whole blocks" not in cached(0)["reading"] and cached(0)["warning"] == ""

    one = {"time": "t", "t": 0.0, "running": 2.0, "waiting": 0.0, "kv": 0.1}
    assert during_2({"series": [one]}) == [one], "a single sample is kept"
    assert during_2({"series": [one, one | {"t": 1.0}]}) == [one], "the last, taken after experiment 2, is not"
    sample_report["series"] = [one] * 6
    assert "at most 2 running" in reading("4", sample_report)["reading"] and not reading("4", sample_report)["warning"]
    sample_report["series"] = []  # no gauge on the /metrics page
    assert "This run: 0 samples during experiment 2, at most 0 running." in reading("4", sample_report)["reading"]
    sample_report["series"] = [one | {"running": None}] * 6
    assert "at most 0 running" in reading("4", sample_report)["reading"] and reading("4", sample_report)["warning"]


@pytest.mark.usefixtures("english")
def test_the_servers_own_interval_is_shown_only_when_both_sides_were_measured(sample_report):
    from courseapp.lab.reading import reading

    sample_report["concurrent"]["server_token_interval"] = {"alone_ms": 5.0, "together_ms": None}
    assert "server's own measure" not in reading("2", sample_report)["reading"]
    sample_report["concurrent"]["server_token_interval"] = {"alone_ms": 5.0, "together_ms": 8.0}
    text = reading("2", sample_report)["reading"]
    assert text.startswith("§3.3 predicts") and "(inter-token latency): a token every 5.00 ms alone and 8.00 ms" in text
    assert "decoded at 62% of its rate alone" in text


def test_one_request_of_experiment_2_is_shown_as_itself_and_different_answers_stand_apart(sample_report):
    """A run at concurrency 1 has nothing to compare: its answer is labelled #1, not "all 1 gave
    the same output"; different answers are separated by a blank line, in the table and the terminal."""
    sample_report["concurrent"]["requests"] = sample_report["concurrent"]["requests"][:1]
    assert _row(sample_report, "2")["output"] == "[#1] 분류: 배송"
    sample_report["concurrent"]["requests"] = [measured("1", text="가"), measured("2", text="나"), measured("3", text="가")]
    assert _row(sample_report, "2")["output"] == "[#1, #3] 가\n\n[#2] 나"
    lines = report.as_text(sample_report).splitlines()
    at = lines.index("    [#1, #3] 가")
    assert lines[at + 1:at + 3] == ["    ", "    [#2] 나"], "the blank line between two answers is kept"


def test_an_empty_answer_and_a_long_one_keep_the_terminal_layout(sample_report):
    """An answer with no text is one indented empty line (not a missing block); a paragraph
    wraps at 100 columns, indented."""
    sample_report["single"]["text"] = ""
    lines = report.as_text(sample_report).splitlines()
    first = lines.index("■ 1. 요청 1건")
    assert lines[first + 4:first + 7] == ["  출력 원문", "    ", ""]
    sample_report["single"]["text"] = "a" * 95 + " b"  # 101 columns with its indent
    lines = report.as_text(sample_report).splitlines()
    assert lines[first + 5:first + 7] == ["    " + "a" * 95, "    b"], "a line holds 100 columns"
    assert report.as_text(sample_report, width=101).splitlines()[first + 5] == "    " + "a" * 95 + " b"


def test_hangul_labels_take_two_columns_so_the_values_line_up(sample_report):
    """The terminal's labels (조건, 측정값, 읽는 법) are padded by display width: every value of a
    block starts in the same column on a terminal, where a Hangul syllable is two columns wide."""
    lines = report.as_text(sample_report).splitlines()
    first = lines.index("■ 1. 요청 1건")
    starts = [report._display_width(line[:line.index(value)]) for line, value in
              zip(lines[first + 1:first + 4], ("temperature", "출력", "기준선"))]
    assert len(set(starts)) == 1 and starts[0] == 2 + 7 + 2, starts  # indent, "읽는 법" (7 columns), 2 spaces


def test_the_launch_command_left_unknown_and_ignore_eos_are_said(sample_report):
    del sample_report["settings"]["launch_command"]
    assert report.as_text(sample_report).startswith("기동 명령 원문: (모름: 서버를 띄운 명령을 함께 적어 두세요)")
    assert "ignore_eos" not in _row(sample_report, "1")["condition"]
    sample_report["settings"]["ignore_eos"] = True
    assert _row(sample_report, "1")["condition"].startswith("temperature 0, max_tokens 200, ignore_eos,")


def test_experiment_3_names_the_first_requests_prompt_length(sample_report):
    """The prompt length in the condition is the first request's, the one that filled the cache
    (in 3b the second prompt's clock can tokenize to a different length)."""
    sample_report["prefix"]["time"][1]["prompt_tokens"] = 1570
    assert "프롬프트 1,565토큰" in _row(sample_report, "3t")["condition"]


def test_a_report_without_metric_names_a_series_or_a_preemption_counter_reads_without_failing(sample_report):
    """An older report (no metric_names), a /metrics page without the gauges (no samples) and one
    without the preemption counter: each row says what is missing instead of failing."""
    del sample_report["metric_names"]
    sample_report["series"] = []
    sample_report["preemptions"] = {"before": None, "after": None, "delta": None}
    rows = {row["id"]: row for row in report.rows(sample_report)}
    assert rows["4"]["condition"].endswith(": (없음), (없음), (없음)")
    assert rows["4"]["measure"].startswith("표본 0개;")
    assert rows["5"]["measure"] == "지표를 찾지 못함"
    assert rows["5"]["condition"] == "실험 2 직전·직후 vllm:num_preemptions_total"
    sample_report["metric_names"] = {"preemptions": "vllm:num_preemptions"}  # the name this server had
    assert _row(sample_report, "5")["condition"] == "실험 2 직전·직후 vllm:num_preemptions"


def test_every_preempt_line_of_the_log_is_shown_one_per_line(sample_report):
    second = dict(sample_report["logs"][2], line="WARNING 12-01 10:00:07 [scheduler.py] Sequence group b is preempted")
    sample_report["logs"].append(second)
    assert _row(sample_report, "5")["output"] == sample_report["logs"][2]["line"] + "\n" + second["line"]


def test_the_page_shows_every_stats_line_and_the_terminal_those_of_experiment_2(sample_report):
    assert report.stats_lines(sample_report) == [sample_report["logs"][0]["line"], sample_report["logs"][1]["line"]]
    assert report.stats_lines(sample_report, during_2=True) == [sample_report["logs"][0]["line"]]


def test_a_log_that_cannot_be_read_is_said_in_its_own_line(sample_report):
    sample_report["logs"] = None
    lines = report.as_text(sample_report).splitlines()
    at = lines.index("서버 로그 (실험 2 구간의 통계 줄):")
    assert lines[at + 1] == "  (이 서버의 로그는 여기서 읽을 수 없음: --log-file로 로그 파일을 알려 주세요)"


@pytest.mark.usefixtures("english")
def test_experiment_2_flags_a_total_under_1_2_times_one_requests_and_adds_the_servers_measure_as_a_sentence(sample_report):
    from courseapp.lab.reading import reading

    sample_report["concurrent"]["server_tokens_per_s"] = 1.2 * 160.0
    assert "only" not in reading("2", sample_report)["warning"], "1.2× is enough"
    sample_report["concurrent"]["server_tokens_per_s"] = 1.19 * 160.0
    assert "only 1.2×" in reading("2", sample_report)["warning"]
    sample_report["concurrent"]["server_token_interval"] = {"alone_ms": 5.0, "together_ms": 8.0, "metric": "m"}
    assert "scene (§3.2). The server's own measure (m):" in reading("2", sample_report)["reading"]


@pytest.mark.usefixtures("english")
def test_the_sweep_batching_and_preemption_rows_warn_in_their_own_words_and_only_when_they_should(sample_report):
    from courseapp.lab.reading import reading

    rep = _with_batching(_with_sweep(sample_report))
    assert [reading(k, rep)["warning"] for k in ("6", "7", "5")] == ["", "", ""]
    assert reading("6", rep)["section"] == "s3-3"
    assert reading("6", _with_sweep(rep, servers=(160.0, 290.0, 520.0, 600.0, 580.0)))["warning"] == (
        "The total stopped growing after 8 at once: the engine (or this 2-core CPU) was full there; more requests only queue.")
    nothing = reading("6", _with_sweep(rep, servers=(0.0,) * 5, pers=(0.0,) * 5))["reading"]
    assert "the total went ×0.0 and each request's speed to 0%." in nothing, "a first level that measured nothing"
    tie = reading("7", _with_batching(rep, continuous=(3.0, 2.9), static=(4.5, 2.9)))["warning"]
    assert tie == ("Here the short answers did not come back sooner with continuous batching. On a busy machine "
                   "one run can be noise: run the lab again and compare."), "as soon is not sooner"


def test_wide_and_fullwidth_characters_take_two_terminal_columns():
    assert report._display_width("가a") == 3 and report._display_width("ＡＢ（") == 6 and report._display_width("ﾊ") == 1
