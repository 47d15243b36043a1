"""The GitHub API, for the app and for one installation. With ``bot/oauth.py`` (a signed-in user's
GitHub), the only modules that import PyGithub.

Callers get plain dataclasses, strings and ints back and never see a PyGithub
object, so the rest of the bot can be tested with a fake HTTP server alone.

Every failure of a call (an HTTP error, a 5xx that outlived the retries, a
connection that could not be made) leaves this module as one
:class:`GitHubError` naming the method, the path and the status. Tokens and
keys never appear in an error, a log line or a repr.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import github
import requests
from github.Auth import Auth
from github.Repository import Repository
from urllib3.util.retry import Retry

from bot import repo_fetch
from bot.publish import ReviewComment

__all__ = [
    "GitHubApp",
    "GitHubError",
    "InstallationClient",
    "PullFile",
    "PullInfo",
    "RepoClient",
    "ReviewComment",
]

log = logging.getLogger(__name__)

# Installation tokens live one hour; one fetched within this margin of its expiry is refreshed, so a
# task that starts with a cached token still has minutes of validity for its slowest call.
TOKEN_REFRESH_MARGIN = timedelta(minutes=5)
# GitHub returns at most 100 items a page; PyGithub's default of 30 triples the calls for big pulls.
PER_PAGE = 100
MAX_CHECK_RUN_ACTIONS = 3  # GitHub refuses more (422)
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})


class GitHubError(Exception):
    """A GitHub API call failed for good (after retries). The message never holds a token.

    ``status`` is the HTTP status when there was a response (None for a connection failure);
    ``transient`` says whether trying the same call later may succeed (5xx, rate limits, network);
    ``retry_after`` is GitHub's suggested wait in seconds when a rate limit is the cause.
    """

    def __init__(
        self,
        method: str,
        path: str,
        status: int | None,
        detail: str,
        *,
        retry_after: float | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.detail = detail
        self.retry_after = retry_after
        shown = "no response" if status is None else str(status)
        super().__init__(f"GitHub API {method} {path} failed ({shown}): {detail}")

    @property
    def transient(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429 or self.retry_after is not None


@dataclass(frozen=True)
class CheckRunInfo:
    id: int
    status: str
    conclusion: str | None
    external_id: str | None


@dataclass(frozen=True)
class PullInfo:
    number: int
    head_sha: str
    base_sha: str
    head_repo_full_name: str | None  # None when the fork was deleted
    author_login: str
    author_association: str  # OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, NONE, …
    draft: bool
    is_fork: bool
    default_branch: str = "main"  # the base repository's: where its config is read from
    state: str = "open"
    private: bool = True
    head_ref: str = ""  # the branch the pull request's commits are on (in the fork, for a fork)


@dataclass(frozen=True)
class ReviewInfo:
    id: int
    body: str
    commit_id: str


@dataclass(frozen=True)
class LineComment:
    id: int
    body: str
    html_url: str


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author_login: str | None  # the GitHub user, when the commit's email maps to one
    message: str
    html_url: str = ""


@dataclass(frozen=True)
class FileAtRef:
    """A file's text at a ref and its blob sha (what replacing it through the contents API names)."""

    text: str
    blob_sha: str


@dataclass(frozen=True)
class PushedCommit:
    sha: str
    html_url: str


@dataclass(frozen=True)
class PullFile:
    filename: str
    status: str  # added, modified, removed, renamed, copied, changed, unchanged
    patch: str | None  # None for binary files and diffs GitHub declines to show (too large)
    previous_filename: str | None = None


class _InstallationAuth(Auth):
    """Authorization header from the app's token cache, read afresh for every request."""

    def __init__(self, token: Callable[[], str]) -> None:
        self._get = token

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        return self._get()

    @property
    def _masked_token(self) -> str:
        return "token (installation token removed)"

    def __repr__(self) -> str:
        return "_InstallationAuth(<hidden>)"


@dataclass
class _Token:
    value: str
    expires_at: datetime


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _Retry(github.GithubRetry):
    """GithubRetry that never repeats a POST GitHub may already have carried out.

    A 5xx or a broken connection after a POST was sent does not say whether GitHub created the
    review or comment: retrying blindly posts it twice. Such a POST fails at once, and the caller
    looks for what it wrote (its marker) before trying again. Rate limits (403, 429: nothing was
    created) and connection failures before sending are retried as for any method."""

    def _is_method_retryable(self, method: str) -> bool:
        return method.upper() != "POST" and super()._is_method_retryable(method)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method.upper() == "POST":
            return status_code in (403, 429) and status_code in (self.status_forcelist or ())
        return super().is_retry(method, status_code, has_retry_after)


