"""github.com's side of "Sign in with GitHub": a GitHub App's OAuth web flow.

These are web pages, not REST API operations, so GitHub's OpenAPI description does not know them:
``FakeGitHub._dispatch`` hands their paths (``WEB_PAGES``) to :meth:`OAuthWeb._web` before any
OpenAPI checking. They are still recorded in ``fake.requests`` (``operation`` None) and
``fail_next()`` still applies to them. The fake serves them at its root (``fake.web_url``, the same
server as ``fake.base_url``) and never under ``/api/v3``, as GitHub Enterprise does
(``https://HOST/login/oauth/...`` next to ``https://HOST/api/v3``).

1. ``GET /login/oauth/authorize?client_id=&redirect_uri=&state=``: the user the test signed in with
   ``fake.sign_in_browser(login)`` authorizes the app at once: 302 to ``redirect_uri`` with
   ``code`` and the same ``state`` added to its query. Nobody signed in: 200 and a "Sign in to
   GitHub" page, no code. A client id that is not the app's: 404 page. Every visit lands in
   ``fake.oauth_authorizations``.
2. ``POST /login/oauth/access_token`` with ``client_id``, ``client_secret``, ``code`` (and
   ``redirect_uri``), form-encoded, JSON or in the query: a user access token (``ghu_...``) bound
   to that user and the app, answered as JSON when ``Accept`` names ``application/json``, else
   form-encoded, as GitHub does. Errors are HTTP 200 too, with ``error``: wrong client id or secret
   → ``incorrect_client_credentials``; unknown, used or expired code → ``bad_verification_code``
   (codes are single-use and live 10 minutes; ``fake.expire_oauth_codes()`` ages them);
   ``redirect_uri`` other than the authorize step's → ``redirect_uri_mismatch``.

The token then calls the API as that user: ``GET /user``, ``GET /user/installations`` and
``GET /user/installations/{id}/repositories`` (see ``endpoints.py``).

Not modelled: the app's registered callback URLs (any ``redirect_uri`` is accepted, and one is
required), the "Authorize <app>" consent page (a signed-in user always consents), expiring user
tokens with refresh tokens, the device flow.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from .base import AppConfig, Reply
from .state import OAuthCode, RecordedRequest, User

CODE_TTL_S = 600  # GitHub: "codes expire after 10 minutes"
AUTHORIZE = "/login/oauth/authorize"
ACCESS_TOKEN = "/login/oauth/access_token"
WEB_PAGES = {AUTHORIZE: "GET", ACCESS_TOKEN: "POST"}  # path -> the one method it answers
_ERROR_DOCS = (
    "https://docs.github.com/apps/oauth-apps/maintaining-oauth-apps/"
    "troubleshooting-oauth-app-access-token-request-errors"
)
TOKEN_ERRORS = {  # error -> (error_description, anchor of error_uri), GitHub's words
    "incorrect_client_credentials": (
        "The client_id and/or client_secret passed are incorrect.",
        "#incorrect-client-credentials",
    ),
    "redirect_uri_mismatch": (
        "The redirect_uri MUST match the registered callback URL for this application.",
        "#redirect-uri-mismatch2",
    ),
    "bad_verification_code": ("The code passed is incorrect or expired.", "#bad-verification-code"),
}


def with_query(url: str, **params: str | None) -> str:
    """``url`` with ``params`` (those not None) added to whatever query it has already."""
    parts = urllib.parse.urlsplit(url)
    extra = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    query = f"{parts.query}&{extra}" if parts.query and extra else parts.query or extra
    return urllib.parse.urlunsplit(parts._replace(query=query))


def page(status: int, title: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    """A small HTML page (bytes bodies go out as they are, without the API's JSON headers)."""
    body = (
        f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title.split(' · ')[0])}</h1><p>{html.escape(text)}</p></body></html>\n"
    )
    headers = {"Content-Type": "text/html; charset=utf-8", **(headers or {})}
    return Reply(status, body.encode("utf-8"), headers)


