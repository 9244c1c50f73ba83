"""A learner's browser for tests that drive a real server over HTTP: its own cookies (session,
CSRF token), and the requests the pages and demo.js send; and a demo run's socket read as
demo.js reads it (watch)."""
import asyncio
import http.cookiejar
import json
import time
import urllib.error
import urllib.parse
import urllib.request


class Browser:
    def __init__(self, url: str):
        self.url, self.jar = url, http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.jar if c.name == name)

    def cookie_header(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar)

    def get(self, path: str) -> tuple[int, str]:
        with self.opener.open(self.url + path, timeout=60) as response:
            return response.status, response.read().decode()

    def post(self, path: str, data: dict | None = None, *, htmx: bool = False, accept: str = "") -> tuple[int, str]:
        headers = {"X-CSRFToken": self.cookie("csrftoken"), "Origin": self.url,
                   **({"HX-Request": "true"} if htmx else {}), **({"Accept": accept} if accept else {})}
        request = urllib.request.Request(self.url + path, data=urllib.parse.urlencode(data or {}).encode(), headers=headers)
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def start(self, preset: str = "", paused: bool = False, **knobs) -> tuple[int, dict]:
        """Start a scene (preset) or the learner's own engine (knobs), as the demo page does."""
        self.get(f"/demo/?preset={preset}" if preset else "/demo/")  # the page: sets the CSRF cookie
        data = {"preset": preset, "paused": "1" if paused else "0"} if preset else {k: str(v) for k, v in knobs.items()}
        status, body = self.post("/demo/runs/", data, accept="application/json")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, {}


ENDED = ("finished", "failed", "expired", "stopped")


def ended(message: dict) -> bool:
    return message.get("status") in ENDED


async def watch(ws_url: str, until=ended, timeout: float = 300, send=None, cookie: str = "", origin: str = ""):
    """Read a demo run's socket until `until(message)` is true and return that message. Frames
    come whole, as the page draws them: the snapshot, then each delta applied to it (a delta
    before the first snapshot waits for it, as in scaled mode where the worker sends it)."""
    import websockets

    from courseapp.demo.traces import FrameMirror

    origin = origin or ws_url.replace("ws://", "http://").split("/ws/")[0]
    headers = {"Cookie": cookie} if cookie else None
    async with websockets.connect(ws_url, origin=origin, additional_headers=headers, max_size=None) as sock:
        if send:
            await sock.send(json.dumps(send))
        deadline, mirror = time.monotonic() + timeout, FrameMirror()
        while time.monotonic() < deadline:
            message = json.loads(await asyncio.wait_for(sock.recv(), timeout=deadline - time.monotonic()))
            if message.get("type") in ("snapshot", "delta"):
                if not mirror.apply(message):
                    continue
                message = {**mirror.state, "type": message["type"], "seq": message["seq"]}
            if until(message):
                return message
    raise TimeoutError("the expected frame never came")


def run_socket(url: str, run_id: str) -> str:
    return url.replace("http://", "ws://") + f"/ws/demo/runs/{run_id}/"