WRITE_ATTEMPTS = 3  # tries of a POST whose outcome GitHub left unknown, each after looking for it
# urllib3 retries none of PATCH by default, nor GithubRetry: a single 502, 503 or secondary rate limit
# on the PATCH that completes a check run failed the publish. A PATCH sets fields, so twice is once.
RETRIED_METHODS = frozenset(Retry.DEFAULT_ALLOWED_METHODS | {"GET", "POST", "PATCH"})


def _unknown_outcome(exc: GitHubError) -> bool:
    """The write may or may not have happened: a 5xx, or no answer at all."""
    return exc.status is None or exc.status >= 500


class GitHubApp:
    """The GitHub App: signs its JWT, hands out installation clients, caches their tokens.

    ``seconds_between_writes`` is PyGithub's pause between mutating calls (GitHub asks for one
    second between them to avoid secondary rate limits); tests against a local fake pass 0.
    ``seconds_between_requests`` defaults to a quarter of it (PyGithub's own ratio: 0.25 s).
    Retries: ``retries`` attempts with exponential backoff (0, 2, 4, 8, 16 s: 30 s in all by default) of
    GETs, PATCHes, PUTs, DELETEs and (see :class:`_Retry`) POSTs on 5xx and 429, and on 403 rate
    limits, waiting for ``Retry-After`` or ``X-RateLimit-Reset`` up to ``max_rate_limit_wait`` seconds
    (beyond that the call fails with ``GitHubError.retry_after`` set, so a queue can reschedule it
    instead of holding a worker).
    ``git_url``: the web base that serves the repositories over git (``https://github.com``; GitHub
    Enterprise: ``https://HOST``), where :meth:`InstallationClient.python_files` fetches a commit's
    files; None derives it from ``base_url`` (see :func:`bot.repo_fetch.git_base_url`), ``""``
    reads them through the API only.
    """

    def __init__(
        self,
        app_id: int | str,
        private_key_pem: str,
        base_url: str = "https://api.github.com",
        seconds_between_writes: float = 1.0,
        *,
        seconds_between_requests: float | None = None,
        retries: int = 5,
        backoff_factor: float = 1.0,
        max_rate_limit_wait: float = 300.0,
        timeout: int = 15,
        bot_login: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        git_url: str | None = None,
    ) -> None:
        self.app_id = str(app_id)
        self.base_url = base_url.rstrip("/")
        self.git_url = repo_fetch.git_base_url(self.base_url) if git_url is None else git_url.rstrip("/")
        self._seconds_between_writes = seconds_between_writes
        self._seconds_between_requests = (
            seconds_between_writes / 4 if seconds_between_requests is None else seconds_between_requests
        )
        self._retries = retries
        self._backoff_factor = backoff_factor
        self._max_rate_limit_wait = max_rate_limit_wait
        self._timeout = timeout
        self._clock = clock
        self._bot_login = bot_login
        self._lock = threading.Lock()
        self._login_lock = threading.Lock()
        self._install_locks: dict[int, threading.Lock] = {}
        self._tokens: dict[int, _Token] = {}
        self._integration = github.GithubIntegration(
            auth=github.Auth.AppAuth(self.app_id, private_key_pem),
            base_url=self.base_url,
            timeout=timeout,
            retry=self.retry_policy(repeat_posts=True),
            seconds_between_requests=self._seconds_between_requests,
            seconds_between_writes=seconds_between_writes,
        )

    def __repr__(self) -> str:
        return f"GitHubApp(app_id={self.app_id!r}, base_url={self.base_url!r})"

    def retry_policy(self, *, repeat_posts: bool = False) -> github.GithubRetry:
        """A fresh retry policy (GithubIntegration's default is none at all: see PITFALLS.md).
        ``repeat_posts``: POSTs that are safe to repeat (a second installation token is harmless)."""
        return (github.GithubRetry if repeat_posts else _Retry)(
            total=self._retries,
            backoff_factor=self._backoff_factor,
            # GithubRetry adds 403 to these, and retries a 403 only when it is a rate limit.
            status_forcelist=[*range(500, 600), 429],
            allowed_methods=RETRIED_METHODS,  # POSTs as _Retry says
            max_rate_limit_wait=self._max_rate_limit_wait,
        )

    def installation(self, installation_id: int) -> InstallationClient:
        """A client acting as one installation. Cheap: the token is fetched on first use, then cached."""
        gh = github.Github(
            auth=_InstallationAuth(lambda: self._token(installation_id)),
            base_url=self.base_url,
            timeout=self._timeout,
            per_page=PER_PAGE,
            retry=self.retry_policy(),
            seconds_between_requests=self._seconds_between_requests,
            seconds_between_writes=self._seconds_between_writes,
            lazy=True,  # objects made from a URL fetch nothing until an attribute is read
        )
        return InstallationClient(self, installation_id, gh)

    def bot_login(self) -> str:
        """The app's own user login (``<slug>[bot]``), from ``GET /app`` once, unless given."""
        with self._login_lock:
            if self._bot_login is None:
                with translate_errors("GET", "/app", self._scrub):
                    slug = self._integration.get_app().slug
                self._bot_login = f"{slug}[bot]"
            return self._bot_login

    def _token(self, installation_id: int) -> str:
        """The installation's token, fetched anew when none is cached or it is near expiry."""
        with self._lock:
            lock = self._install_locks.setdefault(installation_id, threading.Lock())
        with lock:  # one fetch per installation at a time; other installations are not held up
            cached = self._tokens.get(installation_id)
            if cached is not None and self._clock() < cached.expires_at - TOKEN_REFRESH_MARGIN:
                return cached.value
            path = f"/app/installations/{installation_id}/access_tokens"
            with translate_errors("POST", path, self._scrub):
                auth = self._integration.get_access_token(installation_id)
            expires_at = auth.expires_at
            if expires_at.tzinfo is None:
                expires_at = expires_at.replace(tzinfo=UTC)
            self._tokens[installation_id] = _Token(auth.token, expires_at)
            log.info("installation %s: new token, expires %s", installation_id, expires_at.isoformat())
            return auth.token

    def _scrub(self, text: str) -> str:
        """``text`` with every token this app holds replaced (defence in depth: none should be there)."""
        for tok in list(self._tokens.values()):
            if tok.value:
                text = text.replace(tok.value, "***")
        return text


