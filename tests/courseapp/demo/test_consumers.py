"""The run websocket: snapshot on connect, frames in order, bad input, origin check."""
import json
import time

import pytest
from django.utils import translation
from channels.testing import WebsocketCommunicator

from courseapp.asgi import application
from tests.aio import run_in_fresh_loop
from courseapp.demo import services
from courseapp.demo.models import DemoRun

ORIGIN = [(b"origin", b"http://127.0.0.1")]


def ws(run_id, headers=ORIGIN):
    return WebsocketCommunicator(application, f"/ws/demo/runs/{run_id}/", headers=headers)


async def _frames_until_finished(comm, limit=2000):
    frames = []
    for _ in range(limit):
        message = json.loads(await comm.receive_from(timeout=30))
        frames.append(message)
        if message.get("type") in ("frame", "snapshot") and message["status"] == "finished":
            break
    return frames


@pytest.mark.django_db(transaction=True)
def test_snapshot_first_then_frames_in_order_until_the_end():
    run = services.run_start(owner=None, preset="preemption")

    async def scenario():
        comm = ws(run.pk)
        connected, _ = await comm.connect()
        assert connected
        frames = await _frames_until_finished(comm)
        await comm.disconnect()
        return frames

    frames = run_in_fresh_loop(scenario)
    assert frames[0]["type"] == "snapshot"
    seqs = [f["seq"] for f in frames if f["type"] == "frame"]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    last = frames[-1]
    assert last["status"] == "finished"
    lane = last["lanes"][0]
    assert lane["stats"]["preemptions"] > 0
    assert any("X" in codes for codes in lane["timeline"].values())
    for _ in range(100):  # the final frame goes out just before the run's row is updated
        run.refresh_from_db()
        if run.status != "running":
            break
        time.sleep(0.05)
    assert run.status == "finished" and run.trace


@pytest.mark.django_db(transaction=True)
def test_malformed_messages_get_an_error_frame_and_the_socket_stays_open():
    run = services.run_start(owner=None, knobs={})

    async def scenario():
        comm = ws(run.pk)
        assert (await comm.connect())[0]
        await comm.receive_json_from(timeout=30)  # the snapshot
        replies = []
        for raw in ["not json", "[1, 2]", json.dumps({"type": "explode"}), json.dumps({"type": "submit", "prompt": ""}),
                    json.dumps({"type": "submit", "prompt": "x" * 501})]:
            await comm.send_to(text_data=raw)
            while True:
                reply = await comm.receive_json_from(timeout=10)
                if reply["type"] == "error":
                    replies.append(reply["message"])
                    break
        await comm.send_json_to({"type": "ping"})
        while (await comm.receive_json_from(timeout=10))["type"] != "pong":
            pass
        await comm.send_json_to({"type": "stop"})  # not the owner: refused
        while (reply := await comm.receive_json_from(timeout=10))["type"] != "error":
            pass
        replies.append(reply["message"])
        await comm.disconnect()
        return replies

    replies = run_in_fresh_loop(scenario)
    with translation.override("ko"):  # the UI language of a socket without a language cookie
        _ = translation.gettext
        assert replies[:2] == [_("malformed message: send a JSON object")] * 2
        assert replies[2] == _("unknown message type %(kind)r") % {"kind": "explode"}
        assert replies[3] == _("type a prompt first")
        assert replies[4] == _("the prompt is too long: at most %(n)d characters") % {"n": 500}
        assert replies[5] == _("only the person who started this run can control it")
    services.run_command(run=DemoRun.objects.get(pk=run.pk), cmd={"type": "stop"})


@pytest.mark.django_db(transaction=True)
def test_a_foreign_origin_is_rejected():
    run = DemoRun.objects.create(spec={}, status="finished")

    async def scenario():
        comm = ws(run.pk, headers=[(b"origin", b"http://evil.example")])
        connected, _ = await comm.connect()
        return connected

    assert run_in_fresh_loop(scenario) is False


@pytest.mark.django_db(transaction=True)
def test_an_unknown_run_closes_the_socket():
    async def scenario():
        comm = ws("00000000-0000-0000-0000-000000000000")
        connected, code = await comm.connect()
        return connected, code

    connected, code = run_in_fresh_loop(scenario)
    assert connected is False and code == 4404
