"""`make run`'s engine process: runs go through it start to end, and when it dies its runs end
as failed with the reason while the web process (this one) carries on and the next run works."""
import os
import signal
import threading
import time

import pytest

from courseapp.demo import services
from courseapp.demo.engine_process import EngineProcess
from tests.courseapp.demo.watcher import Watcher


class Recorder:
    def __init__(self):
        self.watcher, self.ends = Watcher(), []
        self.first_frame, self.ended = threading.Event(), threading.Event()

    def publish(self, message):
        self.watcher(message)
        self.first_frame.set()

    @property
    def frames(self):
        return self.watcher.frames

    def finish(self, end):
        self.ends.append(end)
        self.ended.set()


def _start(host, run_id, spec):
    rec = Recorder()
    host.start(run_id, spec, publish=rec.publish, on_begin=lambda: True, on_finish=rec.finish)
    return rec


@pytest.fixture
def host():
    host = EngineProcess(torch_threads=1)
    yield host
    host.shutdown()


def test_a_scene_runs_to_its_end_in_the_engine_process(host):
    rec = _start(host, "00000000-0000-0000-0000-000000000001", services.run_spec(preset="concurrency"))
    assert rec.ended.wait(180), "the scene never ended"
    assert rec.ends == [{"trace": rec.ends[0]["trace"], "status": "finished", "reason": ""}]
    assert rec.ends[0]["trace"]  # packed, for replay
    last = rec.frames[-1]
    assert last["status"] == "finished"
    assert [lane["stats"]["tokens"] for lane in last["lanes"]] == [40, 8 * 40]
    assert host._proc.pid != os.getpid() and host.live() == []


def test_when_the_engine_process_dies_its_runs_fail_with_the_reason_and_the_next_run_works(host):
    run_id = "00000000-0000-0000-0000-000000000002"
    rec = _start(host, run_id, services.run_spec(preset="preemption", paused=True))
    assert rec.first_frame.wait(180)
    assert host.is_alive(run_id) and host.latest_snapshot(run_id) is not None
    dead = host._proc
    os.kill(dead.pid, signal.SIGKILL)  # what a native abort inside torch would look like
    assert rec.ended.wait(30)
    assert rec.ends[0]["error"] == f"the engine process stopped (exit code {-signal.SIGKILL})"
    assert not host.is_alive(run_id)
    deadline = time.monotonic() + 5
    while host._proc is dead and time.monotonic() < deadline:
        time.sleep(0.05)

    again = _start(host, "00000000-0000-0000-0000-000000000003", services.run_spec(preset="concurrency"))
    assert again.ended.wait(180)
    assert again.ends[0]["status"] == "finished"
    assert host._proc.pid != dead.pid


def test_commands_reach_a_run_in_the_engine_process(host):
    run_id = "00000000-0000-0000-0000-000000000004"
    rec = _start(host, run_id, services.run_spec(preset="preemption", paused=True))
    assert rec.first_frame.wait(180)
    assert rec.frames[-1]["paused"] is True
    assert host.command(run_id, {"type": "stop", "reason": "owner"})
    assert rec.ended.wait(30)
    assert rec.ends[0]["status"] == "stopped" and rec.ends[0]["reason"] == "owner"
    assert not host.command(run_id, {"type": "step"})  # gone
