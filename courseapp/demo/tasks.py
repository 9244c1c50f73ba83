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


@shared_task(acks_late=True, name="demo.run")
def run_demo(run_id: str) -> str:
    from courseapp.demo.host import RunSession

    run = DemoRun.objects.filter(pk=run_id).first()
    if run is None or run.status != DemoRun.Status.RUNNING:
        return "skipped"  # e.g. redelivered after its worker died: it was already marked failed
    host = f"celery@{socket.gethostname()}"
    services.run_heartbeat(run_id=run_id, host=host)
    session = RunSession(
        run_id, run.spec, publish=lambda frame: events.publish(run_id, frame),
        heartbeat=lambda: services.run_heartbeat(run_id=run_id, host=host),
    )
    stop = threading.Event()
    poller = threading.Thread(target=_poll_commands, args=(run_id, session, stop), daemon=True)
    poller.start()
    try:
        trace = session.run()
        services.run_finish(run_id=run_id, trace=trace, error=None)
        return "finished"
    except Exception as exc:
        services.run_finish(run_id=run_id, trace=session.trace, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        stop.set()
