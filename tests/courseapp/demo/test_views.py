"""Demo pages over HTTP: a scene page starts nothing, a POST starts the run, the limits and what
the pages say about them, class joins, replays and who may read them."""
import time
from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from courseapp.demo import presets, services, traces
from courseapp.demo.models import JOIN_ALPHABET, DemoRun
from courseapp.learners.models import Learner
from tests.courseapp.demo.watcher import Watcher

JSON = {"HTTP_ACCEPT": "application/json"}


def ko(message, **params):
    with translation.override("ko"):
        return translation.gettext(message) % params if params else translation.gettext(message)


@pytest.fixture
def no_engine(monkeypatch):
    """Runs are created and counted as usual; no engine thread starts."""
    commands = []
    monkeypatch.setattr(services, "_launch", lambda run: None)
    monkeypatch.setattr(services, "run_command", lambda *, run, cmd: commands.append((str(run.pk), cmd)) or True)
    return commands


def start(client, preset="preemption", **extra):
    return client.post(reverse("demo:run-create"), {"preset": preset, **extra}, **JSON)


@pytest.mark.django_db
def test_unknown_preset_is_a_400_listing_the_scenes(client):
    response = client.get(reverse("demo:index"), {"preset": "nope"})
    assert response.status_code == 400
    assert "prefix-caching" in response.content.decode()


@pytest.mark.django_db
def test_opening_a_scene_page_starts_nothing_and_writes_nothing(client):
    response = client.get(reverse("demo:index"), {"preset": "preemption", "paused": "1"})
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-start-url="{reverse("demo:run-create")}"' in page
    assert 'name="paused" value="1"' in page
    assert not DemoRun.objects.exists()
    assert not Learner.objects.exists()
    assert not Session.objects.exists()


@pytest.mark.django_db
def test_a_post_starts_the_scene_for_a_new_guest(client, no_engine):
    client.get(reverse("demo:index"), {"preset": "preemption", "paused": "1"})
    response = start(client, paused="1")
    assert response.status_code == 201
    run = DemoRun.objects.get(pk=response.json()["run"])
    assert run.preset == "preemption" and run.spec["start_paused"] is True
    assert run.owner == Learner.objects.get() and run.client_addr == "127.0.0.1"
    assert response.json()["url"] == reverse("demo:run", args=[run.pk])


@pytest.mark.django_db
def test_a_start_without_the_csrf_token_is_refused(no_engine):
    client = Client(enforce_csrf_checks=True)
    client.get(reverse("demo:index"), {"preset": "preemption"})
    response = client.post(reverse("demo:run-create"), {"preset": "preemption"}, **JSON)
    assert response.status_code == 403
    assert not DemoRun.objects.exists()


@pytest.mark.django_db
def test_bad_knobs_are_refused_with_the_limit_and_write_nothing(client):
    response = client.post(reverse("demo:run-create"), {"num_blocks": "4", "max_num_seqs": "8"})
    assert response.status_code == 400
    assert ko("%(name)s must be between %(lo)d and %(hi)d", name="num_blocks", lo=16, hi=512) in response.content.decode()
    response = client.post(reverse("demo:run-create"), {"block_size": "sixteen"})
    assert response.status_code == 400
    assert ko("%(name)s must be a whole number between %(lo)d and %(hi)d", name="block_size", lo=4, hi=64) in response.content.decode()
    assert "invalid literal" not in response.content.decode()
    for name, value, options in (("scheduling", "fifo", "continuous, static"), ("preemption_mode", "drop", "recompute, swap")):
        response = client.post(reverse("demo:run-create"), {name: value})
        assert response.status_code == 400, "an unknown mode is not quietly the default"
        assert ko("%(name)s must be one of: %(options)s", name=name, options=options) in response.content.decode()
    assert not DemoRun.objects.exists() and not Learner.objects.exists()


