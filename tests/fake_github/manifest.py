"""github.com's side of "Register a GitHub App from a manifest", and the REST call that ends it.

1. ``POST /settings/apps/new?state=`` (or ``/organizations/{org}/settings/apps/new?state=``) with a
   form field ``manifest`` (JSON): the page where GitHub asks the user to name and create the App.
   The fake has the user confirm at once: the manifest is checked (JSON object; ``url`` and, when
   given, ``hook_attributes.url`` are http(s) URLs; ``redirect_url`` is present — GitHub would show
   the new App's page without one, which the fake does not model; ``default_permissions`` levels and
   ``default_events`` are well-formed) and the answer is 302 to ``redirect_url`` with ``code`` and
   the same ``state`` added to its query. Nobody signed in (``fake.sign_in_browser(login)``):
   200 and a "Sign in to GitHub" page, no code. A bad manifest: 422 page saying why. Like the OAuth
   pages (``oauth.py``) these are web pages outside the OpenAPI description, served at the fake's
   root, recorded in ``fake.requests`` and subject to ``fail_next()``. Every visit lands in
   ``fake.manifest_visits``.
2. ``POST /app-manifests/{code}/conversions`` (REST, no authentication): 201 with the new App
   (``integration`` plus ``client_id``, ``client_secret``, ``webhook_secret`` and ``pem``), checked
   against the description like every API answer. Codes are single-use and live one hour
   (``fake.expire_manifest_codes()`` ages them); unknown, used or expired → 404 "Not Found".
   The conversion makes the new App *the* app of the fake (``set_app()``, with a fresh key pair),
   so JWTs signed with the returned ``pem`` work against ``GET /app`` at once.

Not modelled: the confirmation page where the user may rename the App, unique App names,
``setup_url``/``setup_on_update``, GitHub's 422 for a manifest it cannot create.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .base import AppConfig, Ctx, HTTPError, Reply, Route
from .oauth import page, with_query
from .state import RecordedRequest, User

MANIFEST_CODE_TTL_S = 3600  # GitHub: "The code is valid for one hour"
NEW_APP = re.compile(r"^(?:/organizations/(?P<org>[A-Za-z0-9-]+))?/settings/apps/new$")
_LEVELS = {"read", "write", "admin"}


@dataclass
class ManifestCode:
    """A code the new-app page handed to the manifest's ``redirect_url``, to trade for the App."""

    code: str
    manifest: dict[str, Any]
    owner: str  # login of the user or organization that owns the new App
    org: bool  # posted to /organizations/{org}/settings/apps/new
    expires_at: float
    used: bool = False


@dataclass
class ManifestVisit:
    org: str | None
    state: str | None
    login: str | None
    manifest: dict[str, Any] | None = None
    code: str | None = None
    problems: list[str] = field(default_factory=list)


