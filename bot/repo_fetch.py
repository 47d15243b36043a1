"""A commit's Python files through one shallow, filtered git fetch instead of one API request per file.

Planning a pull request needs every ``.py`` file of the repository at the head commit. Read
through the REST API that is a tree request plus one blob request per file: thousands of the
installation's 5,000 hourly requests on a large repository, and minutes of wall time. Here it is
two git fetches into a fresh temporary repository, a few HTTP requests in all:

1. ``git fetch --depth 1 --filter=blob:none origin <sha>``: the commit and its trees, no file contents;
2. ``git fetch --stdin origin`` with the object ids of the tree's ``.py`` blobs: only Python's contents.

Every blob of the commit's Python comes over (compressed), also when the budget keeps only part of
it: git learns a blob's size only with the blob, and the budget's rule (a file that would pass it
is skipped, later smaller ones still taken) needs every size.

Protocol v2 (GitHub's) serves any object by id. A protocol v0 server serves only what it
advertises: a commit by sha only at a ref's tip (a pull request's head is the tip of
``refs/pull/<N>/head`` in the base repository, forks' included), blobs by id not at all. When the
blobs are refused, the commit is fetched again into a second repository with
``--filter=blob:limit=<budget + 1>``, which brings every file small enough to fit (Python or not)
in the same request. When the sha itself is refused and the pull request's number is known,
``refs/pull/<N>/head`` is fetched instead, and must still name the sha.

The installation token travels only in the environment of the fetch commands, as the
``http.extraHeader`` of ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n``: never in the
remote URL, never in ``.git/config``, never on a command line (where ``/proc/<pid>/cmdline`` shows it
to every local user and where GitPython's errors and debug log repeat it). Git never prompts
(``GIT_TERMINAL_PROMPT=0``) and no credential helper sees or stores the token.
"""

from __future__ import annotations

import base64
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FetchError", "fetch_python_files", "git_base_url"]

log = logging.getLogger(__name__)

# A fetch that takes longer than this is killed (the API path then reads the files instead).
FETCH_TIMEOUT_S = 300.0
# A transfer slower than LOW_SPEED_BYTES a second for LOW_SPEED_S seconds is abandoned by git itself.
LOW_SPEED_BYTES = 1000
LOW_SPEED_S = 60
_SHA = re.compile(r"[0-9a-f]{40}")


class FetchError(Exception):
    """The files could not be read through git. The message never holds a token."""


@dataclass(frozen=True)
class _Entry:
    path: str
    oid: str


def git_base_url(api_url: str) -> str | None:
    """The web base that serves git for the REST API at ``api_url``, or None when it is not known.

    ``https://api.github.com`` → ``https://github.com``; GitHub Enterprise Server's
    ``https://HOST/api/v3`` → ``https://HOST``. Any other API base (a test double, a proxy) has no
    known git server: the files are then read through the API."""
    api = api_url.rstrip("/")
    if api == "https://api.github.com":
        return "https://github.com"
    if api.endswith("/api/v3"):
        return api.removesuffix("/api/v3")
    return None


def remote_url(git_base: str, owner: str, repo: str) -> str:
    """``{git_base}/{owner}/{repo}.git``: the repository's smart-HTTP URL, never with credentials."""
    return f"{git_base.rstrip('/')}/{owner}/{repo}.git"


