"""The webhook endpoint over real HTTP (uvicorn in a thread, httpx), real Redis, SQLite and PostgreSQL.

Octokit's recorded payloads are signed with a test secret and posted with GitHub's
headers; what arrived is read back from the broker and the deliveries table.
"""

from __future__ import annotations

import json
import logging
import os
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
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot import db
from bot.cli import JsonFormatter
from bot.enqueue import celery_publisher
from bot.models import Delivery
from bot.settings import Settings
from bot.web import create_app
from bot.webhooks import sign
from runners.celery_app import PLAN_TASK, celery_broker_ok, celery_enqueue, celery_queue_depth, make_celery

ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = ROOT / "tests" / "fixtures" / "github-webhooks" / "payload-examples"
PR_OPENED = (PAYLOADS / "pull_request" / "opened.payload.json").read_bytes()
PING = (PAYLOADS / "ping" / "payload.json").read_bytes()
COMMENT = (PAYLOADS / "issue_comment" / "created.payload.json").read_bytes()
DEAD_BROKER = "redis://127.0.0.1:1/0"
Queued = Callable[[str], list[dict[str, Any]]]


def decide(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The test's stand-in for bot.events.decide: opened pull requests only."""
    if event != "pull_request" or payload.get("action") != "opened":
        return None
    return {
        "task": PLAN_TASK,
        "installation_id": payload["installation"]["id"],
        "repository": payload["repository"]["full_name"],
        "number": payload["number"],
    }


@dataclass
class Edge:
    url: str
    sessions: sessionmaker[Session]
    secret: str

    def post(
        self,
        http: httpx.Client,
        event: str,
        body: bytes,
        *,
        delivery: str | None = None,
        secret: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """POST as GitHub does: JSON body, event, delivery id and the body's signature."""
        sent = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/test",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign((secret or self.secret).encode(), body),
        }
        sent.update(headers or {})
        return http.post(f"{self.url}/webhook", content=body, headers={k: v for k, v in sent.items() if v})

    def rows(self) -> list[Delivery]:
        with self.sessions() as session:
            return list(session.execute(select(Delivery).order_by(Delivery.id)).scalars())


@pytest.fixture
def start_edge(
    database_url: str, redis_url: str, webhook_secret: str, serve: Callable[[FastAPI], str]
) -> Iterator[Callable[..., Edge]]:
    """``start_edge(**settings, enqueue=None, broker_ok=None, publish=celery_enqueue) -> Edge``: create_app
    served over HTTP; without ``enqueue``, ``publish(celery)`` of a Celery app on the settings' broker."""
    engines = []

    def start(
        *,
        decide: Callable[[str, dict[str, Any]], dict[str, Any] | None] = decide,
        enqueue: Callable[[dict[str, Any], str], str] | None = None,
        broker_ok: Callable[[], bool] | None = None,
        publish: Callable[[Any], Callable[[dict[str, Any], str], str]] = celery_enqueue,
        **overrides: Any,
    ) -> Edge:
        values = {"database_url": database_url, "broker_url": redis_url, **overrides}
        settings = Settings(webhook_secret=webhook_secret, _env_file=None, **values)
        engines.append(db.make_engine(settings.database_url))
        db.create_schema(engines[-1])
        sessions = db.session_factory(engines[-1])
        celery = make_celery(settings.broker_url)
        app = create_app(
            settings,
            decide=decide,
            enqueue=enqueue or publish(celery),
            session_factory=sessions,
            broker_ok=broker_ok or celery_broker_ok(celery),
            queue_depth=celery_queue_depth(celery),
        )
        return Edge(serve(app), sessions, webhook_secret)

    yield start
    for engine in engines:
        engine.dispose()


def test_an_opened_pull_request_is_enqueued(
    start_edge: Callable[..., Edge], http: httpx.Client, queued: Queued
) -> None:
    edge = start_edge()
    answer = edge.post(http, "pull_request", PR_OPENED, delivery="d-opened")
    assert answer.status_code == 202, answer.text
    job = {"task": PLAN_TASK, "installation_id": 1, "repository": "Codertocat/Hello-World", "number": 2}
    assert answer.json() == {"status": "enqueued", "job": job}
    [message] = queued("github")
    assert message["headers"]["id"] == "delivery-d-opened"
    assert message["headers"]["task"] == PLAN_TASK
    assert message["kwargs"] == {"installation_id": 1, "repository": "Codertocat/Hello-World", "number": 2}
    [row] = edge.rows()
    assert (row.delivery_id, row.event, row.action, row.outcome, row.job_id) == (
        "d-opened",
        "pull_request",
        "opened",
        "enqueued",
        "delivery-d-opened",
    )
    assert (row.installation_id, row.repository) == (1, "Codertocat/Hello-World")


def test_a_redelivery_is_answered_but_not_enqueued(
    start_edge: Callable[..., Edge], http: httpx.Client, queued: Queued
) -> None:
    edge = start_edge()
    assert edge.post(http, "pull_request", PR_OPENED, delivery="d-1").status_code == 202
    again = edge.post(http, "pull_request", PR_OPENED, delivery="d-1")
    assert (again.status_code, again.json()) == (200, {"status": "duplicate"})
    assert len(queued("github")) == 1
    assert len(edge.rows()) == 1


def test_concurrent_redeliveries_enqueue_once(
    start_edge: Callable[..., Edge], redis_url: str, http: httpx.Client, queued: Queued
) -> None:
    send = celery_enqueue(make_celery(redis_url))

    def slow_enqueue(job: dict[str, Any], delivery_id: str) -> str:
        time.sleep(0.3)  # both requests are inside their transactions at once
        return send(job, delivery_id)

    edge = start_edge(enqueue=slow_enqueue)
    statuses: list[int] = []

    def post() -> None:
        with httpx.Client(timeout=20) as client:
            statuses.append(edge.post(client, "pull_request", PR_OPENED, delivery="d-race").status_code)

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200, 202]
    assert len(queued("github")) == 1
    assert len(edge.rows()) == 1


