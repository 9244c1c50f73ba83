"""The quiz grading API (`/api/v1/…`, OpenAPI 3 at `/api/schema/`, browsable docs at `/api/docs/`):
other systems list the lesson's questions and grade answers with the same rules as the pages.

Every call carries `Authorization: Bearer <token>` (`manage.py create_api_token`); a token sees
only its classes. Errors have one shape, `{"error": {"code", "message", "details"}}`. Questions
come without answers or explanations; option ids are the same opaque ids the pages use.
"""
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError
from django.db.models import Q
from django.http import Http404
from ninja import Header, NinjaAPI, Path, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.pagination import PageNumberPagination, paginate
from ninja.security import HttpBearer
from pydantic import Field

from courseapp.api import services
from courseapp.api.models import LearnerIdentity
from courseapp.api.services import Problem
from courseapp.demo import limits
from courseapp.instructor.models import Membership
from courseapp.lessons.outline import outline_get
from courseapp.quizzes import presenting
from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.responses import ResponseError, validate
from courseapp.quizzes.selectors import anchor_label, anchor_url, attempts_count, reveal_answer
from courseapp.quizzes.services import attempt_submit


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        client = services.client_authenticate(token=token)
        if client is not None and not limits.hit(key=f"api:{client.pk}", limit=settings.GRADING_API_RATE_PER_MINUTE, window=60):
            raise Problem(429, "rate_limited", f"At most {settings.GRADING_API_RATE_PER_MINUTE} requests a minute per token.",
                          retry_after=60)
        return client


api = NinjaAPI(title="Lesson 21 quiz grading API", version="1", urls_namespace="grading_api", auth=TokenAuth(),
               openapi_url="/schema/", docs_url="/docs/")


def _error(request, status: int, code: str, message: str, details=None, retry_after: int | None = None):
    response = api.create_response(request, {"error": {"code": code, "message": message, "details": details}}, status=status)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


@api.exception_handler(Problem)
def _problem(request, exc: Problem):
    return _error(request, exc.status, exc.code, exc.message, exc.details, exc.retry_after)


@api.exception_handler(ValidationError)
def _invalid(request, exc: ValidationError):
    return _error(request, 422, "invalid_request", "The request does not match the schema.", exc.errors)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    return _error(request, 401, "unauthenticated", "Send a valid token: Authorization: Bearer <token>.")


@api.exception_handler(HttpError)
def _http(request, exc: HttpError):
    return _error(request, exc.status_code, "http_error", str(exc))


@api.exception_handler(Http404)
def _not_found(request, exc):
    return _error(request, 404, "not_found", "Not found.")


# --- schemas ------------------------------------------------------------------------------------
class Option(Schema):
    id: str
    text: str


class QuestionOut(Schema):
    id: str = Field(description="the question's slug: what a submission names")
    type: str = Field(description="single | multi | numeric | short | ordering | matching")
    prompt: str
    objective: str
    section: str = Field(description="the lesson anchor it is about, e.g. s2-2")
    choices: list[Option] | None = None
    items: list[Option] | None = None
    left: list[Option] | None = None
    right: list[Option] | None = None
    unit: str | None = None


NO_NUL = r"^[^\x00]*$"  # PostgreSQL's text cannot hold NUL: refused here, not a 500 there


class SubmissionIn(Schema):
    learner: str = Field(min_length=1, max_length=255, pattern=NO_NUL, description="your id for the learner")
    question: str = Field(min_length=1, max_length=100, pattern=NO_NUL, description="a question id from /questions")
    response: dict = Field(description='by type: {"choice": id} · {"choices": [ids]} · {"value": "42"} · '
                                       '{"text": "…"} · {"order": [ids]} · {"pairs": {left id: right id}}')
    class_id: int | None = Field(None, ge=1, le=2**63 - 1, description="needed only when the token has several classes")


class Citation(Schema):
    anchor: str
    label: str
    url: str


