"""The live view of a served engine: its real requests drawn as the demo's scenes draw theirs.

    /ws/lab/runs/<run id>/live/   the learner who started that lab run: its engine, while it measures
    /ws/lab/site/live/            instructors and staff: the site's engine, the one /v1 serves

One socket per viewer: a snapshot first, then one delta per frame (demo/served_view.py makes
them in the engine's process, FPS a second at most; serving/engines.py starts the drawing for the
first viewer and stops it after the last). The frame handling — skipping stale deltas, a snapshot
on a gap — is the demo's (RunConsumer). Nothing comes in but pings and snapshot requests: a
viewer watches, it does not steer a served engine.
"""
import asyncio
import time

from channels.db import database_sync_to_async
from django.utils.translation import gettext as _

from courseapp.demo import events
from courseapp.demo.consumers import RunConsumer
from courseapp.lab.models import LabRun
from courseapp.serving import engines

RETRY_EVERY_S = 2.0  # an engine that is not open yet (no request so far, a run still queued) is looked for again


def may_watch(name: str, *, user, session) -> bool:
    """The site's engine: instructors and staff. A lab run's: the learner who started it."""
    from courseapp.demo.selectors import learner_id_of, may_teach

    if name == "site":
        return may_teach(user)
    learner_id = learner_id_of(user=user, session=session)
    return learner_id is not None and LabRun.objects.filter(pk=name, learner_id=learner_id).exists()


def _run_active(name: str) -> bool:
    return name == "site" or LabRun.objects.filter(pk=name, status__in=LabRun.ACTIVE).exists()


class ServedViewConsumer(RunConsumer):
    async def connect(self):
        kwargs = self.scope["url_route"]["kwargs"]
        self.name = str(kwargs["run_id"]) if "run_id" in kwargs else "site"
        allowed = await database_sync_to_async(may_watch)(self.name, user=self.scope.get("user"), session=self.scope.get("session"))
        if not allowed:
            await self.close(code=4404)  # someone else's run is as good as missing
            return
        self.run_id = self.name
        self.group = events.group_name(f"served-{self.name}")
        events.bind_server_loop(asyncio.get_running_loop())
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined_at = time.monotonic()
        await self.accept()
        self.last_seen = time.monotonic()
        self.seq, self.behind, self.retry, self.snapshot_read = 0, False, None, 0.0
        self.viewing = False
        await self._open_view(say=True)
        self.watchdog = asyncio.create_task(self._watch())

    def _cleanup(self):
        """However the socket ended (disconnect, or a broken layer that skips it), its view of
        the engine closes too."""
        super()._cleanup()
        if getattr(self, "viewing", False):
            self.viewing = False
            asyncio.get_running_loop().run_in_executor(None, engines.view_close, self.name)

    async def _open_view(self, say: bool = False) -> None:
        name = self.name
        self.viewing = await asyncio.to_thread(engines.view_open, name, lambda m: events.publish(f"served-{name}", m))
        if self.viewing:
            await self._catch_up(asked=True)
        elif say:
            await self._error(_("No engine is serving here yet: the picture appears with the first request."))

    async def _latest(self):
        return engines.view_snapshot(self.name)

    async def _watch(self):
        """Every few seconds: an engine not open yet is looked for again; a lab run that ended says so."""
        while True:
            await asyncio.sleep(RETRY_EVERY_S)
            if not self.viewing:
                if not await database_sync_to_async(_run_active)(self.name):
                    await self.send_json({"type": "status", "status": "finished", "reason": ""})
                    return
                await self._open_view()
            elif engines.view_snapshot(self.name) is None and time.monotonic() - self.last_seen > RETRY_EVERY_S:
                self.viewing = False  # its engine closed (the run ended): view_close already ran for it

    async def _handle(self, message):
        if message.type == "ping":
            await self.send_json({"type": "pong"})
        elif message.type == "snapshot":
            self.behind = True
            await self._catch_up(asked=True)
        else:
            await self._error(_("This view only watches the engine; it takes no commands."))
