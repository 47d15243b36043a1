"""A fake GitHub REST API: a real HTTP server on 127.0.0.1 that PyGithub (or anything) talks to.

Start one with ``FakeGitHub()`` (or ``with FakeGitHub() as fake:``); point a client at
``fake.base_url`` (``http://127.0.0.1:PORT``) or ``fake.enterprise_url`` (the same routes under
``/api/v3``, as GitHub Enterprise serves them). ``fake.web_url`` (the same server, at its root)
serves github.com's pages for the app's OAuth web flow, "Sign in with GitHub" (see ``oauth.py``),
and the new-app page of the manifest flow (see ``manifest.py``); they skip the OpenAPI steps below.
It listens in a background thread (``ThreadingHTTPServer``, ephemeral port) and answers one
request at a time, so its state is never seen half-updated.

Every request goes through the same steps (one that ``hold_next()`` holds waits, unanswered, before
the first, until the test releases it):

1. it is recorded in ``fake.requests`` (with ``at``, when the fake took it up);
2. it is matched against GitHub's OpenAPI description (see ``openapi.py``): no operation for its
   method and path → a violation and 404; path/query parameters or the JSON body not valid for the
   operation's schemas → a violation and GitHub's 422 ``{"message": "Invalid request.\\n\\n..."}``
   (a path parameter of the wrong type → 404, as GitHub routes it nowhere). Query parameters and
   body fields the description does not know are recorded as violations too, but answered as
   GitHub would (it ignores them); all of these land in ``fake.violations``;
3. a failure planned with ``fail_next()`` answers instead, if one matches;
4. the operation must be one the fake implements (else 404, listed in ``fake.unimplemented``);
5. authentication: ``/app...`` endpoints need ``Authorization: Bearer <JWT>`` signed with the
   app's key (RS256; ``iss`` = app id, ``iat`` not in the future, ``exp`` in the future and at
   most 10 minutes ahead); the others take an installation token (``ghs_...``, from
   ``POST /app/installations/{id}/access_tokens`` or ``issue_token()``), a user token
   (``add_user_token()``: a personal access token, or with ``for_app=True`` a user access token
   ``ghu_...`` as the OAuth web flow hands out) or nothing (public reads only). Unknown, expired
   or revoked tokens → 401 "Bad credentials"; a missing ``User-Agent`` → 403 as on github.com;
6. installation tokens only reach the installation's repositories (others: 404 when private,
   403 "Resource not accessible by integration" for writes to public ones) with the
   installation's permissions (e.g. ``checks: write`` for check runs);
7. the primary rate limit is counted per token (``x-ratelimit-*`` headers on every answer; 403
   "API rate limit exceeded ..." at zero, see ``set_rate_limit()``);
8. the endpoint runs against the stored state and enforces GitHub's rules (review comments
   must sit on lines of the diff, bodies at most 65536 characters, check-run limits...);
9. 2xx answers are checked against the operation's response schema; differences (the fake's own
   bugs) go to ``fake.response_violations``.

Implemented endpoints (anything else in the description answers 404 and is listed in
``fake.unimplemented``; see ``endpoints.ROUTES``): POST /app-manifests/{code}/conversions,
GET /app, GET /app/installations[/{id}],
POST /app/installations/{id}/access_tokens, GET /repos/{o}/{r}/installation,
GET /installation/repositories, GET /user, GET /user/installations,
GET /user/installations/{id}/repositories, GET /rate_limit, GET /repos/{o}/{r}, GET/PUT .../contents/{path},
GET .../commits/{ref}, GET .../collaborators/{u}/permission, GET .../pulls, GET .../pulls/{n},
GET .../pulls/{n}/files, GET/POST .../pulls/{n}/reviews, GET .../pulls/{n}/reviews/{id}[/comments],
GET/POST .../pulls/{n}/comments, POST .../pulls/{n}/comments/{id}/replies,
GET .../pulls/comments/{id}, GET .../issues/{n}, GET/POST .../issues/{n}/comments,
GET/PATCH/DELETE .../issues/comments/{id}, GET/POST .../issues/comments/{id}/reactions,
POST .../issues/{n}/reactions, POST .../pulls/comments/{id}/reactions, POST .../check-runs,
GET/PATCH .../check-runs/{id}, GET .../check-runs/{id}/annotations, GET .../commits/{ref}/check-runs.

State for assertions: ``fake.reviews[(owner, repo, number)]`` (each ``Review`` with its
``comments``), ``fake.issue_comments[(owner, repo, number)]``, ``fake.check_runs[(owner, repo)]``,
``fake.reactions[("issue_comment", comment_id)]`` / ``[("issue", owner, repo, number)]`` /
``[("review_comment", comment_id)]``, ``fake.pulls``, ``fake.repos``, ``fake.tokens``.
Keys use the owner/repo spelling given to ``add_repo()``; requests may use any case.
"""

from __future__ import annotations

import contextlib
import http
import itertools
import json
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import keys
from .base import (
    DOCS,
    RATE_DOCS,
    SHA_RE,
    Actor,
    AppConfig,
    AppCredentials,
    Ctx,
    HTTPError,
    Reply,
    Route,
    utc_now,
)
from .diff import PatchError, parse_patch
from .endpoints import ROUTES, Endpoints
from .manifest import NEW_APP, ManifestCode, ManifestVisit, ManifestWeb
from .oauth import WEB_PAGES, OAuthWeb
from .openapi import NO_BODY, OpenAPISpec, Operation, load_spec
from .render import node_id
from .state import (
    AUTHOR_ASSOCIATIONS,
    DEFAULT_INSTALLATION_PERMISSIONS,
    FILE_STATUSES,
    ROLES,
    CheckRun,
    Hold,
    Installation,
    Issue,
    IssueComment,
    OAuthCode,
    PlannedFailure,
    Pull,
    PullFile,
    Reaction,
    RecordedRequest,
    Repo,
    Review,
    Token,
    User,
    Violation,
    fake_sha,
    git_blob_sha,
)


