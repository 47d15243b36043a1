"""Fixtures for the web edge: a database (SQLite and PostgreSQL), a Redis broker, a real HTTP server.

PostgreSQL and Redis are the local services (127.0.0.1:5432, database ``test``;
127.0.0.1:6379); tests that need one are skipped, saying so, when it is not running.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/11"  # a database of its own, flushed around each test
TEST_SECRET = "kernelize-test-webhook-secret-7f3a"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@pytest.fixture
def webhook_secret() -> str:
    return TEST_SECRET


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a PostgreSQL schema of its own (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kernelize.db'}"
        return
    if not _listening(5432):
        pytest.skip("PostgreSQL is not running on 127.0.0.1:5432")
    import psycopg

    schema = f"kz_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        # libpq's options: every connection of this engine works inside the schema.
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def redis_url() -> Iterator[str]:
    if not _listening(6379):
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    try:
        yield REDIS_URL
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@dataclass
class Server:
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def serve() -> Iterator[Callable[[FastAPI], str]]:
    """``serve(app) -> base URL``: uvicorn on 127.0.0.1 (a free port) in a thread, stopped after the test."""
    servers: list[Server] = []

    def start(app: FastAPI) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        # log_config=None: leave the test process's logging (and caplog) alone.
        config = uvicorn.Config(app, log_config=None, lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        servers.append(Server(f"http://127.0.0.1:{port}", server, thread))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.fixture
def queued(redis_client: Any) -> Callable[[str], list[dict[str, Any]]]:
    """``queued(queue) -> [{"headers": ..., "kwargs": ...}]``: the messages waiting in a Redis queue."""

    def read(queue: str) -> list[dict[str, Any]]:
        messages = []
        for raw in redis_client.lrange(queue, 0, -1):
            message = json.loads(raw)
            args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            messages.append({"headers": message["headers"], "args": args, "kwargs": kwargs})
        return messages

    return read


@pytest.fixture
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start_worker(module, queues, env=None) -> Popen``: a real ``celery -A MODULE worker -Q QUEUES
    --pool solo`` for a Celery app in tests/bot/ on the test Redis (``KERNELIZE_TEST_BROKER``), with
    ``env`` added to this process's environment; it logs to ``tmp_path/<module>-<queues>.log`` and
    stops (warm shutdown) after the test."""
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(module: str, queues: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        full = {**os.environ, "KERNELIZE_TEST_BROKER": redis_url, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
        log = (tmp_path / f"{module}-{queues.replace(',', '-')}.log").open("wb")
        command = [sys.executable, "-m", "celery", "-A", module, "worker", "-Q", queues, "--pool", "solo"]
        command += ["--without-mingle", "--without-gossip", "--without-heartbeat", "-l", "info"]
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=full | (env or {}), stdout=log, stderr=subprocess.STDOUT
        )
        started.append((proc, log))
        return proc

    yield start
    for proc, log in started:
        proc.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture
def celery_worker(start_worker: Callable[..., subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A real worker (``celery worker -Q github --pool solo``) running tests/bot/celery_worker_tasks.py."""
    return start_worker("celery_worker_tasks", "github")


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[Any]:
    """``tests/bot/flow.py``'s World: the fake GitHub, the webhook app and eager Celery, on each database."""
    from tests.bot.flow import make_world

    with make_world(monkeypatch, database_url) as w:
        yield w


@pytest.fixture
def running_job(world: Any) -> Callable[..., dict[str, Any]]:
    """``running_job(**fields) -> context``: a job running for ``world``'s pull request with its check
    run in progress, as a plan leaves it (``fields`` set on the job); the context its tasks get."""
    from bot import tasks
    from bot.flows.common import CHECK_NAME
    from bot.models import Job
    from tests.bot.flow import HEAD, INSTALLATION, NUMBER, OWNER, REPO

    def make(**fields: Any) -> dict[str, Any]:
        check_run_id = tasks._client(INSTALLATION).create_check_run(
            OWNER, REPO, HEAD, CHECK_NAME, "in_progress", external_id="k"
        )
        with world.sessions() as session, session.begin():
            job = Job(
                key="k",
                installation_id=INSTALLATION,
                repository=f"{OWNER}/{REPO}",
                pull_number=NUMBER,
                head_sha=HEAD,
                reason="command",
                state="running",
                check_run_id=check_run_id,
                **fields,
            )
            session.add(job)
            session.flush()
            job_id = job.id
        return {
            "installation_id": INSTALLATION,
            "owner": OWNER,
            "repo": REPO,
            "number": NUMBER,
            "check_run_id": check_run_id,
            "job_id": job_id,
        }

    return make
