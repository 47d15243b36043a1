"""Reading a commit's Python files with git: a real git server over smart HTTP, real fetches.

``GitHTTPServer`` runs ``git http-backend`` as a CGI program behind an HTTP server on 127.0.0.1
that answers 401 to any request without ``Authorization: Basic x-access-token:<token>``, as
GitHub does for a private repository. bench/bundle_fetch.py uses it too.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bot import repo_fetch
from bot.github import GitHubApp
from bot.repo_fetch import FetchError, fetch_python_files
from tests.fake_github import FakeGitHub

OWNER, REPO = "octo", "models"
TOKEN = "ghs_" + "T0k3n" * 7  # what the served repositories accept
INSTALLATION = 5


# --- a git server --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedRequest:
    method: str
    path: str
    status: int
    response_bytes: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.server.git.record(ServedRequest(self.command, self.path, status, len(body)))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        git = self.server.git
        body = self._body()
        if self.headers.get("Authorization") != git.expected_authorization():
            self._reply(401, [("WWW-Authenticate", 'Basic realm="git"')], b"Bad credentials\n")
            return
        url = urllib.parse.urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(git.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(git.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(url.path),
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "REMOTE_USER": "x-access-token",
        }
        if encoding := self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if git.protocol_v2 and (proto := self.headers.get("Git-Protocol")):
            env["HTTP_GIT_PROTOCOL"] = proto
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name.strip(), value.strip()))
        self._reply(status, headers, payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    git: GitHTTPServer


class GitHTTPServer:
    """Repositories under ``root`` (``root/OWNER/REPO.git``) over git's smart HTTP on 127.0.0.1.

    Every request needs ``Authorization: Basic base64(x-access-token:<token>)`` (else 401).
    ``protocol_v2=False`` drops the client's ``Git-Protocol`` header, so the server speaks protocol
    v0, where only advertised refs (and what the repository's ``uploadpack.*`` allows) may be fetched.
    ``requests`` records every request with its answer's status."""

    def __init__(self, root: Path, token: str, *, protocol_v2: bool = True) -> None:
        self.root = root
        self.token = token
        self.protocol_v2 = protocol_v2
        self.requests: list[ServedRequest] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.git = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def expected_authorization(self) -> str:
        return "Basic " + base64.b64encode(f"x-access-token:{self.token}".encode()).decode()

    def record(self, request: ServedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> GitHTTPServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- repositories --------------------------------------------------------------------------------

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        input=stdin,
        env={**os.environ, **_GIT_ENV},
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode().strip()


def new_repo(path: Path, **config: str) -> Path:
    """A repository with a working tree at ``path``, serving filters and (by default) any object."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    settings = {"uploadpack.allowFilter": "true", "uploadpack.allowAnySHA1InWant": "true", **config}
    for key, value in settings.items():
        git(path, "config", key, value)
    return path


def commit(repo: Path, files: dict[str, bytes], message: str = "commit") -> str:
    """Write ``files`` into the working tree (the rest stays as it is), commit everything; the sha."""
    for rel, data in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


FILES_A: dict[str, bytes] = {
    "setup.py": b"print('a')\n",
    "pkg/__init__.py": b"",
    "pkg/big.py": b"x = 1\n" + b"#" * 600 + b"\n",
    "pkg/layers/norm.py": b"from ..base import B\n",
    "pkg/layers/base.py": b"class B: ...\n",
    "pkg/zeta.py": "Z = 'é'\n".encode(),  # 9 bytes, 8 characters
    "pkg/bad.py": b"x = '\xff'\n",  # not UTF-8: read with the bad byte replaced
    "README.md": b"not python\n",
    "data/weights.bin": bytes(range(256)) * 8,
}
FILES_B: dict[str, bytes] = {"setup.py": b"print('b')\n", "pkg/new.py": b"NEW = 1\n"}


def texts(files: dict[str, bytes]) -> dict[str, str]:
    return {p: d.decode("utf-8", errors="replace") for p, d in sorted(files.items()) if p.endswith(".py")}


def within(files: dict[str, bytes], limit: int) -> dict[str, str]:
    """What the bundle holds under ``limit``: path order, a file that would pass it skipped."""
    out, total = {}, 0
    for path, data in sorted(files.items()):
        if not path.endswith(".py") or total + len(data) > limit:
            continue
        text = data.decode("utf-8", errors="replace")
        total += len(text)
        out[path] = text
    return out


@dataclass
class Served:
    server: GitHTTPServer
    repo: Path
    sha_a: str
    sha_b: str

    @property
    def url(self) -> str:
        return repo_fetch.remote_url(self.server.url, OWNER, REPO)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """octo/models with commit A, then B on top, then uncommitted edits in its working tree."""
    root = tmp_path / "srv"
    repo = new_repo(root / OWNER / f"{REPO}.git")
    sha_a = commit(repo, FILES_A, "A")
    sha_b = commit(repo, FILES_B, "B")
    (repo / "setup.py").write_text("print('uncommitted')\n")
    (repo / "pkg" / "dirty.py").write_text("DIRTY = 1\n")
    with GitHTTPServer(root, TOKEN) as server:
        yield Served(server, repo, sha_a, sha_b)


def present_objects(work: Path) -> set[str]:
    listing = git(work / "repo.git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(listing.split())


# --- tests ---------------------------------------------------------------------------------------


def test_fetches_the_commits_python_files_and_nothing_else(served: Served, tmp_path: Path) -> None:
    work = tmp_path / "work"
    got = fetch_python_files(served.url, TOKEN, served.sha_a, 10_000, keep_in=work)
    assert got == texts(FILES_A)  # not B's setup.py, not B's new file, not the working tree's edits
    assert got["pkg/bad.py"] == "x = '\ufffd'\n"
    later = fetch_python_files(served.url, TOKEN, served.sha_b, 10_000)
    assert later == texts({**FILES_A, **FILES_B})
    # Only Python's contents came over: the other files' blobs are not in the fetched repository.
    held = present_objects(work)
    for path in ("README.md", "data/weights.bin"):
        assert git(served.repo, "rev-parse", f"{served.sha_a}:{path}") not in held
    assert git(served.repo, "rev-parse", f"{served.sha_a}:pkg/big.py") in held
    # Two fetches of two round trips each (refs, then the pack), every one authorised.
    statuses = [r.status for r in served.server.requests]
    assert statuses and set(statuses) == {200} and len(statuses) <= 8


@pytest.mark.parametrize("limit", [0, 10, 11, 40, 100, 620, 640, 10_000])
def test_budget_is_honoured_as_the_api_path_does(served: Served, limit: int) -> None:
    got = fetch_python_files(served.url, TOKEN, served.sha_a, limit)
    assert got == within(FILES_A, limit)
    assert list(got) == sorted(got)
    assert sum(len(t) for t in got.values()) <= limit


def test_same_answer_as_the_api_path(served: Served) -> None:
    """Against the API path itself (the fake GitHub serving the same files), at several budgets."""
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo(OWNER, REPO)
        fake.add_installation(INSTALLATION, OWNER, [REPO])
        for path, data in FILES_A.items():
            fake.set_file(OWNER, REPO, served.sha_a, path, data)
        app = GitHubApp(creds.app_id, creds.private_pem, base_url=fake.base_url, seconds_between_writes=0)
        assert app.git_url is None  # a test double's API base names no git server: API only
        with app.installation(INSTALLATION) as client:
            for limit in (0, 11, 100, 620, 640, 10_000):
                api = client.python_files(OWNER, REPO, served.sha_a, limit)
                assert fetch_python_files(served.url, TOKEN, served.sha_a, limit) == api
        fake.assert_clean()


def test_token_never_leaks(served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # GitPython logs every command it runs at DEBUG
    header = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    work = tmp_path / "work"
    fetch_python_files(served.url, TOKEN, served.sha_a, 10_000, keep_in=work)
    for path in work.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data and header.encode() not in data, path
    url = git(work / "repo.git", "config", "remote.origin.url")
    assert url == served.url and TOKEN not in url
    assert "extraheader" not in git(work / "repo.git", "config", "--list").lower()

    served.server.token = "ghs_the-one-the-server-wants"  # TOKEN is now wrong: 401
    with pytest.raises(FetchError) as failed:
        fetch_python_files(served.url, TOKEN, served.sha_a, 10_000, keep_in=tmp_path / "again")
    for shown in (str(failed.value), repr(failed.value), caplog.text):
        assert TOKEN not in shown and header not in shown
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    assert 401 in {r.status for r in served.server.requests}


def new_app(fake: FakeGitHub, git_url: str) -> GitHubApp:
    creds = fake.configure_app()
    fake.add_repo(OWNER, REPO)
    fake.add_installation(INSTALLATION, OWNER, [REPO])
    return GitHubApp(
        creds.app_id, creds.private_pem, base_url=fake.base_url, seconds_between_writes=0, git_url=git_url
    )


def api_reads(fake: FakeGitHub) -> int:
    return len(fake.requests_to("GET", r"/git/(trees|blobs)/"))


def test_the_client_reads_through_git_with_the_installation_token(served: Served) -> None:
    with FakeGitHub() as fake:
        app = new_app(fake, served.server.url)
        with app.installation(INSTALLATION) as client:
            served.server.token = app._token(INSTALLATION)  # the fake's installation token
            got = client.python_files(OWNER, REPO, served.sha_a, 10_000, pull_number=1)
        assert got == texts(FILES_A)
        assert api_reads(fake) == 0
        fake.assert_clean()


def test_a_refused_fetch_falls_back_to_the_api(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    """The git server refuses the installation's token (401): the same files come through the API."""
    caplog.set_level(logging.DEBUG)
    with FakeGitHub() as fake:
        app = new_app(fake, served.server.url)
        for path, data in FILES_A.items():
            fake.set_file(OWNER, REPO, served.sha_a, path, data)
        with app.installation(INSTALLATION) as client:
            token = app._token(INSTALLATION)
            assert served.server.token != token
            got = client.python_files(OWNER, REPO, served.sha_a, 10_000)
        assert got == texts(FILES_A)
        assert api_reads(fake) == 1 + len(texts(FILES_A))  # the tree, then one request a file
        fake.assert_clean()
    assert 401 in {r.status for r in served.server.requests}
    fallbacks = [r for r in caplog.records if "through the API" in r.getMessage()]
    assert len(fallbacks) == 1 and fallbacks[0].levelno == logging.WARNING
    assert token not in caplog.text and TOKEN not in caplog.text


def test_without_git_the_api_reads_the_files(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeGitHub() as fake:
        app = new_app(fake, served.server.url)
        for path, data in FILES_A.items():
            fake.set_file(OWNER, REPO, served.sha_a, path, data)
        with app.installation(INSTALLATION) as client:
            app._token(INSTALLATION)
            monkeypatch.setenv("PATH", "/nonexistent")  # no git executable to be found
            got = client.python_files(OWNER, REPO, served.sha_a, 10_000)
        assert got == texts(FILES_A)
        assert "git is not installed" in caplog.text
    assert served.server.requests == []


FORK_FILES: dict[str, bytes] = {
    "pkg/layers/norm.py": b"from ..base import B  # the fork's change\n",
    "extra.py": b"E = 1\n",
}


@dataclass
class Forked:
    root: Path
    sha_a: str  # on main, no longer any ref's tip
    sha_f: str  # the fork's commit: in the base repository only as refs/pull/7/head


@pytest.fixture
def forked(tmp_path: Path) -> Forked:
    """octo/models with a fork's pull request #7, kept as GitHub keeps it: refs/pull/7/head."""
    root = tmp_path / "srv"
    base = new_repo(root / OWNER / f"{REPO}.git", **{"uploadpack.allowAnySHA1InWant": "false"})
    sha_a = commit(base, FILES_A, "A")
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(base), str(fork))
    sha_f = commit(fork, FORK_FILES, "fork change")
    git(fork, "push", "-q", str(base), "HEAD:refs/pull/7/head")  # as GitHub does when the PR opens
    commit(base, FILES_B, "B")  # main moves on
    return Forked(root, sha_a, sha_f)


def test_a_fork_head_is_fetched_from_the_base_repository(forked: Forked) -> None:
    """Protocol v2, as GitHub: the fork's commit, fetched by sha from the base repository."""
    with GitHTTPServer(forked.root, TOKEN) as server:
        url = repo_fetch.remote_url(server.url, OWNER, REPO)
        assert fetch_python_files(url, TOKEN, forked.sha_f, 10_000) == texts({**FILES_A, **FORK_FILES})
        assert {r.status for r in server.requests} == {200}


def test_a_server_serving_only_its_refs(forked: Forked, tmp_path: Path) -> None:
    """Protocol v0 without uploadpack.allow*SHA1InWant: the fork's head is the tip of refs/pull/7/head
    (fetchable); its blobs by id are refused, so they come with the commit. A sha at no ref's tip is
    refused; the pull request's ref is tried and found to name another commit."""
    with GitHTTPServer(forked.root, TOKEN, protocol_v2=False) as server:
        url = repo_fetch.remote_url(server.url, OWNER, REPO)
        work = tmp_path / "work"
        got = fetch_python_files(url, TOKEN, forked.sha_f, 10_000, pull_number=7, keep_in=work)
        assert got == texts({**FILES_A, **FORK_FILES})
        assert (work / "repo-with-blobs.git").is_dir()  # the second way was taken
        limited = fetch_python_files(url, TOKEN, forked.sha_f, 100, pull_number=7)
        assert limited == within({**FILES_A, **FORK_FILES}, 100)
        with pytest.raises(FetchError, match="unadvertised object"):
            fetch_python_files(url, TOKEN, forked.sha_a, 10_000)
        with pytest.raises(FetchError, match=r"refs/pull/7/head is now .*the pull request moved on"):
            fetch_python_files(url, TOKEN, forked.sha_a, 10_000, pull_number=7)
        assert {r.status for r in server.requests} == {200}


def test_git_base_url_follows_the_api_base() -> None:
    assert repo_fetch.git_base_url("https://api.github.com/") == "https://github.com"
    assert repo_fetch.git_base_url("https://ghe.example.com/api/v3") == "https://ghe.example.com"
    assert repo_fetch.git_base_url("http://127.0.0.1:8080") is None
    app = GitHubApp(1, "unused", base_url="https://api.github.com")
    assert app.git_url == "https://github.com"
    assert GitHubApp(1, "unused", git_url="").git_url == ""
    assert repo_fetch.remote_url("https://github.com/", OWNER, REPO) == "https://github.com/octo/models.git"
