"""Every grading rule, with its edge cases (issue #2 §5)."""
import pytest

from courseapp.quizzes.grading import (
    grade_matching,
    grade_multi,
    grade_numeric,
    grade_ordering,
    grade_short,
    grade_single,
    lcs_length,
    normalise_text,
)


class TestSingle:
    key = {"answer": "b"}

    def test_right_choice_scores_one(self):
        assert grade_single(self.key, {"choice": "b"}).score == 1.0

    def test_wrong_choice_scores_zero(self):
        assert grade_single(self.key, {"choice": "a"}).score == 0.0


class TestMulti:
    key = {"choices": ["a", "b", "c", "d"], "answer": ["a", "c"]}

    def test_exact_set_is_full_credit(self):
        assert grade_multi(self.key, {"choices": ["a", "c"]}).score == 1.0

    def test_each_right_tick_earns_one_kth(self):
        result = grade_multi(self.key, {"choices": ["a"]})
        assert result.score == pytest.approx(0.5)
        assert result.detail == {"hits": 1, "false": 0, "missed": 1, "picked": 1}

    def test_a_wrong_tick_takes_one_right_tick_back(self):
        assert grade_multi(self.key, {"choices": ["a", "c", "b"]}).score == pytest.approx(0.5)
        assert grade_multi(self.key, {"choices": ["a", "b"]}).score == 0.0

    def test_empty_selection_earns_nothing(self):
        # issue #9: counting unticked options as right decisions gave an empty answer 60% on 2-of-5
        two_of_five = {"choices": list("abcde"), "answer": ["a", "b"]}
        result = grade_multi(two_of_five, {"choices": []})
        assert result.score == 0.0
        assert result.detail["picked"] == 0

    def test_everything_checked_earns_nothing(self):
        assert grade_multi(self.key, {"choices": ["a", "b", "c", "d"]}).score == 0.0

    def test_all_wrong_decisions_score_zero(self):
        assert grade_multi(self.key, {"choices": ["b", "d"]}).score == 0.0

    def test_empty_key_rewards_checking_nothing_only(self):
        key = {"choices": ["a", "b"], "answer": []}
        assert grade_multi(key, {"choices": []}).score == 1.0
        assert grade_multi(key, {"choices": ["a"]}).score == 0.0

    def test_duplicates_in_response_count_once(self):
        assert grade_multi(self.key, {"choices": ["a", "a", "c"]}).score == 1.0


class TestNumeric:
    key = {"answer": 3.0, "tolerance": 0.5}

    @pytest.mark.parametrize("value", [3.0, 3.5, 2.5, 3.2])
    def test_within_tolerance_inclusive_is_full_credit(self, value):
        assert grade_numeric(self.key, {"value": value}).score == 1.0

    @pytest.mark.parametrize("value", [3.51, 4.0, 2.0, 2.49])
    def test_within_twice_the_tolerance_is_half_credit(self, value):
        result = grade_numeric(self.key, {"value": value})
        assert result.score == 0.5
        assert result.detail["close"] is True

    @pytest.mark.parametrize("value", [4.01, 1.99, -3.0, 100.0])
    def test_beyond_twice_the_tolerance_is_zero(self, value):
        assert grade_numeric(self.key, {"value": value}).score == 0.0

    def test_float_noise_does_not_cross_a_border(self):
        key = {"answer": 0.3, "tolerance": 0.1}
        assert grade_numeric(key, {"value": 0.1 + 0.1 + 0.1 + 0.1}).score == 1.0  # 0.4000000000000001

    def test_zero_tolerance_means_exact_and_no_half_credit(self):
        key = {"answer": 94, "tolerance": 0}
        assert grade_numeric(key, {"value": 94}).score == 1.0
        assert grade_numeric(key, {"value": 95}).score == 0.0

    def test_a_key_without_a_tolerance_wants_the_exact_number(self):
        assert grade_numeric({"answer": 94}, {"value": 94}).score == 1.0
        assert grade_numeric({"answer": 94}, {"value": 94.5}).score == 0.0


