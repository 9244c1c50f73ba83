"""Scaled mode: a Celery worker on the "engine" queue hosts demo runs.

Run one process per GPU host: `celery -A courseapp worker -Q engine --pool threads -c 6 -n
engine1@%h -l info` (README: Scaled mode). The worker loads the model once it is ready, in the
background (courseapp/demo/worker.py; never before a fork). Commands for a run arrive on its own
channel-layer channel; frames leave through the same events.publish as embedded.
"""
import asyncio
import logging
import socket
import threading

from celery import shared_task
from channels.layers import get_channel_layer

from courseapp.demo import events, selectors, services, worker
from courseapp.outages import Outage
from courseapp.demo.models import DemoRun

logger = logging.getLogger("courseapp.demo")


def _poll_commands(run_id: str, session, stop: threading.Event) -> None:
    """The run's commands, for as long as it lives: a Redis blip or restart costs a retry, not
    the listener (a run whose listener died would ignore its owner's stop for good)."""
    async def loop():
        layer = get_channel_layer()
        channel = events.command_channel(run_id)
        outage = Outage(f"demo run {run_id}: command channel", logger)
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.5)
            except asyncio.TimeoutError:  # nothing came; while an outage lasts, a PING says whether it is over
                if outage.down and await asyncio.to_thread(events.engines_reachable):
                    outage.answered()
                continue
            except Exception as exc:  # Redis away: wait, then listen again
                await asyncio.sleep(outage.failed(exc))
                continue
            outage.answered()
            session.command(message.get("cmd", {}))

    asyncio.run(loop())


def _beat(run_id: str, host: str, session, stop: threading.Event) -> None:
    """Heartbeats from a thread of their own: a slow database never holds up an engine step.
    The database also says when the run was ended from outside (its owner, a replacing scene,
    the reaper) while the command saying so could not reach this worker: the run stops then."""
    from django.db import close_old_connections, connections

    outage = Outage(f"demo run {run_id}: heartbeat", logger)
    try:
        while not stop.wait(1.0):
            close_old_connections()  # a connection PostgreSQL dropped is replaced, not reused
            try:
                if not session.is_ticking():
                    continue
                alive = services.run_heartbeat(run_id=run_id, host=host, idle_until=session.idle_until(),
                                               running=session.has_started())
                if alive is False:
                    ended = selectors.run_end_state(run_id)
                    if ended is not None:
                        session.command({"type": "stop", **ended})
                if alive is None:
                    raise ConnectionError("the database did not take the heartbeat")
                outage.answered()
            except Exception as exc:  # never the thread: the next beat tries again
                outage.failed(exc)
    finally:
        connections.close_all()


@shared_task(bind=True, acks_late=True, ignore_result=True, name="demo.run")
def run_demo(self, run_id: str) -> str:
    from courseapp.demo.host import RunSession

    host = self.request.hostname or f"celery@{socket.gethostname()}"  # the worker's -n name
    if not services.run_begin(run_id=run_id, host=host):
        # Ended while queued (nobody watched, no worker in time), or delivered again after it
        # already ran here or on a worker that died: never replayed from scratch for nobody.
        status = DemoRun.objects.filter(pk=run_id).values_list("status", "end_reason", "host").first()
        logger.info("demo run %s dropped on %s: it is %s", run_id, host, status or "gone")
        return "dropped"
    run = DemoRun.objects.get(pk=run_id)
    session = RunSession(run_id, run.spec, publish=None)

    def publish(message: dict) -> None:
        events.publish(run_id, message)
        events.store_snapshot(run_id, session.snapshot_text())  # for viewers of any web process

    session.publish = publish
    worker.serving(run_id, session)
    stop = threading.Event()
    threading.Thread(target=_poll_commands, args=(run_id, session, stop), daemon=True).start()
    threading.Thread(target=_beat, args=(run_id, host, session, stop), daemon=True).start()
    try:
        end = session.run_to_end(worker.shutting_down.is_set, shutdown_reason="worker_shutdown")
    finally:
        stop.set()
        worker.served(run_id)
    services.run_finish(run_id=run_id, **end)
    return end.get("status", "failed")
