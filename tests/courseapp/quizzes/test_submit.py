"""Submitting a self-check: grading, feedback that cites the section, bad input, double submits."""
import pytest
from bs4 import BeautifulSoup
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from courseapp.learners.models import Learner
from courseapp.quizzes.models import Attempt, Question
from tests.answers import right_form, shown_id, wrong_form

HX = {"HTTP_HX_REQUEST": "true"}
TYPES = ["single", "multi", "numeric", "short", "ordering", "matching"]


def submit(client, q, data, nonce="n-1", **extra):
    return client.post(reverse("quizzes:submit", args=[q.slug]), {**data, "nonce": nonce}, **HX, **extra)


def first_of(qtype):
    return Question.objects.filter(type=qtype).order_by("order").first()


@pytest.mark.django_db
@pytest.mark.parametrize("qtype", TYPES)
def test_right_answer_is_graded_correct_for_every_type(client, qtype):
    q = first_of(qtype)
    response = submit(client, q, right_form(q))
    assert response.status_code == 200
    assert 'data-verdict="correct"' in response.content.decode()
    assert Attempt.objects.get(question=q).score == 1.0


@pytest.mark.django_db
@pytest.mark.parametrize("qtype", TYPES)
def test_wrong_answer_feedback_names_and_links_its_section(client, qtype):
    q = first_of(qtype)
    html = submit(client, q, wrong_form(q)).content.decode()
    label = "§" + q.anchor.removeprefix("s").replace("-", ".")
    assert f">{label}</a>" in html
    assert f"#{q.anchor}" in html
    assert 'data-verdict="correct"' not in html


def oob(html: str, element_id: str):
    """The element with this id, if the response swaps it in out of band."""
    found = BeautifulSoup(html, "html.parser").find(id=element_id)
    return found if found is not None and found.get("hx-swap-oob") == "true" else None


@pytest.mark.django_db
def test_submission_updates_the_objective_meter_out_of_band(client):
    q = first_of("single")
    html = submit(client, q, right_form(q)).content.decode()
    meter = oob(html, f"mastery-{q.objective.slug}")  # the meter itself, not just some oob element
    assert meter is not None, "the objective's meter is swapped in out of band"
    total = q.objective.questions.count()
    assert meter["data-percent"] == str(round(100 / total))  # counts the answer just given
    assert meter.select_one("[role=meter]")["aria-valuenow"] == str(round(100 / total))


@pytest.mark.django_db
def test_double_submit_with_the_same_nonce_is_counted_once(client):
    q = first_of("single")
    first = submit(client, q, wrong_form(q), nonce="same")
    second = submit(client, q, right_form(q), nonce="same")  # a replay must not rewrite history
    assert first.status_code == second.status_code == 200
    assert Attempt.objects.filter(question=q).count() == 1
    assert Attempt.objects.get(question=q).score == 0.0


@pytest.mark.django_db
def test_each_response_carries_a_fresh_nonce_for_the_next_try(client):
    """The response replaces the form's nonce (out of band) with a new one; sending that one is
    the next try, while the spent one stays a replay."""
    q = first_of("single")
    nonce_id = f"nonce-{q.slug}"
    first = submit(client, q, wrong_form(q), nonce="one").content.decode()
    assert oob(first, nonce_id) is not None, "the response swaps the form's nonce field"
    given = oob(first, nonce_id)["value"]
    assert given and given != "one"
    second = submit(client, q, wrong_form(q), nonce=given).content.decode()
    assert Attempt.objects.filter(question=q).count() == 2, "the nonce handed back is usable: a new try"
    assert 'class="reveal"' in second, "it counted as the second try"
    given_again = oob(second, nonce_id)["value"]
    assert given_again not in ("one", given)
    submit(client, q, right_form(q), nonce=given)  # a spent nonce is a replay, not a try
    assert list(Attempt.objects.filter(question=q).order_by("pk").values_list("score", flat=True)) == [0.0, 0.0]
    submit(client, q, right_form(q), nonce=given_again)
    assert list(Attempt.objects.filter(question=q).order_by("pk").values_list("score", flat=True)) == [0.0, 0.0, 1.0]


@pytest.mark.django_db
def test_key_is_revealed_only_after_a_right_answer_or_a_second_try(client):
    q = first_of("single")
    answer_text = next(c["text"] for c in q.public["choices"] if c["id"] == q.key["answer"])
    first = submit(client, q, wrong_form(q), nonce="a").content.decode()
    assert 'class="reveal"' not in first
    second = submit(client, q, wrong_form(q), nonce="b").content.decode()
    assert 'class="reveal"' in second and answer_text in second