class SubmissionOut(Schema):
    attempt_id: int
    learner_id: int
    question: str
    score: float
    max_score: float = 1.0
    correct: bool
    feedback: dict
    sections: list[Citation]
    may_reveal: bool = Field(description="true after a right answer or a second try, as on the pages")
    answer: list[str] | None = Field(None, description="the key in words, when may_reveal")
    created: bool = Field(description="false: this nonce or key was graded before; the same attempt is returned")


class GradebookRow(Schema):
    learner_id: int
    external_id: str | None
    class_id: int
    scores: dict[str, float] = Field(description="question id → the latest attempt's score")
    mean: float = Field(description="over every question of the lesson; unanswered counts 0")


class AttemptOut(Schema):
    id: int
    question: str
    score: float
    response: dict
    created_at: datetime


class ErrorBody(Schema):
    code: str
    message: str
    details: object | None = None


class ErrorOut(Schema):
    error: ErrorBody


ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut, 429: ErrorOut}


# --- helpers ------------------------------------------------------------------------------------
def _classes(request) -> list[services.TokenClass]:
    """The token's classes (read with the token: services.client_authenticate)."""
    return request.auth.classes


def _lesson_questions(request):
    lessons = {c.lesson_id for c in _classes(request)}
    return Question.objects.filter(lesson_id__in=lessons).select_related("objective", "lesson").order_by("lesson__number", "order", "pk")


_by_slug: dict[int, tuple[object, dict]] = {}  # lesson number → (its outline, {slug: question})


def _question(request, slug: str) -> Question | None:
    """The question `slug` of one of the token's lessons, from this process's copy of the lesson
    (lessons/outline.py: current within OUTLINE_RECHECK_SECONDS, with its lesson attached);
    a lesson that is not published is asked of the database."""
    for c in _classes(request):
        try:
            outline = outline_get(number=c.lesson_number)
        except Http404:
            question = Question.objects.select_related("lesson").filter(lesson_id=c.lesson_id, slug=slug).first()
        else:
            kept = _by_slug.get(c.lesson_number)
            if kept is None or kept[0] is not outline:
                kept = _by_slug[c.lesson_number] = (outline, {q.slug: q for q in outline.questions})
            question = kept[1].get(slug)
        if question is not None:
            return question
    return None


def _question_out(question: Question) -> dict:
    public = presenting.shown(question, seed="api")
    return {"id": question.slug, "type": question.type, "prompt": question.prompt, "objective": question.objective.slug,
            "section": question.anchor, **{g: public.get(g) for g in ("choices", "items", "left", "right")},
            "unit": public.get("unit")}


def _authored(question: Question, response: dict) -> dict:
    """The response with the opaque ids /questions showed turned back into authored ids."""
    def ids(group):
        return presenting.raw_ids(question, group)

    try:
        if question.type == "single" and response.get("choice") is not None:
            return {"choice": ids("choices").get(response["choice"], "?")}
        if question.type == "multi":
            return {"choices": [ids("choices").get(c, "?") for c in response.get("choices") or []]}
        if question.type == "ordering":
            return {"order": [ids("items").get(i, "?") for i in response.get("order") or []]}
        if question.type == "matching":
            left, right = ids("left"), ids("right")
            return {"pairs": {left.get(k, "?"): right.get(v, "?") if v else "" for k, v in (response.get("pairs") or {}).items()}}
    except (AttributeError, TypeError):
        raise Problem(422, "invalid_response", "The response does not have this question type's shape.") from None
    return response


def _shown(question: Question, response: dict) -> dict:
    """A stored response (authored ids) with the opaque ids /questions shows."""
    def opaque(kind, raw):
        return presenting.opaque_id(question.slug, kind, raw) if raw else raw

    if question.type == "single":
        return {"choice": opaque("choice", response.get("choice"))}
    if question.type == "multi":
        return {"choices": [opaque("choice", c) for c in response.get("choices", [])]}
    if question.type == "ordering":
        return {"order": [opaque("item", i) for i in response.get("order", [])]}
    if question.type == "matching":
        return {"pairs": {opaque("left", k): opaque("right", v) for k, v in response.get("pairs", {}).items()}}
    return response