class OAuthWeb:
    """The web flow's state, set-up and pages (a mixin of FakeGitHub, like ``Endpoints``)."""

    app: AppConfig | None
    browser_login: str | None
    oauth_codes: dict[str, OAuthCode]
    oauth_authorizations: list[dict[str, str | None]]
    _lock: threading.RLock

    if TYPE_CHECKING:

        def add_user(
            self, login: str, *, type: str = "User", id: int | None = None, site_admin: bool = False
        ) -> User: ...

        def add_user_token(self, login: str, token: str | None = None, *, for_app: bool = False) -> str: ...

    # -- set-up ------------------------------------------------------------------------------

    def sign_in_browser(self, login: str) -> User:
        """``login`` (created if new) is signed in to "github.com" in the browser: the authorize page
        sends the app a code for them."""
        with self._lock:
            user = self.add_user(login)
            self.browser_login = user.login
            return user

    def sign_out_browser(self) -> None:
        """Nobody is signed in: the authorize page asks to sign in and hands out no code."""
        with self._lock:
            self.browser_login = None

    def expire_oauth_codes(self) -> None:
        """Age every code handed out so far past its 10 minutes: trading one gives
        ``bad_verification_code``."""
        with self._lock:
            for grant in self.oauth_codes.values():
                grant.expires_at = time.time() - 1

    # -- pages -------------------------------------------------------------------------------

    def _web(self, rec: RecordedRequest) -> Reply:
        if WEB_PAGES[rec.path] != rec.method:
            return page(404, "Page not found · GitHub", f"{rec.path} answers {WEB_PAGES[rec.path]} only.")
        if rec.path == AUTHORIZE:
            return self._authorize(rec)
        return self._access_token(rec)

    def _authorize(self, rec: RecordedRequest) -> Reply:
        def arg(name: str) -> str | None:
            values = rec.query.get(name)
            return values[-1] if values else None

        client_id, redirect_uri, state = arg("client_id"), arg("redirect_uri"), arg("state")
        login = self.browser_login
        visit: dict[str, str | None] = {
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "login": login,
            "code": None,
        }
        self.oauth_authorizations.append(visit)
        app = self.app
        if app is None or not client_id or client_id != app.client_id:
            return page(
                404,
                "Page not found · GitHub",
                f"No GitHub App has the client_id {client_id!r} (configure_app() gives the app's).",
            )
        if not redirect_uri:
            return page(
                400,
                "Bad request · GitHub",
                "redirect_uri is missing: the fake needs one (GitHub would fall back to the app's "
                "registered callback URL, which the fake does not model).",
            )
        if login is None:
            return page(200, "Sign in to GitHub · GitHub", f"to continue to {app.name}")
        code = secrets.token_hex(10)  # GitHub's codes: 20 hex characters
        self.oauth_codes[code] = OAuthCode(code, client_id, redirect_uri, login, time.time() + CODE_TTL_S)
        visit["code"] = code
        location = with_query(redirect_uri, code=code, state=state)
        text = f"You are being redirected to {location}."
        return page(302, "Redirecting · GitHub", text, {"Location": location})

    def _access_token(self, rec: RecordedRequest) -> Reply:
        params = {k: v[-1] for k, v in rec.query.items()}
        content_type = rec.headers.get("content-type", "").lower()
        if "json" in content_type and rec.body:
            try:
                rec.json = json.loads(rec.body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return self._token_answer(rec, {"error": "Problems parsing JSON"}, status=400)
            if isinstance(rec.json, dict):
                params.update({k: str(v) for k, v in rec.json.items()})
        elif rec.body:
            form = urllib.parse.parse_qs(rec.body.decode("utf-8", "replace"), keep_blank_values=True)
            params.update({k: v[-1] for k, v in form.items()})
        app = self.app
        if (
            app is None
            or params.get("client_id") != app.client_id
            or not hmac.compare_digest(params.get("client_secret", "").encode(), app.client_secret.encode())
        ):
            return self._token_error(rec, "incorrect_client_credentials")
        grant = self.oauth_codes.get(params.get("code", ""))
        if grant is None or grant.used or grant.expires_at <= time.time() or grant.client_id != app.client_id:
            return self._token_error(rec, "bad_verification_code")
        redirect_uri = params.get("redirect_uri")
        if redirect_uri and redirect_uri != grant.redirect_uri:
            return self._token_error(rec, "redirect_uri_mismatch")
        grant.used = True
        token = self.add_user_token(grant.login, for_app=True)
        return self._token_answer(rec, {"access_token": token, "token_type": "bearer", "scope": ""})

    def _token_error(self, rec: RecordedRequest, error: str) -> Reply:
        description, anchor = TOKEN_ERRORS[error]
        return self._token_answer(
            rec, {"error": error, "error_description": description, "error_uri": _ERROR_DOCS + anchor}
        )

    @staticmethod
    def _token_answer(rec: RecordedRequest, data: dict[str, Any], *, status: int = 200) -> Reply:
        """GitHub answers in JSON when ``Accept`` asks for it, else form-encoded."""
        if "application/json" in rec.headers.get("accept", "").lower():
            as_json = json.dumps(data).encode()
            return Reply(status, as_json, {"Content-Type": "application/json; charset=utf-8"})
        return Reply(
            status,
            urllib.parse.urlencode(data).encode(),
            {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        )