# (type, form data, the message the learner reads — a msgid, shown in the UI language)
BAD = [
    ("single", {"choice": "not-a-choice"}, "That choice is not one of this question's options."),
    ("single", {}, "Choose an answer first."),
    ("single", {"choice": ["x", "y"]}, "Choose exactly one answer."),
    ("multi", {"choice": ["zzz"]}, "That choice is not one of this question's options."),
    ("numeric", {"value": "abc"}, None),
    ("numeric", {"value": ""}, "Enter a number."),
    ("numeric", {"value": "inf"}, None),
    ("short", {"text": "   "}, "Type an answer first."),
    ("short", {"text": "가" * 301}, None),
    ("ordering", {"order": ["x"]}, "The order must list every item exactly once."),
    ("matching", {}, None),  # "Match every item first (0 of n matched)…": see test_feedback
]


def bad_data(q, data):
    if q.type == "ordering":
        items = [shown_id(q, "item", i["id"]) for i in q.public["items"]]
        return {"order": items[:-1] + items[:1]}  # one item twice, one missing
    return data


@pytest.mark.django_db
@pytest.mark.parametrize("qtype,data,message", BAD)
def test_malformed_or_tampered_submission_shows_a_message_in_the_card_and_stores_nothing(client, qtype, data, message):
    q = first_of(qtype)
    response = client.post(reverse("quizzes:submit", args=[q.slug]), {**bad_data(q, data), "nonce": "bad"}, **HX)
    # htmx gets a 200 aimed at the card: with DEBUG on, django-htmx's debug script would replace
    # the whole page with the body of a 400.
    assert response.status_code == 200
    assert response["HX-Retarget"] == f"#fb-{q.slug}" and response["HX-Reswap"] == "innerHTML"
    html = response.content.decode()
    if message:
        with translation.override("ko"):
            assert escape(translation.gettext(message)) in html
    assert 'role="alert"' in html and 'data-verdict="error"' in html
    assert not Attempt.objects.exists()
    assert not Learner.objects.exists(), "a refused submit makes no guest row"


@pytest.mark.django_db
@pytest.mark.parametrize("qtype,data,message", BAD)
def test_malformed_plain_form_post_is_a_400(client, qtype, data, message):
    q = first_of(qtype)
    response = client.post(reverse("quizzes:submit", args=[q.slug]), {**bad_data(q, data), "nonce": "bad"})
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_matching_with_a_foreign_option_is_refused(client):
    q = first_of("matching")
    left = shown_id(q, "left", q.public["left"][0]["id"])
    response = submit(client, q, {f"match-{left}": "forged"})
    assert response.status_code == 200 and 'data-verdict="error"' in response.content.decode()
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_authored_ids_are_not_accepted_in_place_of_the_shown_ones(client):
    q = first_of("single")
    response = submit(client, q, {"choice": q.key["answer"]})  # "a": what the YAML file says
    assert 'data-verdict="error"' in response.content.decode()
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_unknown_question_is_refused_with_its_name(client):
    response = client.post(reverse("quizzes:submit", args=["no-such-question"]), {"choice": "a"}, **HX)
    assert response.status_code == 200
    assert "no-such-question" in response.content.decode()
    plain = client.post(reverse("quizzes:submit", args=["no-such-question"]), {"choice": "a"})
    assert plain.status_code == 400


@pytest.mark.django_db
def test_oversized_body_is_a_400_with_a_clear_message(client):
    q = first_of("short")
    response = submit(client, q, {"text": "x" * 20000})
    assert response.status_code == 400
    with translation.override("ko"):
        assert translation.gettext("The submission is too large. Nothing was saved.") in response.content.decode()
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_get_is_not_allowed(client):
    q = first_of("single")
    assert client.get(reverse("quizzes:submit", args=[q.slug])).status_code == 405


@pytest.mark.django_db
def test_plain_form_post_without_htmx_redirects_back_to_the_card(client):
    q = first_of("single")
    response = client.post(reverse("quizzes:submit", args=[q.slug]), {**right_form(q), "nonce": "p"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"#q-{q.slug}")
    page = client.get(response["Location"].split("#")[0]).content.decode()
    assert 'data-verdict="correct"' in page


@pytest.mark.django_db
def test_attempts_are_immutable():
    q = first_of("single")
    attempt = Attempt.objects.create(learner=Learner.objects.create(), question=q, response={}, score=0, nonce="x")
    attempt.score = 1.0
    with pytest.raises(ValueError):
        attempt.save()
