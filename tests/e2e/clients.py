"""A learner's browser for tests that drive a real server over HTTP: its own cookies (session,
CSRF token), and the requests the pages and demo.js send."""
import http.cookiejar
import json
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
