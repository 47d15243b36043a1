"""What the fake's parts share: limits, errors, and the shapes of a request and an answer."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from .openapi import Operation
from .state import DEFAULT_INSTALLATION_PERMISSIONS, Installation, Token, User

MAX_BODY = 65536  # characters in an issue comment, review or review comment body
MAX_PER_PAGE = 100  # GitHub serves at most 100 items a page, whatever per_page asks
MAX_PR_FILES = 3000  # GET .../pulls/{n}/files lists at most 3000 files
DOCS = "https://docs.github.com/rest"
RATE_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
LEVELS = {"read": 1, "write": 2, "admin": 3}


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_sentence(items: list[str]) -> str:
    """Join messages the way GitHub (Rails' to_sentence) does: "a", "a and b", "a, b, and c"."""
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


class HTTPError(Exception):
    """An error answer: GitHub's ``{"message", "documentation_url", "status", ("errors")}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
        doc_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}
        self.doc_url = doc_url


@dataclass
class AppConfig:
    app_id: int
    public_key_pem: str
    slug: str
    name: str
    client_id: str  # OAuth client id (Iv23li...): the OAuth web flow names the app by it
    client_secret: str
    owner: User
    description: str | None = "Turns PyTorch modules into verified, timed Triton kernels."
    external_url: str = "https://kernelize.example.com"
    permissions: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_INSTALLATION_PERMISSIONS))
    events: list[str] = field(default_factory=lambda: ["check_run", "issue_comment", "pull_request"])
    installations_count: int = 0
    bot: User | None = None


@dataclass(frozen=True)
class AppCredentials:
    """What a test needs to act as the app: ``github.Auth.AppAuth(creds.app_id, creds.private_pem)``,
    and ``client_id``/``client_secret`` for its OAuth web flow (signing users in)."""

    app_id: int
    private_pem: str
    public_pem: str
    slug: str
    client_id: str = ""
    client_secret: str = ""


@dataclass
class Actor:
    kind: str  # "app" | "installation" | "user" | "anonymous"
    identity: str  # rate-limit bucket
    user: User | None = None
    token: Token | None = None
    installation: Installation | None = None


@dataclass
class Ctx:
    """One request, as handlers see it."""

    method: str
    path: str
    params: dict[str, str]
    query: dict[str, list[str]]
    json: Any
    op: Operation
    actor: Actor
    headers: dict[str, str]

    def q(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    handler: str
    # "app" (JWT) | "repo" (token or anonymous) | "installation" (installation token only) | "any"
    # | "user" (any credential, JWTs included; the handler refuses all but user tokens, in GitHub's words)
    auth: str
    perms: tuple[tuple[str, str], ...] = ()  # any one of (permission, level) suffices
    write: bool = False
