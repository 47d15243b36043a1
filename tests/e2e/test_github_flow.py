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

import httpx
import pytest

from tests.fake_github import FakeGitHub, added_file_patch

redis = pytest.importorskip("redis")

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = ROOT / "tests/fixtures/github-webhooks/payload-examples/pull_request/opened.payload.json"
BROKER, BACKEND = "redis://127.0.0.1:6379/13", "redis://127.0.0.1:6379/14"
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


@pytest.fixture(params=["redis", "embedded"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict]:
    """``redis``: web, a github worker and a GPU worker as three processes on Redis (production shape).
    ``embedded``: ``kernelize serve`` alone, with the SQLite broker and its own worker (one machine)."""
    for url in (BROKER, BACKEND):
        redis.Redis.from_url(url).flushdb()
    payload = json.loads(PAYLOAD.read_text())
    payload["installation"] = {"id": 4242, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="}
    payload["sender"]["type"] = "User"
    payload["pull_request"]["draft"] = False
    source = (ROOT / "tests/problems/layers.py").read_text()
    files = [
        {"filename": "models/layers.py", "status": "added", "patch": added_file_patch(source.splitlines())}
    ]
    fake = FakeGitHub()
    creds = fake.configure_app()
    fake.adopt_payload(payload, files=files)
    owner, repo = payload["repository"]["full_name"].split("/")
    head = payload["pull_request"]["head"]["sha"]
    fake.set_file(owner, repo, head, "models/layers.py", source)

    port = _free_port()
    github_env = _base_env() | {
        "KERNELIZE_WEBHOOK_SECRET": SECRET,
        "KERNELIZE_GITHUB_APP_ID": str(creds.app_id),
        "KERNELIZE_GITHUB_PRIVATE_KEY": creds.private_pem,
        "KERNELIZE_GITHUB_API_URL": fake.base_url,
        "KERNELIZE_DATABASE_URL": f"sqlite:///{tmp_path / 'kz.db'}",
        "KERNELIZE_BROKER_URL": BROKER,
        "KERNELIZE_RESULT_BACKEND": BACKEND,
        "KERNELIZE_GENERATORS": "files",
        "KERNELIZE_SECONDS_BETWEEN_WRITES": "0",
        "KERNELIZE_CANDIDATE_TIMEOUT_S": "120",
    }
    # The GPU side gets the broker and its own resources: no secret, no key, no database.
    gpu_env = _base_env() | {
        "KERNELIZE_BROKER_URL": BROKER,
        "KERNELIZE_RESULT_BACKEND": BACKEND,
        "KERNELIZE_CANDIDATES_DIR": str(ROOT / "tests/candidates/layers"),
    }
    cli = [sys.executable, "-m", "bot.cli"]
    logs = {name: open(tmp_path / f"{name}.log", "wb") for name in ("web", "github", "gpu")}  # noqa: SIM115
    if request.param == "embedded":
        github_env |= {
            "KERNELIZE_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.db'}",
            "KERNELIZE_RESULT_BACKEND": f"db+sqlite:///{tmp_path / 'results.db'}",
            "KERNELIZE_CANDIDATES_DIR": gpu_env["KERNELIZE_CANDIDATES_DIR"],
        }
        procs = {
            "web": subprocess.Popen(
                [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)],
                cwd=tmp_path,
                env=github_env,
                stdout=logs["web"],
                stderr=subprocess.STDOUT,
            )
        }
    else:
        procs = {
            "web": subprocess.Popen(
                [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)],
                cwd=tmp_path,
                env=github_env,
                stdout=logs["web"],
                stderr=subprocess.STDOUT,
            ),
            "github": subprocess.Popen(
                [*cli, "worker", "--queues", "github"],
                cwd=tmp_path,
                env=github_env,
                stdout=logs["github"],
                stderr=subprocess.STDOUT,
            ),
            "gpu": subprocess.Popen(
                [*cli, "worker", "--queues", "gpu"],
                cwd=ROOT,
                env=gpu_env,
                stdout=logs["gpu"],
                stderr=subprocess.STDOUT,
            ),
        }
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()
        time.sleep(0.2)
    try:
        yield {
            "fake": fake,
            "url": url,
            "payload": payload,
            "owner": owner,
            "repo": repo,
            "head": head,
            "source": source,
            "logs": tmp_path,
        }
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=45)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
        fake.close()


def _post(world: dict, delivery: str) -> httpx.Response:
    body = json.dumps(world["payload"]).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sig,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{world['url']}/webhook", content=body, headers=headers, timeout=10)


def _logs(world: dict) -> str:
    return "\n".join(
        f"--- {n}\n{(world['logs'] / f'{n}.log').read_text()[-4000:]}" for n in ("github", "gpu")
    )


def test_pull_request_to_suggestion(world: dict) -> None:
    fake, owner, repo = world["fake"], world["owner"], world["repo"]
    number = world["payload"]["pull_request"]["number"]
    first = _post(world, "e2e-delivery-1")
    assert first.status_code == 202, first.text

    deadline = time.monotonic() + 300
    while not any(c.status == "completed" for c in fake.check_runs[(owner, repo)]):
        assert time.monotonic() < deadline, "no completed check run\n" + _logs(world)
        time.sleep(0.5)

    [check] = fake.check_runs[(owner, repo)]
    assert (check.name, check.head_sha, check.conclusion) == ("Kernelize", world["head"], "success")
    [review] = fake.reviews[(owner, repo, number)]
    [comment] = review.comments
    lines = world["source"].splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("class RMSNorm"))
    assert comment.path == "models/layers.py" and comment.start_line == start
    assert "```suggestion" in comment.body and "_rms_norm_kernel" in comment.body
    summaries = [
        c for c in fake.issue_comments[(owner, repo, number)] if "<!-- kernelize:summary -->" in c.body
    ]
    assert len(summaries) == 1 and world["head"][:7] in summaries[0].body
    assert "NeedsConfig" in summaries[0].body  # the module that could not be built says why

    again = _post(world, "e2e-delivery-1")  # GitHub's redelivery keeps the delivery id
    assert again.status_code == 200 and again.json()["status"] == "duplicate"

    # A new delivery for the same head sha (a reopen, say): planned, found done, nothing posted.
    seen = len(fake.requests)
    assert _post(world, "e2e-delivery-2").status_code == 202
    deadline = time.monotonic() + 60
    while not any("/check-runs" in r.path and r.method == "GET" for r in fake.requests[seen:]):
        assert time.monotonic() < deadline, "the second plan never looked at the check runs\n" + _logs(world)
        time.sleep(0.2)
    time.sleep(2)
    assert len(fake.reviews[(owner, repo, number)]) == 1
    assert len(fake.check_runs[(owner, repo)]) == 1
    assert not [r for r in fake.requests[seen:] if r.method in ("POST", "PATCH")]
    fake.assert_clean()
