"""The run websocket: snapshot on connect, frames in order; every bad message answered with an
error frame on an open socket; who may send what; the prompt limit per learner."""
import json
import time
from importlib import import_module

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.utils import translation

from courseapp.asgi import application
from courseapp.demo import services, traces
from courseapp.demo.models import DemoRun
from courseapp.learners.models import Learner
from tests.aio import run_in_fresh_loop
from tests.courseapp.demo.watcher import Watcher

ORIGIN = (b"origin", b"http://127.0.0.1:8000")
HOST = (b"host", b"127.0.0.1:8000")


def ko(message, **params):
    with translation.override("ko"):  # the UI language of a socket without a language cookie
        text = translation.gettext(message)
    return text % params if params else text


def session_cookie(learner=None, joined=None):
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    if learner is not None:
        store["learner_id"] = learner.pk
    if joined:
        store["demo_joined"] = joined
    store.create()
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={store.session_key}".encode())


def ws(run_id, *headers):
    return WebsocketCommunicator(application, f"/ws/demo/runs/{run_id}/", headers=[ORIGIN, HOST, *headers])


async def reply_to(comm, message):
    """Send one message and return the error it got (None if it was taken): a ping right after
    answers in order, so whatever error comes before the pong belongs to the message."""
    await comm.send_to(text_data=message if isinstance(message, str) else json.dumps(message))
    await comm.send_json_to({"type": "ping"})
    error = None
    while True:
        reply = await comm.receive_json_from(timeout=20)
        if reply["type"] == "error":
            error = reply["message"]
        elif reply["type"] == "pong":
            return error


async def connected(comm):
    ok, _ = await comm.connect()
    assert ok
    await comm.receive_json_from(timeout=30)  # the snapshot or the status
    return comm


@pytest.fixture
def commands(monkeypatch):
    """What reaches the run's host (no engine: the runs below are rows only)."""
    sent = []
    monkeypatch.setattr(services, "run_command", lambda *, run, cmd: cmd["type"] == "snapshot" or sent.append(cmd) or True)
    return sent


def open_run(**fields):
    return DemoRun.objects.create(spec={"open": True}, status="running", host="embedded", **fields)


@pytest.mark.django_db(transaction=True)
def test_snapshot_first_then_deltas_in_order_until_the_end():
    run = services.run_start(owner=None, spec=services.run_spec(preset="preemption")).run

    async def scenario():
        comm = ws(run.pk)
        assert (await comm.connect())[0]
        frames, watcher = [], Watcher()
        for _ in range(2000):
            message = json.loads(await comm.receive_from(timeout=60))
            frames.append(message)
            if message.get("type") in ("delta", "snapshot"):
                assert watcher.mirror.apply(message), "a delta out of order"
                if watcher.mirror.state["status"] == "finished":
                    break
        await comm.disconnect()
        return frames, watcher.mirror.state

    messages, final = run_in_fresh_loop(scenario)
    frames = [m for m in messages if m["type"] in ("snapshot", "delta")]  # a status may come first: not started yet
    assert frames[0]["type"] == "snapshot" and all(f["type"] == "delta" for f in frames[1:])
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "every frame after the snapshot, in order"
    lane = final["lanes"][0]
    assert final["status"] == "finished"
    assert lane["stats"]["preemptions"] > 0
    assert any("X" in codes for codes in lane["timeline"].values())
    for _ in range(100):  # the final frame goes out just before the run's row is updated
        run.refresh_from_db()
        if run.status != "running":
            break
        time.sleep(0.05)
    assert run.status == "finished"
    assert traces.last_frame(run.trace_packed)["lanes"][0]["stats"] == lane["stats"]


def watch_to_the_end(run_id, *, lose=None):
    """Watch a run as the page does; `lose` = the seq of a delta to drop as if the network lost
    it. On a gap the viewer asks for a snapshot (static/js/demo.js). Returns the messages and the
    picture it ended with."""

    async def scenario():
        comm = ws(run_id)
        assert (await comm.connect())[0]
        mirror, messages = traces.FrameMirror(), []
        for _ in range(4000):
            message = json.loads(await comm.receive_from(timeout=60))
            if message.get("type") not in ("delta", "snapshot"):
                continue
            messages.append(message)
            if message["seq"] == lose:
                continue
            if not mirror.apply(message) and message["type"] == "delta":
                if mirror.seq and message["seq"] > mirror.seq:
                    await comm.send_json_to({"type": "snapshot"})
                    mirror.seq = 0  # asked once; wait for the snapshot
                continue
            if mirror.state and mirror.state["status"] == "finished":
                break
        await comm.disconnect()
        return messages, mirror.state

    return run_in_fresh_loop(scenario)


def final_picture(run):
    for _ in range(100):  # the final frame goes out just before the run's row is updated
        run.refresh_from_db()
        if run.status != "running":
            break
        time.sleep(0.05)
    return traces.last_frame(run.trace_packed)["lanes"]


