"""``kernelize setup``: register the GitHub App from ``deploy/app-manifest.json`` and write its settings.

GitHub's manifest flow needs a browser signed in to GitHub: a one-page server on 127.0.0.1 hands the
browser a form that posts the manifest to GitHub's new-app page, GitHub sends the browser back to
this server's ``/done`` with a one-hour code, and the code is traded (``POST
/app-manifests/{code}/conversions``, no credentials) for the App's id, key and secrets. They go to
the env file (mode 0600) and a PEM file beside it (0600). Nothing is written unless the whole flow
succeeds, and keys already set in the env file are kept unless ``--force``.

Decisions are plain functions (:func:`build_manifest`, :func:`plan_env`...); the server and the
files are the edges.
"""

from __future__ import annotations

import hmac
import html
import json
import os
import re
import secrets
import tempfile
import threading
import urllib.parse
import webbrowser
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

DEFAULT_WEB_URL = "https://github.com"
DEFAULT_API_URL = "https://api.github.com"
MANIFEST_PATH = Path(__file__).resolve().parent.parent / "deploy" / "app-manifest.json"
PEM_NAME = "github-app.pem"
PREFIX = "KERNELIZE_"
# Every key setup writes, or removes (a key given inline would clash with the PEM file's path).
OWNED_KEYS = (
    "GITHUB_APP_ID",
    "GITHUB_PRIVATE_KEY_PATH",
    "GITHUB_PRIVATE_KEY",
    "WEBHOOK_SECRET",
    "GITHUB_CLIENT_ID",
    "GITHUB_CLIENT_SECRET",
    "GITHUB_API_URL",
    "GITHUB_WEB_URL",
    "PUBLIC_URL",
)
UNKNOWN = "\0unknown"  # a value only GitHub will tell: differs from anything already in the file
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./:@+,=-]*$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


class SetupError(Exception):
    """The flow cannot finish; the message says what happened and what to do."""


@dataclass(frozen=True)
class SetupOptions:
    public_url: str
    env_file: Path
    org: str | None = None
    name: str | None = None
    web_url: str = DEFAULT_WEB_URL
    api_url: str = DEFAULT_API_URL
    port: int = 0
    open_browser: bool = True
    timeout_s: float = 900.0
    force: bool = False
    manifest_path: Path = MANIFEST_PATH


# -- decisions ---------------------------------------------------------------------------------


def check_base_url(url: str, option: str) -> str:
    """``url`` without its trailing slash, if it is an http(s) URL with a host and nothing after the path."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SetupError(
            f"{option} must be an http(s) URL such as https://kernelize.example.com, got {url!r}"
        )
    if parts.query or parts.fragment:
        raise SetupError(f"{option} must not have a query or fragment, got {url!r}")
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def build_manifest(
    template: Mapping[str, Any], public_url: str, redirect_url: str, name: str | None = None
) -> dict[str, Any]:
    """The manifest to post: ``template`` pointed at ``public_url`` (webhook at ``/webhook``, sign-in
    callback at ``/oauth/callback``, as bot/web.py serves them) and GitHub's code sent to ``redirect_url``."""
    manifest: dict[str, Any] = json.loads(json.dumps(template))  # a deep copy
    manifest["url"] = public_url
    manifest["hook_attributes"] = {**manifest.get("hook_attributes", {}), "url": f"{public_url}/webhook"}
    manifest["callback_urls"] = [f"{public_url}/oauth/callback"]
    manifest["redirect_url"] = redirect_url
    if name:
        manifest["name"] = name
    return manifest


def new_app_url(web_url: str, org: str | None, state: str) -> str:
    """GitHub's page that registers an App from a posted manifest, for the user or ``org``."""
    owner = f"/organizations/{urllib.parse.quote(org, safe='')}" if org else ""
    return f"{web_url}{owner}/settings/apps/new?" + urllib.parse.urlencode({"state": state})


def env_values(app: Mapping[str, Any], pem_path: Path, options: SetupOptions) -> dict[str, str | None]:
    """The env file's new values (None: the key goes) for the App GitHub created."""
    return {
        "GITHUB_APP_ID": str(app["id"]),
        "GITHUB_PRIVATE_KEY_PATH": str(pem_path),
        "GITHUB_PRIVATE_KEY": None,
        "WEBHOOK_SECRET": str(app["webhook_secret"]),
        "GITHUB_CLIENT_ID": str(app["client_id"]),
        "GITHUB_CLIENT_SECRET": str(app["client_secret"]),
        "GITHUB_API_URL": options.api_url if options.api_url != DEFAULT_API_URL else None,
        "GITHUB_WEB_URL": options.web_url if options.web_url != DEFAULT_WEB_URL else None,
        "PUBLIC_URL": options.public_url,
    }


