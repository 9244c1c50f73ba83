"""The quiz grading API as another system uses it: tokens and their classes, questions without
answers, grading every question type, retries with Idempotency-Key, one error shape."""
import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from courseapp.api.models import ApiClient, IdempotentAnswer
from courseapp.instructor import services as classes
from courseapp.quizzes.models import Attempt, Question
from tests.answers import api_response

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_classes(lesson):
    teacher, _ = classes.instructor_make(username="teacher")
    return (classes.cohort_create(instructor=teacher, name="A", lesson=lesson),
            classes.cohort_create(instructor=teacher, name="B", lesson=lesson))


def api(token: str | None):
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def call(method, path, body=None, **extra):
        if body is None:
            return getattr(client, method)(f"/api/v1/{path}", **headers, **extra)
        return getattr(client, method)(f"/api/v1/{path}", json.dumps(body), content_type="application/json", **headers, **extra)

    return call


def token_for(*cohorts, scope="grade") -> str:
    return ApiClient.issue(name="lms", scope=scope, cohorts=cohorts)[1]


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def test_questions_come_without_answers_paginated_and_filtered(two_classes):
    call = api(token_for(two_classes[0], scope="read"))
    page = call("get", "questions").json()
    assert page["count"] == Question.objects.count() and len(page["items"]) == min(50, page["count"])
    text = json.dumps(page, ensure_ascii=False)
    for question in Question.objects.all():
        assert question.explanation[:40] not in text or not question.explanation
        for choice in question.public.get("choices", []):
            assert f'"id": "{choice["id"]}"' not in text, "authored ids stay on the server"
    assert all(set(q) >= {"id", "type", "prompt", "objective", "section"} and "answer" not in q for q in page["items"])
    only = call("get", "questions", data={"objective": "kv-waste"}).json()
    assert only["count"] > 0 and all(q["objective"] == "kv-waste" for q in only["items"])
    section = call("get", "questions", data={"section": "s1"}).json()
    assert section["count"] > 0 and all(q["section"].split("-")[0] == "s1" for q in section["items"])


def test_every_question_type_is_graded_as_on_the_pages(two_classes):
    call = api(token_for(two_classes[0]))
    seen = set()
    for question in Question.objects.order_by("order"):
        if question.type in seen:
            continue
        seen.add(question.type)
        wrong = call("post", "submissions", {"learner": f"w-{question.type}", "question": question.slug,
                                             "response": api_response(question, right=False)})
        assert wrong.status_code == 201 and wrong.json()["score"] < 1 and not wrong.json()["may_reveal"], question.slug
        assert wrong.json()["answer"] is None, "the key stays hidden after one wrong try"
        right = call("post", "submissions", {"learner": f"r-{question.type}", "question": question.slug,
                                             "response": api_response(question)})
        body = right.json()
        assert right.status_code == 201 and body["score"] == 1.0 and body["correct"] and body["may_reveal"], question.slug
        assert body["sections"][0]["anchor"] == question.anchor and body["sections"][0]["url"].endswith(f"#{question.anchor}")
    assert seen == {"single", "multi", "numeric", "short", "ordering", "matching"}


def test_a_retry_with_the_same_key_gets_the_same_answer_and_another_body_409(two_classes):
    call = api(token_for(two_classes[0]))
    question = Question.objects.filter(type="single").first()
    body = {"learner": "s-1", "question": question.slug, "response": api_response(question)}
    first = call("post", "submissions", body, HTTP_IDEMPOTENCY_KEY="try-1")
    again = call("post", "submissions", body, HTTP_IDEMPOTENCY_KEY="try-1")
    assert again.json() == first.json() and Attempt.objects.count() == 1
    other = call("post", "submissions", {**body, "learner": "s-2"}, HTTP_IDEMPOTENCY_KEY="try-1")
    assert other.status_code == 409 and error_of(other)["code"] == "idempotency_key_reused"
    assert Attempt.objects.count() == 1 and IdempotentAnswer.objects.count() == 1
    fresh = call("post", "submissions", body, HTTP_IDEMPOTENCY_KEY="try-2")
    assert fresh.json()["attempt_id"] != first.json()["attempt_id"] and Attempt.objects.count() == 2


