"""The grading API's fast path (issue #11) keeps every behaviour: submissions skip the page
middleware but keep the API's headers, read the question from the process's copy of the lesson
(current after an edit), and stay exactly-once when requests race on one key or one new learner;
the per-token rate limit counts every request once even when many arrive at the same moment."""
import json
import threading

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from courseapp.api import services
from courseapp.api.models import ApiClient, IdempotentAnswer, LearnerIdentity
from courseapp.demo import limits
from courseapp.instructor import services as classes
from courseapp.instructor.models import Membership
from courseapp.lessons.models import Lesson
from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.services import attempt_submit
from tests.answers import api_response


def _token(scope="grade") -> str:
    teacher, _ = classes.instructor_make(username="teacher")
    cohort = classes.cohort_create(instructor=teacher, name="A", lesson=Lesson.objects.get(number=21))
    return ApiClient.issue(name="lms", scope=scope, cohorts=[cohort])[1]


def _post(token: str, body: dict, key: str | None = None, client: Client | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", **({"HTTP_IDEMPOTENCY_KEY": key} if key else {})}
    return (client or Client()).post("/api/v1/submissions", json.dumps(body), content_type="application/json", **headers)


@pytest.mark.django_db
def test_api_operations_skip_the_page_middleware_and_keep_the_api_headers():
    token = _token()
    question = Question.objects.filter(type="single").first()
    browser = Client()
    browser.cookies["django_language"] = "en"  # a page's language choice does not reach the API
    answer = _post(token, {"learner": "a", "question": question.slug, "response": {"choice": "nope"}}, client=browser)
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_response"
    assert answer.json()["error"]["message"] != "That choice is not one of this question's options.", "in Korean"
    assert not answer.cookies, "no session, CSRF or order-seed cookie"
    assert answer["X-Content-Type-Options"] == "nosniff" and answer["X-Frame-Options"] == "DENY"
    assert answer["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert answer["Content-Language"] == settings.LANGUAGE_CODE
    assert Client().get("/api/v1/questions").status_code == 401, "no token, no answer"


@pytest.mark.django_db
def test_pages_and_the_api_docs_still_take_the_page_middleware():
    docs = Client().get("/api/docs/")
    page = Client().get("/lessons/21/s2/")
    for response in (docs, page):
        assert response.status_code == 200
        assert "default-src 'self'" in response["Content-Security-Policy"], "the pages' policy"
    assert "order_seed" in page.cookies, "a page still draws the visitor's option order"
    assert Client().get("/api/v1/nothing-here").status_code == 404


@pytest.mark.django_db
def test_a_new_submission_costs_a_handful_of_statements():
    token = _token()
    question = Question.objects.filter(type="matching").first()
    _post(token, {"learner": "warm", "question": question.slug, "response": api_response(question)}, key="k0")
    from django.db import connection

    with CaptureQueriesContext(connection) as queries:
        answer = _post(token, {"learner": "new", "question": question.slug, "response": api_response(question)}, key="k1")
    assert answer.status_code == 201 and answer.json()["created"]
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) <= 9, statements  # was 20: the page middleware, the ORM's lookups, six savepoints
    with CaptureQueriesContext(connection) as queries:
        again = _post(token, {"learner": "new", "question": question.slug, "response": api_response(question)}, key="k1")
    assert again.json() == answer.json() and len(queries.captured_queries) == 2  # the token, the kept answer


@pytest.mark.django_db
def test_the_question_comes_from_the_current_lesson_after_an_edit():
    token = _token()
    question = Question.objects.filter(type="numeric").first()
    body = {"learner": "n", "question": question.slug, "response": api_response(question)}
    assert _post(token, body).status_code == 201
    old_slug, question.slug = question.slug, f"{question.slug}-renamed"
    question.save()  # in this process: the next request sees it
    assert _post(token, body).json()["error"]["code"] == "question_not_found"
    renamed = _post(token, {**body, "question": question.slug})
    assert renamed.status_code == 201 and renamed.json()["question"] == question.slug != old_slug


@pytest.mark.django_db
def test_a_retry_that_raced_the_first_request_gets_the_first_answer(monkeypatch):
    """The retry read no kept answer (the first had not committed yet), graded, and met the
    first's learner and key when it wrote: it rolls back whole and answers as the first did."""
    token = _token()
    question = Question.objects.filter(type="single").first()
    body = {"learner": "r", "question": question.slug, "response": api_response(question)}
    first = _post(token, body, key="same")
    seen, calls = services.submission_seen, []

    def too_early(**kwargs):
        calls.append(kwargs)
        return services.Seen(None, None) if len(calls) == 1 else seen(**kwargs)

    monkeypatch.setattr(services, "submission_seen", too_early)
    again = _post(token, body, key="same")
    assert len(calls) == 2 and again.status_code == first.status_code == 201 and again.json() == first.json()
    assert Attempt.objects.count() == 1 and IdempotentAnswer.objects.count() == 1 and LearnerIdentity.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_new_learners_attempt_is_written_only_inside_the_transaction_that_made_them():
    from courseapp.learners.models import Learner

    _token()
    question = Question.objects.filter(type="single").first()
    with pytest.raises(ValueError):  # without a transaction there is nothing to roll back on a race
        attempt_submit(learner=Learner.objects.create(), question=question, response=api_response(question),
                       nonce="", new_learner=True)
    assert not Attempt.objects.exists()


def _at_once(count: int, call) -> list:
    """`call(n)` in `count` threads released together; their results (each thread closes its
    database connection)."""
    gate, results = threading.Barrier(count), [None] * count

    def run(n):
        try:
            gate.wait()
            results[n] = call(n)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.django_db(transaction=True)
def test_parallel_retries_of_one_key_write_one_attempt_and_get_one_answer():
    token = _token()
    question = Question.objects.filter(type="ordering").first()
    body = {"learner": "p", "question": question.slug, "response": api_response(question)}
    answers = _at_once(4, lambda n: _post(token, body, key="one-key"))
    assert {a.status_code for a in answers} == {201}
    assert all(a.json() == answers[0].json() for a in answers)
    assert Attempt.objects.count() == 1 and IdempotentAnswer.objects.count() == 1 and LearnerIdentity.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_parallel_first_submissions_of_one_learner_make_one_learner():
    token = _token()
    questions = list(Question.objects.filter(lesson__number=21).order_by("order")[:4])
    answers = _at_once(4, lambda n: _post(token, {"learner": "same-person", "question": questions[n].slug,
                                                  "response": api_response(questions[n])}, key=f"key-{n}"))
    assert [a.status_code for a in answers] == [201] * 4
    assert len({a.json()["learner_id"] for a in answers}) == 1
    assert LearnerIdentity.objects.count() == 1 and Membership.objects.count() == 1 and Attempt.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_the_rate_limit_counts_every_request_once_when_they_arrive_together(settings, monkeypatch, tmp_path):
    """Counted in files shared by the server's processes (as `make run` serves), under a lock:
    none is lost."""
    from django.core.cache.backends.filebased import FileBasedCache

    files = FileBasedCache(str(tmp_path), {})
    monkeypatch.setattr(limits, "_cache", lambda: files)
    token = _token()
    settings.GRADING_API_RATE_PER_MINUTE = 5
    statuses = _at_once(8, lambda n: Client().get("/api/v1/questions", HTTP_AUTHORIZATION=f"Bearer {token}").status_code)
    assert sorted(statuses) == [200] * 5 + [429] * 3
    client = ApiClient.objects.get()
    assert limits.over(key=f"api:{client.pk}", limit=5, window=60)


@pytest.mark.django_db
def test_a_token_in_use_is_marked_used_at_most_once_a_minute():
    token = _token(scope="read")
    client = ApiClient.objects.get()
    assert client.last_used_at is None
    assert Client().get("/api/v1/questions", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    client.refresh_from_db()
    first = client.last_used_at
    assert first is not None
    Client().get("/api/v1/questions", HTTP_AUTHORIZATION=f"Bearer {token}")
    client.refresh_from_db()
    assert client.last_used_at == first, "not again within the minute"


@pytest.mark.django_db
def test_a_nul_character_is_refused_not_a_server_error():
    """PostgreSQL's text cannot hold NUL: such input gets 422 on every backend, never a 500."""
    token = _token()
    question, short = Question.objects.filter(type="single").first(), Question.objects.filter(type="short").first()
    assert _post(token, {"learner": "a\x00b", "question": question.slug, "response": api_response(question)}).status_code == 422
    listed = Client().get("/api/v1/questions", {"objective": "kv\x00"}, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert listed.status_code == 422
    typed = _post(token, {"learner": "x", "question": short.slug, "response": {"text": "블록\x00"}})
    assert typed.status_code == 422 and typed.json()["error"]["code"] == "invalid_response"
    assert not Attempt.objects.exists()