class TestShort:
    key = {"answers": ["연속 배칭", "continuous batching"], "patterns": []}

    @pytest.mark.parametrize(
        "text", ["연속 배칭", "연속배칭", "  연속   배칭 ", "연속 배칭.", "Continuous Batching", "CONTINUOUS-BATCHING", "ｃｏｎｔｉｎｕｏｕｓ batching"]
    )
    def test_korean_and_english_variants_ignore_case_spacing_punctuation_width(self, text):
        assert grade_short(self.key, {"text": text}).score == 1.0

    @pytest.mark.parametrize("text", ["정적 배칭", "batching", "연속", ""])
    def test_other_answers_score_zero(self, text):
        assert grade_short(self.key, {"text": text}).score == 0.0

    def test_patterns_match_the_normalised_response(self):
        key = {"answers": ["선점"], "patterns": [r"^preempt(ion|ed)?$"]}
        assert grade_short(key, {"text": "Preempted"}).score == 1.0
        assert grade_short(key, {"text": "preemptive scheduling"}).score == 0.0

    def test_a_key_without_patterns_grades_by_its_answers_alone(self):
        key = {"answers": ["선점"]}
        assert grade_short(key, {"text": "선점"}).score == 1.0
        assert grade_short(key, {"text": "스왑"}).score == 0.0

    def test_a_rubric_credits_each_idea_found_and_names_found_and_missing_ones(self):
        rubric = [{"label": "KV를 블록 단위로 나눈다", "patterns": ["블록"]}, {"label": "필요할 때 할당한다", "patterns": ["필요할때"]}]
        result = grade_short({"rubric": rubric}, {"text": "KV 캐시를 고정 크기 블록으로 나눕니다."})
        assert result.score == 0.5
        assert result.detail["ideas"] == [{"label": "KV를 블록 단위로 나눈다", "found": True, "contradicted": False},
                                          {"label": "필요할 때 할당한다", "found": False, "contradicted": False}]  # the feedback lists them

    def test_an_answer_that_contradicts_an_idea_gets_nothing(self):
        rubric = [{"label": "미리 잡지 않는다", "patterns": ["미리잡지않"], "contradicted_by": ["미리잡(는|아)"]},
                  {"label": "블록으로 나눈다", "patterns": ["블록"]}]
        result = grade_short({"rubric": rubric}, {"text": "최대 길이만큼 미리 잡아 두고 블록으로 나눈다."})
        assert result.score == 0.0 and result.detail["ideas"][0]["contradicted"]
        assert grade_short({"rubric": rubric}, {"text": "미리 잡지 않고 블록으로 나눈다"}).score == 1.0

    def test_normalise_keeps_hangul_and_digits(self):
        assert normalise_text("KV 캐시 8,192칸!") == "kv캐시8192칸"


class TestOrdering:
    key = {"order": ["a", "b", "c", "d"]}

    def test_right_order_is_full_credit(self):
        assert grade_ordering(self.key, {"order": ["a", "b", "c", "d"]}).score == 1.0

    def test_one_item_out_of_place_loses_one_nth(self):
        # LCS of (b, a, c, d) and (a, b, c, d) is 3
        result = grade_ordering(self.key, {"order": ["b", "a", "c", "d"]})
        assert result.score == pytest.approx(0.75)
        assert result.detail == {"in_order": 3, "total": 4}  # the feedback's "3 of 4 in order"

    def test_reversed_keeps_only_one(self):
        assert grade_ordering(self.key, {"order": ["d", "c", "b", "a"]}).score == pytest.approx(0.25)

    def test_rotation_keeps_the_longest_run(self):
        assert grade_ordering(self.key, {"order": ["d", "a", "b", "c"]}).score == pytest.approx(0.75)

    def test_lcs_length(self):
        assert lcs_length([], ["a"]) == 0
        assert lcs_length(list("ACBD"), list("ABCD")) == 3


class TestMatching:
    key = {"pairs": {"l1": "r1", "l2": "r2", "l3": "r3", "l4": "r4"}}

    def test_all_pairs_right(self):
        assert grade_matching(self.key, {"pairs": {"l1": "r1", "l2": "r2", "l3": "r3", "l4": "r4"}}).score == 1.0

    def test_proportional_credit(self):
        result = grade_matching(self.key, {"pairs": {"l1": "r1", "l2": "r3", "l3": "r2", "l4": "r4"}})
        assert result.score == pytest.approx(0.5)
        assert result.detail == {"pairs_right": 2, "total": 4}

    def test_blank_pairs_count_as_wrong(self):
        assert grade_matching(self.key, {"pairs": {"l1": "r1", "l2": "", "l3": "", "l4": ""}}).score == pytest.approx(0.25)

    def test_same_right_item_used_twice_only_scores_where_it_belongs(self):
        result = grade_matching(self.key, {"pairs": {"l1": "r1", "l2": "r1", "l3": "r1", "l4": "r1"}})
        assert result.score == pytest.approx(0.25)