_RETRY_STATUS = re.compile(r"too many (\d{3}) error responses")


def _detail(exc: github.GithubException) -> str:
    """GitHub's own words: its message and each entry of ``errors``."""
    data = exc.data
    if not isinstance(data, dict):
        return str(data or exc.message or "no message")[:500]
    parts = [str(data.get("message") or exc.message or "no message")]
    for err in data.get("errors") or []:
        if isinstance(err, dict):
            text = err.get("message") or " ".join(
                str(err[k]) for k in ("resource", "field", "code") if k in err
            )
            parts.append(str(text))
        else:
            parts.append(str(err))
    return "; ".join(p for p in parts if p)


def _rate_limit_wait(headers: Mapping[str, str]) -> float:
    """Seconds until GitHub lifts a rate limit: ``Retry-After``, else ``X-RateLimit-Reset``, else 60."""
    lower = {k.lower(): v for k, v in headers.items()}
    if lower.get("retry-after", "").isdigit():
        return float(lower["retry-after"])
    if lower.get("x-ratelimit-reset", "").isdigit():
        return max(0.0, float(lower["x-ratelimit-reset"]) - datetime.now(UTC).timestamp())
    return 60.0  # GitHub's advice for secondary limits without a header: wait at least a minute


@contextmanager
def translate_errors(method: str, path: str, scrub: Callable[[str], str]) -> Iterator[None]:
    """Turn PyGithub's and requests' exceptions into GitHubError (``scrub`` takes any secret out of
    its message); for every caller of GitHub, the App's clients and a user's token alike."""
    try:
        yield
    except github.RateLimitExceededExceedsMaxWait as exc:
        detail = f"{_detail(exc)} (rate limited; GitHub asks to wait {exc.wait or 0:.0f} s)"
        raise GitHubError(method, path, exc.status, scrub(detail), retry_after=exc.wait) from None
    except github.RateLimitExceededException as exc:
        wait = _rate_limit_wait(exc.headers or {})
        detail = f"{_detail(exc)} (rate limited; try again in {wait:.0f} s)"
        raise GitHubError(method, path, exc.status, scrub(detail), retry_after=wait) from None
    except github.GithubException as exc:
        raise GitHubError(method, path, exc.status, scrub(_detail(exc))) from None
    except requests.exceptions.RetryError as exc:
        match = _RETRY_STATUS.search(str(exc))
        status = int(match.group(1)) if match else None
        detail = "GitHub kept failing after every retry; try again later"
        raise GitHubError(method, path, status, detail) from None
    except requests.exceptions.RequestException as exc:
        detail = f"{type(exc).__name__}: could not reach GitHub; try again later"
        raise GitHubError(method, path, None, detail) from None


