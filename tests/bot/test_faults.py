"""Faults injected into the real services the webhook receiver depends on.

Each test runs its own Redis or PostgreSQL server (a private process on a free port, started and
stopped here, so the machine's shared services are never touched), sends signed GitHub deliveries
to the real app served over HTTP, stops the server mid-way and starts it again. What must hold:
GitHub gets its answer within its 10 s limit (503 while a service is down, so its "Redeliver"
works), nothing accepted is lost, nothing is enqueued or recorded twice.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import select

from bot.enqueue import celery_publisher
from bot.models import Delivery
from runners.celery_app import celery_enqueue
from tests.bot import test_web
from tests.bot.test_web import PR_OPENED, Edge

start_edge = test_web.start_edge  # the served app's fixture, shared with tests/bot/test_web.py

PG_BIN = Path("/usr/lib/postgresql/15/bin")
GITHUB_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, up: bool, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            listening = s.connect_ex(("127.0.0.1", port)) == 0
        if listening == up:
            return
        time.sleep(0.1)
    raise AssertionError(f"port {port} never became {'reachable' if up else 'free'}")


class PrivateRedis:
    """``redis-server`` on a free port, writing every command to its append-only file (as a broker
    that must lose nothing is run), so a restart keeps what was queued."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.proc = subprocess.Popen(["redis-server", *args], **quiet)
        _wait_listening(self.port, up=True)

    def kill(self) -> None:
        """As a crash: SIGKILL, no shutdown save."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        _wait_listening(self.port, up=False)

    def queued(self, queue: str) -> list[str]:
        client = redis.Redis.from_url(self.url)
        try:
            return [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]
        finally:
            client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


class PrivatePostgres:
    """A PostgreSQL cluster of its own (initdb in a temp folder, owned by the ``postgres`` user, since
    the server refuses to run as root), on a free port."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, _free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.as_owner, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{args[0]}: {done.stderr.strip()[-500:]}"

    def init(self) -> None:
        if self.as_owner:  # a folder of its own the postgres user can reach (pytest's are root's alone)
            shutil.chown(self.folder, user="postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.folder / "data"), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.folder / "server.log")  # the server's output: not the pipes this process waits on
        data = str(self.folder / "data")
        self._run(str(PG_BIN / "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", "start")
        _wait_listening(self.port, up=True)

    def stop(self) -> None:
        """An immediate shutdown: the clients' connections are cut, as in a crash."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        _wait_listening(self.port, up=False)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL 15's server programs are not installed")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: PostgreSQL refuses to start as root")
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="kernelize-pg-")))
    try:
        server.init()
        server.start()
        yield server
    finally:
        stop = [str(PG_BIN / "pg_ctl"), "-D", str(server.folder / "data"), "-m", "immediate", "stop"]
        subprocess.run([*server.as_owner, *stop], capture_output=True, timeout=60)
        shutil.rmtree(server.folder, ignore_errors=True)


def _timed_post(edge: Edge, http: httpx.Client, delivery: str) -> httpx.Response:
    started = time.monotonic()
    answer = edge.post(http, "pull_request", PR_OPENED, delivery=delivery)
    assert time.monotonic() - started < GITHUB_TIMEOUT_S, "GitHub would have given up on this delivery"
    return answer


def _rows(edge: Edge) -> list[tuple[str, str, str | None]]:
    with edge.sessions() as session:
        rows = session.execute(select(Delivery).order_by(Delivery.id)).scalars()
        return [(r.delivery_id, r.outcome, r.job_id) for r in rows]


@pytest.mark.parametrize("publish", [celery_enqueue, celery_publisher])
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_broker_that_crashes_and_comes_back_loses_nothing(
    start_edge: Callable[..., Edge],
    private_redis: PrivateRedis,
    http: httpx.Client,
    publish: Callable[[Any], Callable[[dict[str, Any], str], str]],
) -> None:
    """Also through the publisher, whose threads keep their producers: a dead one is dropped."""
    edge = start_edge(broker_url=private_redis.url, publish=publish)
    assert _timed_post(edge, http, "f-before").status_code == 202
    private_redis.kill()
    down = _timed_post(edge, http, "f-during")
    assert down.status_code == 503
    assert down.json()["error"] == "broker unavailable, nothing recorded"
    assert _rows(edge) == [("f-before", "enqueued", "delivery-f-before")]
    private_redis.start()  # the same port, its append-only file replayed
    assert private_redis.queued("github") == ["delivery-f-before"]  # accepted before the crash: kept
    # GitHub's "Redeliver" for the failed delivery, and a duplicate of the first.
    assert _timed_post(edge, http, "f-during").status_code == 202
    assert _timed_post(edge, http, "f-before").status_code in (200, 202)
    assert sorted(private_redis.queued("github")) == ["delivery-f-before", "delivery-f-during"]  # once each
    assert [d for d, outcome, _ in _rows(edge) if outcome == "enqueued"] == ["f-before", "f-during"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_database_that_goes_away_and_comes_back_loses_nothing(
    start_edge: Callable[..., Edge],
    private_postgres: PrivatePostgres,
    redis_url: str,
    queued: Callable[[str], list[dict[str, Any]]],
    http: httpx.Client,
) -> None:
    edge = start_edge(database_url=private_postgres.url)
    assert _timed_post(edge, http, "g-before").status_code == 202
    private_postgres.stop()
    down = _timed_post(edge, http, "g-during")
    assert down.status_code == 503
    assert down.json()["error"] == "database unavailable, nothing recorded"
    health = http.get(f"{edge.url}/healthz")
    assert (health.status_code, health.json()["database"]) == (503, "unavailable")
    private_postgres.start()
    assert _timed_post(edge, http, "g-during").status_code == 202  # GitHub's "Redeliver"
    assert _timed_post(edge, http, "g-before").status_code in (200, 202)  # a duplicate: not again
    assert [d for d, outcome, _ in _rows(edge) if outcome == "enqueued"] == ["g-before", "g-during"]
    ids = sorted(m["headers"]["id"] for m in queued("github"))
    assert ids == ["delivery-g-before", "delivery-g-during"]  # once each
    assert http.get(f"{edge.url}/healthz").status_code == 200