def _auth_environment(token: str) -> dict[str, str]:
    """Environment for one authenticated git command: the token as an HTTP header, no prompts, no helpers."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")
    config = [
        ("credential.helper", ""),  # an empty value clears every helper configured elsewhere
        ("core.askPass", ""),
        ("http.extraHeader", f"Authorization: Basic {basic}"),
        ("http.lowSpeedLimit", str(LOW_SPEED_BYTES)),
        ("http.lowSpeedTime", str(LOW_SPEED_S)),
    ]
    env = {"GIT_CONFIG_COUNT": str(len(config))}
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


# For every git command of the temporary repository: never ask anyone for anything, never fetch
# an object that is missing behind our back (git 2.44+), keep tokens out of any trace the caller enabled.
_QUIET_ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_TRACE_REDACT": "1",
}
# No background gc or commit-graph work in a repository that is deleted a second later.
_QUIET_CONFIG = ("gc.auto=0", "maintenance.auto=false", "fetch.writeCommitGraph=false")


class _Scrubber:
    """Removes a token, and the header value made from it, from text that leaves this module."""

    def __init__(self, token: str) -> None:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")
        self._secrets = [s for s in (token, basic) if s]

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _git_error(exc: Any, scrub: _Scrubber) -> str:
    """What git said (its last line of stderr), without the token."""
    stderr = getattr(exc, "stderr", "") or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", errors="replace")
    lines = [ln.strip() for ln in str(stderr).splitlines() if ln.strip()]
    lines = [ln.removeprefix("stderr: ").strip("'").strip() for ln in lines]
    lines = [ln for ln in lines if ln]
    said = lines[-1] if lines else f"exit status {getattr(exc, 'status', '?')}"
    return scrub(said)[:300]


def _import_git() -> Any:
    """GitPython, or FetchError when there is no git executable (GitPython refuses to import then)."""
    if shutil.which("git") is None:
        raise FetchError("git is not installed")
    try:
        import git
    except ImportError as exc:
        raise FetchError(f"GitPython cannot run git: {type(exc).__name__}") from None
    return git


@contextmanager
def _workdir(keep_in: Path | None) -> Iterator[Path]:
    if keep_in is not None:
        keep_in.mkdir(parents=True, exist_ok=True)
        yield keep_in
        return
    with tempfile.TemporaryDirectory(prefix="kernelize-fetch-") as tmp:
        yield Path(tmp)


def fetch_python_files(
    url: str,
    token: str,
    sha: str,
    limit_bytes: int,
    *,
    pull_number: int | None = None,
    timeout_s: float = FETCH_TIMEOUT_S,
    keep_in: Path | None = None,
) -> dict[str, str]:
    """Every ``.py`` file of commit ``sha`` of the repository at ``url``, read with git, within
    ``limit_bytes`` of text.

    The same answer as the API path: files in path order, each decoded as UTF-8 with bad bytes
    replaced; one whose size would take the total past ``limit_bytes`` is skipped and later ones
    still considered. ``pull_number``: the pull request whose head ``sha`` is, so that a server
    that refuses a fetch by sha can be asked for ``refs/pull/<N>/head`` instead.
    ``keep_in``: work in this directory and leave it there (tests look inside); by default a
    temporary directory, removed on return. Raises :class:`FetchError` (no token in it) on any failure.
    """
    if not _SHA.fullmatch(sha):
        raise FetchError("git is used for full commit shas only")
    job = _Job(_import_git(), url, token, sha, limit_bytes, pull_number, timeout_s)
    try:
        with _workdir(keep_in) as work:
            try:
                return job.run(work / "repo.git", blobs_by_id=True)
            except _IdsRefused as refused:
                # A server that serves only what it advertises (protocol v0): blobs come with the commit.
                log.info("%s: %s; fetching the commit with its files", sha[:12], refused)
                return job.run(work / "repo-with-blobs.git", blobs_by_id=False)
    except (OSError, ValueError) as exc:  # a full disk, a repository git answered about unexpectedly
        detail = job.scrub(str(exc))[:300]
        raise FetchError(f"reading the fetched commit failed: {type(exc).__name__}: {detail}") from None


class _IdsRefused(FetchError):
    """The server would not send blobs asked for by object id."""


class _Job:
    """One commit's files from one repository: the settings every attempt shares."""

    def __init__(
        self,
        git: Any,
        url: str,
        token: str,
        sha: str,
        limit_bytes: int,
        pull_number: int | None,
        timeout_s: float,
    ) -> None:
        self.git = git
        self.url = url
        self.sha = sha
        self.limit_bytes = limit_bytes
        self.pull_number = pull_number
        self.timeout_s = timeout_s
        self.scrub = _Scrubber(token)
        self.auth = _auth_environment(token)
        self.target: str | None = None  # what the server agreed to send: the sha or the pull's ref

    def run(self, path: Path, *, blobs_by_id: bool) -> dict[str, str]:
        """Fetch into a new repository at ``path`` and read the files. ``blobs_by_id``: the commit
        without any file's contents, then the Python files' blobs by id; else the commit with every
        file under the budget's size."""
        git = self.git
        try:
            repo = git.Repo.init(str(path), bare=True)
        except git.GitCommandError as exc:
            raise FetchError(f"git init failed: {_git_error(exc, self.scrub)}") from None
        try:
            repo.git.update_environment(**_QUIET_ENVIRONMENT)
            for setting in _QUIET_CONFIG:
                key, _, value = setting.partition("=")
                repo.git.config(key, value)
            repo.git.remote("add", "origin", self.url)
            blobs = "blob:none" if blobs_by_id else f"blob:limit={self.limit_bytes + 1}"
            self._fetch_commit(repo, blobs)
            entries = _python_entries(repo, self.sha)
            if blobs_by_id:
                self._fetch_blobs(repo, path.parent / f"{path.name}.wants", entries)
            return _read(repo, entries, self.limit_bytes, complete=blobs_by_id)
        except git.GitCommandError as exc:
            raise FetchError(f"git failed: {_git_error(exc, self.scrub)}") from None
        finally:
            repo.close()

    def _fetch(self, repo: Any, args: list[str], **kw: Any) -> None:
        repo.git.fetch(*args, env=dict(self.auth), kill_after_timeout=self.timeout_s, **kw)

    def _fetch_commit(self, repo: Any, blobs: str) -> None:
        """Fetch the commit and its trees (and the blobs ``blobs`` lets through): by sha, or where
        the server refuses that, as the pull request's ref, which must still name the sha."""
        git = self.git
        common = ["--depth=1", "--no-tags", "--recurse-submodules=no", f"--filter={blobs}", "origin"]
        ref = f"refs/pull/{self.pull_number}/head" if self.pull_number is not None else None
        first = ""
        if self.target in (None, self.sha):
            try:
                self._fetch(repo, [*common, self.sha])
                self.target = self.sha
                return
            except git.GitCommandError as exc:
                first = _git_error(exc, self.scrub)
                if ref is None:
                    raise FetchError(f"git fetch of {self.sha[:12]} failed: {first}") from None
        assert ref is not None
        try:
            self._fetch(repo, [*common, ref])
        except git.GitCommandError as exc:
            said = _git_error(exc, self.scrub)
            raise FetchError(
                f"git fetch of {self.sha[:12]} failed ({first}), and of {ref} ({said})"
            ) from None
        fetched = str(repo.git.rev_parse("FETCH_HEAD")).strip()
        if fetched != self.sha:
            raise FetchError(f"{ref} is now {fetched[:12]}, not {self.sha[:12]}: the pull request moved on")
        self.target = ref

    def _fetch_blobs(self, repo: Any, wants: Path, entries: list[_Entry]) -> None:
        """One fetch of every listed blob by object id (what a partial clone does for missing objects)."""
        oids = list(dict.fromkeys(e.oid for e in entries))
        if not oids:
            return
        wants.write_text("".join(f"{oid}\n" for oid in oids), encoding="ascii")
        args = ["--no-tags", "--no-write-fetch-head", "--recurse-submodules=no", "--stdin", "origin"]
        try:
            with wants.open("rb") as stdin:
                self._fetch(repo, args, istream=stdin)
        except self.git.GitCommandError as exc:
            said = _git_error(exc, self.scrub)
            raise _IdsRefused(f"git fetch of {len(oids)} Python files by id failed: {said}") from None


