"""One websocket per watcher of a run: a snapshot first, then frames; prompts and controls in."""
import asyncio
import json
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils.translation import gettext as _

from courseapp.demo import events, selectors, services

MAX_PROMPT_CHARS = 500
WATCH_EVERY_S = 2.0


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        run = await database_sync_to_async(selectors.run_get)(run_id)
        if run is None:
            await self.close(code=4404)
            return
        self.run_id = str(run.id)
        self.group = events.group_name(self.run_id)
        events.bind_server_loop(asyncio.get_running_loop())
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.last_seen = time.monotonic()
        self.failed_sent = False
        # The session and the learner load from the database: not on the event loop.
        self.learner_id = await database_sync_to_async(selectors.learner_id_for)(self.scope.get("user"), self.scope.get("session"))
        await self._send_snapshot(run)
        self.watchdog = asyncio.create_task(self._watch())

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if hasattr(self, "watchdog"):
            self.watchdog.cancel()

    # --- out ---------------------------------------------------------------------------------
    async def run_frame(self, event):
        self.last_seen = time.monotonic()
        await self.send(text_data=event["text"])

    async def _error(self, message: str, **extra):
        await self.send_json({"type": "error", "message": message, **extra})

    async def _send_snapshot(self, run):
        """The current picture first. A run that has not drawn yet sends its opening snapshot to
        the group this socket already joined, so nothing is missed either way."""
        if run.is_active and run.host == "embedded":
            from courseapp.demo.host import embedded

            frame = embedded.latest(self.run_id)
            if frame is not None:
                await self.send_json({**frame, "type": "snapshot"})
                return
            if embedded.is_alive(self.run_id):
                return
        if not run.is_active:
            frame = selectors.run_last_frame(run)
            if frame is not None:
                await self.send_json(frame)
                return
        await self.send_json({"type": "status", "run": self.run_id, "status": run.status, "message": run.error})
        if run.is_active:  # hosted by a worker: ask it for a fresh snapshot
            await database_sync_to_async(services.run_command)(run=run, cmd={"type": "snapshot"})

    async def _watch(self):
        """No frame for a while: check the run's heartbeat so a dead host shows up as failed."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            if time.monotonic() - self.last_seen < WATCH_EVERY_S:
                continue
            run = await database_sync_to_async(selectors.run_get)(self.run_id)
            if run is None:
                return
            if run.status == "running":
                if await database_sync_to_async(services.run_fail_if_stale)(run=run):
                    run.status, run.error = "failed", _("the engine worker stopped responding")
            if run.status == "failed" and not self.failed_sent:
                self.failed_sent = True
                await self.send_json({"type": "error", "status": "failed", "message": run.error or _("the run failed")})

    # --- in ----------------------------------------------------------------------------------
    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Malformed input gets an error frame; the socket stays open."""
        try:
            content = json.loads(text_data or "")
        except (TypeError, ValueError):
            await self._error(_("malformed message: send a JSON object"))
            return
        if not isinstance(content, dict):
            await self._error(_("malformed message: send a JSON object"))
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type")
        run = await database_sync_to_async(selectors.run_get)(self.run_id)
        if run is None or not run.is_active:
            await self._error(_("this run has ended"))
            return
        learner_id = self.learner_id
        user = self.scope.get("user")
        if kind == "ping":
            await self.send_json({"type": "pong"})
        elif kind == "submit":
            await self._submit(run, content, learner_id, user)
        elif kind in ("pause", "resume", "step", "speed", "stop"):
            if not selectors.can_control(run, learner_id=learner_id, user=user):
                await self._error(_("only the person who started this run can control it"))
                return
            cmd = {"type": kind}
            if kind == "speed":
                try:
                    cmd["value"] = float(content.get("value"))
                except (TypeError, ValueError):
                    await self._error(_("speed needs a number"))
                    return
            await database_sync_to_async(services.run_command)(run=run, cmd=cmd)
        else:
            await self._error(_("unknown message type %(kind)r") % {"kind": str(kind)[:40]})

    async def _submit(self, run, content, learner_id, user):
        prompt = content.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            await self._error(_("type a prompt first"))
            return
        if len(prompt) > MAX_PROMPT_CHARS:
            await self._error(_("the prompt is too long: at most %(n)d characters") % {"n": MAX_PROMPT_CHARS})
            return
        if not run.spec.get("open"):
            await self._error(_("this run replays a fixed scene; start your own run to send prompts"))
            return
        who = f"user:{user.pk}" if user is not None and user.is_authenticated else f"learner:{learner_id or self.channel_name}"
        try:
            await database_sync_to_async(services.rate_limit)(key=who, limit=6, per_seconds=60)
        except services.DemoRefused as exc:
            await self._error(str(exc))
            return
        owner = user.get_username() if user is not None and user.is_authenticated else (f"guest {learner_id}" if learner_id else "guest")
        max_tokens = content.get("max_tokens", 64)
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 256:
            await self._error(_("max_tokens must be an integer from 1 to 256"))
            return
        await database_sync_to_async(services.run_command)(
            run=run, cmd={"type": "submit", "prompt": prompt.strip(), "owner": owner, "max_tokens": max_tokens}
        )
