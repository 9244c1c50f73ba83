"""How runs end: nobody watching, never picked up, too old, a host gone silent, paused too long;
and the writes that report it surviving a locked database."""
import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.db.models.query import QuerySet
from django.utils import timezone

from courseapp.demo import limits, services
from courseapp.demo.models import DemoRun
from tests.courseapp.demo.watcher import Watcher


def ago(seconds):
    return timezone.now() - timedelta(seconds=seconds)


@pytest.fixture
def commands(monkeypatch):
    sent = []
    monkeypatch.setattr(services, "run_command", lambda *, run, cmd: sent.append((str(run.pk), cmd)) or True)
    return sent


@pytest.mark.django_db
def test_the_reaper_ends_runs_nobody_watches_or_no_worker_took(commands):
    watched = DemoRun.objects.create(spec={}, status="running", watched_at=ago(5), heartbeat_at=timezone.now())
    left = DemoRun.objects.create(spec={}, status="running", watched_at=ago(61), heartbeat_at=timezone.now())
    queued = DemoRun.objects.create(spec={}, status="queued", watched_at=ago(5))
    DemoRun.objects.filter(pk=queued.pk).update(created_at=ago(61))
    old = DemoRun.objects.create(spec={}, status="running", watched_at=ago(5), heartbeat_at=timezone.now(), expires_at=ago(1))

    ended = services.runs_reap()

    assert set(ended) == {str(left.pk), str(queued.pk), str(old.pk)}
    reasons = dict(DemoRun.objects.values_list("pk", "end_reason"))
    assert reasons[left.pk] == "no_viewer" and reasons[queued.pk] == "no_worker" and reasons[old.pk] == "lifetime"
    assert DemoRun.objects.get(pk=watched.pk).status == "running"
    assert DemoRun.objects.get(pk=left.pk).status == "expired"
    never = DemoRun.objects.get(pk=queued.pk)
    assert never.status == "failed" and "60" in never.end_message  # "no engine worker took it within 60 s"
    assert (str(left.pk), {"type": "stop", "reason": "no_viewer", "status": "expired", "message": ""}) in commands
    assert services.runs_reap() == []  # once


@pytest.mark.django_db
def test_a_worker_that_stopped_beating_fails_its_run_but_a_live_local_run_does_not(commands, monkeypatch):
    from courseapp.demo.host import embedded

    silent = DemoRun.objects.create(spec={}, status="running", host="celery@gone", watched_at=ago(1), heartbeat_at=ago(30))
    local = DemoRun.objects.create(spec={}, status="running", host="embedded", watched_at=ago(1), heartbeat_at=ago(30))
    monkeypatch.setattr(embedded, "is_ticking", lambda run_id: run_id == str(local.pk))  # its heartbeat waits on a lock
    services.runs_reap()
    lost = DemoRun.objects.get(pk=silent.pk)
    assert (lost.status, lost.end_reason) == ("failed", "worker_lost") and "celery@gone" in lost.end_message
    assert DemoRun.objects.get(pk=local.pk).status == "running"


@pytest.mark.django_db
def test_a_run_whose_engine_is_still_loading_is_starting_not_stale(commands, settings):
    """A worker that took a run beats while the model loads (status "starting"); the staleness
    clock is for a silent host, the start limit for an engine that never comes up."""
    settings.DEMO_START_WITHIN_S = 120
    run = DemoRun.objects.create(spec={}, status="queued", watched_at=timezone.now())
    assert services.run_begin(run_id=str(run.pk), host="celery@w1")
    assert DemoRun.objects.get(pk=run.pk).status == "starting"
    assert not services.run_begin(run_id=str(run.pk), host="celery@w2"), "a second delivery is dropped"
    DemoRun.objects.filter(pk=run.pk).update(started_at=ago(60))
    services.run_heartbeat(run_id=str(run.pk), host="celery@w1", running=False)  # still loading after 60 s
    assert services.runs_reap() == [] and DemoRun.objects.get(pk=run.pk).status == "starting"
    services.run_heartbeat(run_id=str(run.pk), host="celery@w1", running=True)
    assert DemoRun.objects.get(pk=run.pk).status == "running"

    slow = DemoRun.objects.create(spec={}, status="starting", host="celery@w1", watched_at=timezone.now(),
                                  started_at=ago(121), heartbeat_at=timezone.now())
    assert services.runs_reap() == [str(slow.pk)]
    slow.refresh_from_db()
    assert (slow.status, slow.end_reason) == ("failed", "start_timeout") and "120" in slow.end_message