@pytest.mark.parametrize(
    "signature",
    [None, "", "sha256=" + "0" * 64, "sha1=2aae6c35c94fcfb415dbe95f408b9ce91ee846ed", "wrong-secret"],
)
def test_unsigned_or_badly_signed_posts_are_refused(
    start_edge: Callable[..., Edge], http: httpx.Client, queued: Queued, signature: str | None
) -> None:
    edge = start_edge()
    if signature == "wrong-secret":
        answer = edge.post(http, "pull_request", PR_OPENED, secret="not-the-configured-secret")
    else:
        answer = edge.post(http, "pull_request", PR_OPENED, headers={"X-Hub-Signature-256": signature or ""})
    assert answer.status_code == 401
    assert "X-Hub-Signature-256" in answer.json()["error"]
    assert edge.rows() == []
    assert queued("github") == []


@pytest.mark.parametrize(
    ("body", "headers", "error"),
    [
        (b'{"action": "opened",', {}, "body is not JSON"),
        (b"[]", {}, "not an object"),
        (PR_OPENED, {"X-GitHub-Event": ""}, "missing X-GitHub-Event"),
        (PR_OPENED, {"X-GitHub-Delivery": ""}, "missing X-GitHub-Delivery"),
    ],
)
def test_malformed_deliveries_are_refused(
    start_edge: Callable[..., Edge], http: httpx.Client, body: bytes, headers: dict[str, str], error: str
) -> None:
    edge = start_edge()
    answer = edge.post(http, "pull_request", body, headers=headers)  # correctly signed
    assert answer.status_code == 400
    assert error in answer.json()["error"]
    assert edge.rows() == []