class InstallationClient:
    """What the tasks do on GitHub as one installation. Obtain it from :meth:`GitHubApp.installation`.

    Use one client per task or thread (the app, and its token cache, are shared safely); ``close()``
    it, or use it as a context manager, to release its HTTP connections.
    """

    def __init__(self, app: GitHubApp, installation_id: int, gh: github.Github) -> None:
        self._app = app
        self.installation_id = installation_id
        self._gh = gh

    def __repr__(self) -> str:
        return f"InstallationClient(installation_id={self.installation_id})"

    def __enter__(self) -> InstallationClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._gh.close()

    def _call(self, method: str, path: str) -> AbstractContextManager[None]:
        return translate_errors(method, path, self._app._scrub)

    def bot_login(self) -> str:
        """The app's own user login (``<slug>[bot]``): what its comments and commits are signed as."""
        return self._app.bot_login()

    def repository(self, owner: str, repo: str) -> RepoClient:
        """This client bound to one repository."""
        return RepoClient(self, owner, repo)

    def _repo(self, owner: str, repo: str) -> Repository:
        return self._gh.get_repo(f"{owner}/{repo}")  # lazy: no request until an attribute is read

    def pull(self, owner: str, repo: str, number: int) -> PullInfo:
        """``GET /repos/{owner}/{repo}/pulls/{number}``: the pull request's shas, author and origin."""
        with self._call("GET", f"/repos/{owner}/{repo}/pulls/{number}"):
            pr = self._repo(owner, repo).get_pull(number)
            head_repo = pr.head.repo
            base_repo = pr.base.repo
            head_name = head_repo.full_name if head_repo is not None else None
            return PullInfo(
                number=pr.number,
                head_sha=pr.head.sha,
                base_sha=pr.base.sha,
                head_repo_full_name=head_name,
                author_login=pr.user.login if pr.user is not None else "ghost",
                author_association=pr.author_association or "NONE",
                draft=bool(pr.draft),
                is_fork=head_name is None or head_name != base_repo.full_name,
                default_branch=base_repo.default_branch or "main",
                state=pr.state or "open",
                private=bool(base_repo.private),
                head_ref=pr.head.ref or "",
            )

    def pull_files(self, owner: str, repo: str, number: int) -> list[PullFile]:
        """Every file of the pull request, all pages (GitHub lists at most 3,000)."""
        with self._call("GET", f"/repos/{owner}/{repo}/pulls/{number}/files"):
            files = self._repo(owner, repo).get_pull(number).get_files()
            return [
                PullFile(
                    filename=f.filename,
                    status=f.status,
                    patch=f.patch,
                    previous_filename=f.previous_filename,
                )
                for f in files
            ]

    def file_text(self, owner: str, repo: str, path: str, ref: str) -> str | None:
        """The text of ``path`` at ``ref`` (UTF-8, bad bytes replaced); None if it is not a file there.

        Files over 1 MB come back from the contents API without content: they are read as a blob.
        """
        found = self.file_at(owner, repo, path, ref)
        return found.text if found is not None else None

    def file_at(self, owner: str, repo: str, path: str, ref: str) -> FileAtRef | None:
        """:meth:`file_text`, with the file's blob sha."""
        api_path = f"/repos/{owner}/{repo}/contents/{path}"
        with self._call("GET", api_path):
            gh_repo = self._repo(owner, repo)
            try:
                content = gh_repo.get_contents(path, ref=ref)
            except github.UnknownObjectException:
                return None
            if isinstance(content, list) or content.type != "file":
                return None
            if content.encoding == "base64" and content.content is not None:
                raw: bytes = content.decoded_content
            else:
                blob = gh_repo.get_git_blob(content.sha)
                raw = base64.b64decode(blob.content) if blob.encoding == "base64" else blob.content.encode()
            return FileAtRef(raw.decode("utf-8", errors="replace"), content.sha)

    def commit_file(
        self,
        owner: str,
        repo: str,
        branch: str,
        path: str,
        text: str,
        blob_sha: str,
        message: str,
        marker: str,
    ) -> PushedCommit:
        """One commit on ``branch`` replacing ``path`` (now blob ``blob_sha``) with ``text``, through the
        contents API; ``marker`` (a line of ``message``) finds it again. GitHub refuses the write
        (409) when the file is no longer that blob: then, and when GitHub left the outcome unknown
        (5xx, no answer), the branch's head is looked at, and a commit carrying ``marker`` there is
        this one, already made (a retried request that went through, or a twin command): never
        the same change twice."""
        try:
            with self._call("PUT", f"/repos/{owner}/{repo}/contents/{path}"):
                made = self._repo(owner, repo).update_file(path, message, text, blob_sha, branch=branch)
            commit = made["commit"]
            return PushedCommit(commit.sha, commit.html_url)
        except GitHubError as exc:
            if exc.status != 409 and not _unknown_outcome(exc):
                raise
            head = self.commit(owner, repo, branch)
            if marker not in head.message:
                raise
            return PushedCommit(head.sha, head.html_url)

    def permission(self, owner: str, repo: str, username: str) -> str:
        """``admin``, ``write``, ``read`` or ``none``: the user's permission on the repository.

        A user GitHub does not know (404) has ``none``.
        """
        with self._call("GET", f"/repos/{owner}/{repo}/collaborators/{username}/permission"):
            try:
                return str(self._repo(owner, repo).get_collaborator_permission(username))
            except github.UnknownObjectException:
                return "none"

    def create_check_run(
        self,
        owner: str,
        repo: str,
        head_sha: str,
        name: str,
        status: str,
        output: Mapping[str, str] | None = None,
        external_id: str | None = None,
        actions: Sequence[Mapping[str, str]] | None = None,
        conclusion: str | None = None,
    ) -> int:
        """Open a check run on ``head_sha`` and return its id (``conclusion`` with status completed).

        ``status``: queued, in_progress or completed; ``output``: ``{"title", "summary", "text"}``
        (each at most 65,535 characters and bytes); ``actions``: at most three
        ``{"label", "description", "identifier"}``.
        """
        if actions is not None and len(actions) > MAX_CHECK_RUN_ACTIONS:
            raise ValueError(
                f"GitHub allows at most {MAX_CHECK_RUN_ACTIONS} check-run actions, got {len(actions)}"
            )
        kwargs: dict[str, Any] = {"name": name, "head_sha": head_sha, "status": status}
        if output is not None:
            kwargs["output"] = dict(output)
        if external_id is not None:
            kwargs["external_id"] = external_id
        if actions is not None:
            kwargs["actions"] = [dict(a) for a in actions]
        if conclusion is not None:
            kwargs["conclusion"] = conclusion

        def post() -> int:
            with self._call("POST", f"/repos/{owner}/{repo}/check-runs"):
                return int(self._repo(owner, repo).create_check_run(**kwargs).id)

        def find() -> int | None:
            runs = self.check_runs(owner, repo, head_sha, name)
            return next((r.id for r in runs if r.external_id == external_id), None)

        return self._write_once(post, find if external_id else None)

    def update_check_run(
        self,
        owner: str,
        repo: str,
        check_run_id: int,
        *,
        status: str | None = None,
        conclusion: str | None = None,
        output: Mapping[str, str] | None = None,
    ) -> None:
        """Change a check run. Giving a ``conclusion`` completes it (GitHub sets status ``completed``)."""
        kwargs: dict[str, Any] = {}
        if status is not None:
            kwargs["status"] = status
        if conclusion is not None:
            kwargs["conclusion"] = conclusion
        if output is not None:
            kwargs["output"] = dict(output)
        with self._call("PATCH", f"/repos/{owner}/{repo}/check-runs/{check_run_id}"):
            self._repo(owner, repo).get_check_run(check_run_id).edit(**kwargs)

    def create_review(
        self,
        owner: str,
        repo: str,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment],
        marker: str | None = None,
    ) -> int:
        """Post one review (event COMMENT) with line comments on the RIGHT side; return its id.

        Each comment's ``line`` (and ``start_line``, strictly before it) must lie in one diff hunk
        of ``commit_sha``, or GitHub answers 422 and nothing is posted. With ``marker`` (a string
        in ``body``), a POST whose outcome GitHub left unknown (5xx, no answer) is followed by a look
        for this app's review carrying it: found, its id is returned; else the POST is tried again.
        """
        payload_comments = []
        for c in comments:
            item: dict[str, Any] = {"path": c.path, "line": c.line, "side": "RIGHT", "body": c.body}
            if c.start_line is not None:
                item["start_line"] = c.start_line
                item["start_side"] = "RIGHT"
            payload_comments.append(item)
        payload = {"commit_id": commit_sha, "body": body, "event": "COMMENT", "comments": payload_comments}
        path = f"/repos/{owner}/{repo}/pulls/{number}/reviews"

        def post() -> int:
            with self._call("POST", path):
                _, data = self._gh.requester.requestJsonAndCheck("POST", path, input=payload)
                return int(data["id"])

        def find() -> int | None:
            assert marker is not None
            return next((r.id for r in self.reviews(owner, repo, number) if marker in r.body), None)

        return self._write_once(post, find if marker else None)

    def _write_once(self, post: Callable[[], int], find: Callable[[], int | None] | None) -> int:
        """``post()``; where GitHub leaves its outcome unknown, ``find()`` what it would have written
        before posting again (``WRITE_ATTEMPTS`` in all): never the same thing twice."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return post()
            except GitHubError as exc:
                if find is None or not _unknown_outcome(exc):
                    raise
                found = find()
                if found is not None:
                    return found
                if attempt == WRITE_ATTEMPTS - 1:
                    raise
                time.sleep(min(2.0**attempt, 8.0) * self._app._backoff_factor)
        raise AssertionError("unreachable")

    def upsert_comment(
        self, owner: str, repo: str, number: int, marker: str, body: str, *, create: bool = True
    ) -> int | None:
        """Edit the bot's issue comment whose body contains ``marker``, or (with ``create``) create one;
        return its id (None when there was none and ``create`` is false).

        Only comments written by this app are considered, so a user quoting the marker is left alone.
        """
        me = self._app.bot_login()
        path = f"/repos/{owner}/{repo}/issues/{number}/comments"
        with self._call("GET", path):
            issue = self._repo(owner, repo).get_issue(number)
            mine = next(
                (
                    c
                    for c in issue.get_comments()
                    if c.user is not None and c.user.login == me and marker in (c.body or "")
                ),
                None,
            )
        if mine is not None:
            with self._call("PATCH", f"/repos/{owner}/{repo}/issues/comments/{mine.id}"):
                mine.edit(body)
            return int(mine.id)
        if not create:
            return None

        def post() -> int:
            with self._call("POST", path):
                return int(issue.create_comment(body).id)

        def find() -> int | None:
            with self._call("GET", path):
                return next(
                    (
                        int(c.id)
                        for c in issue.get_comments()
                        if c.user is not None and c.user.login == me and marker in (c.body or "")
                    ),
                    None,
                )

        return self._write_once(post, find)

    def react(self, owner: str, repo: str, comment_id: int, content: str) -> None:
        """Add a reaction (``+1``, ``eyes``, ``rocket``, …) to an issue comment."""
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}; GitHub accepts {sorted(REACTIONS)}")
        path = f"/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"

        def post() -> int:  # GitHub answers an existing reaction with itself: safe to repeat
            with self._call("POST", path):
                self._gh.requester.requestJsonAndCheck("POST", path, input={"content": content})
            return 0

        self._write_once(post, lambda: None)

    def check_runs(self, owner: str, repo: str, sha: str, name: str) -> list[CheckRunInfo]:
        """This app's check runs called ``name`` on commit ``sha``."""
        path = f"/repos/{owner}/{repo}/commits/{sha}/check-runs"
        with self._call("GET", path):
            runs = self._repo(owner, repo).get_commit(sha).get_check_runs(check_name=name)
            return [CheckRunInfo(int(r.id), r.status, r.conclusion, r.external_id) for r in runs]

    def review_bodies(self, owner: str, repo: str, number: int) -> list[str]:
        """The bodies of the reviews this app posted on pull request ``number``."""
        return [r.body for r in self.reviews(owner, repo, number)]

    def reviews(self, owner: str, repo: str, number: int) -> list[ReviewInfo]:
        """The reviews this app posted on pull request ``number``, oldest first."""
        me = self._app.bot_login()
        path = f"/repos/{owner}/{repo}/pulls/{number}/reviews"
        with self._call("GET", path):
            reviews = self._repo(owner, repo).get_pull(number).get_reviews()
            return [
                ReviewInfo(int(r.id), r.body or "", r.commit_id or "")
                for r in reviews
                if r.user is not None and r.user.login == me
            ]

    def review_comments(self, owner: str, repo: str, number: int, review_id: int) -> list[LineComment]:
        """The line comments of one review."""
        path = f"/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}/comments"
        with self._call("GET", path):
            page = 1
            out: list[LineComment] = []
            while True:
                _, data = self._gh.requester.requestJsonAndCheck(
                    "GET", path, parameters={"per_page": 100, "page": page}
                )
                out.extend(
                    LineComment(int(c["id"]), str(c.get("body") or ""), str(c.get("html_url") or ""))
                    for c in data
                )
                if len(data) < 100:
                    return out
                page += 1

    def commit(self, owner: str, repo: str, sha: str) -> CommitInfo:
        path = f"/repos/{owner}/{repo}/commits/{sha}"
        with self._call("GET", path):
            c = self._repo(owner, repo).get_commit(sha)
            author = c.author.login if c.author is not None else None
            return CommitInfo(c.sha, author, c.commit.message or "", c.html_url or "")

    def review_comment_reactions(self, owner: str, repo: str, comment_id: int) -> list[str]:
        """The reactions (``+1``, ``-1``, …) on one line comment."""
        path = f"/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"
        with self._call("GET", path):
            out: list[str] = []
            page = 1
            while True:
                _, data = self._gh.requester.requestJsonAndCheck(
                    "GET", path, parameters={"per_page": 100, "page": page}
                )
                out.extend(str(r.get("content")) for r in data)
                if len(data) < 100:
                    return out
                page += 1

    def update_review(self, owner: str, repo: str, number: int, review_id: int, body: str) -> None:
        path = f"/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}"
        with self._call("PUT", path):
            self._gh.requester.requestJsonAndCheck("PUT", path, input={"body": body})

    def edit_review_comment(self, owner: str, repo: str, comment_id: int, body: str) -> None:
        path = f"/repos/{owner}/{repo}/pulls/comments/{comment_id}"
        with self._call("PATCH", path):
            self._gh.requester.requestJsonAndCheck("PATCH", path, input={"body": body})

    def comment(self, owner: str, repo: str, number: int, body: str) -> int:
        """A new comment on issue or pull request ``number`` (a reply to a command); its id."""
        path = f"/repos/{owner}/{repo}/issues/{number}/comments"
        with self._call("POST", path):
            _, data = self._gh.requester.requestJsonAndCheck("POST", path, input={"body": body})
            return int(data["id"])

    def python_files(
        self, owner: str, repo: str, ref: str, limit_bytes: int, *, pull_number: int | None = None
    ) -> dict[str, str]:
        """Every ``.py`` file of the repository at ``ref`` (the whole tree, so imports between files
        resolve), in path order, stopping at ``limit_bytes`` of text (a file that would pass it is
        skipped). Read with a shallow git fetch of that commit (:mod:`bot.repo_fetch`: four HTTP
        requests instead of one per file); where git cannot (not installed, refused, unreachable),
        through the API, after one log line saying why. ``pull_number``: the pull request whose
        head ``ref`` is, so that a server refusing a fetch by sha can serve ``refs/pull/N/head``."""
        if self._app.git_url and re.fullmatch(r"[0-9a-f]{40}", ref):
            url = repo_fetch.remote_url(self._app.git_url, owner, repo)
            token = self._app._token(self.installation_id)
            try:
                return repo_fetch.fetch_python_files(url, token, ref, limit_bytes, pull_number=pull_number)
            except repo_fetch.FetchError as exc:
                why = self._app._scrub(str(exc)).replace(token, "***")
                log.warning("%s/%s@%s: reading the files through the API: %s", owner, repo, ref[:12], why)
        return self._python_files_api(owner, repo, ref, limit_bytes)

    def _python_files_api(self, owner: str, repo: str, ref: str, limit_bytes: int) -> dict[str, str]:
        """:meth:`python_files` through the REST API: the recursive tree, then one request per blob."""
        path = f"/repos/{owner}/{repo}/git/trees/{ref}"
        with self._call("GET", path):
            gh_repo = self._repo(owner, repo)
            tree = gh_repo.get_git_tree(ref, recursive=True)
            blobs = [e for e in tree.tree if e.type == "blob" and e.path.endswith(".py")]
        files: dict[str, str] = {}
        total = 0
        for entry in sorted(blobs, key=lambda e: e.path):
            if entry.size is not None and total + entry.size > limit_bytes:
                continue
            with self._call("GET", f"/repos/{owner}/{repo}/git/blobs/{entry.sha}"):
                blob = gh_repo.get_git_blob(entry.sha)
                raw = base64.b64decode(blob.content) if blob.encoding == "base64" else blob.content.encode()
            text = raw.decode("utf-8", errors="replace")
            total += len(text)
            files[entry.path] = text
        return files