def _only(request, *names: str) -> None:
    """A query parameter this operation does not know, or one given twice, is refused: a misspelt
    filter (`?objectve=`) would otherwise quietly return everything."""
    unknown = sorted(set(request.GET) - {"page", "page_size", *names})
    if unknown:
        raise Problem(422, "unknown_parameter", f"Unknown query parameter(s): {', '.join(unknown)[:200]}.",
                      details=unknown[:10])
    repeated = sorted(name for name in request.GET if len(request.GET.getlist(name)) > 1)
    if repeated:
        raise Problem(422, "repeated_parameter", f"Give each query parameter once: {', '.join(repeated)}.")


def _cohort_for_submission(request, class_id: int | None) -> services.TokenClass:
    cohorts = _classes(request)
    if class_id is not None:
        for cohort in cohorts:
            if cohort.pk == class_id:
                return cohort
        raise Problem(404, "class_not_found", f"This token has no class {class_id}.")
    if len(cohorts) != 1:
        raise Problem(400, "class_required", "This token has several classes: say which with class_id.",
                      details=[c.pk for c in cohorts])
    return cohorts[0]


# --- endpoints ----------------------------------------------------------------------------------
@api.get("/v1/questions", response={200: list[QuestionOut], **ERRORS}, summary="The lesson's questions, without answers")
@paginate(PageNumberPagination, page_size=settings.GRADING_API_PAGE_SIZE)
def questions(request, objective: str | None = Query(None, pattern=NO_NUL), section: str | None = Query(None, pattern=NO_NUL)):
    _only(request, "objective", "section")
    found = _lesson_questions(request)
    if objective:
        found = found.filter(objective__slug=objective)
    if section:
        found = found.filter(Q(anchor=section) | Q(anchor__startswith=f"{section}-"))
    return [_question_out(q) for q in found]


@api.post("/v1/submissions", response={200: SubmissionOut, 201: SubmissionOut, **ERRORS}, summary="Grade one answer")
def submit(request, body: SubmissionIn, key: str | None = Header(
        None, alias="Idempotency-Key", min_length=1, max_length=255,
        description="a retry with the same key and body gets the same answer")):
    """Everything is read and checked first; then learner, attempt and kept answer are written in
    one short transaction (on SQLite it holds the write lock: nothing else runs inside it). If a
    parallel request made the same learner or kept the same key meanwhile, that transaction rolls
    back whole and the request looks again: it then finds the other's learner, or its answer."""
    client = request.auth
    if client.scope != client.Scope.GRADE:
        raise Problem(403, "scope", "This token may read only; grading needs a token made with --scope grade.")
    digest = services.body_hash(body.dict()) if key else ""
    for tries_left in reversed(range(3)):
        seen = services.submission_seen(client=client, key=key, external_id=body.learner)
        if seen.kept is not None:  # a retry gets the answer kept for its key; another body under it, 409
            status, kept_digest, data = seen.kept
            if kept_digest != digest:
                raise Problem(409, "idempotency_key_reused", "This Idempotency-Key was used with a different request body.")
            return Status(status, data)
        question = _question(request, body.question)
        if question is None:
            raise Problem(404, "question_not_found", f"No question {body.question!r} in this token's lessons.")
        cohort = _cohort_for_submission(request, body.class_id)
        try:
            response = validate(question, _authored(question, body.response))
        except ResponseError as exc:
            raise Problem(422, "invalid_response", str(exc)) from None
        try:
            with services.write_transaction():
                learner, new = seen.learner, seen.learner is None
                if new:
                    learner = services.learner_make(client=client, external_id=body.learner, cohort_id=cohort.pk)
                else:  # a learner this client made for another of its classes joins the one it names
                    services.membership_ensure(learner=learner, cohort_id=cohort.pk)
                attempt, created = attempt_submit(learner=learner, question=question, response=response,
                                                  nonce=f"api:{client.pk}:{key}" if key else "", new_learner=new)
                # a new learner's only attempt is this one
                may_reveal = attempt.is_correct or (not new and attempts_count(learner=learner, question=question) >= 2)
                status, data = (201 if created else 200), _graded(request, question, learner, attempt, created, may_reveal)
                if key:
                    services.answer_keep(client=client, key=key, digest=digest, status=status, body=data)
            return Status(status, data)
        except IntegrityError:
            if not tries_left:
                raise