class FakeGitHub(Endpoints, OAuthWeb, ManifestWeb):
    """A stateful fake of GitHub's REST API, served over real HTTP (see the module docstring).

    Setting up: ``set_app()``/``configure_app()``, ``add_installation()``, ``add_repo()``,
    ``set_file()``, ``add_pull()``, ``push()``, ``add_issue()``, ``add_issue_comment()``,
    ``set_permission()``, ``adopt_payload()``/``from_payload()``, ``issue_token()``,
    ``add_user_token()``, ``expire_token()``, ``fail_next()``, ``set_rate_limit()``, ``hold_next()``;
    for signing users in: ``sign_in_browser()``, ``sign_out_browser()``, ``expire_oauth_codes()``;
    for the manifest flow: ``expire_manifest_codes()``.
    Looking: ``requests``, ``violations``, ``response_violations``, ``unimplemented``,
    ``reviews``, ``issue_comments``, ``check_runs``, ``reactions``, ``oauth_authorizations``,
    ``manifest_visits``, ``manifest_codes``, ``pending_failures()``, ``assert_clean()``.
    """

    def __init__(
        self,
        *,
        spec: OpenAPISpec | None = None,
        check_responses: bool = True,
        token_ttl_s: float = 3600.0,
        rate_limit: int = 5000,
        start: bool = True,
    ) -> None:
        self.spec = spec or load_spec()
        self.check_responses = check_responses
        self.token_ttl_s = token_ttl_s
        self.rate_limit = rate_limit
        self._lock = threading.RLock()
        self._ids = itertools.count(100_000_001)
        self._used_ids: set[int] = set()
        self._api = ""

        self.app: AppConfig | None = None
        self.users: dict[str, User] = {}  # lower-cased login -> User
        self.repos: dict[tuple[str, str], Repo] = {}  # lower-cased (owner, name) -> Repo
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.pulls: dict[tuple[str, str, int], Pull] = {}
        self.issues: dict[tuple[str, str, int], Issue] = {}
        self.issue_comments: defaultdict[tuple[str, str, int], list[IssueComment]] = defaultdict(list)
        self.reviews: defaultdict[tuple[str, str, int], list[Review]] = defaultdict(list)
        self.check_runs: defaultdict[tuple[str, str], list[CheckRun]] = defaultdict(list)
        self.reactions: defaultdict[tuple[Any, ...], list[Reaction]] = defaultdict(list)
        self._check_suites: dict[tuple[str, str, str], int] = {}
        # sha -> (author login or None, message), for commits a test describes (see set_commit)
        self.commit_details: dict[str, tuple[str | None, str]] = {}
        # The OAuth web flow (oauth.py): who is signed in to "github.com", codes, authorize visits
        self.browser_login: str | None = None
        self.oauth_codes: dict[str, OAuthCode] = {}
        self.oauth_authorizations: list[dict[str, str | None]] = []
        # Registering an App from a manifest (manifest.py): codes and new-app page visits
        self.manifest_codes: dict[str, ManifestCode] = {}
        self.manifest_visits: list[ManifestVisit] = []

        self.requests: list[RecordedRequest] = []
        self.violations: list[Violation] = []
        self.response_violations: list[str] = []
        self.unimplemented: list[str] = []
        self._failures: list[PlannedFailure] = []
        self._holds: list[Hold] = []
        self._rate: dict[str, list[float]] = {}  # identity -> [limit, remaining, reset epoch]
        self._rate_override: tuple[int, int, float] | None = None

        self.server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        if start:
            self.start()

    # -- life --------------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        if self.server is not None:
            return self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, args=(0.05,), name=f"fake-github:{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            for hold in self._holds:  # nothing waits on a test that has finished
                hold.release()
        if self.server is None:
            return
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (give it to ``github.Github(base_url=...)``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """Where github.com's pages are (``/login/oauth/authorize``, ``/login/oauth/access_token``):
        the same server as ``base_url``, at its root, as on GitHub Enterprise (never under ``/api/v3``)."""
        return self.base_url

    @property
    def enterprise_url(self) -> str:
        """The same API under GitHub Enterprise's ``/api/v3`` prefix."""
        return f"{self.base_url}/api/v3"

    # -- ids, users --------------------------------------------------------------------------

    def _new_id(self, wanted: int | None = None) -> int:
        if wanted is not None:
            self._used_ids.add(wanted)
            return wanted
        while True:
            ident = next(self._ids)
            if ident not in self._used_ids:
                self._used_ids.add(ident)
                return ident

    def add_user(
        self, login: str, *, type: str = "User", id: int | None = None, site_admin: bool = False
    ) -> User:
        """The user ``login`` (created on first mention; ``type`` "User", "Organization" or "Bot")."""
        with self._lock:
            found = self.users.get(login.lower())
            if found is not None:
                return found
            ident = self._new_id(id)
            user = User(
                login,
                ident,
                node_id(type if type != "Organization" else "Organization", ident),
                type,
                site_admin,
            )
            self.users[login.lower()] = user
            return user

    # -- the app and its installations -------------------------------------------------------

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
    ) -> AppConfig:
        """Make the fake know the GitHub App ``app_id`` whose JWTs ``public_key_pem`` verifies.

        Its bot user is ``<slug>[bot]``: the author of everything done with its installation tokens.
        Its OAuth ``client_id``/``client_secret`` (for the web flow) are made up from ``app_id``
        unless given.
        """
        with self._lock:
            owner = self.add_user(owner_login, type="Organization")
            self.app = AppConfig(
                app_id=app_id,
                public_key_pem=public_key_pem,
                slug=slug,
                name=name,
                client_id=client_id or f"Iv23li{fake_sha('client', app_id)[:14]}",
                client_secret=client_secret or fake_sha("client-secret", app_id),
                owner=owner,
                permissions=dict(permissions or DEFAULT_INSTALLATION_PERMISSIONS),
                events=list(events or ["check_run", "issue_comment", "pull_request"]),
            )
            self.app.bot = self.add_user(f"{slug}[bot]", type="Bot")
            return self.app

    def configure_app(self, app_id: int = 424242, *, slug: str = "kernelize", **kw: Any) -> AppCredentials:
        """``set_app()`` with the process-wide test key pair; returns what a client needs (the key
        pair for its JWTs, ``client_id``/``client_secret`` for its OAuth web flow)."""
        private_pem, public_pem = keys.shared_app_key()
        app = self.set_app(app_id, public_pem, slug=slug, **kw)
        return AppCredentials(app_id, private_pem, public_pem, slug, app.client_id, app.client_secret)

    def add_installation(
        self,
        installation_id: int,
        account_login: str,
        repositories: Iterable[str] | None = None,
        *,
        permissions: dict[str, str] | None = None,
        events: list[str] | None = None,
        account_type: str = "User",
    ) -> Installation:
        """Install the app on ``account_login``: on the named ``repositories`` ("name" or
        "owner/name"), or on all of the account's repositories when None."""
        with self._lock:
            account = self.add_user(account_login, type=account_type)
            names = None
            if repositories is not None:
                names = [r.split("/", 1)[1] if "/" in r else r for r in repositories]
            inst = Installation(
                id=self._new_id(installation_id),
                account=account,
                repositories=names,
                permissions=dict(
                    permissions or (self.app.permissions if self.app else DEFAULT_INSTALLATION_PERMISSIONS)
                ),
                events=list(events or (self.app.events if self.app else ["pull_request"])),
                created_at=utc_now(),
            )
            self.installations[installation_id] = inst
            if self.app is not None:
                self.app.installations_count = len(self.installations)
            return inst

    def suspend_installation(self, installation_id: int) -> None:
        with self._lock:
            self.installations[installation_id].suspended_at = utc_now()

    def issue_token(
        self,
        installation_id: int,
        *,
        ttl_s: float | None = None,
        permissions: dict[str, str] | None = None,
        repositories: list[str] | None = None,
    ) -> str:
        """An installation token minted directly (what ``POST .../access_tokens`` would give)."""
        with self._lock:
            inst = self.installations[installation_id]
            token = Token(
                token="ghs_" + secrets.token_hex(18),
                kind="installation",
                expires_at=time.time() + (self.token_ttl_s if ttl_s is None else ttl_s),
                installation_id=inst.id,
                permissions=dict(permissions or inst.permissions),
                repositories=repositories,
            )
            self.tokens[token.token] = token
            return token.token

    def add_user_token(self, login: str, token: str | None = None, *, for_app: bool = False) -> str:
        """A personal access token (``ghp_``) acting as user ``login`` (its repository roles apply).

        ``for_app``: a user access token of the app instead (``ghu_``, what the OAuth web flow
        hands out): it also lists the app's installations (``GET /user/installations``), and reaches
        only repositories an installation covers, with the installation's permissions.
        """
        with self._lock:
            self.add_user(login)
            client_id = None
            if for_app:
                if self.app is None:
                    raise ValueError("for_app=True needs the app: call configure_app() first")
                client_id = self.app.client_id
            value = token or ("ghu_" if for_app else "ghp_") + secrets.token_hex(18)
            self.tokens[value] = Token(
                token=value, kind="user", expires_at=None, login=login, client_id=client_id
            )
            return value

    def expire_token(self, token: str | None = None) -> None:
        """Make ``token`` (or every token) expired: requests with it get 401 "Bad credentials"."""
        with self._lock:
            for t in [self.tokens[token]] if token else list(self.tokens.values()):
                t.expires_at = time.time() - 1

    # -- repositories ------------------------------------------------------------------------

    def add_repo(
        self,
        owner: str,
        name: str,
        *,
        default_branch: str = "main",
        private: bool = False,
        description: str | None = None,
        id: int | None = None,
        owner_type: str = "User",
        fork_of: Repo | None = None,
    ) -> Repo:
        """The repository ``owner/name`` (created once; later calls return it)."""
        with self._lock:
            found = self.repos.get((owner.lower(), name.lower()))
            if found is not None:
                return found
            user = self.add_user(owner, type=owner_type)
            ident = self._new_id(id)
            repo = Repo(
                owner=user,
                name=name,
                id=ident,
                node_id=node_id("Repository", ident),
                private=private,
                default_branch=default_branch,
                created_at=utc_now(),
                description=description,
                fork=fork_of is not None,
                parent=fork_of,
            )
            self.repos[(owner.lower(), name.lower())] = repo
            return repo

    def repo(self, owner: str, name: str) -> Repo:
        return self.repos[(owner.lower(), name.lower())]

    def set_branch(self, owner: str, repo: str, branch: str, sha: str) -> None:
        with self._lock:
            r = self.repo(owner, repo)
            r.refs[branch] = sha
            r.commits.add(sha)

    def set_commit(self, owner: str, repo: str, sha: str, message: str, author: str | None = None) -> None:
        """Commit ``sha`` with this message and (when GitHub maps its email to one) this author."""
        with self._lock:
            self.repo(owner, repo).commits.add(sha)
            if author is not None:
                self.add_user(author)
            self.commit_details[sha] = (author, message)

    def add_commit(self, owner: str, repo: str, sha: str) -> None:
        """Make ``sha`` a commit of the repository (check runs need a known ``head_sha``)."""
        with self._lock:
            self.repo(owner, repo).commits.add(sha)

    def set_file(self, owner: str, repo: str, ref_or_sha: str, path: str, content: str | bytes) -> None:
        """Put ``content`` at ``path`` in the tree of commit (or branch) ``ref_or_sha``.

        A 40-hex ``ref_or_sha`` becomes a known commit; any other is a branch name (created on a
        made-up commit if new). ``GET .../contents/{path}?ref=`` then serves it.
        """
        with self._lock:
            r = self.repo(owner, repo)
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            if SHA_RE.match(ref_or_sha):
                key = ref_or_sha
            else:
                key = r.refs.setdefault(ref_or_sha, fake_sha(r.full_name, "branch", ref_or_sha))
            r.commits.add(key)
            r.trees.setdefault(key, {})[path.strip("/")] = data
            r.blobs[git_blob_sha(data)] = data

    def set_permission(self, owner: str, repo: str, username: str, role: str) -> None:
        """``username``'s role on the repository: admin, maintain, write, triage, read or none."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        with self._lock:
            self.add_user(username)
            self.repo(owner, repo).roles[username.lower()] = role

    def role_of(self, repo: Repo, login: str) -> str:
        role = repo.roles.get(login.lower())
        if role is not None:
            return role
        if repo.owner.login.lower() == login.lower() and repo.owner.type == "User":
            return "admin"
        return "none" if repo.private else "read"

    # -- pull requests and issues ------------------------------------------------------------

    def _pull_files(self, files: Iterable[dict[str, Any]] | None) -> list[PullFile]:
        out: list[PullFile] = []
        for spec in files or []:
            unknown = set(spec) - {
                "filename",
                "status",
                "patch",
                "additions",
                "deletions",
                "changes",
                "sha",
                "previous_filename",
            }
            if unknown:
                raise ValueError(f"unknown pull file keys {sorted(unknown)}")
            status = spec.get("status", "modified")
            if status not in FILE_STATUSES:
                raise ValueError(f"file status must be one of {FILE_STATUSES}, not {status!r}")
            patch_text = spec.get("patch")
            parsed = None
            if patch_text is not None:
                try:
                    parsed = parse_patch(patch_text)
                except PatchError as exc:
                    raise ValueError(f"{spec['filename']}: {exc}") from exc
            additions = spec.get("additions", parsed.additions if parsed else 0)
            deletions = spec.get("deletions", parsed.deletions if parsed else 0)
            if parsed is not None and (additions, deletions) != (parsed.additions, parsed.deletions):
                raise ValueError(
                    f"{spec['filename']}: additions/deletions {additions}/{deletions} do not match the patch "
                    f"({parsed.additions}/{parsed.deletions})"
                )
            changes = spec.get("changes", additions + deletions)
            out.append(
                PullFile(
                    filename=spec["filename"],
                    status=status,
                    patch=patch_text,
                    additions=additions,
                    deletions=deletions,
                    changes=changes,
                    sha=spec.get("sha") or git_blob_sha((patch_text or spec["filename"]).encode()),
                    previous_filename=spec.get("previous_filename"),
                    parsed=parsed,
                )
            )
        return out

    def add_pull(
        self,
        owner: str,
        repo: str,
        number: int,
        head_sha: str,
        base_sha: str,
        user_login: str,
        files: Iterable[dict[str, Any]] | None = None,
        *,
        author_association: str = "MEMBER",
        draft: bool = False,
        title: str | None = None,
        body: str | None = "",
        head_ref: str | None = None,
        base_ref: str | None = None,
        head_owner: str | None = None,
        id: int | None = None,
        state: str = "open",
    ) -> Pull:
        """An open pull request ``number`` (and its issue) on ``owner/repo`` (created if needed).

        ``files``: dicts like GET .../pulls/{n}/files items (``filename``, ``status``,
        ``patch``; ``additions``/``deletions``/``changes`` default to what the patch says, and
        must agree with it). ``head_owner``: the PR comes from that user's fork.
        """
        if author_association not in AUTHOR_ASSOCIATIONS:
            raise ValueError(f"author_association must be one of {AUTHOR_ASSOCIATIONS}")
        with self._lock:
            r = self.add_repo(owner, repo)
            if (r.owner.login, r.name, number) in self.issues:
                raise ValueError(f"{r.full_name}#{number} exists already (use push() for new commits)")
            user = self.add_user(user_login)
            head_repo = r
            if head_owner is not None and head_owner.lower() != r.owner.login.lower():
                head_repo = self.add_repo(head_owner, r.name, fork_of=r)
            pull_files = self._pull_files(files)
            ident = self._new_id(id)
            now = utc_now()
            pull = Pull(
                repo=r,
                number=number,
                id=ident,
                node_id=node_id("PullRequest", ident),
                title=title or f"Pull request #{number}",
                body=body,
                user=user,
                head_sha=head_sha,
                base_sha=base_sha,
                head_ref=head_ref or f"feature-{number}",
                base_ref=base_ref or r.default_branch,
                head_repo=head_repo,
                files=pull_files,
                author_association=author_association,
                draft=draft,
                created_at=now,
                updated_at=now,
                state=state,
                closed_at=None if state == "open" else now,
                files_by_commit={head_sha: pull_files},
            )
            for where in (r, head_repo):
                where.commits.update({head_sha, base_sha})
            head_repo.refs.setdefault(pull.head_ref, head_sha)
            r.refs.setdefault(pull.base_ref, base_sha)
            self.pulls[pull.key] = pull
            issue_ident = self._new_id()
            self.issues[pull.key] = Issue(
                repo=r,
                number=number,
                id=issue_ident,
                node_id=node_id("Issue", issue_ident),
                title=pull.title,
                body=body,
                user=user,
                author_association=author_association,
                created_at=now,
                updated_at=now,
                state=state,
                pull=pull,
            )
            return pull

    def pull(self, owner: str, repo: str, number: int) -> Pull:
        r = self.repo(owner, repo)
        return self.pulls[(r.owner.login, r.name, number)]

    def push(
        self, owner: str, repo: str, number: int, head_sha: str, files: Iterable[dict[str, Any]] | None = None
    ) -> Pull:
        """New commits on the PR (a ``synchronize``): ``head_sha`` becomes its head, ``files`` its files.
        Reviews may still name an older head in ``commit_id`` (checked against that head's files)."""
        with self._lock:
            p = self.pull(owner, repo, number)
            pull_files = self._pull_files(files) if files is not None else p.files
            p.head_sha, p.files = head_sha, pull_files
            p.files_by_commit[head_sha] = pull_files
            p.updated_at = utc_now()
            p.repo.commits.add(head_sha)
            p.head_repo.commits.add(head_sha)
            p.head_repo.refs[p.head_ref] = head_sha
            return p

    def add_issue(
        self,
        owner: str,
        repo: str,
        number: int,
        user_login: str,
        *,
        title: str = "An issue",
        body: str | None = None,
        author_association: str = "NONE",
        id: int | None = None,
    ) -> Issue:
        with self._lock:
            r = self.add_repo(owner, repo)
            ident = self._new_id(id)
            now = utc_now()
            issue = Issue(
                r,
                number,
                ident,
                node_id("Issue", ident),
                title,
                body,
                self.add_user(user_login),
                author_association,
                now,
                now,
            )
            self.issues[(r.owner.login, r.name, number)] = issue
            return issue

    def add_issue_comment(
        self,
        owner: str,
        repo: str,
        number: int,
        user_login: str,
        body: str,
        *,
        comment_id: int | None = None,
        author_association: str = "NONE",
    ) -> IssueComment:
        """A comment someone already made (e.g. the ``/kernelize`` command a webhook reports)."""
        with self._lock:
            r = self.repo(owner, repo)
            if (r.owner.login, r.name, number) not in self.issues:
                raise KeyError(f"no issue or pull request {owner}/{repo}#{number}")
            ident = self._new_id(comment_id)
            now = utc_now()
            comment = IssueComment(
                ident,
                node_id("IssueComment", ident),
                r,
                number,
                self.add_user(user_login),
                body,
                now,
                now,
                author_association,
            )
            self.issue_comments[(r.owner.login, r.name, number)].append(comment)
            return comment

    # -- webhook payloads --------------------------------------------------------------------

    @classmethod
    def from_payload(
        cls, payload: dict[str, Any], *, files: Iterable[dict[str, Any]] | None = None, **kwargs: Any
    ) -> FakeGitHub:
        """A started fake holding what the webhook ``payload`` describes (see ``adopt_payload``)."""
        fake = cls(**kwargs)
        fake.adopt_payload(payload, files=files)
        return fake

    def adopt_payload(
        self, payload: dict[str, Any], *, files: Iterable[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Create the repository, installation, pull request/issue, comment and check run a webhook
        ``payload`` names, with the payload's ids, logins, numbers and shas, so that the API agrees
        with the webhook. ``files``: the pull request's files (payloads do not carry them).
        Returns what was created, by kind ("repo", "installation", "pull", "issue", "comment",
        "check_run")."""
        made: dict[str, Any] = {}
        with self._lock:
            repo_data = payload.get("repository")
            if repo_data is None:
                return made
            owner_data = repo_data["owner"]
            self.add_user(owner_data["login"], type=owner_data.get("type", "User"), id=owner_data.get("id"))
            repo = self.add_repo(
                owner_data["login"],
                repo_data["name"],
                default_branch=repo_data.get("default_branch") or "main",
                private=bool(repo_data.get("private")),
                description=repo_data.get("description"),
                id=repo_data.get("id"),
                owner_type=owner_data.get("type", "User"),
            )
            made["repo"] = repo
            sender = payload.get("sender")
            if sender:
                self.add_user(sender["login"], type=sender.get("type", "User"), id=sender.get("id"))
            inst = payload.get("installation")
            if inst and inst.get("id") is not None:
                found = self.installations.get(inst["id"])
                if found is None:
                    found = self.add_installation(inst["id"], repo.owner.login, [repo.name])
                elif (
                    found.repositories is not None
                    and repo.name not in found.repositories
                    and found.account is repo.owner
                ):
                    found.repositories.append(repo.name)
                made["installation"] = found
            pr = payload.get("pull_request")
            if pr is not None:
                self.add_user(
                    pr["user"]["login"], type=pr["user"].get("type", "User"), id=pr["user"].get("id")
                )
                head = pr["head"]
                existing = self.pulls.get((repo.owner.login, repo.name, pr["number"]))
                if existing is not None:  # a later event of a known PR: follow its head and state
                    if existing.head_sha != head["sha"] or files is not None:
                        self.push(repo.owner.login, repo.name, pr["number"], head["sha"], files)
                    existing.state, existing.draft = pr.get("state", existing.state), bool(pr.get("draft"))
                    existing.title, existing.body = pr.get("title") or existing.title, pr.get("body")
                    made["pull"] = existing
                else:
                    head_owner = (head.get("repo") or {}).get("owner", {}).get("login")
                    made["pull"] = self.add_pull(
                        repo.owner.login,
                        repo.name,
                        pr["number"],
                        head["sha"],
                        pr["base"]["sha"],
                        pr["user"]["login"],
                        files,
                        author_association=pr.get("author_association", "NONE"),
                        draft=bool(pr.get("draft")),
                        title=pr.get("title"),
                        body=pr.get("body"),
                        head_ref=head.get("ref"),
                        base_ref=pr["base"].get("ref"),
                        head_owner=head_owner,
                        id=pr.get("id"),
                        state=pr.get("state", "open"),
                    )
            issue = payload.get("issue")
            if issue is not None:
                key = (repo.owner.login, repo.name, issue["number"])
                self.add_user(issue["user"]["login"], id=issue["user"].get("id"))
                if key not in self.issues:
                    if issue.get("pull_request"):
                        # The payload does not say the PR's shas: make some up, stable per PR.
                        made["pull"] = self.add_pull(
                            repo.owner.login,
                            repo.name,
                            issue["number"],
                            fake_sha(repo.full_name, issue["number"], "head"),
                            fake_sha(repo.full_name, issue["number"], "base"),
                            issue["user"]["login"],
                            files,
                            author_association=issue.get("author_association", "NONE"),
                            title=issue.get("title"),
                            body=issue.get("body"),
                        )
                    else:
                        made["issue"] = self.add_issue(
                            repo.owner.login,
                            repo.name,
                            issue["number"],
                            issue["user"]["login"],
                            title=issue.get("title") or "An issue",
                            body=issue.get("body"),
                            author_association=issue.get("author_association", "NONE"),
                            id=issue.get("id"),
                        )
                made.setdefault("issue", self.issues[key])
                comment = payload.get("comment")
                if comment is not None and comment["id"] not in self._used_ids:
                    self.add_user(
                        comment["user"]["login"],
                        type=comment["user"].get("type", "User"),
                        id=comment["user"].get("id"),
                    )
                    made["comment"] = self.add_issue_comment(
                        repo.owner.login,
                        repo.name,
                        issue["number"],
                        comment["user"]["login"],
                        comment.get("body") or "",
                        comment_id=comment["id"],
                        author_association=comment.get("author_association", "NONE"),
                    )
            run = payload.get("check_run")
            if run is not None and run["id"] not in self._used_ids:
                repo.commits.add(run["head_sha"])
                ident = self._new_id(run["id"])
                check = CheckRun(
                    id=ident,
                    node_id=run.get("node_id") or node_id("CheckRun", ident),
                    repo=repo,
                    name=run["name"],
                    head_sha=run["head_sha"],
                    status=run.get("status", "queued"),
                    conclusion=run.get("conclusion"),
                    started_at=run.get("started_at"),
                    completed_at=run.get("completed_at"),
                    details_url=run.get("details_url"),
                    external_id=run.get("external_id"),
                    app_id=(run.get("app") or {}).get("id"),
                    check_suite_id=(run.get("check_suite") or {}).get("id") or self._new_id(),
                    output={k: (run.get("output") or {}).get(k) for k in ("title", "summary", "text")},
                )
                self.check_runs[repo.key].append(check)
                made["check_run"] = check
        return made

    # -- failures and limits -----------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int = 503,
        times: int = 1,
        headers: dict[str, str] | None = None,
        body: Any = None,
        after: bool = False,
        when: Callable[[Any], bool] | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose method is ``method`` ("*" for any) and whose path
        (without ``/api/v3`` and query) ``re.search``-matches ``path_regex`` with ``status``.

        ``after``: carry each request out first (a review is created, a comment posted), then
        answer with the failure, as GitHub sometimes does with a 502 after a write went through.
        ``when``: only requests whose parsed JSON body (None without one) it accepts, e.g.
        ``lambda body: "conclusion" in body`` for the PATCH that completes a check run.

        ``body`` None gives GitHub's body for the status: for 403 with ``x-ratelimit-remaining: 0``
        "API rate limit exceeded ...", for 429 or a 403 with ``retry-after`` the secondary rate limit
        message, else the status' phrase. ``headers`` are sent as given (and override the fake's own
        ``x-ratelimit-*``). Such requests are still checked against the description first.
        """
        with self._lock:
            self._failures.append(
                PlannedFailure(
                    method.upper(),
                    re.compile(path_regex),
                    status,
                    times,
                    dict(headers or {}),
                    body,
                    after,
                    when,
                )
            )

    def fail_rate_limited(self, method: str, path_regex: str, *, reset_in_s: int = 0, times: int = 1) -> None:
        """A primary rate limit hit: 403, ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset``."""
        reset = int(time.time()) + reset_in_s
        self.fail_next(
            method,
            path_regex,
            403,
            times=times,
            headers={
                "x-ratelimit-limit": str(self.rate_limit),
                "x-ratelimit-remaining": "0",
                "x-ratelimit-used": str(self.rate_limit),
                "x-ratelimit-reset": str(reset),
                "x-ratelimit-resource": "core",
            },
        )

    def fail_secondary_rate_limit(
        self, method: str, path_regex: str, *, retry_after_s: int = 0, status: int = 403, times: int = 1
    ) -> None:
        """A secondary rate limit hit: 403 (or 429) with ``Retry-After``."""
        self.fail_next(method, path_regex, status, times=times, headers={"retry-after": str(retry_after_s)})

    def pending_failures(self) -> list[str]:
        """The failures planned with ``fail_next()`` that no request has met yet."""
        with self._lock:
            return [str(f) for f in self._failures]

    def hold_next(self, method: str, path_regex: str) -> Hold:
        """Keep the next request whose method is ``method`` ("*" for any) and whose path (without
        query) ``re.search``-matches ``path_regex`` waiting, unanswered and not yet looked at, until
        ``hold.release()`` (or ``close()``): a test acts while its caller is mid-request, e.g. kills
        the worker that sent it. ``hold.wait_reached(timeout)`` says when it has arrived."""
        hold = Hold(method.upper(), re.compile(path_regex))
        with self._lock:
            self._holds.append(hold)
        return hold

    def _wait_if_held(self, method: str, raw_path: str) -> None:
        path = urllib.parse.urlsplit(raw_path).path
        with self._lock:
            hold = next(
                (h for h in self._holds if h.method in ("*", method) and h.pattern.search(path)), None
            )
            if hold is None:
                return
            self._holds.remove(hold)
        hold.reached.set()
        hold.released.wait()

    def set_rate_limit(self, remaining: int, *, limit: int | None = None, reset_in_s: int = 3600) -> None:
        """Give every token (and anonymous callers) ``remaining`` requests until ``reset_in_s`` from now.
        At zero, requests get 403 "API rate limit exceeded ..." until the reset."""
        with self._lock:
            self._rate.clear()
            self._rate_override = (limit or self.rate_limit, remaining, time.time() + reset_in_s)

    # -- looking -----------------------------------------------------------------------------

    def requests_to(self, method: str, path_regex: str) -> list[RecordedRequest]:
        """Recorded requests with this method ("*": any) whose path ``re.search``-matches."""
        pattern = re.compile(path_regex)
        with self._lock:
            return [
                r
                for r in self.requests
                if (method == "*" or r.method == method.upper()) and pattern.search(r.path)
            ]

    def take_violations(self) -> list[Violation]:
        """The violations so far, forgotten (for tests that send invalid requests on purpose)."""
        with self._lock:
            found, self.violations = self.violations, []
            return found

    def assert_clean(self) -> None:
        """Fail unless every request fit the description, hit an endpoint the fake implements and got an
        answer that fits its schema (the ``fake_github`` fixture calls this at teardown)."""
        problems = [str(v) for v in self.violations]
        problems += [
            f"the fake does not implement {m} (add it to tests/fake_github)" for m in self.unimplemented
        ]
        problems += [f"the fake's answer broke the schema: {m}" for m in self.response_violations]
        assert not problems, (
            "fake GitHub: requests outside GitHub's OpenAPI description, endpoints the "
            "fake lacks or answers outside their schemas:\n" + "\n".join(problems)
        )

    # -- serving -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "GitHub.com"
            sys_version = ""

            def setup(self) -> None:
                super().setup()
                # Headers and body leave in separate writes: without this, Nagle + delayed ACK
                # would add ~40 ms to every answer.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = self._read_chunked()
                else:
                    raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake._wait_if_held(self.command, self.path)
                status, extra, payload = fake._process(self.command, self.path, headers, raw)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    for key, value in extra.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)

            def _read_chunked(self) -> bytes:
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def _process(
        self, method: str, raw_path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            try:
                reply, actor = self._dispatch(method, raw_path, headers, raw)
            except Exception as exc:  # a bug in the fake: answer 500 and say so loudly
                self.response_violations.append(f"{method} {raw_path}: fake crashed: {exc!r}")
                reply, actor = Reply(500, {"message": f"fake GitHub crashed: {exc!r}"}), None
            out = {
                "Content-Type": "application/json; charset=utf-8",
                "X-GitHub-Api-Version-Selected": "2022-11-28",
                "X-GitHub-Media-Type": "github.v3; format=json",
                "X-GitHub-Request-Id": f"FAKE:{len(self.requests):06d}",
            }
            out.update(self._rate_headers(actor))
            for key, value in reply.headers.items():
                # planned headers replace the fake's own, whatever their case
                for existing in [k for k in out if k.lower() == key.lower()]:
                    del out[existing]
                out[key] = value
            if self.requests:
                self.requests[-1].status = reply.status
            if isinstance(reply.body, bytes):  # a web page (oauth.py): not the API, none of its headers
                return reply.status, dict(reply.headers), reply.body
            payload = b"" if reply.body is None else json.dumps(reply.body).encode("utf-8")
            return reply.status, out, payload

    def _rate_headers(self, actor: Actor | None) -> dict[str, str]:
        bucket = self._bucket(actor.identity if actor else "anonymous")
        limit, remaining, reset = bucket
        return {
            "X-RateLimit-Limit": str(int(limit)),
            "X-RateLimit-Remaining": str(int(remaining)),
            "X-RateLimit-Reset": str(int(reset)),
            "X-RateLimit-Used": str(int(limit - remaining)),
            "X-RateLimit-Resource": "core",
        }

    def _bucket(self, identity: str) -> list[float]:
        now = time.time()
        bucket = self._rate.get(identity)
        if bucket is None or bucket[2] <= now:
            if self._rate_override is not None and self._rate_override[2] > now:
                limit, remaining, reset = self._rate_override
                bucket = [float(limit), float(remaining), reset]
            else:
                limit = 60 if identity == "anonymous" else self.rate_limit
                bucket = [float(limit), float(limit), now + 3600]
            self._rate[identity] = bucket
        return bucket

    def _violate(self, rec: RecordedRequest, kind: str, message: str) -> None:
        self.violations.append(Violation(rec.method, rec.raw_path, rec.operation, kind, message))

    def _dispatch(
        self, method: str, raw_path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[Reply, Actor | None]:
        split = urllib.parse.urlsplit(raw_path)
        path = split.path
        prefix = ""
        if path == "/api/v3" or path.startswith("/api/v3/"):
            prefix = "/api/v3"
            path = path[len(prefix) :] or "/"
        if len(path) > 1:
            path = path.rstrip("/")
        self._api = f"{self.base_url}{prefix}"
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        rec = RecordedRequest(method, path, raw_path, query, headers, None, raw)
        self.requests.append(rec)
        new_app = None if prefix else NEW_APP.match(path)
        if not prefix and (path in WEB_PAGES or new_app):  # github.com's pages: outside the API
            failure = self._take_failure(method, path, None)
            if failure is not None:
                rec.injected = True
                return self._failure_reply(failure), None
            if new_app:
                return self._new_app_page(rec, new_app.group("org")), None
            return self._web(rec), None
        body: Any = NO_BODY
        if raw:
            try:
                body = rec.json = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self._violate(rec, "json", "The body is not JSON.")
                return self._error(400, "Problems parsing JSON"), None
        match = self.spec.match(method, path)
        if match is None:
            allowed = sorted({m for t, _ in self.spec.templates_matching(path) for m in t.operations})
            detail = f"no {method} operation for this path (it has {allowed})" if allowed else "no such path"
            self._violate(rec, "no-operation", f"GitHub's API has {detail}.")
            return self._error(404, "Not Found"), None
        op = match.operation
        rec.operation = op.operation_id
        problems = self.spec.check_request(match, query, body)
        for problem in problems:
            self._violate(rec, problem.kind, problem.message)
        fatal = [p for p in problems if p.fatal]
        if any(p.kind == "path" for p in fatal):
            return self._error(404, "Not Found", doc_url=op.doc_url), None
        if fatal:
            details = "\n".join(p.message for p in fatal)
            return self._error(422, f"Invalid request.\n\n{details}", doc_url=op.doc_url), None
        failure = self._take_failure(method, path, rec.json)
        if failure is not None:
            rec.injected = True
            if not failure.after:
                return self._failure_reply(failure), None
        route = ROUTES.get((method, op.template))
        if route is None:
            self.unimplemented.append(f"{method} {op.template} ({op.operation_id})")
            return self._error(404, "Not Found", doc_url=op.doc_url), None
        if "user-agent" not in headers:
            return self._error(
                403,
                "Request forbidden by administrative rules. Please make sure your request has a User-Agent "
                "header "
                "(https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). "
                "Check https://developer.github.com for other possible causes.",
            ), None
        try:
            actor = self._authenticate(headers, route, op)
        except HTTPError as exc:
            return self._error_from(exc, op), None
        bucket = self._bucket(actor.identity)
        if route.handler != "get_rate_limit":
            if bucket[1] <= 0:
                who = (
                    f"installation ID {actor.installation.id}"
                    if actor.installation
                    else f"user ID {actor.user.id}"
                    if actor.user
                    else "127.0.0.1"
                )
                return self._error(
                    403,
                    f"API rate limit exceeded for {who}. If you reach out to GitHub Support for help, please "
                    f"include the request ID {headers.get('x-request-id', 'FAKE')}.",
                    doc_url=RATE_DOCS,
                ), actor
            bucket[1] -= 1
        ctx = Ctx(method, path, match.path_params, query, rec.json, op, actor, headers)
        try:
            reply = getattr(self, f"_h_{route.handler}")(ctx, route)
        except HTTPError as exc:
            return self._error_from(exc, op), actor
        if failure is not None:  # ``after``: done, and answered as a failure
            return self._failure_reply(failure), actor
        if self.check_responses and 200 <= reply.status < 300:
            for message in self.spec.check_response(op, reply.status, reply.body):
                self.response_violations.append(f"{method} {raw_path}: {message}")
        return reply, actor

    def _error(
        self,
        status: int,
        message: str,
        *,
        errors: list[Any] | None = None,
        doc_url: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        body: dict[str, Any] = {"message": message}
        if errors is not None:
            body["errors"] = errors
        body["documentation_url"] = doc_url or DOCS
        body["status"] = str(status)
        return Reply(status, body, dict(headers or {}))

    def _error_from(self, exc: HTTPError, op: Operation) -> Reply:
        return self._error(
            exc.status, exc.message, errors=exc.errors, doc_url=exc.doc_url or op.doc_url, headers=exc.headers
        )

    def _take_failure(self, method: str, path: str, body: Any) -> PlannedFailure | None:
        for failure in self._failures:
            if failure.method not in ("*", method) or not failure.pattern.search(path):
                continue
            if failure.when is None or failure.when(body):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                return failure
        return None

    def _failure_reply(self, failure: PlannedFailure) -> Reply:
        lowered = {k.lower(): v for k, v in failure.headers.items()}
        body = failure.body
        if body is None:
            if failure.status == 403 and lowered.get("x-ratelimit-remaining") == "0":
                message = (
                    "API rate limit exceeded for installation. If you reach out to GitHub Support for help, "
                    "please include the request ID FAKE."
                )
            elif failure.status == 429 or (failure.status == 403 and "retry-after" in lowered):
                message = "You have exceeded a secondary rate limit. "
                message += "Please wait a few minutes before you try again."
            else:
                message = http.HTTPStatus(failure.status).phrase
            body = {"message": message, "documentation_url": DOCS, "status": str(failure.status)}
        return Reply(failure.status, body, dict(failure.headers))

    # -- authentication ----------------------------------------------------------------------

    def _authenticate(self, headers: dict[str, str], route: Route, op: Operation) -> Actor:
        value = headers.get("authorization", "").strip()
        scheme, _, credential = value.partition(" ")
        scheme, credential = scheme.lower(), credential.strip()
        if route.auth == "app":
            if not value:
                raise HTTPError(401, "A JSON web token could not be decoded")  # GitHub's answer without one
            if scheme != "bearer" or credential.count(".") != 2:
                raise HTTPError(401, "A JSON web token could not be decoded")
            return self._app_actor(credential)
        if not value:
            if route.auth in ("installation", "user"):
                raise HTTPError(401, "Requires authentication")
            return Actor("anonymous", "anonymous")
        if scheme not in ("token", "bearer") or not credential:
            raise HTTPError(401, "Bad credentials")
        if route.auth == "user" and credential.count(".") == 2 and credential.startswith("ey"):
            # /user endpoints answer a valid app JWT with a 403 that says which token they want
            return self._app_actor(credential)
        if credential.count(".") == 2 and credential.startswith("ey"):
            # A JWT where an installation token belongs: GitHub only takes JWTs on /app endpoints.
            raise HTTPError(401, "Bad credentials")
        token = self.tokens.get(credential)
        if (
            token is None
            or token.revoked
            or (token.expires_at is not None and token.expires_at <= time.time())
        ):
            raise HTTPError(401, "Bad credentials")
        if token.kind == "installation":
            inst = self.installations.get(token.installation_id or -1)
            if inst is None:
                raise HTTPError(401, "Bad credentials")
            if inst.suspended_at is not None:
                raise HTTPError(403, "This installation has been suspended")
            bot = self.app.bot if self.app else None
            return Actor("installation", f"installation:{inst.id}", bot, token, inst)
        if route.auth == "installation":
            raise HTTPError(
                403,
                "You must authenticate with an installation access token in order to list repositories "
                "for an installation.",
            )
        user = self.add_user(token.login or "ghost")
        return Actor("user", f"user:{user.login.lower()}", user, token)

    def _app_actor(self, jwt_token: str) -> Actor:
        """The app, if ``jwt_token`` is a JWT it signed that GitHub would take (else GitHub's 401)."""
        if self.app is None:
            raise HTTPError(401, "A JSON web token could not be decoded")
        try:
            keys.verify_app_jwt(jwt_token, self.app.public_key_pem, self.app.app_id, self.app.client_id)
        except keys.JWTRejected as exc:
            raise HTTPError(401, str(exc)) from exc
        return Actor("app", f"app:{self.app.app_id}")
