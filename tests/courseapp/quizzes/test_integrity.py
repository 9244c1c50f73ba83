"""Answer integrity (issue #7): a nonce answers for one question only, and where the key sits
among the options differs from learner to learner, so neither a replay nor a position gives it away."""
import pytest
from bs4 import BeautifulSoup
from django.test import Client
from django.urls import reverse

from courseapp.learners.models import Learner
from courseapp.learners.order_seed import COOKIE
from courseapp.quizzes.models import Attempt, Question
from courseapp.quizzes.services import attempt_submit
from tests.answers import right_form, shown_id, wrong_form
from tests.factories import LearnerFactory, UserFactory

HX = {"HTTP_HX_REQUEST": "true"}
GUESTS = 20


def submit(client, q, data, nonce):
    return client.post(reverse("quizzes:submit", args=[q.slug]), {**data, "nonce": nonce}, **HX)


def every_card_page(lesson):
    """The appendix holds the self-check: every question's card is on it."""
    return lesson.sections.get(slug="appendix-a").get_absolute_url()


def shown_choices(client, url) -> dict[str, list[str]]:
    """question slug → the option ids in the order this client's page shows them."""
    soup = BeautifulSoup(client.get(url).content, "html.parser")
    return {
        card["data-question"]: [i["value"] for i in card.select("input[name=choice]")]
        for card in soup.select("div.question[data-type=single], div.question[data-type=multi]")
    }


@pytest.mark.django_db
def test_a_nonce_replayed_on_another_question_reveals_nothing_of_the_first(client):
    first = Question.objects.filter(type="single").order_by("order").first()
    assert 'data-verdict="correct"' in submit(client, first, right_form(first), "shared").content.decode()
    revealed = [c["text"] for c in first.public["choices"] if c["id"] == first.key["answer"]]
    for q in Question.objects.exclude(pk=first.pk):
        html = submit(client, q, wrong_form(q), "shared").content.decode()
        assert 'data-verdict="correct"' not in html, q.slug
        assert 'class="reveal"' not in html, q.slug
        assert first.explanation[:40] not in html and revealed[0] not in html, q.slug
        if q.explanation:
            assert q.explanation[:40] not in html, q.slug
    # Every replay was graded as its own question's first attempt.
    assert Attempt.objects.count() == Question.objects.count()
    assert all(a.score < 1 for a in Attempt.objects.exclude(question=first))


@pytest.mark.django_db
def test_attempt_submit_looks_a_nonce_up_within_its_question():
    learner = LearnerFactory()
    x, y = Question.objects.filter(type="numeric").order_by("order")[:2]
    ax, created_x = attempt_submit(learner=learner, question=x, response={"value": x.key["answer"]}, nonce="n")
    ay, created_y = attempt_submit(learner=learner, question=y, response={"value": -1}, nonce="n")
    assert created_x and created_y
    assert ay.question == y and ay.score == 0.0 and ay.pk != ax.pk
    again, created = attempt_submit(learner=learner, question=y, response={"value": y.key["answer"]}, nonce="n")
    assert (again.pk, created) == (ay.pk, False)  # a double submit on the same question still counts once


@pytest.mark.django_db
def test_each_guest_sees_the_options_in_an_order_of_their_own(lesson):
    url = every_card_page(lesson)
    singles = list(Question.objects.filter(type="single"))
    multis = list(Question.objects.filter(type="multi"))
    key_positions = {q.slug: set() for q in singles}
    multi_positions = {q.slug: set() for q in multis}
    first_pick_scores = []
    for n in range(GUESTS):
        guest = Client()
        shown = shown_choices(guest, url)
        for q in singles:
            key_positions[q.slug].add(shown[q.slug].index(shown_id(q, "choice", q.key["answer"])))
            # A guest who always ticks the first option.
            submit(guest, q, {"choice": shown[q.slug][0]}, f"first-{n}")
        for q in multis:
            keys = {shown_id(q, "choice", c) for c in q.key["answer"]}
            multi_positions[q.slug].add(tuple(i for i, c in enumerate(shown[q.slug]) if c in keys))
        learner = Learner.objects.latest("pk")
        scores = list(learner.attempts.values_list("score", flat=True))
        assert len(scores) == len(singles)
        first_pick_scores.append(sum(scores) / len(scores))

    assert all(len(positions) > 1 for positions in key_positions.values()), key_positions
    assert all(len(positions) > 1 for positions in multi_positions.values()), multi_positions
    mean = sum(first_pick_scores) / len(first_pick_scores)
    assert mean < 0.6, mean  # chance is 1 / (number of options), about 0.3 here


@pytest.mark.django_db
def test_matching_right_side_is_shuffled_per_learner(lesson):
    q = Question.objects.filter(type="matching").first()
    url = every_card_page(lesson)
    orders = set()
    for _ in range(10):
        soup = BeautifulSoup(Client().get(url).content, "html.parser")
        select = soup.select_one(f"#q-{q.slug} select")
        orders.add(tuple(o["value"] for o in select.select("option") if o.get("value")))
    assert len(orders) > 1


@pytest.mark.django_db
def test_a_guests_order_is_stable_and_does_not_move_after_the_first_answer(client, lesson):
    url = every_card_page(lesson)
    response = client.get(url)
    assert COOKIE in response.cookies  # the seed travels as a cookie …
    assert not Learner.objects.exists()  # … not as a row: a page view writes nothing
    before = shown_choices(client, url)
    q = Question.objects.filter(type="single").first()
    submit(client, q, wrong_form(q), "one")
    assert Learner.objects.count() == 1
    assert shown_choices(client, url) == before


@pytest.mark.django_db
def test_an_account_keeps_its_order_on_every_device(lesson):
    user = UserFactory(username="sora")
    url = every_card_page(lesson)
    devices = []
    for _ in range(2):
        device = Client()
        device.get(url)  # a visitor's own seed first …
        device.post(reverse("login"), {"username": "sora", "password": "correct-horse-battery"})
        devices.append(shown_choices(device, url))
        q = Question.objects.filter(type="single").first()
        submit(device, q, wrong_form(q), f"n-{len(devices)}")
    assert devices[0] == devices[1]  # … then the account's
    assert Learner.objects.filter(user=user).count() == 1