@dataclass(frozen=True)
class RepoClient:
    """What a task does on GitHub in one repository: :class:`InstallationClient`'s calls with
    ``owner`` and ``repo`` given once, so the flows of ``bot/flows/`` name the repository nowhere else."""

    client: InstallationClient
    owner: str
    repo: str

    @property
    def full_name(self) -> str:
        """``owner/repo``, as the database keys a repository."""
        return f"{self.owner}/{self.repo}"

    @property
    def installation_id(self) -> int:
        return self.client.installation_id

    def bot_login(self) -> str:
        return self.client.bot_login()

    def pull(self, number: int) -> PullInfo:
        return self.client.pull(self.owner, self.repo, number)

    def pull_files(self, number: int) -> list[PullFile]:
        return self.client.pull_files(self.owner, self.repo, number)

    def file_text(self, path: str, ref: str) -> str | None:
        return self.client.file_text(self.owner, self.repo, path, ref)

    def file_at(self, path: str, ref: str) -> FileAtRef | None:
        return self.client.file_at(self.owner, self.repo, path, ref)

    def commit_file(
        self, branch: str, path: str, text: str, blob_sha: str, message: str, marker: str
    ) -> PushedCommit:
        return self.client.commit_file(self.owner, self.repo, branch, path, text, blob_sha, message, marker)

    def permission(self, username: str) -> str:
        return self.client.permission(self.owner, self.repo, username)

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        status: str,
        output: Mapping[str, str] | None = None,
        external_id: str | None = None,
        actions: Sequence[Mapping[str, str]] | None = None,
        conclusion: str | None = None,
    ) -> int:
        return self.client.create_check_run(
            self.owner,
            self.repo,
            head_sha,
            name,
            status,
            output=output,
            external_id=external_id,
            actions=actions,
            conclusion=conclusion,
        )

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: str | None = None,
        conclusion: str | None = None,
        output: Mapping[str, str] | None = None,
    ) -> None:
        self.client.update_check_run(
            self.owner, self.repo, check_run_id, status=status, conclusion=conclusion, output=output
        )

    def check_runs(self, sha: str, name: str) -> list[CheckRunInfo]:
        return self.client.check_runs(self.owner, self.repo, sha, name)

    def create_review(
        self,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment],
        marker: str | None = None,
    ) -> int:
        return self.client.create_review(self.owner, self.repo, number, commit_sha, body, comments, marker)

    def review_bodies(self, number: int) -> list[str]:
        return self.client.review_bodies(self.owner, self.repo, number)

    def reviews(self, number: int) -> list[ReviewInfo]:
        return self.client.reviews(self.owner, self.repo, number)

    def review_comments(self, number: int, review_id: int) -> list[LineComment]:
        return self.client.review_comments(self.owner, self.repo, number, review_id)

    def review_comment_reactions(self, comment_id: int) -> list[str]:
        return self.client.review_comment_reactions(self.owner, self.repo, comment_id)

    def update_review(self, number: int, review_id: int, body: str) -> None:
        self.client.update_review(self.owner, self.repo, number, review_id, body)

    def edit_review_comment(self, comment_id: int, body: str) -> None:
        self.client.edit_review_comment(self.owner, self.repo, comment_id, body)

    def upsert_comment(self, number: int, marker: str, body: str, *, create: bool = True) -> int | None:
        return self.client.upsert_comment(self.owner, self.repo, number, marker, body, create=create)

    def comment(self, number: int, body: str) -> int:
        return self.client.comment(self.owner, self.repo, number, body)

    def react(self, comment_id: int, content: str) -> None:
        self.client.react(self.owner, self.repo, comment_id, content)

    def commit(self, sha: str) -> CommitInfo:
        return self.client.commit(self.owner, self.repo, sha)

    def python_files(self, ref: str, limit_bytes: int, *, pull_number: int | None = None) -> dict[str, str]:
        return self.client.python_files(self.owner, self.repo, ref, limit_bytes, pull_number=pull_number)