def test_bodies_over_the_limit_are_refused(start_edge: Callable[..., Edge], http: httpx.Client) -> None:
    edge = start_edge(max_body_bytes=1024)
    big = json.dumps({"zen": "x" * 4096}).encode()
    assert edge.post(http, "ping", big).status_code == 413  # Content-Length says so: nothing read

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while streaming
        yield from (big[i : i + 512] for i in range(0, len(big), 512))

    headers = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "d-chunked",
        "X-Hub-Signature-256": sign(edge.secret.encode(), big),
    }
    answer = http.post(f"{edge.url}/webhook", content=chunks(), headers=headers)
    assert answer.status_code == 413
    assert "over 1024 bytes" in answer.json()["error"]
    exactly = b'{"zen": "' + b" " * (1024 - 11) + b'"}'
    assert len(exactly) == 1024
    assert edge.post(http, "ping", exactly, delivery="d-fits").status_code == 200
    assert [row.delivery_id for row in edge.rows()] == ["d-fits"]


def test_a_broker_outage_records_nothing_and_a_redelivery_later_works(
    start_edge: Callable[..., Edge], redis_url: str, http: httpx.Client, queued: Queued
) -> None:
    broker = {"app": make_celery(DEAD_BROKER)}
    edge = start_edge(enqueue=lambda job, delivery_id: celery_enqueue(broker["app"])(job, delivery_id))
    started = time.monotonic()
    down = edge.post(http, "pull_request", PR_OPENED, delivery="d-outage")
    assert down.status_code == 503
    assert down.json()["error"] == "broker unavailable, nothing recorded"
    assert time.monotonic() - started < 2  # GitHub gives up after 10 s
    assert edge.rows() == []
    broker["app"] = make_celery(redis_url)  # the broker is back; GitHub's "Redeliver" button
    again = edge.post(http, "pull_request", PR_OPENED, delivery="d-outage")
    assert again.status_code == 202
    assert [(row.outcome, row.job_id) for row in edge.rows()] == [("enqueued", "delivery-d-outage")]
    assert [m["headers"]["id"] for m in queued("github")] == ["delivery-d-outage"]


def test_an_enqueue_naming_its_task_otherwise_is_recorded_with_that_id(
    start_edge: Callable[..., Edge], http: httpx.Client
) -> None:
    edge = start_edge(enqueue=lambda job, delivery_id: f"task-{delivery_id}")
    assert edge.post(http, "pull_request", PR_OPENED, delivery="d-named").status_code == 202
    assert [(row.outcome, row.job_id) for row in edge.rows()] == [("enqueued", "task-d-named")]


def test_the_webhook_path_answers_only_posts(start_edge: Callable[..., Edge], http: httpx.Client) -> None:
    """POST /webhook skips FastAPI's routing; other methods still get FastAPI's answer."""
    edge = start_edge()
    assert http.get(f"{edge.url}/webhook").status_code == 405
    assert edge.rows() == []


