"""What the fake GitHub holds: plain dataclasses that tests read for their assertions."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .diff import Patch

ROLES = ("admin", "maintain", "write", "triage", "read", "none")
# The legacy ``permission`` field of GET .../collaborators/{u}/permission folds the finer roles.
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}
AUTHOR_ASSOCIATIONS = (
    "COLLABORATOR",
    "CONTRIBUTOR",
    "FIRST_TIMER",
    "FIRST_TIME_CONTRIBUTOR",
    "MANNEQUIN",
    "MEMBER",
    "NONE",
    "OWNER",
)
FILE_STATUSES = ("added", "removed", "modified", "renamed", "copied", "changed", "unchanged")
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
# What an installation may do unless told otherwise: Kernelize's own grant (deploy/app-manifest.json).
DEFAULT_INSTALLATION_PERMISSIONS = {
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
}


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fake_sha(*parts: object) -> str:
    """A deterministic 40-hex "commit sha" made from ``parts``."""
    return hashlib.sha1("\0".join(map(str, parts)).encode()).hexdigest()


@dataclass
class User:
    login: str
    id: int
    node_id: str
    type: str = "User"  # "User" | "Bot" | "Organization"
    site_admin: bool = False
    name: str | None = None


@dataclass
class Repo:
    owner: User
    name: str
    id: int
    node_id: str
    private: bool
    default_branch: str
    created_at: str
    description: str | None = None
    fork: bool = False
    parent: Repo | None = None
    archived: bool = False
    topics: list[str] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    trees: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit sha or ref -> path -> bytes
    blobs: dict[str, bytes] = field(default_factory=dict)  # git blob sha -> bytes
    commits: set[str] = field(default_factory=set)  # shas known to exist in the repository
    roles: dict[str, str] = field(default_factory=dict)  # lower-cased login -> role (see ROLES)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    @property
    def key(self) -> tuple[str, str]:
        return (self.owner.login, self.name)


@dataclass
class PullFile:
    filename: str
    status: str
    patch: str | None
    additions: int
    deletions: int
    changes: int
    sha: str
    previous_filename: str | None = None
    parsed: Patch | None = None


@dataclass
class Pull:
    repo: Repo
    number: int
    id: int
    node_id: str
    title: str
    body: str | None
    user: User
    head_sha: str
    base_sha: str
    head_ref: str
    base_ref: str
    head_repo: Repo
    files: list[PullFile]
    author_association: str
    draft: bool
    created_at: str
    updated_at: str
    state: str = "open"
    merged: bool = False
    locked: bool = False
    closed_at: str | None = None
    labels: list[str] = field(default_factory=list)
    files_by_commit: dict[str, list[PullFile]] = field(default_factory=dict)  # every head it had

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.repo.owner.login, self.repo.name, self.number)


@dataclass
class Issue:
    repo: Repo
    number: int
    id: int
    node_id: str
    title: str
    body: str | None
    user: User
    author_association: str
    created_at: str
    updated_at: str
    state: str = "open"
    pull: Pull | None = None
    locked: bool = False


@dataclass
class Reaction:
    id: int
    node_id: str
    user: User
    content: str
    created_at: str


@dataclass
class IssueComment:
    id: int
    node_id: str
    repo: Repo
    issue_number: int
    user: User
    body: str
    created_at: str
    updated_at: str
    author_association: str
    via_app: bool = False


@dataclass
class ReviewComment:
    id: int
    node_id: str
    review_id: int
    repo: Repo
    pull_number: int
    path: str
    body: str
    commit_id: str
    user: User
    created_at: str
    updated_at: str
    author_association: str
    diff_hunk: str
    line: int | None
    side: str | None
    start_line: int | None = None
    start_side: str | None = None
    position: int | None = None
    in_reply_to_id: int | None = None
    subject_type: str = "line"


@dataclass
class Review:
    id: int
    node_id: str
    repo: Repo
    pull_number: int
    user: User
    body: str
    state: str  # "COMMENTED" | "APPROVED" | "CHANGES_REQUESTED" | "PENDING"
    commit_id: str
    submitted_at: str | None
    author_association: str
    comments: list[ReviewComment] = field(default_factory=list)


@dataclass
class CheckRun:
    id: int
    node_id: str
    repo: Repo
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    started_at: str | None
    completed_at: str | None
    details_url: str | None
    external_id: str | None
    app_id: int | None
    check_suite_id: int
    output: dict[str, Any] = field(default_factory=dict)  # title, summary, text (latest)
    annotations: list[dict[str, Any]] = field(default_factory=list)  # appended by every update
    images: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    updates: int = 0


@dataclass
class Installation:
    id: int
    account: User
    repositories: list[str] | None  # repository names under the account; None: all of them
    permissions: dict[str, str]
    events: list[str]
    created_at: str
    suspended_at: str | None = None


@dataclass
class Token:
    token: str
    kind: str  # "installation" | "user"
    expires_at: float | None  # epoch seconds; None: never
    installation_id: int | None = None
    login: str | None = None  # for user tokens
    permissions: dict[str, str] = field(default_factory=dict)
    repositories: list[str] | None = None  # narrowed at creation; None: the installation's
    revoked: bool = False
    # User access tokens (ghu_, from the app's OAuth flow): that app's client id; None for a PAT
    client_id: str | None = None


@dataclass
class OAuthCode:
    """A code the authorize page handed to ``redirect_uri``, to trade for a user access token."""

    code: str
    client_id: str
    redirect_uri: str
    login: str
    expires_at: float  # epoch seconds (GitHub: 10 minutes after the authorize step)
    used: bool = False  # codes are single-use


@dataclass
class RecordedRequest:
    """One request as the fake saw it (``path`` without the ``/api/v3`` prefix or query)."""

    method: str
    path: str
    raw_path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    json: Any  # the parsed JSON body, or None
    body: bytes
    status: int = 0
    operation: str | None = None  # the OpenAPI operationId, when one matched
    injected: bool = False  # answered by fail_next()
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic())


@dataclass(frozen=True)
class Violation:
    """A request that GitHub's OpenAPI description does not allow (or an operation it lacks)."""

    method: str
    path: str
    operation: str | None
    kind: str  # "no-operation" | "path" | "query" | "body" | "unknown-query" | "unknown-field" | "json"
    message: str

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.operation or '-'}] {self.kind}: {self.message}"


@dataclass
class PlannedFailure:
    method: str
    pattern: Any  # compiled regex
    status: int
    times: int
    headers: dict[str, str]
    body: Any
    after: bool = False  # carry the request out, then answer the failure (GitHub's 5xx after a write)
    when: Callable[[Any], bool] | None = None  # only requests whose parsed JSON body this accepts

    def __str__(self) -> str:
        return f"{self.method} {self.pattern.pattern} -> {self.status} ({self.times} left)"


@dataclass
class Hold:
    """A request kept waiting, unanswered, before the fake looks at it (``FakeGitHub.hold_next()``)."""

    method: str
    pattern: re.Pattern[str]
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def wait_reached(self, timeout: float) -> bool:
        """Whether the request arrived within ``timeout`` seconds."""
        return self.reached.wait(timeout)

    def release(self) -> None:
        """Let the request through: it is then answered as any other (to a caller that may be gone)."""
        self.released.set()
