"""Splitting a question file entry into what the page shows and what only the grader reads."""
import hashlib

import pytest

from courseapp.quizzes.loader import QuestionFileError, split_question
from courseapp.quizzes.models import Question
from courseapp.quizzes.presenting import opaque_id, shown

ORDERING = {
    "id": "steps",
    "type": "ordering",
    "items": [{"id": "1", "text": "first"}, {"id": "2", "text": "second"}, {"id": "3", "text": "third"}, {"id": "4", "text": "fourth"}],
}


def test_ordering_is_shown_in_an_order_that_is_not_the_answer():
    public, key, _ = split_question(ORDERING)
    assert [i["id"] for i in public["items"]] != key["order"]
    assert sorted(i["id"] for i in public["items"]) == sorted(key["order"])


def test_ids_the_page_sees_do_not_reveal_the_raw_ids():
    public, _, _ = split_question(ORDERING)
    page = shown(Question(slug="steps", type="ordering", public=public), seed="0" * 32)
    assert {i["id"] for i in page["items"]}.isdisjoint({"1", "2", "3", "4"})
    assert [i["text"] for i in page["items"]] == [i["text"] for i in public["items"]]  # the loader's order


def test_shown_ids_are_keyed_with_the_server_secret_and_scoped_to_the_question(settings):
    first = opaque_id("steps", "item", "1")
    assert first != opaque_id("other-question", "item", "1")
    assert first != hashlib.sha256(b"steps/item/1").hexdigest()[: len(first)]
    settings.SECRET_KEY = "another-secret-" + "x" * 40
    assert opaque_id("steps", "item", "1") != first


def test_split_is_stable_across_loads():
    assert split_question(ORDERING) == split_question(ORDERING)


def test_single_choice_key_is_not_in_public():
    data = {"id": "q", "type": "single", "choices": [{"id": "a", "text": "A"}, {"id": "b", "text": "B"}], "answer": "b"}
    public, key, _ = split_question(data)
    assert "answer" not in public
    assert key["answer"] in {c["id"] for c in public["choices"]}


@pytest.mark.parametrize(
    "data,message",
    [
        ({"id": "q", "type": "single", "choices": [{"id": "a", "text": "A"}], "answer": "z"}, "does not exist"),
        ({"id": "q", "type": "essay"}, "unknown type"),
        ({"id": "q", "type": "numeric"}, "needs answer"),
        ({"id": "q", "type": "matching", "left": [{"id": "l", "text": "L"}], "right": [{"id": "r", "text": "R"}], "answer": {}}, "pair every"),
        ({"id": "q", "type": "ordering", "items": [{"id": "a", "text": "A"}, {"id": "a", "text": "B"}, {"id": "c", "text": "C"}]}, "duplicate"),
        ({"id": "q", "type": "short", "rubric": [{"label": "처리량", "patterns": ["처리량"]}]}, "model_answer"),
        ({"id": "q", "type": "short", "rubric": [{"label": "처리량", "patterns": ["(처리량"]}], "model_answer": "처리량"}, "rubric pattern"),
        ({"id": "q", "type": "short", "rubric": [], "model_answer": "처리량"}, "label and patterns"),
        ({"id": "q", "type": "short", "answers": []}, "accepted answer"),
    ],
)
def test_broken_entries_are_refused_with_the_question_id(data, message):
    with pytest.raises(QuestionFileError, match=message):
        split_question(data)


@pytest.mark.django_db
def test_matching_whose_sides_reuse_an_id_is_graded_and_revealed_by_side(client):
    from django.urls import reverse

    from courseapp.quizzes.selectors import reveal_answer
    from tests.answers import right_form
    from tests.factories import ObjectiveFactory, make_question

    data = {
        "id": "same-ids-match",
        "type": "matching",
        "left": [{"id": "1", "text": "왼쪽 하나"}, {"id": "2", "text": "왼쪽 둘"}],
        "right": [{"id": "1", "text": "오른쪽 하나"}, {"id": "2", "text": "오른쪽 둘"}],
        "answer": {"1": "2", "2": "1"},
    }
    q = make_question(objective=ObjectiveFactory(), data=data)
    assert reveal_answer(q).lines == ["왼쪽 하나 → 오른쪽 둘", "왼쪽 둘 → 오른쪽 하나"]
    response = client.post(reverse("quizzes:submit", args=[q.slug]), {**right_form(q), "nonce": "n"}, HTTP_HX_REQUEST="true")
    assert 'data-verdict="correct"' in response.content.decode()


def test_a_rubric_answer_keeps_its_rubric_and_model_answer_off_the_page():
    data = {"id": "q", "type": "short", "rubric": [{"label": "처리량", "patterns": ["처리량"]}], "model_answer": "처리량이 는다"}
    public, key, _ = split_question(data)
    assert public == {"long": True, "ideas": 1}
    assert key["model_answer"] == "처리량이 는다" and key["rubric"][0]["patterns"] == ["처리량"]