def _parse_value(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        inner = raw[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\") if raw[0] == '"' else inner
    return raw.split(" #", 1)[0].strip()


def _quote(value: str) -> str:
    if _PLAIN_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plan_env(existing: str, values: Mapping[str, str | None], *, force: bool, header: str = "") -> str:
    """The env file's new text: ``values`` (keys without the prefix; None removes) set, every other
    line kept. A key already there with another value is refused unless ``force``."""
    lines = existing.splitlines()
    found: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        match = _ENV_LINE.match(line)
        if match and match.group(1).startswith(PREFIX):
            found.setdefault(match.group(1).removeprefix(PREFIX), []).append(index)
    clashes = [
        PREFIX + key
        for key, new in values.items()
        for index in found.get(key, [])
        if new is None or _parse_value(lines[index].split("=", 1)[1]) != new
    ]
    if clashes and not force:
        raise SetupError(
            f"already set: {', '.join(dict.fromkeys(clashes))}: "
            "pass --force to replace them, or --env-file for another file"
        )
    drop = {index for key in values for index in found.get(key, [])[1:]}
    for key, new in values.items():
        if key in found:
            first = found[key][0]
            if new is None:
                drop.add(first)
            else:
                lines[first] = f"{PREFIX}{key}={_quote(new)}"
    kept = [line for index, line in enumerate(lines) if index not in drop]
    added = [
        f"{PREFIX}{key}={_quote(new)}" for key, new in values.items() if new is not None and key not in found
    ]
    if added:
        if kept and kept[-1].strip():
            kept.append("")
        kept += ([header] if header else []) + added
    return "\n".join(kept) + "\n"


def conversion_error(status: int, body: Any, api_url: str) -> str:
    """One line for GitHub's refusal to trade a code."""
    message = body.get("message") if isinstance(body, dict) else None
    said = f"GitHub answered {status}" + (f" {message!r}" if message else "")
    if status in (404, 422):
        return (
            f"{said}: the code is unknown, used or expired (it works once, within an hour): "
            "run kernelize setup again (delete any half-made App on GitHub first)"
        )
    return f"{said} at {api_url}/app-manifests/…/conversions: try again later"


# -- edges -------------------------------------------------------------------------------------


def exchange_code(api_url: str, code: str, *, timeout_s: float = 30.0) -> dict[str, Any]:
    """The new App (id, slug, pem, webhook_secret, client_id, client_secret, html_url...) for ``code``."""
    url = f"{api_url}/app-manifests/{urllib.parse.quote(code, safe='')}/conversions"
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": "kernelize-setup",
    }
    try:
        answer = httpx.post(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise SetupError(
            f"cannot reach {api_url}: {exc or type(exc).__name__}: check --github-api-url"
        ) from None
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code != 201:
        raise SetupError(conversion_error(answer.status_code, body, api_url))
    needed = ("id", "pem", "client_id", "client_secret", "html_url")
    if not isinstance(body, dict) or any(not body.get(key) for key in needed):
        raise SetupError(f"GitHub's answer at {url} lacks the App's {', '.join(needed)}")
    if not body.get("webhook_secret"):
        # The manifest flow normally hands one out; without it the server would refuse to start.
        raise SetupError(
            f"GitHub created the App {body['html_url']} without a webhook secret: set one in its settings "
            f"and follow the manual steps in docs/self-hosting.md"
        )
    return body


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only (0600 from the start)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_targets(options: SetupOptions) -> str:
    """Refuse early (before anything happens on GitHub) what would be refused at the end; the env
    file's current text."""
    env_file = options.env_file
    if not env_file.parent.is_dir():
        raise SetupError(f"{env_file}: the folder does not exist")
    try:
        existing = env_file.read_text(encoding="utf-8") if env_file.exists() else ""
    except OSError as exc:
        raise SetupError(f"{env_file}: cannot read: {exc.strerror or exc}") from None
    pem = env_file.parent / PEM_NAME
    if pem.exists() and not options.force:
        raise SetupError(f"{pem} exists: pass --force to replace it")
    placeholder = {key: UNKNOWN for key in OWNED_KEYS} | {
        "GITHUB_PRIVATE_KEY": None,
        "GITHUB_API_URL": options.api_url if options.api_url != DEFAULT_API_URL else None,
        "GITHUB_WEB_URL": options.web_url if options.web_url != DEFAULT_WEB_URL else None,
        "PUBLIC_URL": options.public_url,
    }
    plan_env(existing, placeholder, force=options.force)
    return existing


def save(app: Mapping[str, Any], options: SetupOptions) -> tuple[Path, Path]:
    """Write the PEM file and the env file; the env file's plan is checked before either is written."""
    env_file = options.env_file.resolve()
    pem = env_file.parent / PEM_NAME
    existing = check_targets(options)
    header = f"# GitHub App {app.get('slug') or app['id']} ({app['html_url']}), written by kernelize setup"
    text = plan_env(existing, env_values(app, pem, options), force=options.force, header=header)
    _write_private(pem, str(app["pem"]))
    _write_private(env_file, text)
    return env_file, pem


# -- the local server ----------------------------------------------------------------------------


def _page(title: str, body: str) -> bytes:
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    ).encode()


def start_page(action: str, manifest: Mapping[str, Any]) -> bytes:
    """The form that posts the manifest to GitHub, submitted at once (the button is for no-script)."""
    value = html.escape(json.dumps(manifest), quote=True)
    return _page(
        "Create the Kernelize GitHub App",
        f"<form id='manifest-form' action='{html.escape(action, quote=True)}' method='post'>"
        f"<input type='hidden' name='manifest' value='{value}'>"
        "<p>GitHub will ask you to confirm the new App.</p>"
        "<button type='submit'>Create the GitHub App on GitHub</button></form>"
        "<script>document.getElementById('manifest-form').submit();</script>",
    )


@dataclass
class Outcome:
    app: dict[str, Any] | None = None
    error: str | None = None
    env_file: Path | None = None
    pem: Path | None = None


class SetupServer:
    """The one-page server: ``/`` (the form) and ``/done`` (GitHub's redirect with the code)."""

    def __init__(self, options: SetupOptions, template: Mapping[str, Any]) -> None:
        self.options = options
        self.state = secrets.token_urlsafe(24)
        self.outcome = Outcome()
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._answered = False  # /done has been answered (once; a second visit gets 409)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", options.port), self._handler())
        self.httpd.daemon_threads = True
        port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{port}/"
        self.manifest = build_manifest(template, options.public_url, f"{self.url}done", options.name)
        self.action = new_app_url(options.web_url, options.org, self.state)

    def done(self, query: Mapping[str, list[str]]) -> tuple[int, bytes]:
        code, state = query.get("code", [""])[-1], query.get("state", [""])[-1]
        with self._lock:
            if self._answered:
                return 409, _page("Already done", "<p>This setup has finished; see the terminal.</p>")
            try:
                if not hmac.compare_digest(state.encode(), self.state.encode()):
                    raise SetupError(
                        "the state GitHub sent back does not match this setup's: "
                        "start again from the page kernelize setup printed"
                    )
                if not code:
                    raise SetupError("GitHub sent no code back: run kernelize setup again")
                app = exchange_code(self.options.api_url, code)
                self.outcome.app = app
                self.outcome.env_file, self.outcome.pem = save(app, self.options)
            except SetupError as exc:
                self.outcome.error = str(exc)
            except OSError as exc:  # the App exists on GitHub now: say where, so it can be deleted
                made = self.outcome.app or {}
                self.outcome.error = f"cannot write the settings: {exc}" + (
                    f" (the App {made['html_url']} was created: delete it and run again)" if made else ""
                )
            finally:
                # ``finished`` is set once the page is written (the handler): setting it here let
                # the process exit while the browser still waited for the page's body.
                self._answered = True
        if self.outcome.error:
            return 400, _page("Setup failed", f"<p>{html.escape(self.outcome.error)}</p>")
        app = self.outcome.app or {}
        link = html.escape(f"{app['html_url']}/installations/new", quote=True)
        return 200, _page(
            "The GitHub App is ready",
            f"<p>Created <a id='app' href='{html.escape(app['html_url'], quote=True)}'>"
            f"{html.escape(str(app.get('name') or app.get('slug')))}</a>; its settings are in "
            f"<code>{html.escape(str(self.outcome.env_file))}</code>.</p>"
            f"<p><a id='install' href='{link}'>Install it on your repositories</a></p>",
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                split = urllib.parse.urlsplit(self.path)
                if split.path == "/":
                    status, body = 200, start_page(server.action, server.manifest)
                elif split.path == "/done":
                    status, body = server.done(urllib.parse.parse_qs(split.query))
                else:
                    status, body = 404, _page("Not found", "")
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("Referrer-Policy", "no-referrer")
                self.end_headers()
                try:
                    self.wfile.write(body)
                    self.wfile.flush()
                finally:
                    if split.path == "/done" and server._answered:
                        server.finished.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def serve(self) -> Outcome:
        thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,), daemon=True)
        thread.start()
        try:
            if not self.finished.wait(self.options.timeout_s):
                minutes = self.options.timeout_s / 60
                raise SetupError(
                    f"no answer from GitHub within {minutes:g} minutes: run kernelize setup again"
                )
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
            thread.join(timeout=5)
        return self.outcome


def load_template(path: Path) -> dict[str, Any]:
    try:
        template = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SetupError(f"{path}: cannot read the App manifest: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise SetupError(f"{path}: the App manifest is not JSON: {exc}") from None
    if not isinstance(template, dict):
        raise SetupError(f"{path}: the App manifest must be a JSON object")
    return template


def run(options: SetupOptions, say: Callable[[str], None] = print) -> Outcome:
    """The whole flow; raises :class:`SetupError` (nothing written) or returns what was written."""
    template = load_template(options.manifest_path)
    check_targets(options)
    try:
        server = SetupServer(options, template)
    except OSError as exc:
        raise SetupError(f"cannot listen on 127.0.0.1:{options.port}: {exc.strerror or exc}") from None
    say(
        f"Open {server.url} in a browser signed in to GitHub to create the App "
        f"(waiting up to {options.timeout_s / 60:g} minutes)"
    )
    if options.open_browser:
        webbrowser.open(server.url)
    outcome = server.serve()
    if outcome.error:
        raise SetupError(outcome.error)
    return outcome