def _python_entries(repo: Any, sha: str) -> list[_Entry]:
    """The commit's ``.py`` blobs (symbolic links included, as the API lists them), in path order."""
    raw: bytes = repo.git.ls_tree("-r", "-z", "--full-tree", sha, stdout_as_string=False)
    entries = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, path_bytes = record.partition(b"\t")
        _mode, kind, oid = meta.decode("ascii").split()
        path = path_bytes.decode("utf-8", errors="replace")
        if kind == "blob" and path.endswith(".py"):
            entries.append(_Entry(path, oid))
    return sorted(entries, key=lambda e: e.path)


def _present(repo: Any) -> dict[str, int]:
    """Size of every blob the temporary repository holds (listing them never fetches a missing one)."""
    check = "--batch-check=%(objectname) %(objecttype) %(objectsize)"
    out = str(repo.git.cat_file("--batch-all-objects", check))
    sizes = {}
    for line in out.splitlines():
        oid, kind, size = line.split()
        if kind == "blob":
            sizes[oid] = int(size)
    return sizes


def _read(repo: Any, entries: list[_Entry], limit_bytes: int, *, complete: bool) -> dict[str, str]:
    """The files' texts in path order within the budget (a file that would pass it is skipped).

    ``complete``: every blob was asked for, so a missing one is an error; otherwise the fetch left
    out only blobs over ``limit_bytes``, which the budget skips anyway."""
    sizes = _present(repo)
    files: dict[str, str] = {}
    total = 0
    for entry in entries:
        size = sizes.get(entry.oid)
        if size is None:
            if complete:
                raise FetchError(f"the server did not send {entry.path}")
            continue
        if total + size > limit_bytes:
            continue
        _, _, _, data = repo.git.get_object_data(entry.oid)
        text = bytes(data).decode("utf-8", errors="replace")
        total += len(text)
        files[entry.path] = text
    return files