@pytest.mark.django_db
def test_a_pool_too_small_for_the_smallest_prompt_is_refused_with_the_minimum(client):
    from courseapp.demo.host import min_prompt_tokens
    from engine.training.corpus import SYSTEM_PROMPT

    needed = min_prompt_tokens(SYSTEM_PROMPT, presets.SHORT_QUESTION) + presets.MIN_ANSWER_TOKENS
    blocks = -(-needed // 16)
    response = client.post(reverse("demo:run-create"), {"num_blocks": str(blocks - 1), "block_size": "16"}, **JSON)
    assert response.status_code == 400
    message = response.json()["error"]
    assert f"{needed}" in message and f"{blocks}" in message
    assert not DemoRun.objects.exists()


@pytest.mark.django_db
def test_the_busy_answer_states_when_a_place_frees_up(client, settings, no_engine):
    settings.DEMO_MAX_ACTIVE_RUNS = 1
    soon = timezone.now() + timedelta(minutes=3)
    DemoRun.objects.create(spec={}, status="running", watched_at=timezone.now(), expires_at=soon)
    response = start(client)
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert 150 <= response.json()["retry_in"] <= 181
    assert timezone.localtime(soon).strftime("%H:%M:%S") in response.json()["wait"]
    page = client.post(reverse("demo:run-create"), {"preset": "preemption"})  # the form (no script)
    assert page.status_code == 503
    assert 'data-demo-busy' in page.content.decode() and 'value="preemption"' in page.content.decode()


@pytest.mark.django_db
def test_the_busy_answer_expects_a_scene_to_last_as_long_as_its_last_runs_took(client, settings, no_engine):
    settings.DEMO_MAX_ACTIVE_RUNS = 1
    now = timezone.now()
    for seconds in (30, 40, 50):  # earlier runs of the scene: 40 s is the median
        DemoRun.objects.create(spec={}, preset="preemption", status="finished", started_at=now - timedelta(minutes=9),
                               finished_at=now - timedelta(minutes=9) + timedelta(seconds=seconds))
    DemoRun.objects.create(spec={}, preset="preemption", status="running", watched_at=now,
                           started_at=now - timedelta(seconds=10), expires_at=now + timedelta(minutes=15))
    response = start(client)
    assert response.status_code == 503
    assert 25 <= response.json()["retry_in"] <= 32, "about 30 s left of a 40-s scene, not its 15-minute bound"
    expected = ko("A place should free up around %(time)s (in %(duration)s), going by how long these scenes take; "
                  "this page tries again until then.", time="@", duration="@")
    assert all(piece in response.json()["wait"] for piece in expected.split("@")), "says it is an estimate, and why"


@pytest.mark.django_db
def test_while_the_engines_cannot_be_reached_a_start_is_refused_and_leaves_no_run(client, settings, monkeypatch):
    settings.DEMO_HOST = "celery"
    monkeypatch.setattr(services.events, "engines_reachable", lambda: False)
    response = start(client)
    assert response.status_code == 503
    assert response.json()["error"] == ko("The live engines are unavailable right now: the server lost its connection "
                                          "to them. The lesson and the self-checks still work.")
    page = client.post(reverse("demo:run-create"), {"preset": "preemption"})  # the form asks for HTML
    assert page.status_code == 503 and "data-demo-busy" in page.content.decode()
    assert not DemoRun.objects.exists()


@pytest.mark.django_db(transaction=True)  # the task is sent once the run's row is committed
def test_a_start_whose_task_cannot_be_sent_removes_its_run(client, settings, monkeypatch):
    from courseapp.demo import tasks

    settings.DEMO_HOST = "celery"
    monkeypatch.setattr(services.events, "engines_reachable", lambda: True)  # Redis goes between the check and the send

    def broker_gone(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.run_demo, "apply_async", broker_gone)
    assert start(client).status_code == 503
    assert not DemoRun.objects.exists()


@pytest.mark.django_db
def test_the_cap_counts_only_runs_someone_watches(client, settings, no_engine):
    settings.DEMO_MAX_ACTIVE_RUNS = 1
    DemoRun.objects.create(spec={}, status="running", watched_at=timezone.now() - timedelta(seconds=45))
    assert start(client).status_code == 201


@pytest.mark.django_db
def test_one_client_address_has_a_limit_of_its_own(settings, no_engine):
    settings.DEMO_MAX_RUNS_PER_ADDRESS = 2
    for _ in range(2):
        assert start(Client()).status_code == 201
    refused = start(Client())
    assert refused.status_code == 429
    assert refused.json()["error"] == ko("Your network already has %(n)d demo runs going, the most it may have at once.", n=2)


@pytest.mark.django_db
def test_a_class_behind_one_address_is_bounded_by_the_class_limit_and_a_guest_keeps_a_share(settings, no_engine):
    """A school room is one NAT address: the 4th learner of a class must not get "your network
    has 3 runs" (issue #33). Class members count against the class limit; guests at the same
    address still have their own small share, which the room's runs do not use up."""
    from courseapp.instructor.models import Cohort, Membership
    from tests.factories import LessonFactory, UserFactory

    settings.DEMO_MAX_ACTIVE_RUNS, settings.DEMO_MAX_RUNS_PER_ADDRESS, settings.DEMO_MAX_RUNS_PER_CLASS_ADDRESS = 20, 2, 5
    cohort = Cohort.objects.create(name="3학년 2반", lesson=LessonFactory())
    members = []
    for i in range(6):
        user = UserFactory(username=f"pupil{i}")
        Membership.objects.create(cohort=cohort, learner=Learner.objects.create(user=user))
        member = Client()
        member.force_login(user)
        members.append(member)
    assert [start(m).status_code for m in members[:5]] == [201] * 5  # more than the guests' 2
    refused = start(members[5])
    assert refused.status_code == 429  # the class limit still bounds the room
    assert refused.json()["error"] == ko("Your network already has %(n)d demo runs going, the most it may have at once.", n=5)
    assert [start(Client()).status_code for _ in range(3)] == [201, 201, 429]  # guests: their own 2
    cohort.archived = True  # an archived class no longer widens anything
    cohort.save()
    assert start(Client()).status_code == 429


@pytest.fixture
def frames(monkeypatch):
    """Every frame each run publishes, by run id (tapped on its way to the channel layer)."""
    from courseapp.demo import events

    sent, real = {}, events.publish
    def tap(run_id, message):
        if message.get("type") in ("snapshot", "delta"):  # frames; an error message goes by as it is
            sent.setdefault(run_id, Watcher())(message)
        real(run_id, message)

    monkeypatch.setattr(events, "publish", tap)
    return sent


@pytest.mark.django_db(transaction=True)  # the runs' threads read and write the database too
def test_a_second_scene_stops_the_first_and_both_pages_say_so(client, frames):
    """The real embedded host: the first scene's session gets the stop, ends, and its last frame
    says why, as the database does."""
    from courseapp.demo.host import embedded

    first = DemoRun.objects.get(pk=start(client, "preemption", paused="1").json()["run"])
    first_thread = embedded.threads[str(first.pk)]
    session = embedded.sessions[str(first.pk)]
    for _ in range(600):  # its engines are built and its loop goes round, as when its page is open
        if session.has_started() or not first_thread.is_alive():
            break
        time.sleep(0.05)
    assert session.has_started()
    response = start(client, "concurrency", paused="1")
    second = DemoRun.objects.get(pk=response.json()["run"])
    second_thread = embedded.threads.get(str(second.pk))
    try:
        first_thread.join(30)  # a paused scene ignoring the stop would wait 10 minutes for a viewer
        assert not first_thread.is_alive(), "the first run's session ended on the stop"
        first.refresh_from_db()
        assert first.status == "stopped" and first.end_reason == "replaced" and first.replaced_by == second
        last = frames[str(first.pk)].frames[-1]
        assert (last["status"], last["reason"]) == ("stopped", "replaced"), "the session's last frame says why"
        assert embedded.is_alive(str(second.pk))
        assert response.json()["replaced"] == [presets.PRESETS["preemption"]["title"]]
        new_page = client.get(reverse("demo:run", args=[second.pk])).content.decode()
        assert presets.PRESETS["preemption"]["title"] in new_page
        old_summary = client.get(reverse("demo:run-summary", args=[first.pk]))
        assert old_summary.status_code == 286
        assert ko("stopped: you opened another scene") in old_summary.content.decode()
    finally:
        for run, thread in ((first, first_thread), (second, second_thread)):
            embedded.command(str(run.pk), {"type": "stop", "reason": "test"})
            if thread is not None:
                thread.join(30)


@pytest.mark.django_db
def test_summary_polls_while_active_and_stops_after(client):
    run = DemoRun.objects.create(spec={}, status="running", host="embedded")
    live = client.get(reverse("demo:run-summary", args=[run.pk]))
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()
    DemoRun.objects.filter(pk=run.pk).update(status="failed", error="the engine worker stopped responding")
    done = client.get(reverse("demo:run-summary", args=[run.pk]))
    assert done.status_code == 286 and "stopped responding" in done.content.decode()


# --- class runs ----------------------------------------------------------------------------------
def join(client, code, name="민지"):
    return client.post(reverse("demo:class-join"), {"code": code, "display_name": name})


@pytest.mark.django_db
def test_join_codes_are_long_and_unambiguous():
    codes = {DemoRun.objects.create(spec={}).join_code for _ in range(30)}
    assert len(codes) == 30
    assert all(len(code) >= 8 and set(code) <= set(JOIN_ALPHABET) for code in codes)
    assert not set("0O1IL") & set(JOIN_ALPHABET)


@pytest.mark.django_db
def test_joining_keeps_the_chosen_name_in_the_session(client):
    run = DemoRun.objects.create(spec={"open": True}, status="running", is_class=True)
    response = join(client, run.join_code.lower(), name="  민지   A ")
    assert response.status_code == 302 and response["Location"] == reverse("demo:run", args=[run.pk])
    assert client.session["demo_joined"] == {str(run.pk): "민지 A"}
    assert 'data-submit' in client.get(response["Location"]).content.decode()
    assert join(Client(), run.join_code, name=" ").status_code == 400  # a name is required


@pytest.mark.django_db
def test_wrong_join_codes_are_throttled_per_client():
    run = DemoRun.objects.create(spec={"open": True}, status="running", is_class=True)
    guesser = Client()
    for i in range(10):
        assert join(guesser, f"WRONG{i:03d}").status_code == 404
    assert join(guesser, run.join_code).status_code == 429  # even the right one, for a while
    assert "demo_joined" not in guesser.session


# --- replays -------------------------------------------------------------------------------------
def finished_run(**fields):
    recorder = traces.TraceRecorder()
    for step in range(3):
        recorder.add({"lanes": [{"name": "mine", "step": step, "requests": [{"prompt": "내 비밀 문의"}]}]})
    return DemoRun.objects.create(status="finished", trace_packed=recorder.packed(), **fields)


@pytest.mark.django_db
def test_a_preset_replay_is_for_anyone(client):
    run = finished_run(preset="preemption", spec={"open": False})
    response = client.get(reverse("demo:run-trace", args=[run.pk]))
    assert response.status_code == 200
    stored = response.json()
    assert stored["base"]["lanes"][0]["step"] == 0 and len(stored["deltas"]) == 2
    zipped = client.get(reverse("demo:run-trace", args=[run.pk]), HTTP_ACCEPT_ENCODING="gzip, br")
    assert zipped["Content-Encoding"] == "gzip" and bytes(zipped.content) == bytes(run.trace_packed)


@pytest.mark.django_db
def test_a_learners_own_run_replays_for_its_owner_only(client, no_engine):
    client.get(reverse("demo:index"))
    owner_run = DemoRun.objects.get(pk=start(client).json()["run"])
    run = finished_run(spec={"open": True}, owner=owner_run.owner)
    assert client.get(reverse("demo:run-trace", args=[run.pk])).status_code == 200
    assert Client().get(reverse("demo:run-trace", args=[run.pk])).status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("hh,mm,ss", [(9, 0, 5), (17, 10, 59), (23, 59, 58), (12, 34, 16)])
def test_timestamped_prompts_differ_inside_the_first_block(hh, mm, ss):
    """The prefix-caching scene's point: a clock at the front leaves no block to share."""
    from datetime import datetime

    from engine import EngineConfig, LLMEngine

    spec = presets.spec_for("prefix-caching", system_prompt="시스템", now=datetime(2026, 1, 1, hh, mm, ss))
    engine = LLMEngine(EngineConfig(num_blocks=64, max_num_seqs=8))
    a, b = (engine.encode_chat([{"role": "system", "content": r["system"]}, {"role": "user", "content": "q"}])
            for r in spec["requests"] if r["key"].startswith("time"))
    first_diff = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert first_diff < 16


@pytest.mark.django_db
def test_a_queued_run_shows_its_place_and_a_starting_one_its_host(client):
    first = DemoRun.objects.create(spec={}, status="queued", host="celery")
    second = DemoRun.objects.create(spec={}, status="queued", host="celery")
    page = client.get(reverse("demo:run-summary", args=[second.pk])).content.decode()
    assert 'data-queue-place="2"' in page
    DemoRun.objects.filter(pk=first.pk).update(status="starting", host="celery@w1")
    assert 'data-queue-place="1"' in client.get(reverse("demo:run-summary", args=[second.pk])).content.decode()
    page = client.get(reverse("demo:run-summary", args=[first.pk])).content.decode()
    assert "celery@w1" in page and "data-queue-place" not in page
