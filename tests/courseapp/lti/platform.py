"""A test LMS built on lti1p3platform: its own RSA key and JWKS, an OAuth2 token endpoint, and a
line item whose score endpoint records what arrives (and fails on request). It serves HTTP on a
local port, since the tool fetches the JWKS and posts scores over the network as with a real LMS."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
from jwcrypto.jwk import JWK
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request

SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"


class _Request(Request):
    def build_metadata(self, params: dict):
        return {"method": "POST", "form_data": params, "get_data": {}, "headers": {}, "content_type": None,
                "path": "", "json": None}


class _Conf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, registration=None, **kwargs):
        self._registration = registration

    def get_registration_by_params(self, **kwargs):
        return self._registration


class _Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs):
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url):
        return url


class _Launch(LTIAdvantageMessageLaunchAbstract):
    def render_launch_form(self, launch_data, **kwargs):
        return launch_data


class Platform:
    """`fail_scores = n` makes the next n score posts answer 503."""

    def __init__(self, *, tool_jwks: dict, client_id: str = "course-client", deployment_id: str = "dep-1"):
        key = JWK.generate(kty="RSA", size=2048)
        self.client_id, self.deployment_id = client_id, deployment_id
        self.scores: list[dict] = []
        self.score_headers: list[dict] = []
        self.tokens_issued = 0
        self.fail_scores = 0
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.iss = f"http://127.0.0.1:{self._http.server_address[1]}"
        self.registration = (Registration().set_iss(self.iss).set_client_id(client_id).set_deployment_id(deployment_id)
                             .set_platform_public_key(key.export_to_pem().decode())
                             .set_platform_private_key(key.export_to_pem(private_key=True, password=None).decode())
                             .set_tool_key_set(tool_jwks))
        self.conf = _Conf(registration=self.registration)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def close(self):
        self._http.shutdown()
        self._http.server_close()

    auth_url = property(lambda self: f"{self.iss}/auth")
    token_url = property(lambda self: f"{self.iss}/token")
    keyset_url = property(lambda self: f"{self.iss}/jwks")

    def lineitem_url(self, n: int = 1) -> str:
        return f"{self.iss}/lineitems/{n}/lineitem"

    def login_url(self, *, tool_login_url: str, launch_url: str, user_id: str) -> str:
        """Step 1, the LMS's side: the tool's OIDC login URL with the launch's parameters."""
        self.registration.set_oidc_login_url(tool_login_url).set_launch_url(launch_url)
        login = _Login(None, self.conf)
        login.set_lti_message_hint(hint=f"resource-for-{user_id}")
        return login.initiate_login(user_id)

    def launch(self, auth_redirect: str, *, user_id: str, roles: list[str], context=("course-1", "LLM 서빙 2026"),
               resource_link: str = "link-1", custom: dict | None = None, lineitem: int | None = 1,
               deep_link_return: str | None = None) -> dict:
        """Step 3: the tool redirected the browser to the LMS's auth URL; the LMS answers with a
        signed id_token (form fields `id_token`, `state`) for the tool's redirect URI."""
        params = dict(parse_qsl(urlsplit(auth_redirect).query))
        assert auth_redirect.startswith(self.auth_url), auth_redirect
        launch = _Launch(_Request(params), self.conf)
        launch.set_user_data(user_id, roles, full_name=f"학생 {user_id}", email_address=f"{user_id}@example.ac.kr")
        # (id, title) or (id, title, label); an empty title or label is left out of the claim
        launch.set_launch_context_claim(context[0], context_title=context[1] or None,
                                        context_label=(context[2] if len(context) > 2 else None) or None,
                                        context_types=["http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"])
        launch.set_resource_link_claim(resource_link, title="21차시")
        if custom:
            launch.set_custom_parameters_claim(custom)
        if lineitem is not None:
            launch.set_ags(f"{self.iss}/lineitems", self.lineitem_url(lineitem), allow_creating_lineitems=False,
                           results_service_enabled=False, scores_service_enabled=True)
        if deep_link_return:
            self.registration.set_deeplink_launch_url(params["redirect_uri"])
            launch.set_dl(deep_link_return, accept_types={"ltiResourceLink"})
        data = launch.lti_launch()
        return {"id_token": data["id_token"], "state": data["state"]}

    def resign(self, id_token: str, claims: dict) -> str:
        """The id_token with claims changed (None: removed), signed again with the LMS's key: what
        an LMS sending a malformed token would send."""
        header = jwt.get_unverified_header(id_token)
        body = jwt.decode(id_token, options={"verify_signature": False})
        for name, value in claims.items():
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        return jwt.encode(body, self.registration.get_platform_private_key(), algorithm="RS256",
                          headers={"kid": header["kid"]})

    def decode_tool_jwt(self, token: str) -> dict:
        return self.conf.tool_validate_and_decode(token)

    def _handler(self):
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/jwks":
                    return self._answer(200, {"keys": platform.registration.get_jwks()})
                self._answer(404, {"error": "not found"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/token":
                    try:
                        token = platform.conf.get_access_token(dict(parse_qsl(body.decode())))
                    except Exception as exc:
                        return self._answer(400, {"error": "invalid_client", "detail": str(exc)})
                    platform.tokens_issued += 1
                    return self._answer(200, token)
                if self.path.startswith("/lineitems/") and self.path.endswith("/scores"):
                    bearer = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    try:
                        allowed = platform.conf.validate_token(bearer, allowed_scopes=[SCORE_SCOPE])
                    except Exception:
                        allowed = False
                    if not allowed:
                        return self._answer(401, {"error": "bad token"})
                    if platform.fail_scores > 0:
                        platform.fail_scores -= 1
                        return self._answer(503, {"error": "gradebook is down"})
                    platform.scores.append({"path": self.path, **json.loads(body)})
                    platform.score_headers.append(dict(self.headers))
                    return self._answer(200, {})
                self._answer(404, {"error": "not found"})

        return Handler


def with_params(url: str, **params) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(params)}"