def test_a_key_is_one_clients_another_client_sending_the_same_key_gets_its_own_answer(two_classes):
    """Mutant (issue #34): the kept answer looked up by key alone, not by client."""
    question = Question.objects.filter(type="single").first()
    in_a, in_b = api(token_for(two_classes[0])), api(token_for(two_classes[1]))
    first = in_a("post", "submissions", {"learner": "s-1", "question": question.slug,
                                         "response": api_response(question, right=False)}, HTTP_IDEMPOTENCY_KEY="sub-0001")
    other = in_b("post", "submissions", {"learner": "t-9", "question": question.slug,
                                         "response": api_response(question)}, HTTP_IDEMPOTENCY_KEY="sub-0001")
    assert first.status_code == other.status_code == 201
    assert other.json()["learner_id"] != first.json()["learner_id"] and other.json()["score"] == 1.0
    assert Attempt.objects.count() == 2 and IdempotentAnswer.objects.count() == 2


def test_a_two_class_tokens_gradebook_names_one_class_only(two_classes):
    """Mutant (issue #34): `?class_id=` of a two-class token returning every class's rows."""
    a, b = two_classes
    both = api(token_for(a, b))
    question = Question.objects.filter(type="single").first()
    for learner, cohort in (("only-a", a), ("only-b", b)):
        assert both("post", "submissions", {"learner": learner, "question": question.slug, "class_id": cohort.pk,
                                            "response": api_response(question)}).status_code == 201
    assert [row["external_id"] for row in both("get", "gradebook", data={"class_id": a.pk}).json()["items"]] == ["only-a"]
    assert [row["external_id"] for row in both("get", "gradebook", data={"class_id": b.pk}).json()["items"]] == ["only-b"]


def test_a_token_sees_only_its_classes(two_classes):
    a, b = two_classes
    in_a, in_b = api(token_for(a)), api(token_for(b))
    question = Question.objects.filter(type="matching").first()
    learner_b = in_b("post", "submissions", {"learner": "bee", "question": question.slug,
                                             "response": api_response(question)}).json()["learner_id"]
    in_a("post", "submissions", {"learner": "ant", "question": question.slug, "response": api_response(question)})
    book = in_a("get", "gradebook").json()
    assert [row["external_id"] for row in book["items"]] == ["ant"] and book["items"][0]["scores"] == {question.slug: 1.0}
    assert in_a("get", f"learners/{learner_b}/attempts").status_code == 404, "another class's learner"
    assert error_of(in_a("get", "gradebook", data={"class_id": b.pk}))["code"] == "class_not_found"
    attempts = in_b("get", f"learners/{learner_b}/attempts").json()["items"]
    assert len(attempts) == 1 and attempts[0]["response"] == api_response(question), "the ids /questions showed"


def test_a_two_class_token_files_a_known_learners_grade_under_the_class_it_names(two_classes):
    a, b = two_classes
    both = api(token_for(a, b))
    question = Question.objects.filter(type="single").first()
    first = both("post", "submissions", {"learner": "ana", "question": question.slug, "class_id": a.pk,
                                         "response": api_response(question, right=False)})
    second = both("post", "submissions", {"learner": "ana", "question": question.slug, "class_id": b.pk,
                                          "response": api_response(question)})
    assert first.status_code == second.status_code == 201
    assert second.json()["learner_id"] == first.json()["learner_id"], "one learner, known to the client as ana"
    in_b = both("get", "gradebook", data={"class_id": b.pk}).json()["items"]
    assert [(row["external_id"], row["scores"]) for row in in_b] == [("ana", {question.slug: 1.0})]
    assert error_of(both("post", "submissions", {"learner": "ana", "question": question.slug, "class_id": 999_999,
                                                 "response": api_response(question)}))["code"] == "class_not_found"


