"""What a learner reads after checking an answer (issue #9): partial credit worded by decision,
every option marked once the key is shown, unfinished answers sent back without using a try,
numbers typed with their unit, and an own-words answer checked against a rubric."""
import pytest
from bs4 import BeautifulSoup
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from courseapp.learners.models import Learner
from courseapp.quizzes.grading import grade_short
from courseapp.quizzes.models import Attempt, Question
from tests.answers import right_form, shown_id, wrong_form

HX = {"HTTP_HX_REQUEST": "true"}


def submit(client, q, data, nonce):
    return client.post(reverse("quizzes:submit", args=[q.slug]), {**data, "nonce": nonce}, **HX)


def ko(msgid: str) -> str:
    with translation.override("ko"):
        return escape(translation.gettext(msgid))


def feedback(html: str):
    return BeautifulSoup(html, "html.parser").select_one("[data-verdict]")


# --- multi-select: ticking nothing is not a try ------------------------------------------------


@pytest.mark.django_db
def test_ticking_nothing_on_a_multi_select_is_sent_back_and_stores_nothing(client):
    q = Question.objects.get(slug="kv-waste-two-kinds")
    html = submit(client, q, {}, "n1").content.decode()
    assert ko("Choose at least one option first.") in html
    plain = client.post(reverse("quizzes:submit", args=[q.slug]), {"nonce": "n2"})
    assert plain.status_code == 400
    assert not Attempt.objects.exists() and not Learner.objects.exists()


@pytest.mark.django_db
def test_multi_partial_credit_is_worded_by_ticks_not_as_n_of_all_options(client):
    q = Question.objects.get(slug="kv-waste-two-kinds")
    one_right = shown_id(q, "choice", q.key["answer"][0])
    html = submit(client, q, {"choice": [one_right]}, "n1").content.decode()
    assert feedback(html)["data-verdict"] == "partial"
    assert Attempt.objects.get(question=q).score == pytest.approx(0.5)
    with translation.override("ko"):
        ticks = translation.gettext("You ticked %(n)s: %(h)s right, %(w)s wrong.") % {"n": 1, "h": 1, "w": 0}
    assert escape(ticks) in html
    assert " of 5 right" not in html and "5개 중" not in html  # the wording that read as five answers


# --- the reveal marks every option ----------------------------------------------------------


def _marks(html):
    return BeautifulSoup(html, "html.parser").select(".reveal li.mark")


@pytest.mark.django_db
def test_options_are_not_marked_before_the_reveal(client):
    q = Question.objects.get(slug="kv-waste-why-reserve")
    assert _marks(submit(client, q, wrong_form(q), "n1").content.decode()) == []


@pytest.mark.django_db
def test_after_the_reveal_every_choice_is_marked_right_or_wrong_with_the_learners_pick(client):
    q = Question.objects.get(slug="kv-waste-why-reserve")
    submit(client, q, wrong_form(q), "n1")
    html = submit(client, q, wrong_form(q), "n2").content.decode()  # second try: the key is shown
    marks = _marks(html)
    texts = {c["id"]: c["text"] for c in q.public["choices"]}
    assert len(marks) == len(texts)
    by_text = {m.get_text(" ", strip=True): m for m in marks}
    for raw_id, text in texts.items():
        mark = next(m for t, m in by_text.items() if text in t)
        assert mark["data-mark"] == ("right" if raw_id == q.key["answer"] else "wrong"), text
    picked = [m for m in marks if m.has_attr("data-chosen")]
    assert len(picked) == 1 and picked[0]["data-mark"] == "wrong"
    # the note on a wrong option explains it once the key is out
    wrong_id = next(c for c in texts if c != q.key["answer"] and c in q.choice_feedback)
    assert escape(q.choice_feedback[wrong_id]) in html


@pytest.mark.django_db
def test_after_the_reveal_a_multi_select_marks_missed_and_wrongly_ticked_options(client):
    q = Question.objects.get(slug="preemption-symptoms")
    form = wrong_form(q)  # ticks every wrong option, none of the right ones
    submit(client, q, form, "n1")
    marks = _marks(submit(client, q, form, "n2").content.decode())
    assert len(marks) == len(q.key["choices"])
    right = [m for m in marks if m["data-mark"] == "right"]
    assert len(right) == len(q.key["answer"]) and not any(m.has_attr("data-chosen") for m in right)
    assert all(m.has_attr("data-chosen") for m in marks if m["data-mark"] == "wrong")


@pytest.mark.django_db
def test_after_the_reveal_each_matching_row_says_whether_it_was_right(client):
    q = Question.objects.get(slug="kv-waste-breakdown")
    submit(client, q, wrong_form(q), "n1")
    marks = _marks(submit(client, q, wrong_form(q), "n2").content.decode())
    assert len(marks) == len(q.key["pairs"])
    assert all(m["data-mark"] == "wrong" and m.select_one(".mark-note") for m in marks)


