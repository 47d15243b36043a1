"""One pull request, end to end, with every part real.

The octokit ``pull_request/opened`` payload is adopted by the fake GitHub, signed and POSTed to
``kernelize serve`` (a subprocess); a GitHub-side worker and a GPU-side worker (two Celery
subprocesses on the local Redis) plan, kernelize on CPU with the ``files`` generator, and publish.
The fake GitHub then holds one review with a suggestion, the sticky summary and a completed check
run, and every request it saw matched GitHub's OpenAPI description. A redelivery changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_github import FakeGitHub, added_file_patch

redis = pytest.importorskip("redis")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests/fixtures/github-webhooks/payload-examples"
PAYLOAD = EXAMPLES / "pull_request/opened.payload.json"
BROKER, BACKEND = "redis://127.0.0.1:6379/13", "redis://127.0.0.1:6379/14"
KILL_BROKER, KILL_BACKEND = "redis://127.0.0.1:6379/9", "redis://127.0.0.1:6379/10"
SECRET = "e2e-webhook-secret-0f3a9c51d2"


def _redis_up() -> bool:
    try:
        redis.Redis.from_url(BROKER, socket_connect_timeout=1).ping()
        return True
    except redis.RedisError:
        return False


pytestmark = pytest.mark.skipif(not _redis_up(), reason="needs Redis on 127.0.0.1:6379")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ} | {"PYTHONUNBUFFERED": "1"}


class World:
    """The fake GitHub holding the octokit pull request, and the Kernelize processes around it."""

    def __init__(
        self, tmp_path: Path, mode: str, broker: str, backend: str, extra_env: dict[str, str]
    ) -> None:
        self.tmp = tmp_path
        if mode == "redis":
            for url in (broker, backend):
                redis.Redis.from_url(url).flushdb()
        payload = json.loads(PAYLOAD.read_text())
        payload["installation"] = {"id": 4242, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="}
        payload["sender"]["type"] = "User"
        payload["pull_request"]["draft"] = False
        self.payload = payload
        self.source = (ROOT / "tests/problems/layers.py").read_text()
        patch = added_file_patch(self.source.splitlines())
        self.fake = FakeGitHub()
        creds = self.fake.configure_app()
        self.fake.adopt_payload(
            payload, files=[{"filename": "models/layers.py", "status": "added", "patch": patch}]
        )
        self.owner, self.repo = payload["repository"]["full_name"].split("/")
        self.number = payload["pull_request"]["number"]
        self.head = payload["pull_request"]["head"]["sha"]
        self.fake.set_file(self.owner, self.repo, self.head, "models/layers.py", self.source)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        # What a new user sets: the secret, the App and where GitHub is. Nothing else.
        self.github_env = (
            _base_env()
            | extra_env
            | {
                "KERNELIZE_WEBHOOK_SECRET": SECRET,
                "KERNELIZE_GITHUB_APP_ID": str(creds.app_id),
                "KERNELIZE_GITHUB_PRIVATE_KEY": creds.private_pem,
                "KERNELIZE_GITHUB_API_URL": self.fake.base_url,
            }
        )
        if mode != "defaults":
            self.github_env |= {
                "KERNELIZE_DATABASE_URL": f"sqlite:///{tmp_path / 'kz.db'}",
                "KERNELIZE_BROKER_URL": broker,
                "KERNELIZE_RESULT_BACKEND": backend,
                "KERNELIZE_GENERATORS": "files",
                "KERNELIZE_SECONDS_BETWEEN_WRITES": "0",
                "KERNELIZE_CANDIDATE_TIMEOUT_S": "120",
            }
        # The GPU side gets the broker and its own resources: no secret, no key, no database.
        self.gpu_env = (
            _base_env()
            | extra_env
            | {
                "KERNELIZE_BROKER_URL": broker,
                "KERNELIZE_RESULT_BACKEND": backend,
                "KERNELIZE_CANDIDATES_DIR": str(ROOT / "tests/candidates/layers"),
            }
        )
        if mode == "embedded":  # one machine: serve runs a worker for both queues
            self.github_env["KERNELIZE_CANDIDATES_DIR"] = self.gpu_env["KERNELIZE_CANDIDATES_DIR"]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._start("web", ["serve", "--host", "127.0.0.1", "--port", str(port)], self.github_env)
        if mode == "redis":
            self._start("github", ["worker", "--queues", "github"], self.github_env)
            self.start_gpu("gpu")
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log("web")
            time.sleep(0.2)

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        out = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", *args],
            cwd=self.tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def start_gpu(self, name: str) -> None:
        self._start(name, ["worker", "--queues", "gpu"], self.gpu_env)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-4000:]}" for n in self.procs)

    def post(
        self, delivery: str, event: str = "pull_request", payload: dict[str, Any] | None = None
    ) -> httpx.Response:
        body = json.dumps(self.payload if payload is None else payload).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sig,
            "Content-Type": "application/json",
        }
        return httpx.post(f"{self.url}/webhook", content=body, headers=headers, timeout=10)

    def wait_for_completed_check(self, timeout: float = 300, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while sum(c.status == "completed" for c in self.fake.check_runs[(self.owner, self.repo)]) < count:
            assert time.monotonic() < deadline, "no completed check run\n" + self.logs()
            time.sleep(0.5)

    def command_payload(self, login: str, body: str) -> dict[str, Any]:
        """The octokit ``issue_comment`` payload as ``login`` commenting ``body`` on this pull request."""
        payload = json.loads((EXAMPLES / "issue_comment/created.payload.json").read_text())
        made = self.fake.add_issue_comment(self.owner, self.repo, self.number, login, body)
        payload["repository"] = self.payload["repository"]
        payload["installation"] = self.payload["installation"]
        payload["issue"]["number"] = self.number
        payload["issue"]["pull_request"] = {"url": self.payload["pull_request"]["url"]}
        payload["comment"].update(id=made.id, body=body)
        payload["sender"].update(login=login, type="User")
        return payload

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=45)
            except subprocess.TimeoutExpired:
                p.kill()
        self.fake.close()


@pytest.fixture(params=["redis", "embedded"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """``redis``: web, a github worker and a GPU worker as three processes on Redis (production shape).
    ``embedded``: ``kernelize serve`` alone, with the SQLite broker and its own worker (one machine)."""
    if request.param == "embedded":
        broker, backend = (
            f"sqla+sqlite:///{tmp_path / 'broker.db'}",
            f"db+sqlite:///{tmp_path / 'results.db'}",
        )
    else:
        broker, backend = BROKER, BACKEND
    w = World(tmp_path, request.param, broker, backend, {})
    try:
        yield w
    finally:
        w.close()


def test_pull_request_to_suggestion(world: World) -> None:
    fake, owner, repo, number = world.fake, world.owner, world.repo, world.number
    first = world.post("e2e-delivery-1")
    assert first.status_code == 202, first.text
    world.wait_for_completed_check()

    [check] = fake.check_runs[(owner, repo)]
    assert (check.name, check.head_sha, check.conclusion) == ("Kernelize", world.head, "success")
    [review] = fake.reviews[(owner, repo, number)]
    [comment] = review.comments
    lines = world.source.splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("class RMSNorm"))
    assert comment.path == "models/layers.py" and comment.start_line == start
    assert "```suggestion" in comment.body and "_rms_norm_kernel" in comment.body
    summaries = [
        c for c in fake.issue_comments[(owner, repo, number)] if "<!-- kernelize:summary -->" in c.body
    ]
    assert len(summaries) == 1 and world.head[:7] in summaries[0].body
    assert "NeedsConfig" in summaries[0].body  # the module that could not be built says why

    again = world.post("e2e-delivery-1")  # GitHub's redelivery keeps the delivery id
    assert again.status_code == 200 and again.json()["status"] == "duplicate"

    # A new delivery for the same head sha (a reopen, say): planned, found done, nothing posted.
    seen = len(fake.requests)
    assert world.post("e2e-delivery-2").status_code == 202
    deadline = time.monotonic() + 60
    while not any("/check-runs" in r.path and r.method == "GET" for r in fake.requests[seen:]):
        assert time.monotonic() < deadline, "the second plan never looked at the check runs\n" + world.logs()
        time.sleep(0.2)
    time.sleep(2)
    assert len(fake.reviews[(owner, repo, number)]) == 1
    assert len(fake.check_runs[(owner, repo)]) == 1
    assert not [r for r in fake.requests[seen:] if r.method in ("POST", "PATCH")]
    fake.assert_clean()


@pytest.mark.timeout(1200)
def test_a_gpu_worker_killed_mid_task_is_replaced_and_posts_once(tmp_path: Path) -> None:
    """acks late + a visibility timeout longer than one task (a file's four modules, each with a
    reference runner and the judge, ~25 s each here) but short for a test: the killed worker's task
    comes back to a new worker, the chord completes once, and the pull request gets exactly one review
    and one check run."""
    w = World(tmp_path, "redis", KILL_BROKER, KILL_BACKEND, {"KERNELIZE_VISIBILITY_TIMEOUT_S": "240"})
    try:
        assert w.post("e2e-kill-1").status_code == 202
        deadline = time.monotonic() + 120
        while "kernelize.kernelize_file" not in w.log("gpu") or "received" not in w.log("gpu"):
            assert time.monotonic() < deadline, w.logs()
            time.sleep(0.1)
        w.procs["gpu"].kill()  # mid-task: no chance to acknowledge or requeue
        w.procs["gpu"].wait()
        w.start_gpu("gpu2")
        w.wait_for_completed_check(timeout=900)  # one file's four modules, each with its reference runner
        assert len(w.fake.reviews[(w.owner, w.repo, w.number)]) == 1
        [check] = w.fake.check_runs[(w.owner, w.repo)]
        assert check.conclusion == "success"
        assert "succeeded" in w.log("gpu2")
        w.fake.assert_clean()
    finally:
        w.close()


def test_the_defaults_answer_a_pull_request_and_a_command(tmp_path: Path) -> None:
    """``kernelize serve`` with no database, broker, result backend or generator setting (SQLite files
    in the working directory, the embedded broker, its own worker, the default portfolio): deliveries
    answer well inside GitHub's 10 s, a burst included, and the review and check run appear."""
    w = World(tmp_path, "defaults", "", "", {})
    try:
        w.fake.set_permission(w.owner, w.repo, "maintainer", "write")
        started = time.monotonic()
        first = w.post("defaults-1")
        assert first.status_code == 202, first.text + w.logs()
        assert time.monotonic() - started < 5, w.logs()
        # A burst while the worker is busy planning and kernelizing: each answers, none waits on it.
        for i in range(20):
            started = time.monotonic()
            ping = w.post(f"defaults-burst-{i}", "ping", {"zen": "Keep it logically awesome.", "hook_id": i})
            assert ping.status_code == 200 and time.monotonic() - started < 5, ping.text + w.logs()
        w.wait_for_completed_check(timeout=400)
        [check] = w.fake.check_runs[(w.owner, w.repo)]
        assert check.conclusion == "success", check.output
        [review] = w.fake.reviews[(w.owner, w.repo, w.number)]
        assert any("```suggestion" in c.body for c in review.comments)

        started = time.monotonic()
        command = w.post("defaults-2", "issue_comment", w.command_payload("maintainer", "/kernelize"))
        assert command.status_code == 202 and time.monotonic() - started < 5, command.text + w.logs()
        w.wait_for_completed_check(timeout=400, count=2)
        assert [c.conclusion for c in w.fake.check_runs[(w.owner, w.repo)]] == ["success", "success"]
        assert sorted(p.name for p in tmp_path.glob("*.db")) == [
            "kernelize-broker.db",
            "kernelize-results.db",
            "kernelize.db",
        ]
        w.fake.assert_clean()
    finally:
        w.close()
