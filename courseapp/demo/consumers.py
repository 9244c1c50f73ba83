"""One websocket per watcher of a run: a snapshot first, then one delta per frame (traces.py);
prompts and controls in.

A viewer that finds a gap in the deltas' numbers asks for a snapshot. A socket whose frames
reach it late (its event loop is behind: a hall of viewers on one process) skips the stale deltas
and gets the latest picture instead of working through a queue of old ones."""
import asyncio
import logging
import time

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils.translation import gettext as _
from redis.exceptions import RedisError

from courseapp.demo import events, inbound, keeper, selectors, services

logger = logging.getLogger("courseapp.demo")
WATCH_EVERY_S = 2.0
BEHIND_AFTER_S = 0.5  # a delta older than this when its turn comes is skipped
SNAPSHOTS_EVERY_S = 1.0  # a worker's stored snapshot is read at most this often per socket
MARK_WATCHED_EVERY_S = 10.0  # services.WATCHING_WITHIN allows for two of these to go missing
REJOIN_EVERY_S = 6.0  # a Redis restart empties the groups: each socket joins its run's again this often
LINK_DOWN_CLOSE = 4503  # the socket closes with this when the live connection is down as it opens


class RunConsumer(AsyncJsonWebsocketConsumer):
    """A socket lives through a Redis blip or restart: its receive loop waits and tries again
    (Channels would end the consumer with 1011 and never call disconnect(), leaving its watchdog
    to mark the run watched forever), it re-joins its run's group, which a restart empties, and
    its viewer is told the live connection is down, then gets a fresh picture once it is back."""

    @property
    def channel_receive(self):
        return self._channel_receive

    @channel_receive.setter
    def channel_receive(self, receive):
        # Channels sets this to the layer's receive for this socket's channel just before its
        # dispatch loop starts: wrapped here, so a broken layer costs a retry, not the socket.
        async def surviving():
            while True:
                try:
                    message = await receive()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    await self._link_failed(exc)
                    continue
                await self._link_answered()
                return message

        self._channel_receive = surviving

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the socket ended, nothing of it keeps running
            self._cleanup()

    async def connect(self):
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        run = await database_sync_to_async(selectors.run_get)(run_id)
        if run is None:
            await self.close(code=4404)
            return
        self.run_id = str(run.id)
        self.group = events.group_name(self.run_id)
        events.bind_server_loop(asyncio.get_running_loop())
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except Exception:  # Redis away: say so, and let the page try again
            await self.accept()
            await self.send_json(self._link_frame("down"))
            await self.close(code=LINK_DOWN_CLOSE)
            return
        self.joined_at = time.monotonic()
        await self.accept()
        self.last_seen = time.monotonic()
        self.ended_sent = False
        self.seq = 0  # the last frame message this socket sent
        self.behind = False  # skipped deltas: the next frame goes as a snapshot
        self.snapshot_read = 0.0  # when this socket last read a worker's stored snapshot
        self.retry: asyncio.Task | None = None  # reads it again once the second is over
        # The session and the learner load from the database: not on the event loop.
        self.viewer = await database_sync_to_async(selectors.viewer_for)(run, user=self.scope.get("user"), session=self.scope.get("session"))
        await self._mark_watched()
        await self._send_snapshot(run)
        self.watchdog = asyncio.create_task(self._watch())

    async def disconnect(self, code):
        self._cleanup()
        if hasattr(self, "group"):
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception:  # Redis away: the membership expires with the group
                pass

    def _cleanup(self):
        for name in ("watchdog", "retry"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()

    # --- the live connection (Redis) ---------------------------------------------------------
    link_down_since: float | None = None
    link_pause = 0.25

    def _link_frame(self, state: str) -> dict:
        message = _("The live connection to the engine is down; retrying…") if state == "down" else ""
        return {"type": "link", "state": state, "message": message}

    async def _link_failed(self, exc: Exception) -> None:
        """Redis did not answer this socket: tell the viewer once, then wait a growing pause."""
        if self.link_down_since is None:
            self.link_down_since = time.monotonic()
            self.link_pause = 0.25
            logger.info("demo socket for run %s: live connection down (%s)", getattr(self, "run_id", "?"), type(exc).__name__)
            try:
                await self.send_json(self._link_frame("down"))
            except Exception:
                pass
        await asyncio.sleep(self.link_pause)
        self.link_pause = min(5.0, self.link_pause * 2)

    async def _link_answered(self) -> None:
        """Redis answers again: join the group anew (a restart emptied it) and send the latest
        picture, so the viewer is not left with a still frame marked live."""
        if self.link_down_since is None:
            return
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except Exception as exc:
            await self._link_failed(exc)
            return
        self.link_down_since, self.joined_at = None, time.monotonic()
        await self.send_json(self._link_frame("up"))
        self.behind = True
        await self._catch_up(asked=True)

    # --- out ---------------------------------------------------------------------------------
    async def run_frame(self, event):
        self.last_seen = time.monotonic()
        kind, seq = event.get("kind"), event.get("seq", 0)
        if kind in ("snapshot", "delta") and seq <= self.seq:
            return  # the picture this socket has already holds it
        if kind == "delta":
            late = time.time() - event.get("sent_at", 0) > BEHIND_AFTER_S
            if self.behind or late or seq != self.seq + 1:  # this delta would not build the right picture
                self.behind = True
                await self._catch_up()
                if self.behind or seq != self.seq + 1:
                    return
        elif kind == "snapshot":
            self.behind = False
        await self.send(text_data=event["text"])
        if kind in ("snapshot", "delta"):
            self.seq = seq

    async def _catch_up(self, asked: bool = False) -> bool:
        """Send the latest picture in place of the deltas skipped; True if one went out. Either
        way the socket is no longer behind once it holds the latest picture there is. `asked`:
        the viewer asked (its picture broke): it gets one even if this socket sent that frame."""
        latest = await self._latest()
        if latest is None:
            return False
        self.behind = False
        if latest[0] <= self.seq and not asked:
            return False
        self.seq, text = latest
        await self.send(text_data=text)
        return True

    async def _latest(self) -> tuple[int, str] | None:
        """(seq, snapshot JSON): from this process's copy of an engine-process or thread run, else
        (a worker hosts it) the one the worker stored — read at most once a second per socket; a
        socket refused meanwhile looks again when the second is over, so it never stays behind
        after the last frame."""
        from courseapp.demo.host import embedded

        latest = embedded.latest_snapshot(self.run_id)
        if latest is not None:
            return latest
        wait = self.snapshot_read + SNAPSHOTS_EVERY_S - time.monotonic()
        if wait > 0:
            if self.retry is None or self.retry.done():
                self.retry = asyncio.create_task(self._catch_up_after(wait))
            return None
        self.snapshot_read = time.monotonic()
        return await sync_to_async(events.stored_snapshot)(self.run_id)

    async def _catch_up_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        if self.behind:
            await self._catch_up(asked=True)

    async def _error(self, message: str, **extra):
        await self.send_json({"type": "error", "message": message, **extra})

    async def _mark_watched(self):
        self.marked_at = time.monotonic()
        keeper.ensure_started()  # the reaper runs wherever someone watches
        await database_sync_to_async(services.run_watched)(run_id=self.run_id)

    async def _send_snapshot(self, run):
        """The current picture first. A run that has not drawn yet sends its opening snapshot to
        the group this socket already joined, so nothing is missed either way."""
        if run.is_active:
            from courseapp.demo.host import embedded

            if await self._catch_up():
                return
            if run.host == "embedded" and embedded.is_alive(self.run_id):
                return
        else:
            self.ended_sent = True
            if selectors.can_read_trace(run, self.viewer):
                frame = await database_sync_to_async(selectors.run_last_frame)(run)
                if frame is not None:
                    await self.send_json(frame)
                    return
        await self._send_status(run)

    async def _send_status(self, run):
        await self.send_json(await database_sync_to_async(selectors.run_status)(run))

    async def _watch(self):
        """Every few seconds: tell the reaper someone watches; and if no frame came, check the
        run, so a dead host shows up as failed and a run ended from outside says why."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            if self.link_down_since is not None:
                await self._link_answered()  # re-joins and sends the latest picture, or waits longer
            elif time.monotonic() - self.joined_at >= REJOIN_EVERY_S:
                try:
                    await self.channel_layer.group_add(self.group, self.channel_name)
                    self.joined_at = time.monotonic()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    await self._link_failed(exc)
            try:
                if time.monotonic() - self.marked_at >= MARK_WATCHED_EVERY_S:
                    await self._mark_watched()
                if time.monotonic() - self.last_seen < WATCH_EVERY_S or self.ended_sent:
                    continue
                run = await database_sync_to_async(selectors.run_get)(self.run_id)
                if run is None:
                    return
                if run.status == "running" and await database_sync_to_async(services.run_fail_if_stale)(run=run):
                    run = await database_sync_to_async(selectors.run_get)(self.run_id)
                if not run.is_active:
                    self.ended_sent = True
                    if run.status == "failed":
                        await self._error(run.error or _("the run failed"), status="failed")
                    else:
                        await self._send_status(run)
                elif run.status in ("queued", "starting"):  # no frame yet: where it waits, who builds it
                    await self._send_status(run)
            except asyncio.CancelledError:
                raise
            except Exception:  # a busy database: look again next round
                logger.warning("demo watchdog for run %s", self.run_id, exc_info=True)

    # --- in ----------------------------------------------------------------------------------
    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Whatever arrives, the answer is a frame and the socket stays open."""
        try:
            message = inbound.validate(inbound.parse(text_data))
            await self._handle(message)
        except inbound.Invalid as exc:
            await self._error(str(exc))
        except services.DemoRefused as exc:
            await self._error(str(exc))
        except (RedisError, ConnectionError) as exc:  # the command could not be handed on
            logger.warning("demo socket message for run %s not delivered: %s", self.run_id, exc)
            await self._error(_("The live connection to the engine is down; that did not reach it. Send it again in a moment."))
        except Exception:
            logger.exception("demo socket message for run %s", self.run_id)
            await self._error(_("the server could not handle that message"))

    async def _handle(self, message: inbound.Message):
        if message.type == "ping":
            await self.send_json({"type": "pong"})
            return
        if message.type == "snapshot":  # the viewer found a gap in the deltas
            self.behind = True
            await self._catch_up(asked=True)
            return
        run = await database_sync_to_async(selectors.run_get)(self.run_id)
        if run is None or not run.is_active:
            await self._error(_("this run has ended"))
            return
        if message.type == "submit":
            await self._submit(run, message)
            return
        if not selectors.can_control(run, self.viewer):
            await self._error(_("only the person who started this run can control it"))
            return
        if message.type == "stop":
            await database_sync_to_async(services.run_end)(run=run, status="stopped", reason="owner")
            return
        cmd = {"type": message.type, **({"value": message.value} if message.type == "speed" else {})}
        await database_sync_to_async(services.run_command)(run=run, cmd=cmd)

    async def _submit(self, run, message: inbound.Message):
        if not run.spec.get("open"):
            await self._error(_("this run replays a fixed scene; start your own run to send prompts"))
            return
        if not selectors.can_submit(run, self.viewer):
            if run.is_class:
                await self._error(_("join this class run with its code to send prompts"))
            else:
                await self._error(_("only the person who started this run can send prompts to it"))
            return
        # Only a valid prompt from someone allowed to send it counts against the limit.
        await database_sync_to_async(services.prompt_allow)(learner_id=self.viewer.learner_id)
        cmd = {"type": "submit", "prompt": message.prompt, "max_tokens": message.max_tokens,
               "owner": selectors.owner_label(run, self.viewer)}
        await database_sync_to_async(services.run_command)(run=run, cmd=cmd)