def manifest_problems(manifest: Any) -> list[str]:
    """What GitHub would refuse in ``manifest`` (empty when the fake can create the App)."""
    if not isinstance(manifest, dict):
        return ["the manifest must be a JSON object"]
    problems = []

    def is_url(value: Any) -> bool:
        parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
        return parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc)

    if not is_url(manifest.get("url")):
        problems.append("url must be an http(s) URL")
    hook = manifest.get("hook_attributes")
    if hook is not None and (not isinstance(hook, dict) or not is_url(hook.get("url"))):
        problems.append("hook_attributes.url must be an http(s) URL")
    if not is_url(manifest.get("redirect_url")):
        problems.append("redirect_url must be an http(s) URL (the fake needs one to send the code)")
    callbacks = manifest.get("callback_urls", [])
    if not isinstance(callbacks, list) or not all(is_url(u) for u in callbacks) or len(callbacks) > 10:
        problems.append("callback_urls must be at most 10 http(s) URLs")
    name = manifest.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 34):
        problems.append("name must be 1 to 34 characters")
    perms = manifest.get("default_permissions", {})
    if not isinstance(perms, dict) or any(level not in _LEVELS for level in perms.values()):
        problems.append("default_permissions levels must be read, write or admin")
    events = manifest.get("default_events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) and e for e in events):
        problems.append("default_events must be a list of event names")
    elif events and hook is None:
        problems.append("default_events need hook_attributes.url")
    return problems


def slugify(name: str) -> str:
    """GitHub's slug for an App name: lower case, runs of other characters as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "app"


class ManifestWeb:
    """The manifest flow's state, pages and endpoint (a mixin of FakeGitHub, like ``OAuthWeb``)."""

    app: AppConfig | None
    browser_login: str | None
    manifest_codes: dict[str, ManifestCode]
    manifest_visits: list[ManifestVisit]
    _lock: threading.RLock

    if TYPE_CHECKING:

        def add_user(
            self, login: str, *, type: str = "User", id: int | None = None, site_admin: bool = False
        ) -> User: ...

        def set_app(
            self,
            app_id: int,
            public_key_pem: str,
            *,
            slug: str = "kernelize",
            name: str = "Kernelize",
            client_id: str | None = None,
            client_secret: str | None = None,
            owner_login: str = "kernelize-dev",
            permissions: dict[str, str] | None = None,
            events: list[str] | None = None,
        ) -> AppConfig: ...

        def _new_id(self, wanted: int | None = None) -> int: ...

        def _render(self) -> Any: ...

    def expire_manifest_codes(self) -> None:
        """Age every manifest code handed out so far past its hour: converting one gives 404."""
        with self._lock:
            for grant in self.manifest_codes.values():
                grant.expires_at = time.time() - 1

    # -- the page ----------------------------------------------------------------------------

    def _new_app_page(self, rec: RecordedRequest, org: str | None) -> Reply:
        if rec.method != "POST":
            return page(
                404, "Page not found · GitHub", f"{rec.path}: the fake answers the manifest POST only."
            )
        states = rec.query.get("state")
        visit = ManifestVisit(org, states[-1] if states else None, self.browser_login)
        self.manifest_visits.append(visit)
        form = urllib.parse.parse_qs(rec.body.decode("utf-8", "replace"), keep_blank_values=True)
        raw = form.get("manifest", [""])[-1]
        if not raw:
            visit.problems = ["no manifest field"]
            return page(422, "Invalid manifest · GitHub", "The form has no manifest field.")
        try:
            manifest = json.loads(raw)
        except json.JSONDecodeError as exc:
            visit.problems = [f"not JSON: {exc}"]
            return page(422, "Invalid manifest · GitHub", f"The manifest is not JSON: {exc}.")
        visit.manifest = manifest if isinstance(manifest, dict) else None
        visit.problems = manifest_problems(manifest)
        if visit.problems:
            return page(422, "Invalid manifest · GitHub", "; ".join(visit.problems) + ".")
        if visit.login is None:
            return page(200, "Sign in to GitHub · GitHub", "to continue to Register new GitHub App")
        owner = org or visit.login
        code = secrets.token_hex(16)
        self.manifest_codes[code] = ManifestCode(
            code, manifest, owner, org is not None, time.time() + MANIFEST_CODE_TTL_S
        )
        visit.code = code
        location = with_query(manifest["redirect_url"], code=code, state=visit.state)
        return page(
            302, "Redirecting · GitHub", f"You are being redirected to {location}.", {"Location": location}
        )

    # -- the REST endpoint -------------------------------------------------------------------

    def _h_create_from_manifest(self, ctx: Ctx, route: Route) -> Reply:
        from .keys import make_app_key

        grant = self.manifest_codes.get(ctx.params["code"])
        if grant is None or grant.used or grant.expires_at <= time.time():
            raise HTTPError(404, "Not Found")
        grant.used = True
        manifest = grant.manifest
        name = str(manifest.get("name") or f"{grant.owner}'s app")
        owner = self.add_user(grant.owner, type="Organization" if grant.org else "User")
        private_pem, public_pem = make_app_key()
        app_id = self._new_id()
        webhook_secret = secrets.token_hex(20)
        app = self.set_app(
            app_id,
            public_pem,
            slug=slugify(name),
            name=name,
            owner_login=owner.login,
            permissions={**dict(manifest.get("default_permissions") or {}), "metadata": "read"},
            events=list(manifest.get("default_events") or []),
        )
        app.description = manifest.get("description")
        app.external_url = manifest["url"]
        body = self._render().app_body() | {
            "client_secret": app.client_secret,
            "webhook_secret": webhook_secret,
            "pem": private_pem,
        }
        return Reply(201, body)