@pytest.fixture
def locked_once(monkeypatch):
    """The next UPDATE fails the way SQLite does after its busy timeout."""
    real_update = QuerySet.update
    failures = {"left": 1}

    def update(self, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("database is locked")
        return real_update(self, **kwargs)

    monkeypatch.setattr(QuerySet, "update", update)
    monkeypatch.setattr(services.time, "sleep", lambda s: None)
    return failures


@pytest.mark.django_db
def test_a_heartbeat_survives_a_transient_lock(locked_once):
    run = DemoRun.objects.create(spec={}, status="running", heartbeat_at=ago(8))
    services.run_heartbeat(run_id=str(run.pk))
    run.refresh_from_db()
    assert run.status == "running" and timezone.now() - run.heartbeat_at < timedelta(seconds=2)


@pytest.mark.django_db
def test_a_heartbeat_never_raises_even_if_the_lock_stays(locked_once):
    run = DemoRun.objects.create(spec={}, status="running", heartbeat_at=ago(3))
    locked_once["left"] = 100
    services.run_heartbeat(run_id=str(run.pk))  # logged, not raised: the run goes on
    run.refresh_from_db()
    assert run.status == "running"


@pytest.mark.django_db
def test_a_runs_end_is_recorded_through_a_lock_and_keeps_its_trace(locked_once):
    run = DemoRun.objects.create(spec={}, status="stopped", end_reason="replaced")  # stopped from outside first
    services.run_finish(run_id=str(run.pk), trace=b"packed", status="stopped", reason="replaced")
    run.refresh_from_db()
    assert run.status == "stopped" and run.end_reason == "replaced" and bytes(run.trace_packed) == b"packed"


@pytest.mark.django_db
def test_a_run_that_finished_as_the_next_scene_opened_is_recorded_finished(commands):
    run = DemoRun.objects.create(spec={}, status="stopped", end_reason="replaced")
    services.run_finish(run_id=str(run.pk), trace=b"packed", status="finished")
    run.refresh_from_db()
    assert run.status == "finished" and run.end_reason == ""


@pytest.mark.django_db
def test_prompts_are_limited_over_a_sliding_minute(monkeypatch):
    clock = {"now": 1_000_050.0}  # 50 s into a fixed window
    monkeypatch.setattr(limits.time, "time", lambda: clock["now"])
    assert all(limits.hit(key="t", limit=6, window=60) for _ in range(6))
    assert not limits.hit(key="t", limit=6, window=60)
    clock["now"] += 15  # a new fixed window began; the last minute still holds six
    assert not limits.hit(key="t", limit=6, window=60)
    clock["now"] += 60
    assert limits.hit(key="t", limit=6, window=60)


@pytest.mark.parametrize("store", ["memory", "files"])
def test_ten_guesses_still_count_ten_just_after_a_window_boundary(monkeypatch, tmp_path, store):
    """The previous window's count is carried over rounded up: right after a boundary ten wrong
    join codes are ten (weighted, 9.99 let the eleventh try through)."""
    if store == "files":  # HTTP worker processes without Redis
        from django.core.cache.backends.filebased import FileBasedCache

        cache = FileBasedCache(str(tmp_path), {})
        monkeypatch.setattr(limits, "_cache", lambda: cache)
    clock = {"now": 600_000.0 - 0.1}  # a tenth of a second before a 10-minute window ends
    monkeypatch.setattr(limits.time, "time", lambda: clock["now"])
    for _ in range(10):
        limits.add(key="guesser", window=600)
    assert limits.over(key="guesser", limit=10, window=600)
    clock["now"] += 0.2
    assert limits.over(key="guesser", limit=10, window=600)
    assert not limits.hit(key="guesser", limit=10, window=600)


@pytest.mark.django_db(transaction=True)
def test_a_paused_run_with_nothing_happening_ends(settings):
    settings.DEMO_PAUSED_IDLE_S = 1
    spec = services.run_spec(preset="preemption", paused=True)
    run = services.run_start(owner=None, spec=spec).run
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if not run.is_active:
            break
        time.sleep(0.2)
    assert run.status == "expired" and run.end_reason == "paused_idle"
    assert run.finished_at is not None


@pytest.mark.django_db(transaction=True)
def test_an_engine_failure_ends_its_run_with_the_reason_and_nothing_else(monkeypatch):
    import engine

    def broken_step(self):
        raise RuntimeError("the KV pool is on fire")

    monkeypatch.setattr(engine.LLMEngine, "step", broken_step)
    run = services.run_start(owner=None, spec=services.run_spec(preset="concurrency")).run
    for _ in range(300):
        run.refresh_from_db()
        if not run.is_active:
            break
        time.sleep(0.1)
    assert run.status == "failed" and run.error == "RuntimeError: the KV pool is on fire"
    # The process goes on: the next run starts and ends normally.
    monkeypatch.undo()
    spec = services.run_spec(preset="concurrency")
    spec["step_delay"] = 0
    after = services.run_start(owner=None, spec=spec).run
    for _ in range(600):
        after.refresh_from_db()
        if not after.is_active:
            break
        time.sleep(0.1)
    assert after.status == "finished"


@pytest.mark.django_db
def test_a_run_ended_from_outside_ends_its_frames_with_the_same_status_and_reason():
    """The page (frames) and the summary (the database) never disagree: a stop sent by run_end
    carries the status and message it wrote."""

    from courseapp.demo.host import RunSession

    spec = services.run_spec(preset="reservation", paused=True)
    watcher = Watcher()
    session = RunSession("outside-end", spec, publish=watcher)
    assert session.is_ticking() and not session.has_started()  # building: alive, not yet running
    thread = threading.Thread(target=session.run, daemon=True)  # a failing assert below must not leave it holding the interpreter
    thread.start()
    for _ in range(600):
        if session.has_started():
            break
        time.sleep(0.05)
    session.command({"type": "stop", "reason": "worker_lost", "status": "failed", "message": "its engine worker was lost"})
    thread.join(30)
    last = watcher.frames[-1]
    assert (last["status"], last["reason"], last["message"]) == ("failed", "worker_lost", "its engine worker was lost")


@pytest.mark.django_db
def test_a_run_ends_itself_at_its_lifetime_whoever_hosts_it():
    """A Celery threads pool enforces no time limit: the run's own loop does."""
    from courseapp.demo.host import RunSession

    spec = {**services.run_spec(preset="reservation", paused=True), "max_run_s": 0.5}
    watcher = Watcher()
    thread = threading.Thread(target=RunSession("lifetime", spec, publish=watcher).run, daemon=True)
    thread.start()
    thread.join(120)  # a hang guard, not a timing: a paused run without its limit never ends
    assert not thread.is_alive(), "the paused run outlived its lifetime"
    assert (watcher.frames[-1]["status"], watcher.frames[-1]["reason"]) == ("expired", "lifetime")


def test_a_hosts_last_picture_of_a_run_outlives_its_session():
    """A socket that is behind when its run ends catches up after the session has left the host:
    the host keeps the final picture (EmbeddedHost here; ProcessHost keeps its mirror's)."""
    import json

    from courseapp.demo.host import EmbeddedHost

    host, ended = EmbeddedHost(), threading.Event()
    spec = services.run_spec(preset="concurrency")
    spec["step_delay"] = 0
    host.start("kept-run", spec, publish=lambda message: None, on_begin=lambda: True,
               on_finish=lambda end: ended.set())
    assert ended.wait(120)
    assert not host.is_alive("kept-run")
    seq, text = host.latest_snapshot("kept-run")
    picture = json.loads(text)
    assert picture["type"] == "snapshot" and picture["seq"] == seq and picture["status"] == "finished"
    assert host.latest_snapshot("never-ran") is None
