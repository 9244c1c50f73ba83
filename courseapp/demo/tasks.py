"""Scaled mode: a Celery worker on the "engine" queue hosts demo runs.

Run one process per GPU host: `celery -A courseapp worker -Q engine --pool threads -c 4`.
The model is loaded lazily on the first run (never before a fork). Commands for a run arrive
on its own channel-layer channel; frames leave through the same events.publish as embedded.
"""
import asyncio
import socket
import threading

from celery import shared_task
from channels.layers import get_channel_layer

from courseapp.demo import events, services
from courseapp.demo.models import DemoRun


def _poll_commands(run_id: str, session, stop: threading.Event) -> None:
    async def loop():
        layer = get_channel_layer()
        channel = events.command_channel(run_id)
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.5)
            except asyncio.TimeoutError:
                continue
            session.command(message.get("cmd", {}))

    asyncio.run(loop())


def _beat(run_id: str, host: str, session, stop: threading.Event) -> None:
    """Heartbeats from a thread of their own: a slow database never holds up an engine step."""
    from django.db import connections

    try:
        while not stop.wait(1.0):
            if session.is_ticking():
                services.run_heartbeat(run_id=run_id, host=host, idle_until=session.idle_until(),
                                       running=session.has_started())
    finally:
        connections.close_all()


@shared_task(acks_late=True, name="demo.run")
def run_demo(run_id: str) -> str:
    from courseapp.demo.host import RunSession

    host = f"celery@{socket.gethostname()}"
    if not services.run_begin(run_id=run_id, host=host):
        return "skipped"  # ended while queued, or redelivered after its worker died
    run = DemoRun.objects.get(pk=run_id)
    session = RunSession(run_id, run.spec, publish=lambda frame: events.publish(run_id, frame))
    stop = threading.Event()
    threading.Thread(target=_poll_commands, args=(run_id, session, stop), daemon=True).start()
    threading.Thread(target=_beat, args=(run_id, host, session, stop), daemon=True).start()
    end: dict = {"error": "interrupted"}
    try:
        session.run()
        end = session.end()
        return "finished"
    except Exception as exc:
        end = {"error": f"{type(exc).__name__}: {exc}"}
        raise
    finally:
        stop.set()
        services.run_finish(run_id=run_id, trace=session.trace.packed(), **end)