# --- unfinished answers do not use up the try -------------------------------------------------


@pytest.mark.django_db
def test_a_half_filled_matching_is_sent_back_to_finish_and_nothing_is_stored(client):
    q = Question.objects.get(slug="kv-waste-breakdown")
    full = right_form(q)
    half = dict(list(full.items())[:2])
    html = submit(client, q, half, "n1").content.decode()
    assert 'data-verdict="error"' in html
    with translation.override("ko"):
        message = translation.gettext(
            "Match every item first (%(filled)d of %(total)d matched). Nothing was saved, so this try still counts as unused."
        ) % {"filled": 2, "total": len(q.key["pairs"])}
    assert escape(message) in html
    assert not Attempt.objects.exists() and not Learner.objects.exists()
    # The finished answer is still the first try: a wrong one does not reveal the key.
    second = submit(client, q, wrong_form(q), "n2").content.decode()
    assert 'class="reveal"' not in second
    assert Attempt.objects.filter(question=q).count() == 1


@pytest.mark.django_db
def test_an_untouched_ordering_is_sent_back_and_nothing_is_stored(client):
    q = Question.objects.get(slug="preemption-sequence")
    as_shown = {"order": [shown_id(q, "item", i["id"]) for i in q.public["items"]]}
    html = submit(client, q, as_shown, "n1").content.decode()
    assert 'data-verdict="error"' in html
    assert ko("Move the items into your order first; nothing was saved, so this try still counts as unused.") in html
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_no_ordering_question_starts_in_the_order_the_tests_use_as_wrong():
    """wrong_form (reversed) must be gradable, not refused as untouched."""
    for q in Question.objects.filter(type="ordering"):
        assert [i["id"] for i in q.public["items"]] != list(reversed(q.key["order"])), q.slug


# --- numbers: units, whole numbers, keypad --------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("typed", ["3개", "3 개", " 3 ", "3.0"])
def test_a_number_typed_with_its_unit_is_accepted(client, typed):
    q = Question.objects.get(slug="kv-waste-reserve-count")
    html = submit(client, q, {"value": typed}, "n1").content.decode()
    assert 'data-verdict="correct"' in html, typed


@pytest.mark.django_db
def test_a_number_with_another_unit_word_is_accepted(client):
    q = Question.objects.get(slug="kv-waste-actual-count")
    assert 'data-verdict="correct"' in submit(client, q, {"value": "16 토큰"}, "n1").content.decode()


@pytest.mark.django_db
def test_a_korean_multiplier_is_not_mistaken_for_a_unit(client):
    q = Question.objects.get(slug="kv-waste-reserve-count")
    html = submit(client, q, {"value": "3만"}, "n1").content.decode()
    assert 'data-verdict="error"' in html
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_a_fraction_for_a_whole_number_answer_gets_the_integer_hint_and_keeps_the_try(client):
    q = Question.objects.get(slug="kv-waste-reserve-count")
    html = submit(client, q, {"value": "3.1"}, "n1").content.decode()
    assert 'data-verdict="error"' in html
    assert ko("Answer with a whole number: this question counts whole things, so round as the question says.") in html
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_whole_number_questions_ask_for_the_digit_keypad(client, lesson):
    page = client.get(lesson.sections.get(slug="appendix-a").get_absolute_url()).content.decode()
    soup = BeautifulSoup(page, "html.parser")
    for q in Question.objects.filter(type="numeric"):
        field = soup.select_one(f"#q-{q.slug} input[name=value]")
        expected = "numeric" if q.public["integer"] else "decimal"
        assert field["inputmode"] == expected, q.slug


def test_a_fractional_answer_keeps_the_decimal_keypad():
    from courseapp.quizzes.loader import split_question

    public, _, _ = split_question({"id": "ratio", "type": "numeric", "answer": 0.99, "tolerance": 0.01})
    assert public["integer"] is False
    public, _, _ = split_question({"id": "count", "type": "numeric", "answer": 12})
    assert public["integer"] is True


# --- own words, checked by a rubric ----------------------------------------------------------


@pytest.mark.django_db
def test_the_model_answer_meets_its_own_rubric_and_a_blank_guess_does_not():
    q = Question.objects.get(slug="throughput-explain")
    assert grade_short(q.key, {"text": q.key["model_answer"]}).score == 1.0
    assert grade_short(q.key, {"text": "잘 모르겠어요"}).score == 0.0
    wrong_idea = grade_short(q.key, {"text": "연속 배칭 덕분에 내 질문 하나도 훨씬 빨리 끝난다"})
    assert wrong_idea.score < 0.5