def _graded(request, question: Question, learner, attempt: Attempt, created: bool, may_reveal: bool) -> dict:
    return {
        "attempt_id": attempt.pk, "learner_id": learner.pk, "question": question.slug, "score": attempt.score,
        "max_score": 1.0, "correct": attempt.is_correct, "feedback": attempt.feedback,
        "sections": [{"anchor": question.anchor, "label": anchor_label(question.anchor),
                      "url": request.build_absolute_uri(anchor_url(question.lesson, question.anchor))}],
        "may_reveal": may_reveal, "answer": reveal_answer(question).lines if may_reveal else None, "created": created}


@api.get("/v1/gradebook", response={200: list[GradebookRow], **ERRORS}, summary="Latest scores of every learner in the token's classes")
@paginate(PageNumberPagination, page_size=settings.GRADING_API_PAGE_SIZE)
def gradebook(request, class_id: int | None = Query(None, ge=1, le=2**63 - 1)):
    from courseapp.learners.selectors import scores_by_learner

    _only(request, "class_id")
    cohorts = _classes(request)
    if class_id is not None:
        cohorts = [c for c in cohorts if c.pk == class_id]
        if not cohorts:
            raise Problem(404, "class_not_found", f"This token has no class {class_id}.")
    memberships = list(Membership.objects.filter(cohort_id__in=[c.pk for c in cohorts]).select_related("cohort")
                       .order_by("cohort_id", "pk"))
    questions = {q.pk: q for q in Question.objects.filter(lesson_id__in={c.lesson_id for c in cohorts})}
    scores = scores_by_learner([m.learner_id for m in memberships], list(questions), "latest")
    external = {i.learner_id: i.external_id for i in
                LearnerIdentity.objects.filter(source=f"client:{request.auth.pk}", learner_id__in=[m.learner_id for m in memberships])}
    rows = []
    for m in memberships:
        lesson_questions = [q for q in questions.values() if q.lesson_id == m.cohort.lesson_id]
        mine = scores.get(m.learner_id, {})
        rows.append({"learner_id": m.learner_id, "external_id": external.get(m.learner_id), "class_id": m.cohort_id,
                     "scores": {questions[q].slug: s for q, s in mine.items() if questions[q].lesson_id == m.cohort.lesson_id},
                     "mean": sum(mine.get(q.pk, 0.0) for q in lesson_questions) / len(lesson_questions) if lesson_questions else 0.0})
    return rows


@api.get("/v1/learners/{learner_id}/attempts", response={200: list[AttemptOut], **ERRORS}, summary="One learner's attempts, newest first")
@paginate(PageNumberPagination, page_size=settings.GRADING_API_PAGE_SIZE)
def learner_attempts(request, learner_id: int = Path(..., ge=1, le=2**63 - 1)):
    _only(request)
    if not Membership.objects.filter(cohort_id__in=[c.pk for c in _classes(request)], learner_id=learner_id).exists():
        raise Problem(404, "learner_not_found", "No learner with this id in this token's classes.")
    return [{"id": a.pk, "question": a.question.slug, "score": a.score, "response": _shown(a.question, a.response),
             "created_at": a.created_at}
            for a in Attempt.objects.filter(learner_id=learner_id).select_related("question").order_by("-created_at", "-pk")]
