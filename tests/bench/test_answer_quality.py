"""bench/answer_quality.py: its judges (well_formed, category), its data loader, and one smoke run
of `python -m bench.answer_quality` against the server it starts itself as `make run` does. Accuracy
and timings are printed by the benchmark, never asserted here (a toy model, a shared machine)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.answer_quality import CATEGORIES, DataError, category, load_inquiries, main, well_formed

ROOT = Path(__file__).resolve().parents[2]
GOOD = ("분류: 배송\n"
        "요약: 주문한 운동화의 배송 지연 문의.\n"
        "답변: 고객님, 불편을 드려 죄송합니다. 택배사에 확인한 뒤 오늘 안에 안내해 드리겠습니다.")


# --- well_formed -------------------------------------------------------------------------------
def test_a_good_three_line_answer_is_well_formed():
    assert well_formed(GOOD, "stop")
    assert well_formed(f"\n  {GOOD}\n\n", "stop")  # judged on the stripped text


def test_an_answer_cut_off_by_max_tokens_is_not_well_formed():
    assert not well_formed(GOOD, "length")
    assert not well_formed(GOOD, None)


def test_two_lines_are_not_well_formed():
    assert not well_formed("분류: 배송\n요약: 배송 지연 문의.", "stop")
    assert not well_formed(GOOD + "\n답변: 한 줄 더.", "stop")  # four
    assert not well_formed(GOOD.replace("\n", "\n\n", 1), "stop")  # a blank line in between


def test_a_looping_answer_is_not_well_formed():
    looping = "분류: 배송\n요약: 배송 지연 문의.\n답변: 배송 완료로 확인 배송 완료로 확인 배송 완료로 확인"
    assert not well_formed(looping, "stop")
    # Twice is not a loop.
    assert well_formed("분류: 배송\n요약: 배송 지연 문의.\n답변: 배송 완료로 확인 배송 완료로 확인", "stop")


def test_lines_out_of_order_are_not_well_formed():
    a, b, c = GOOD.split("\n")
    assert not well_formed("\n".join([b, a, c]), "stop")
    assert not well_formed("\n".join([a, c, b]), "stop")
    assert not well_formed("\n".join([a, b, b.replace("요약", "답변 ", 1)]), "stop")  # "답변 :" is not "답변: "


def test_an_empty_answer_line_is_not_well_formed():
    a, b, _ = GOOD.split("\n")
    assert not well_formed("\n".join([a, b, "답변: "]), "stop")
    assert not well_formed("\n".join([a, b, "답변:    "]), "stop")
    assert not well_formed("\n".join(["분류: ", b, GOOD.split("\n")[2]]), "stop")
    assert not well_formed("", "stop")


# --- category ----------------------------------------------------------------------------------
def test_category_is_the_first_lines_value():
    assert category(GOOD) == "배송"
    assert category("분류:  환불/반품  \n요약: …") == "환불/반품"
    assert category("\n분류: 제품 불량") == "제품 불량"  # the stripped text's first line
    assert category("분류: 날씨\n요약: …") == "날씨"  # unknown ones too (the table puts them in 형식 밖)


def test_category_is_none_without_the_label_on_the_first_line():
    assert category("요약: …\n분류: 배송") is None
    assert category("분류 배송") is None
    assert category("분류: \n요약: …") is None
    assert category("") is None


# --- data --------------------------------------------------------------------------------------
def write_jsonl(path: Path, items: list) -> Path:
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    return path


def test_the_loader_reads_every_category(tmp_path):
    items = [{"id": f"q{i}", "category": c, "text": f"문의 {i}"} for i, c in enumerate(CATEGORIES)]
    assert load_inquiries(write_jsonl(tmp_path / "ok.jsonl", items)) == items
    assert "기타" in CATEGORIES and len(CATEGORIES) == 11


def test_the_loader_refuses_an_unknown_category(tmp_path, capsys):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"id": "q1", "category": "배송", "text": "택배가 안 와요"},
                                                {"id": "q2", "category": "날씨", "text": "비 와요?"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: unknown category '날씨'"):
        load_inquiries(path)
    assert main(["--data", str(path)]) == 2  # refused before any server is started
    assert "unknown category '날씨'" in capsys.readouterr().err


@pytest.mark.parametrize("line", ['{"id": "q1", "category": "배송"}', "not json", '["q1", "배송", "텍스트"]',
                                  '{"id": "q1", "category": "배송", "text": ""}'])
def test_the_loader_refuses_a_bad_line(tmp_path, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:1: "):
        load_inquiries(path)


# --- smoke -------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_a_run_of_two_inquiries_in_both_settings_prints_the_summaries_and_the_table(tmp_path):
    data = write_jsonl(tmp_path / "two.jsonl", [
        {"id": "s1", "category": "배송", "text": "지난주에 주문한 운동화가 아직 안 왔어요. 언제 오나요?"},
        {"id": "s2", "category": "기타", "text": "오프라인 매장도 있나요?"},
    ])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmark's own default: `make run`'s settings
    done = subprocess.run([sys.executable, "-m", "bench.answer_quality", "--limit", "2", "--settings", "none,system",
                           "--data", str(data), "--max-tokens", "60", "--json", str(tmp_path / "out.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    for setting in ("none", "system"):
        assert re.search(rf"^{setting}\s+2\s+\d+\s+\d+\.\d%\s+\d+\s+\d+\.\d%\s", out, re.M), out
        assert f"confusion table, {setting}: rows = labelled category" in out, out
        assert re.search(rf"^target, {setting}: .*(PASS|FAIL)$", out, re.M), out
    assert re.search(r"^라벨 \\ 답 .*\(형식 밖\)\s+n$", out, re.M), out
    results = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert sorted((r["setting"], r["id"]) for r in results["results"]) == [
        ("none", "s1"), ("none", "s2"), ("system", "s1"), ("system", "s2")]