def test_a_failing_decision_records_nothing(start_edge: Callable[..., Edge], http: httpx.Client) -> None:
    def broken(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        raise KeyError("pull_request")

    edge = start_edge(decide=broken)
    assert edge.post(http, "pull_request", PR_OPENED, delivery="d-bug").status_code == 500
    assert edge.rows() == []  # once fixed, GitHub's redelivery is not taken for a duplicate


def test_ping_and_ignored_events(start_edge: Callable[..., Edge], http: httpx.Client, queued: Queued) -> None:
    edge = start_edge()
    pong = edge.post(http, "ping", PING, delivery="d-ping")
    assert (pong.status_code, pong.json()) == (200, {"status": "pong"})
    ignored = edge.post(http, "issue_comment", COMMENT, delivery="d-comment")
    assert (ignored.status_code, ignored.json()) == (202, {"status": "ignored"})
    assert [(row.delivery_id, row.event, row.outcome, row.job_id) for row in edge.rows()] == [
        ("d-ping", "ping", "ping", None),
        ("d-comment", "issue_comment", "ignored", None),
    ]
    assert queued("github") == []


def test_healthz(start_edge: Callable[..., Edge], http: httpx.Client, tmp_path: Path) -> None:
    ok = http.get(f"{start_edge().url}/healthz")
    assert (ok.status_code, ok.json()) == (200, {"database": "ok", "broker": "ok"})
    dead_broker = http.get(f"{start_edge(broker_url=DEAD_BROKER).url}/healthz")
    assert (dead_broker.status_code, dead_broker.json()) == (503, {"database": "ok", "broker": "unavailable"})
    # A database that cannot be opened (its folder is gone): reported, not raised.
    edge = start_edge()
    edge.sessions.configure(bind=db.make_engine(f"sqlite:///{tmp_path / 'missing' / 'k.db'}"))
    dead_db = http.get(f"{edge.url}/healthz")
    assert (dead_db.status_code, dead_db.json()) == (503, {"database": "unavailable", "broker": "ok"})


def test_metrics(start_edge: Callable[..., Edge], http: httpx.Client) -> None:
    edge = start_edge(max_body_bytes=64 * 1024)
    edge.post(http, "pull_request", PR_OPENED, delivery="m-1")
    edge.post(http, "pull_request", PR_OPENED, delivery="m-1")
    edge.post(http, "ping", PING)
    edge.post(http, "ping", PING, secret="wrong-secret-wrong-secret")
    edge.post(http, "ping", b"not json")
    edge.post(http, "ping", b"{" + b" " * 70 * 1024 + b"}")
    answer = http.get(f"{edge.url}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    for line in (
        'kernelize_webhook_deliveries_total{event="pull_request",outcome="enqueued"} 1.0',
        'kernelize_webhook_deliveries_total{event="pull_request",outcome="duplicate"} 1.0',
        'kernelize_webhook_deliveries_total{event="ping",outcome="pong"} 1.0',
        'kernelize_webhook_rejected_total{reason="signature"} 1.0',
        'kernelize_webhook_rejected_total{reason="malformed"} 1.0',
        'kernelize_webhook_rejected_total{reason="too_large"} 1.0',
        "kernelize_webhook_seconds_count 6.0",
    ):
        assert line in text, line
    # A second app has counters of its own (per-app registry).
    assert "kernelize_webhook_seconds_count 0.0" in http.get(f"{start_edge().url}/metrics").text


def test_metrics_of_queues_jobs_and_gpu_time(start_edge: Callable[..., Edge], http: httpx.Client) -> None:
    from bot.models import Job

    edge = start_edge()
    edge.post(http, "pull_request", PR_OPENED, delivery="q-1")  # one plan task waits in the github queue
    with edge.sessions() as session, session.begin():
        for installation, seconds, state in [(7, 10.0, "done"), (7, 2.5, "done"), (8, 0.0, "queued")]:
            session.add(
                Job(
                    key=f"k{installation}-{seconds}",
                    installation_id=installation,
                    repository="o/r",
                    pull_number=1,
                    head_sha="a" * 40,
                    reason="test",
                    state=state,
                    gpu_seconds=seconds,
                )
            )
    text = http.get(f"{edge.url}/metrics").text
    for line in (
        'kernelize_queue_depth{queue="github"} 1.0',
        'kernelize_queue_depth{queue="gpu"} 0.0',
        'kernelize_gpu_seconds_total{installation="7"} 12.5',
        'kernelize_gpu_seconds_total{installation="8"} 0.0',
        'kernelize_jobs{state="done"} 2.0',
        'kernelize_jobs{state="queued"} 1.0',
    ):
        assert line in text, line
    # A broker that is down drops the queue depth from the scrape, not the scrape.
    down = start_edge(broker_url=DEAD_BROKER)
    answer = http.get(f"{down.url}/metrics")
    assert answer.status_code == 200 and "kernelize_queue_depth{" not in answer.text
    assert "kernelize_webhook_seconds_count" in answer.text


def test_each_delivery_is_logged_as_json_without_secret_or_body(
    start_edge: Callable[..., Edge], http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kernelize.web")
    edge = start_edge()
    edge.post(http, "pull_request", PR_OPENED, delivery="log-1")
    edge.post(http, "pull_request", PR_OPENED, delivery="log-2", secret="an-attacker-guess-0000")
    records = [r for r in caplog.records if r.name == "kernelize.web"]
    lines = [json.loads(JsonFormatter().format(r)) for r in records]
    assert {k: lines[0][k] for k in ("delivery_id", "event", "action", "outcome", "status", "job_id")} == {
        "delivery_id": "log-1",
        "event": "pull_request",
        "action": "opened",
        "outcome": "enqueued",
        "status": 202,
        "job_id": "delivery-log-1",
    }
    assert {k: lines[1][k] for k in ("delivery_id", "outcome", "reason", "status")} == {
        "delivery_id": "log-2",
        "outcome": "rejected",
        "reason": "signature",
        "status": 401,
    }
    everything = json.dumps(lines)
    assert edge.secret not in everything and "an-attacker-guess" not in everything
    assert "Codertocat" not in everything  # nothing from the body


@pytest.mark.parametrize("publish", [celery_enqueue, celery_publisher])
def test_end_to_end_to_a_real_worker(
    start_edge: Callable[..., Edge],
    http: httpx.Client,
    redis_client: Any,
    celery_worker: subprocess.Popen[bytes],
    publish: Callable[[Any], Callable[[dict[str, Any], str], str]],
) -> None:
    edge = start_edge(publish=publish)
    assert edge.post(http, "pull_request", PR_OPENED, delivery="e2e-1").status_code == 202
    popped = redis_client.blpop("kernelize-test:received", timeout=30)
    assert popped is not None, "the worker did not run the task within 30 s"
    assert json.loads(popped[1]) == {
        "id": "delivery-e2e-1",
        "kwargs": {"installation_id": 1, "repository": "Codertocat/Hello-World", "number": 2},
        "routing_key": "github",
    }


# --- the `kernelize serve` command -------------------------------------------------------------


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELIZE_")}
    return env | values


def test_serve_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve", "--port", "1"],
        cwd=tmp_path,
        env=_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "kernelize: error: KERNELIZE_WEBHOOK_SECRET is not set: "
        "the server refuses to start without a webhook secret\n"
    )


def test_serve_refuses_to_start_its_worker_without_the_sandbox(tmp_path: Path, webhook_secret: str) -> None:
    """The one-machine install where bubblewrap is missing: nothing listens, one line says why, and
    ``--no-worker`` (a GPU worker elsewhere) is named."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = _env(
        PYTHONPATH=str(ROOT), KERNELIZE_WEBHOOK_SECRET=webhook_secret, KERNELIZE_BWRAP="/nonexistent/bwrap"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "kernelize: error: isolation unavailable: /nonexistent/bwrap not found (install bubblewrap); "
        "kernelize serve's worker (--no-worker runs the web side alone) runs no code from pull requests "
        "without its sandbox"
    )
    with socket.socket() as sock:  # nothing was left listening
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_serve_runs_on_the_embedded_defaults(tmp_path: Path, http: httpx.Client, webhook_secret: str) -> None:
    """SQLite database and SQLite broker in the working directory: no service to run."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = _env(PYTHONPATH=str(ROOT), KERNELIZE_WEBHOOK_SECRET=webhook_secret)
    command = [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 30
        while True:
            try:
                health = http.get(f"{url}/healthz")
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "kernelize serve did not start"
                time.sleep(0.1)
        assert (health.status_code, health.json()) == (200, {"database": "ok", "broker": "ok"})
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "serve-1"}
        headers["X-Hub-Signature-256"] = sign(webhook_secret.encode(), PING)
        assert http.post(f"{url}/webhook", content=PING, headers=headers).json() == {"status": "pong"}
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=10)
    assert (tmp_path / "kernelize.db").exists()
    logged = [json.loads(line) for line in output.decode().splitlines() if line.startswith("{")]
    assert any(e.get("delivery_id") == "serve-1" and e.get("outcome") == "pong" for e in logged), output
    assert webhook_secret not in output.decode()


def test_the_web_process_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import bot.cli, bot.web, runners.celery_app\n"
        "import bot.events\n"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
