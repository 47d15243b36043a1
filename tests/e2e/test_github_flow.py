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
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot import db
from bot.models import Suggestion
from runners.apply import applied
from tests.fake_github import FakeGitHub, fake_sha, file_patch

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
    """The fake GitHub holding the octokit pull request, and the Kernelize processes around it.
    ``files``: the pull request's files, path -> (text at its base or None for a new file, text at
    its head); by default it adds tests/problems/layers.py as ``models/layers.py``. ``database_url``:
    the github side's database (by default a SQLite file; ``defaults`` sets none)."""

    def __init__(
        self,
        tmp_path: Path,
        mode: str,
        broker: str,
        backend: str,
        extra_env: dict[str, str],
        files: dict[str, tuple[str | None, str]] | None = None,
        database_url: str | None = None,
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
        files = files or {"models/layers.py": (None, self.source)}
        self.fake = FakeGitHub()
        creds = self.fake.configure_app()
        specs = [
            {
                "filename": path,
                "status": "added" if old is None else "modified",
                "patch": file_patch(old, new),
            }
            for path, (old, new) in files.items()
        ]
        self.fake.adopt_payload(payload, files=specs)
        self.owner, self.repo = payload["repository"]["full_name"].split("/")
        self.number = payload["pull_request"]["number"]
        self.head = payload["pull_request"]["head"]["sha"]
        self.base = payload["pull_request"]["base"]["sha"]
        for path, (old, new) in files.items():
            self.fake.set_file(self.owner, self.repo, self.head, path, new)
            if old is not None:
                self.fake.set_file(self.owner, self.repo, self.base, path, old)
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
                "KERNELIZE_DATABASE_URL": database_url or f"sqlite:///{tmp_path / 'kz.db'}",
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
        self.port = port
        self.start_web("web")
        if mode == "redis":
            self.start_github("github")
            self.start_gpu("gpu")

    def start_web(self, name: str) -> None:
        """``kernelize serve`` (``defaults``, ``embedded``: its own worker too), up when this returns."""
        self._start(name, ["serve", "--host", "127.0.0.1", "--port", str(self.port)], self.github_env)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log(name)
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

    def start_github(self, name: str) -> None:
        self._start(name, ["worker", "--queues", "github"], self.github_env)

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

    def pull_request_payload(self, action: str, head: str, sender: str, **pr: Any) -> dict[str, Any]:
        """The octokit ``pull_request`` payload for ``action`` on this pull request at ``head``, as
        ``sender`` sent it (a bot when the login ends in ``[bot]``)."""
        payload = json.loads((EXAMPLES / f"pull_request/{action}.payload.json").read_text())
        payload["repository"] = self.payload["repository"]
        payload["installation"] = self.payload["installation"]
        payload["pull_request"].update(number=self.number, state="open", draft=False, **pr)
        payload["pull_request"]["head"]["sha"] = head
        payload["sender"].update(login=sender, type="Bot" if sender.endswith("[bot]") else "User")
        return payload

    def wait(self, what: str, done: Callable[[], Any], timeout: float = 300) -> Any:
        """``done()``'s first true answer, polled; the processes' logs when it never comes."""
        deadline = time.monotonic() + timeout
        while not (found := done()):
            assert time.monotonic() < deadline, f"{what}: never happened\n" + self.logs()
            time.sleep(0.3)
        return found

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
        # Progress reached the check run on the defaults too (the embedded broker carries the
        # progress task beside the others): an update while still in progress names the module.
        updates = [r.json for r in w.fake.requests_to("PATCH", r"/check-runs/\d+$") if r.status == 200]
        during = [u for u in updates if u.get("status") != "completed" and u.get("output")]
        assert any("::" in u["output"].get("summary", "") for u in during), updates

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


# A pull request that fixes ShiftedReLU (one line: the class is outside that hunk, so its kernel
# can only be shown in the summary) and adds RMSNorm (wholly inside a hunk: a review suggestion).
BLOCKS_BASE = """import torch
from torch import nn


class ShiftedReLU(nn.Module):
    \"\"\"relu(x + shift), with a shift learned per feature.\"\"\"

    def __init__(self, dim: int):
        super().__init__()
        self.shift = nn.Parameter(torch.linspace(-0.5, 0.5, dim))

    def forward(self, x):
        y = x + self.shift
        return torch.clamp(y, min=0.0)
"""
RMSNORM = """class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
"""
BLOCKS_HEAD = BLOCKS_BASE.replace("torch.clamp(y, min=0.0)", "torch.relu(y)") + "\n\n" + RMSNORM
BLOCKS = "models/blocks.py"
LIFE_BROKER, LIFE_BACKEND = "redis://127.0.0.1:6379/7", "redis://127.0.0.1:6379/8"
_SUGGESTION_RE = re.compile(r"(`{3,})suggestion\n(.*?)\n\1", re.DOTALL)


def _statuses(sessions: Any) -> dict[tuple[str, str], str]:
    """(class, head sha) -> status, for every suggestion stored."""
    with sessions() as session:
        return {(s.class_name, s.head_sha): s.status for s in session.query(Suggestion)}


def _summary(world: World) -> str:
    key = (world.owner, world.repo, world.number)
    [summary] = [c.body for c in world.fake.issue_comments[key] if "<!-- kernelize:summary -->" in c.body]
    return summary


@pytest.mark.timeout(1200)
def test_a_pull_request_from_opened_to_merged(tmp_path: Path) -> None:
    """Opened → a suggestion in the review and one in the summary → the author applies the review's
    (their push, ``synchronize``) → the re-run says applied / already kernelized → a maintainer has
    the summary's committed with ``/kernelize apply`` → the App's own push is tracked → merged: every
    suggestion ends merged. Web, a github worker and a GPU worker as processes, on Redis."""
    w = World(tmp_path, "redis", LIFE_BROKER, LIFE_BACKEND, {}, files={BLOCKS: (BLOCKS_BASE, BLOCKS_HEAD)})
    fake, owner, repo, number, key = w.fake, w.owner, w.repo, w.number, (w.owner, w.repo, w.number)
    engine = db.make_engine(f"sqlite:///{tmp_path / 'kz.db'}")
    sessions = db.session_factory(engine)
    try:
        fake.set_permission(owner, repo, "maintainer", "write")
        branch = fake.pull(owner, repo, number).head_ref

        # 1. Opened: RMSNorm as a review suggestion; ShiftedReLU's kernel in the summary, with the command.
        assert w.post("life-opened").status_code == 202
        w.wait_for_completed_check()
        [check] = fake.check_runs[(owner, repo)]
        assert check.conclusion == "success", check.output
        [review] = fake.reviews[key]
        [line] = review.comments
        assert line.body.startswith("<!-- kernelize:suggestion target=models/blocks.py::RMSNorm")
        assert "**Kernelize**: a Triton version of `RMSNorm` that passed every correctness check" in line.body
        assert "Speed: **not measured (no GPU)**" in line.body
        evidence = line.body.split("```suggestion")[0].strip()
        summary = _summary(w)
        assert w.head[:7] in summary
        assert "times are **not measured (no GPU)**" in summary and "not measured (no GPU)" in summary
        assert "`ShiftedReLU` (lines 5–14) is not inside one hunk of the diff" in summary
        assert "<details><summary>Code to replace <code>ShiftedReLU</code>" in summary
        assert f"`/kernelize apply {BLOCKS}::ShiftedReLU` to have Kernelize commit this code" in summary
        assert "`/kernelize apply Class` commits a suggestion to this branch" in summary
        assert "rejected" not in summary
        assert _statuses(sessions) == {("RMSNorm", w.head): "posted", ("ShiftedReLU", w.head): "posted"}

        # 2. The author applies the review's suggestion (GitHub's button makes this commit) and pushes.
        found = _SUGGESTION_RE.search(line.body)
        assert found is not None and line.start_line is not None
        second = applied(BLOCKS_HEAD, line.start_line, line.line, found.group(2) + "\n")
        head2 = fake_sha("life", 2)
        fake.push(
            owner,
            repo,
            number,
            head2,
            [{"filename": BLOCKS, "status": "modified", "patch": file_patch(BLOCKS_BASE, second)}],
        )
        fake.set_file(owner, repo, head2, BLOCKS, second)
        fake.set_commit(
            owner,
            repo,
            head2,
            "Apply suggestion from @kernelize[bot]\n\n"
            "Co-authored-by: kernelize[bot] <1+kernelize[bot]@users.noreply.github.com>",
            author="Codertocat",
        )
        pushed = w.pull_request_payload("synchronize", head2, "Codertocat")
        assert w.post("life-synchronize", payload=pushed).status_code == 202
        w.wait_for_completed_check(count=2)
        check2 = fake.check_runs[(owner, repo)][-1]
        assert check2.head_sha == head2 and "already kernelized ✓" in check2.output["summary"]
        [review] = fake.reviews[key]  # nothing new for the review: ShiftedReLU is still outside one hunk
        assert review.body.startswith(
            f"**Applied ✓:** this review's suggestions are in the pull request (`{head2[:7]}`)"
        )
        [line] = review.comments
        assert line.body.startswith(f"**Applied ✓** in `{head2[:7]}`") and evidence in line.body
        assert "```suggestion" not in line.body and "Outdated" not in line.body
        summary = _summary(w)
        assert head2[:7] in summary and "already kernelized ✓" in summary
        assert f"verified on `{w.head[:7]}`" in summary and "not run again" in summary
        assert "rejected" not in summary and "outdated" not in summary.lower()
        assert f"`/kernelize apply {BLOCKS}::ShiftedReLU`" in summary
        assert _statuses(sessions) == {
            ("RMSNorm", w.head): "applied",
            ("ShiftedReLU", w.head): "posted",
            ("ShiftedReLU", head2): "posted",
        }

        # 3. A maintainer has the summary's kernel committed to the branch.
        command = w.command_payload("maintainer", f"/kernelize apply {BLOCKS}::ShiftedReLU")
        assert w.post("life-apply", "issue_comment", command).status_code == 202
        reply = w.wait(
            "the apply reply",
            lambda: next((c.body for c in fake.issue_comments[key] if "kernelize:apply" in c.body), None),
        )
        head3 = fake.repo(owner, repo).refs[branch]
        assert head3 not in (w.head, head2) and fake.pull(owner, repo, number).head_sha == head3
        assert reply.startswith(
            f"Committed Kernelize's suggestion for `{BLOCKS}::ShiftedReLU` to `{branch}` as [`{head3[:7]}`]("
        )
        assert f"verified on `{head2[:7]}`" in reply
        third = fake.repo(owner, repo).trees[head3][BLOCKS].decode()
        with sessions() as session:
            verified = session.query(Suggestion).filter_by(class_name="ShiftedReLU", head_sha=head2).one()
            assert verified.status == "applied" and verified.applied_sha == head3
            assert third == applied(second, verified.start_line, verified.end_line, verified.code)
        assert "_shifted_relu_kernel" in third and found.group(2) in third  # RMSNorm's kernel kept
        author, message = fake.commit_details[head3]
        assert author == "kernelize[bot]"
        assert message.startswith("Kernelize: apply the verified Triton version of ShiftedReLU")
        assert "speed not measured" in message and f"head={head2}" in message
        assert [r.content for r in fake.reactions[("issue_comment", command["comment"]["id"])]] == [
            "eyes",
            "rocket",
        ]

        # 4. GitHub reports the App's own push: tracked (the first run's ShiftedReLU code is there too),
        # never run again.
        own = w.pull_request_payload("synchronize", head3, "kernelize[bot]")
        assert w.post("life-own-push", payload=own).status_code == 202
        w.wait("the push tracked", lambda: _statuses(sessions)[("ShiftedReLU", w.head)] == "applied")
        assert _statuses(sessions)[("ShiftedReLU", head2)] == "applied"
        assert len(fake.check_runs[(owner, repo)]) == 2

        # 5. Merged: every suggestion that is in the code is merged.
        fake.pull(owner, repo, number).state, fake.pull(owner, repo, number).merged = "closed", True
        closed = w.pull_request_payload("closed", head3, "maintainer", merged=True)
        closed["pull_request"]["state"] = "closed"
        assert w.post("life-merged", payload=closed).status_code == 202
        w.wait("merged", lambda: set(_statuses(sessions).values()) == {"merged"})
        with sessions() as session:
            rows = {(s.class_name, s.head_sha): s for s in session.query(Suggestion)}
            history = {k: [e.status for e in s.events] for k, s in rows.items()}
            assert history == {k: ["posted", "applied", "merged"] for k in rows}
            assert rows[("RMSNorm", w.head)].applied_via_button
            assert rows[("ShiftedReLU", head2)].events[1].detail == "committed by /kernelize apply"
        stats = httpx.get(f"{w.url}/api/v1/repos/{owner}/{repo}/stats", timeout=10).json()
        assert (stats["posted"], stats["merged"], stats["acceptance_rate"]) == (3, 3, 1.0)
        fake.assert_clean()
    finally:
        engine.dispose()
        w.close()
