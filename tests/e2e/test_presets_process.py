"""One Daphne process, the real engine: the five scenes back to back, then three at once; and
twenty learners starting scenes in the same instant. The process must live through it all."""
import asyncio
import threading
import time

import pytest

from courseapp.demo import presets
from courseapp.demo.models import DemoRun
from tests.aio import run_in_fresh_loop
from tests.e2e import clients
from tests.e2e.clients import Browser
from tests.e2e.conftest import start_daphne, stop_process

pytestmark = pytest.mark.e2e


async def watch_to_the_end(url: str, run_id: str, timeout: float = 300) -> dict:
    """Read the run's frames until it ends; the last one."""
    return await clients.watch(clients.run_socket(url, run_id), timeout=timeout)


# `make run` hosts the engine in a child process; DEMO_ENGINE_PROCESS=0 keeps it in threads of Daphne.
HOSTS = [pytest.param({"DEMO_ENGINE_PROCESS": "1"}, id="engine-process"), pytest.param({"DEMO_ENGINE_PROCESS": "0"}, id="threads")]


@pytest.fixture
def daphne(transactional_db, request):
    proc, url, log = start_daphne(getattr(request, "param", {}))
    yield proc, url
    stop_process(proc)
    log.close()


def _three_at_once(proc, url) -> None:
    three = ["reservation", "preemption", "static-vs-continuous"]
    started = [Browser(url).start(name) for name in three]
    assert [status for status, _ in started] == [201, 201, 201]

    async def watch_all():
        return await asyncio.gather(*(watch_to_the_end(url, run["run"]) for _, run in started))

    ends = run_in_fresh_loop(watch_all, timeout=600)
    assert [end["status"] for end in ends] == ["finished"] * 3
    assert proc.poll() is None, "the server died with three scenes at once"


def _all_rows_finished(count: int) -> None:
    for _ in range(100):  # each run's row is written just after its final frame
        if not DemoRun.objects.filter(status__in=DemoRun.ACTIVE).exists():
            break
        time.sleep(0.1)
    assert sorted(DemoRun.objects.values_list("status", flat=True)) == ["finished"] * count


@pytest.mark.parametrize("daphne", HOSTS[:1], indirect=True)
def test_the_five_scenes_back_to_back_and_three_at_once_in_one_process(daphne):
    """As `make run` hosts them. (In threads, every scene also runs in tests/e2e/test_demo.py.)"""
    proc, url = daphne
    learner = Browser(url)
    for name in presets.PRESETS:
        status, run = learner.start(name)
        assert status == 201, name
        last = run_in_fresh_loop(lambda: watch_to_the_end(url, run["run"]))
        assert last["status"] == "finished", (name, last)
        assert proc.poll() is None, f"the server died during {name}"
    _three_at_once(proc, url)
    _all_rows_finished(8)


@pytest.mark.parametrize("daphne", HOSTS[1:], indirect=True)
def test_three_scenes_at_once_in_threads_of_one_process(daphne):
    proc, url = daphne
    _three_at_once(proc, url)
    _all_rows_finished(3)


@pytest.mark.parametrize("daphne", [{"DEMO_MAX_ACTIVE_RUNS": "8", "DEMO_MAX_RUNS_PER_ADDRESS": "20", "DEMO_ENGINE_PROCESS": "1"}], indirect=True)
def test_twenty_learners_starting_scenes_at_once_get_no_server_error(daphne):
    proc, url = daphne
    learners = [Browser(url) for _ in range(20)]
    codes: list[int] = []
    gate = threading.Barrier(20)

    def go(learner):
        gate.wait()
        codes.append(learner.start("preemption", paused=True)[0])

    threads = [threading.Thread(target=go, args=(learner,), daemon=True) for learner in learners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(codes) == [201] * 8 + [503] * 12  # exactly the cap, the rest told to wait
    assert DemoRun.objects.count() == 8
    assert proc.poll() is None


# Steps slow enough that no scene can end by itself before the stop, however busy the machine.
SLOW = [pytest.param({**host.values[0], "DEMO_STEP_DELAY": "0.1"}, id=host.id) for host in HOSTS]


@pytest.mark.parametrize("daphne", SLOW, indirect=True)
def test_stopping_the_server_mid_scene_ends_the_runs_and_exits_cleanly(daphne):
    """Ctrl-C or SIGTERM while engines run: the runs end ("the server restarted") and the
    process exits normally, not with a native abort from engine threads inside torch."""
    proc, url = daphne
    runs = [Browser(url).start(name)[1]["run"] for name in ("reservation", "preemption", "concurrency")]
    for _ in range(300):
        if DemoRun.objects.filter(pk__in=runs, status="running").count() == 3:
            break
        time.sleep(0.1)
    time.sleep(1)  # the engines are mid-step
    proc.terminate()
    assert proc.wait(30) == 0
    assert set(DemoRun.objects.values_list("status", "end_reason")) == {("stopped", "shutdown")}