@pytest.mark.django_db(transaction=True)
def test_a_viewer_that_misses_a_delta_asks_for_a_snapshot_and_ends_on_the_runs_picture():
    run = services.run_start(owner=None, spec=services.run_spec(preset="preemption")).run
    messages, final = watch_to_the_end(run.pk, lose=5)
    kinds = [(m["type"], m["seq"]) for m in messages]
    assert kinds[0][0] == "snapshot" and ("delta", 5) in kinds
    recovered = [seq for kind, seq in kinds[1:] if kind == "snapshot"]
    assert recovered and recovered[0] > 5, "the server answered the gap with a snapshot"
    assert final["status"] == "finished" and final["lanes"] == final_picture(run)


@pytest.mark.django_db(transaction=True)
def test_a_socket_that_falls_behind_skips_stale_deltas_for_the_latest_picture(monkeypatch):
    from courseapp.demo import consumers

    monkeypatch.setattr(consumers, "BEHIND_AFTER_S", -1.0)  # every delta counts as late
    run = services.run_start(owner=None, spec=services.run_spec(preset="preemption")).run
    messages, final = watch_to_the_end(run.pk)
    assert {m["type"] for m in messages} == {"snapshot"}, "no stale delta was sent"
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(set(seqs))
    assert final["status"] == "finished" and final["lanes"] == final_picture(run)


MALFORMED = [
    ("not json", "malformed message: send a JSON object", {}),
    ("[1, 2]", "malformed message: send a JSON object", {}),
    ("[" * 50_000 + "]" * 50_000, "the message is too long: at most %(n)d characters", {"n": 8192}),
    ('{"type": "submit", "x": ' + "[" * 2000 + "]" * 2000 + "}", "the message is nested too deeply: at most %(n)d levels", {"n": 3}),
    ('{"type": "speed", "value": 1' + "0" * 400 + "}", "numbers in a message must lie between -%(n)s and %(n)s", {"n": "1,000,000,000,000,000"}),
    ('{"type": "speed", "value": 1e400}', "numbers in a message must lie between -%(n)s and %(n)s", {"n": "1,000,000,000,000,000"}),
    ('{"type": "speed", "value": NaN}', "numbers in a message must lie between -%(n)s and %(n)s", {"n": "1,000,000,000,000,000"}),
    ({"type": "speed", "value": "fast"}, "speed must be a number from %(lo)s to %(hi)s", {"lo": "0.125", "hi": "8"}),
    ({"type": "speed", "value": 100}, "speed must be a number from %(lo)s to %(hi)s", {"lo": "0.125", "hi": "8"}),
    ({"type": "explode"}, "unknown message type %(kind)r", {"kind": "explode"}),
    ({"type": ["submit"]}, "unknown message type %(kind)r", {"kind": "['submit']"}),
    ({"type": "submit", "prompt": ""}, "type a prompt first", {}),
    ({"type": "submit", "prompt": {"text": "hi"}}, "type a prompt first", {}),
    ({"type": "submit", "prompt": "x" * 501}, "the prompt is too long: at most %(n)d characters", {"n": 500}),
    ({"type": "submit", "prompt": "hi", "max_tokens": "64"}, "max_tokens must be a whole number from %(lo)d to %(hi)d", {"lo": 1, "hi": 256}),
    ({"type": "submit", "prompt": "hi", "max_tokens": 0}, "max_tokens must be a whole number from %(lo)d to %(hi)d", {"lo": 1, "hi": 256}),
    ({"type": "submit", "prompt": "hi", "max_tokens": 2.5}, "max_tokens must be a whole number from %(lo)d to %(hi)d", {"lo": 1, "hi": 256}),
]


@pytest.mark.django_db(transaction=True)
def test_every_malformed_message_gets_an_error_frame_and_the_socket_stays_open(commands):
    owner = Learner.objects.create()
    run = open_run(owner=owner)
    cookie = session_cookie(owner)

    async def scenario():
        comm = await connected(ws(run.pk, cookie))
        replies = [await reply_to(comm, message) for message, _, _ in MALFORMED]
        await comm.disconnect()
        return replies

    replies = run_in_fresh_loop(scenario)
    assert replies == [ko(message, **params) for _, message, params in MALFORMED]
    assert commands == []


@pytest.mark.django_db(transaction=True)
def test_only_the_owner_controls_and_submits(commands):
    owner, stranger = Learner.objects.create(), Learner.objects.create()
    run = open_run(owner=owner)
    cookies = {"stranger": session_cookie(stranger), "nobody": session_cookie(), "owner": session_cookie(owner)}

    async def scenario():
        replies = {}
        for who in ("stranger", "nobody"):
            cookie = cookies[who]
            comm = await connected(ws(run.pk, cookie))
            replies[who] = [await reply_to(comm, {"type": "submit", "prompt": "남의 실행에 몰래"}),
                            await reply_to(comm, {"type": "pause"})]
            await comm.disconnect()
        comm = await connected(ws(run.pk, cookies["owner"]))
        replies["owner"] = [await reply_to(comm, {"type": "submit", "prompt": "내 문의", "max_tokens": 8}),
                            await reply_to(comm, {"type": "pause"})]
        await comm.disconnect()
        return replies

    replies = run_in_fresh_loop(scenario)
    refused = [ko("only the person who started this run can send prompts to it"), ko("only the person who started this run can control it")]
    assert replies["stranger"] == refused and replies["nobody"] == refused
    assert replies["owner"] == [None, None]
    assert commands == [{"type": "submit", "prompt": "내 문의", "max_tokens": 8, "owner": ""}, {"type": "pause"}]