@pytest.mark.django_db
@pytest.mark.parametrize("text", [
    "한 건도 훨씬 빨라지고, 서버 전체 처리량도 늘어난다. 놀던 빈자리를 다른 요청으로 채우니까.",
    "내 질문 하나가 더 빨리 끝나. 처리량이 늘고 GPU가 놀던 자리를 채우거든.",
    "요청 하나의 속도가 빨라집니다. 같은 시간에 처리하는 양도 많아집니다.",
])
def test_an_answer_that_states_the_misconception_gets_no_credit_whatever_else_it_names(text):
    q = Question.objects.get(slug="throughput-explain")
    grade = grade_short(q.key, {"text": text})
    assert grade.score == 0.0 and grade.detail["ideas"][0]["contradicted"]


@pytest.mark.django_db
@pytest.mark.parametrize("text", [
    "내 질문 하나는 빨라지지 않아. 대신 서버 전체 처리량이 늘어. 놀던 빈자리를 다른 요청으로 채우니까.",
    "한 건의 속도는 그대로고 같은 시간에 끝내는 양이 많아진다. GPU가 쉬는 시간을 다른 요청으로 채운다.",
])
def test_a_right_answer_in_other_words_keeps_full_credit(text):
    q = Question.objects.get(slug="throughput-explain")
    assert grade_short(q.key, {"text": text}).score == 1.0


@pytest.mark.django_db
def test_an_own_words_answer_lists_the_ideas_found_and_shows_the_model_answer_at_the_reveal(client):
    q = Question.objects.get(slug="throughput-explain")
    partial = "서버 전체 처리량이 늘어난다."
    html = submit(client, q, {"text": partial}, "n1").content.decode()
    ideas = BeautifulSoup(html, "html.parser").select(".rubric li")
    assert [li["data-idea"] for li in ideas].count("found") == 1 and len(ideas) == 3
    assert feedback(html)["data-verdict"] == "partial"
    assert escape(q.key["model_answer"][:30]) not in html  # not before the reveal
    second = submit(client, q, {"text": partial}, "n2").content.decode()
    assert escape(q.key["model_answer"][:30]) in second


@pytest.mark.django_db
def test_the_own_words_card_says_how_it_is_graded(client, lesson):
    page = client.get(lesson.sections.get(slug="appendix-a").get_absolute_url()).content.decode()
    card = BeautifulSoup(page, "html.parser").select_one("#q-throughput-explain")
    assert card.select_one("textarea[name=text]") is not None
    assert "model answer" in card.get_text() or "모범 답안" in card.get_text()


@pytest.mark.django_db
def test_every_question_can_be_answered_right_through_the_form(client):
    """Each item's key is reachable from the page: no question is impossible to get right."""
    for n, q in enumerate(Question.objects.all()):
        html = submit(client, q, right_form(q), f"right-{n}").content.decode()
        assert 'data-verdict="correct"' in html, q.slug


# --- the note on the chosen wrong option, and the reveal after a right answer -----------------


@pytest.mark.django_db
def test_a_first_wrong_pick_with_a_note_shows_that_note_and_only_that_note(client):
    """The first try keeps the key back but explains the option the learner chose (its note from
    the question file), not the other options' notes."""
    q = next(q for q in Question.objects.filter(type="single").order_by("order")
             if len([c for c in q.choice_feedback if c != q.key["answer"]]) >= 2)
    picked, other = [c for c in q.choice_feedback if c != q.key["answer"]][:2]
    html = submit(client, q, {"choice": shown_id(q, "choice", picked)}, "n1").content.decode()
    soup = BeautifulSoup(html, "html.parser")
    assert feedback(html)["data-verdict"] == "wrong" and soup.select_one(".reveal") is None
    note = soup.select_one(".choice-note")
    assert note is not None and note.get_text(strip=True) == q.choice_feedback[picked].strip()
    assert escape(q.choice_feedback[other][:40]) not in html


@pytest.mark.django_db
@pytest.mark.parametrize("qtype", ["single", "multi", "numeric", "short", "ordering", "matching"])
def test_a_right_first_answer_reveals_the_key_at_once(client, qtype):
    from courseapp.quizzes.selectors import reveal_answer

    q = Question.objects.filter(type=qtype).order_by("order").first()
    html = submit(client, q, right_form(q), "n1").content.decode()
    assert feedback(html)["data-verdict"] == "correct"
    reveal = BeautifulSoup(html, "html.parser").select_one(".reveal")
    assert reveal is not None, "a right answer is told the key (and every option marked) on the first try"
    shown = " ".join(reveal.get_text(" ").split())
    for line in reveal_answer(q).lines:
        assert " ".join(line.split()) in shown, (q.slug, line)
    marks = reveal.select("li.mark")
    if qtype in ("single", "multi", "ordering", "matching"):
        assert marks and all(m.has_attr("data-mark") for m in marks)
        picked = [m for m in marks if m.has_attr("data-chosen")]
        assert picked and all(m["data-mark"] == "right" for m in picked)
