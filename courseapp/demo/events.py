"""The one place that sends to the channel layer, whichever layer is configured.

In the embedded mode the in-memory layer lives on the ASGI server's event loop, and a
group_send from another thread must be scheduled onto that loop (an async_to_sync call from
the engine thread would never be delivered there). In a Celery worker, channels-redis is
reached with async_to_sync.
"""
import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache

from courseapp.demo.traces import encode_text
from courseapp.outages import Outage

logger = logging.getLogger("courseapp.demo")
_server_loop: asyncio.AbstractEventLoop | None = None
# Frames go out many times a second: while the layer is away, one line as that begins and one as
# it ends, not a traceback a frame.
_publishing = Outage("demo frames: channel layer", logger)
SNAPSHOT_KEPT_S = 120  # a run's stored picture outlives a silent worker a little (the reaper ends it)


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called from the websocket consumer (which runs on the server loop)."""
    global _server_loop
    _server_loop = loop


def group_name(run_id: str) -> str:
    return f"run-{run_id.replace('-', '')}"


def command_channel(run_id: str) -> str:
    return f"demo-run.{run_id.replace('-', '')}"


def publish(run_id: str, message: dict) -> None:
    """Send a frame message (traces.FrameStream: a snapshot or a delta) to everyone watching the
    run. Never raises into the engine loop."""
    layer = get_channel_layer()
    # Serialised once here: the in-memory layer deep-copies every message for every watcher,
    # and the consumer then sends the text as it is (200 watchers must not mean 200 encodings).
    # seq and sent_at ride beside the text: a consumer that falls behind skips frames without
    # parsing them (consumers.RunConsumer.run_frame).
    event = {"type": "run.frame", "text": encode_text(message), "kind": message.get("type", ""),
             "seq": message.get("seq", 0), "sent_at": message.get("sent_at", 0.0)}
    try:
        if _server_loop is not None and _server_loop.is_running():
            asyncio.run_coroutine_threadsafe(layer.group_send(group_name(run_id), event), _server_loop)
        else:
            async_to_sync(layer.group_send)(group_name(run_id), event)
    except Exception as exc:  # a full or unreachable layer drops a frame; the viewer asks for a snapshot
        _publishing.failed(exc)
    else:
        _publishing.answered()


def store_snapshot(run_id: str, latest: tuple[int, str] | None) -> None:
    """Scaled mode: a worker keeps its run's latest picture in the cache (Redis), where a viewer
    that connects to any web process, or missed a frame, reads it — 200 viewers joining must not
    mean 200 commands to the worker. Never raises into the engine loop."""
    if latest is None:
        return
    try:
        cache.set(snapshot_key(run_id), latest, SNAPSHOT_KEPT_S)
    except Exception as exc:
        _publishing.failed(exc)


def stored_snapshot(run_id: str) -> tuple[int, str] | None:
    """(seq, snapshot JSON) a worker stored for the run, or None."""
    latest = cache.get(snapshot_key(run_id))
    return tuple(latest) if latest else None


def snapshot_key(run_id: str) -> str:
    return f"demo-snapshot:{run_id}"


SEND_TRIES = 3


async def send_command(run_id: str, cmd: dict) -> None:
    """Scaled mode: a command for a run hosted by a Celery worker. Tried again twice, after a
    short pause: the first send after a Redis restart may meet a pooled connection that died."""
    for attempt in range(SEND_TRIES):
        try:
            await get_channel_layer().send(command_channel(run_id), {"type": "run.command", "cmd": cmd})
            return
        except Exception:
            if attempt == SEND_TRIES - 1:
                raise
            await asyncio.sleep(0.2 * 2**attempt)


def engines_reachable() -> bool:
    """Scaled mode: Redis, where runs are sent to workers and their frames come back, answers a
    PING within a second."""
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False
