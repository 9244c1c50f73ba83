"""The live view of a served engine (lab/consumers.py, lab/views.py): who may watch which
engine, the page, and the socket's frames of a lab run's engine."""
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from courseapp.asgi import application
from courseapp.instructor.roles import instructors_group
from courseapp.lab.models import LabRun
from courseapp.learners.models import Learner
from courseapp.serving import engines
from tests.aio import run_in_fresh_loop
from tests.courseapp.demo.test_consumers import HOST, ORIGIN, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
OPTIONS = {"num_blocks": 48, "max_num_seqs": 4, "max_num_batched_tokens": 128, "log_interval_s": 60}


def lab_run(learner, status="running"):
    return LabRun.objects.create(learner=learner, knobs={}, status=status)


def socket(path, *headers):
    return WebsocketCommunicator(application, path, headers=[ORIGIN, HOST, *headers])


async def refused(comm) -> bool:
    ok, code = await comm.connect()
    return not ok and code == 4404


def test_only_the_runs_learner_watches_its_engine_and_only_teachers_the_sites():
    owner, other = Learner.objects.create(seed=1), Learner.objects.create(seed=2)
    run = lab_run(owner)
    path = f"/ws/lab/runs/{run.pk}/live/"
    assert run_in_fresh_loop(lambda: refused(socket(path, session_cookie(other))))
    assert run_in_fresh_loop(lambda: refused(socket(path)))
    assert run_in_fresh_loop(lambda: refused(socket("/ws/lab/site/live/", session_cookie(owner))))


def test_the_owner_sees_the_runs_engine_serve_a_request(settings):
    owner = Learner.objects.create(seed=1)
    run = lab_run(owner)
    token, engine = engines.lab_engine_open(str(run.pk), **OPTIONS)
    cookie = session_cookie(owner)

    async def watch():
        comm = socket(f"/ws/lab/runs/{run.pk}/live/", cookie)
        ok, _ = await comm.connect()
        assert ok
        first = await comm.receive_json_from(timeout=30)
        assert first["type"] == "snapshot" and first["scene"] == "served" and first["lanes"][0]["requests"] == []
        ids, _ = engine.prepare(prompt="hello", max_tokens=5)
        engine.submit(ids, {"max_tokens": 5, "temperature": 0.0, "ignore_eos": True}, "lab-req").result(timeout=60)
        while True:  # deltas follow, numbered on from the snapshot
            message = await comm.receive_json_from(timeout=30)
            assert message["type"] == "delta"
            if '"finished"' in json.dumps(message["d"]):
                break
        await comm.send_json_to({"type": "pause"})
        assert (await comm.receive_json_from(timeout=10))["type"] == "error", "a viewer does not steer the engine"
        await comm.disconnect()

    try:
        run_in_fresh_loop(watch)
        assert engine.view_snapshot() is None, "the last viewer gone, the drawing stopped"
    finally:
        engines.lab_engine_close(token)


def test_a_run_with_no_engine_yet_says_so_and_an_ended_one_ends_the_view():
    owner = Learner.objects.create(seed=1)
    run = lab_run(owner, status="finished")
    cookie = session_cookie(owner)

    async def watch():
        comm = socket(f"/ws/lab/runs/{run.pk}/live/", cookie)
        ok, _ = await comm.connect()
        assert ok
        assert (await comm.receive_json_from(timeout=10))["type"] == "error"  # no engine is serving here yet
        assert (await comm.receive_json_from(timeout=10)) == {"type": "status", "status": "finished", "reason": ""}
        await comm.disconnect()

    run_in_fresh_loop(watch)


def test_the_pages_owner_only_and_teachers_only(client):
    owner = Learner.objects.create(seed=1)
    run = lab_run(owner)
    assert client.get(f"/lab/runs/{run.pk}/live/").status_code == 404
    session = client.session
    session["learner_id"] = owner.pk
    session.save()
    page = client.get(f"/lab/runs/{run.pk}/live/")
    assert page.status_code == 200 and f'data-ws-path="/ws/lab/runs/{run.pk}/live/"'.encode() in page.content
    assert client.get("/lab/live/").status_code == 302  # to the login
    user = User.objects.create_user("teacher", password="pw-for-tests-only")
    client.force_login(user)
    assert client.get("/lab/live/").status_code == 403
    user.groups.add(instructors_group())
    page = client.get("/lab/live/")
    assert page.status_code == 200 and b'data-ws-path="/ws/lab/site/live/"' in page.content