def test_errors_use_one_shape_and_the_right_status(two_classes, settings):
    a, b = two_classes
    question = Question.objects.filter(type="single").first()
    good = {"learner": "x", "question": question.slug, "response": api_response(question)}
    assert error_of(api(None)("get", "questions"))["code"] == "unauthenticated"
    assert api("gk_not-a-token")("get", "questions").status_code == 401
    reader = api(token_for(a, scope="read"))
    assert reader("post", "submissions", good).status_code == 403
    both = api(token_for(a, b))
    assert error_of(both("post", "submissions", good))["code"] == "class_required"
    grader_token = token_for(a)
    grader = api(grader_token)
    assert grader("post", "submissions", {**good, "question": "nope"}).status_code == 404
    assert error_of(grader("post", "submissions", {**good, "response": {"choice": "zzz"}}))["code"] == "invalid_response"
    for odd in ({"choice": []}, {"choice": {"a": 1}}, {"choice": 7}):  # JSON that is no option id (was a 500)
        assert error_of(grader("post", "submissions", {**good, "response": odd}))["code"] == "invalid_response", odd
    assert grader("post", "submissions", {"learner": "", "question": question.slug, "response": {}}).status_code == 422
    assert error_of(grader("get", "questions?objectve=kv-waste"))["code"] == "unknown_parameter", "a misspelt filter"
    assert error_of(grader("get", "questions?section=s1&section=s2"))["code"] == "repeated_parameter"
    assert grader("get", f"learners/{2**70}/attempts").status_code == 422, "an id past the database's integers"
    ApiClient.objects.get(token_hint=grader_token[:10]).revoke()
    assert grader("get", "questions").status_code == 401, "a revoked token"
    settings.GRADING_API_RATE_PER_MINUTE = 2
    limited = api(token_for(b))
    limited("get", "questions"), limited("get", "questions")
    refused = limited("get", "questions")
    assert refused.status_code == 429 and refused["Retry-After"] == "60"


def test_errors_no_operation_answers_are_in_the_same_json_shape(two_classes):
    grader = api(token_for(two_classes[0]))
    question = Question.objects.filter(type="short").first()
    big = grader("post", "submissions", {"learner": "x", "question": question.slug, "response": {"text": "가" * 20_000}})
    assert big.status_code == 413 and error_of(big)["code"] == "body_too_large"
    wrong_method = grader("delete", "questions")
    assert wrong_method.status_code == 405 and error_of(wrong_method)["code"] == "method_not_allowed"
    assert "GET" in wrong_method["Allow"]
    for path in ("nope", "questions/extra/", f"learners/{'9' * 25}/attempts/x"):
        missing = grader("get", path)
        assert missing.status_code == 404 and error_of(missing)["code"] == "not_found", path
    assert not Attempt.objects.exists()


def test_create_api_token_prints_it_once_and_keeps_only_its_hash(two_classes):
    a, _b = two_classes
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "moodle", "--scope", "grade", "--class", str(a.pk), stdout=out, stderr=err)
    token = out.getvalue().strip()
    client = ApiClient.objects.get(name="moodle")
    assert token.startswith("gk_") and token not in json.dumps(list(ApiClient.objects.values()), default=str)
    assert client.token_hint == token[:10] and list(client.cohorts.all()) == [a] and "once" in err.getvalue()
    assert api(token)("get", "questions").status_code == 200
    schema = Client().get("/api/schema/").json()
    assert {"/api/v1/questions", "/api/v1/submissions", "/api/v1/gradebook"} <= set(schema["paths"])


def test_a_learners_attempts_show_every_types_response_in_the_ids_questions_gave(two_classes):
    """What a learner sent, read back from /learners/{id}/attempts, is what /questions let the
    client send (opaque ids, never the authored ones), for each question type."""
    call = api(token_for(two_classes[0]))
    sent = {}
    for question in Question.objects.order_by("order"):
        if question.type in sent:
            continue
        sent[question.type] = api_response(question, right=False)
        answer = call("post", "submissions", {"learner": "reader", "question": question.slug, "response": sent[question.type]})
        assert answer.status_code == 201, answer.content
        learner = answer.json()["learner_id"]
    attempts = call("get", f"learners/{learner}/attempts").json()["items"]
    shown = {Question.objects.get(slug=a["question"]).type: a["response"] for a in attempts}
    assert set(shown) == {"single", "multi", "numeric", "short", "ordering", "matching"}
    assert float(shown.pop("numeric")["value"]) == float(sent.pop("numeric")["value"]), "a number, stored as one"
    assert shown == sent