@pytest.mark.django_db(transaction=True)
def test_the_prompt_limit_is_per_learner_and_invalid_prompts_do_not_count(commands):
    owner = Learner.objects.create()
    run = open_run(owner=owner)
    cookie = session_cookie(owner)

    async def scenario():
        first = await connected(ws(run.pk, cookie))
        invalid = [await reply_to(first, {"type": "submit", "prompt": "hi", "max_tokens": 999}) for _ in range(6)]
        taken = [await reply_to(first, {"type": "submit", "prompt": f"문의 {i}"}) for i in range(6)]
        second = await connected(ws(run.pk, cookie))  # another socket, the same learner
        over = await reply_to(second, {"type": "submit", "prompt": "일곱 번째"})
        await first.disconnect()
        await second.disconnect()
        return invalid, taken, over

    invalid, taken, over = run_in_fresh_loop(scenario)
    assert all(reply is not None for reply in invalid)
    assert taken == [None] * 6
    assert over == ko("too many prompts: at most %(limit)d a minute; wait a little and send again", limit=6)
    assert len(commands) == 6


@pytest.mark.django_db(transaction=True)
def test_class_runs_take_prompts_from_joined_learners_under_their_chosen_names(commands):
    joined, outsider = Learner.objects.create(), Learner.objects.create()
    run = open_run(is_class=True)
    member_cookie, outsider_cookie = session_cookie(joined, joined={str(run.pk): "민지"}), session_cookie(outsider)

    async def scenario():
        member = await connected(ws(run.pk, member_cookie))
        taken = await reply_to(member, {"type": "submit", "prompt": "배송 문의"})
        control = await reply_to(member, {"type": "pause"})
        await member.disconnect()
        other = await connected(ws(run.pk, outsider_cookie))
        refused = await reply_to(other, {"type": "submit", "prompt": "몰래"})
        await other.disconnect()
        return taken, control, refused

    taken, control, refused = run_in_fresh_loop(scenario)
    assert taken is None and commands[0]["owner"] == "민지"
    assert control == ko("only the person who started this run can control it")
    assert refused == ko("join this class run with its code to send prompts")
    assert len(commands) == 1


@pytest.mark.django_db(transaction=True)
def test_watching_marks_the_run_and_an_ended_run_says_why(commands):
    run = open_run(owner=Learner.objects.create())
    DemoRun.objects.filter(pk=run.pk).update(watched_at=None)

    async def scenario():
        comm = await connected(ws(run.pk))
        await comm.disconnect()
        await database_sync_to_async(DemoRun.objects.filter(pk=run.pk).update)(status="stopped", end_reason="replaced")
        comm = ws(run.pk)
        assert (await comm.connect())[0]
        status = await comm.receive_json_from(timeout=10)
        await comm.disconnect()
        return status

    status = run_in_fresh_loop(scenario)
    assert status["type"] == "status" and status["status"] == "stopped" and status["reason"] == "replaced"
    assert status["message"] == ko("stopped: you opened another scene")
    run.refresh_from_db()
    assert run.watched_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("origin", [b"http://evil.example", b"http://127.0.0.1:8503", b"http://127.0.0.1", None])
def test_a_foreign_origin_is_rejected_another_port_of_this_host_too(origin):
    run = DemoRun.objects.create(spec={}, status="finished")

    async def scenario():
        headers = [HOST] + ([(b"origin", origin)] if origin else [])
        comm = WebsocketCommunicator(application, f"/ws/demo/runs/{run.pk}/", headers=headers)
        connected, _ = await comm.connect()
        return connected

    assert run_in_fresh_loop(scenario) is False


def test_the_sites_own_origin_passes_and_a_trusted_one_behind_a_proxy(settings):
    from courseapp.ws_origin import same_origin

    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000") and same_origin("http://localhost", "localhost:80")
    assert not same_origin("http://127.0.0.1:8000", "evil.example:8000"), "a Host header outside ALLOWED_HOSTS"
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.ac.kr"]
    assert same_origin("https://course.example.ac.kr", "127.0.0.1:8000")
    assert not same_origin("http://course.example.ac.kr", "127.0.0.1:8000"), "the scheme counts"


@pytest.mark.django_db(transaction=True)
def test_an_unknown_run_closes_the_socket():
    async def scenario():
        comm = ws("00000000-0000-0000-0000-000000000000")
        connected, code = await comm.connect()
        return connected, code

    connected, code = run_in_fresh_loop(scenario)
    assert connected is False and code == 4404
