"""Celery configuration, the enqueue helper and the broker health probe, against real brokers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runners.celery_app import (
    COMMAND_TASK,
    GITHUB_QUEUE,
    GPU_QUEUE,
    INSTALLATION_TASK,
    KERNELIZE_FILE_TASK,
    KERNELIZE_TASK,
    PLAN_TASK,
    PROGRESS_TASK,
    PUBLISH_FAILED_TASK,
    PUBLISH_TASK,
    TRACK_TASK,
    celery_broker_ok,
    celery_enqueue,
    make_celery,
)

ROOT = Path(__file__).resolve().parents[2]
DEAD_BROKER = "redis://127.0.0.1:1/0"


def test_configuration() -> None:
    conf = make_celery("redis://127.0.0.1:6379/0").conf
    assert [q.name for q in conf.task_queues] == [GITHUB_QUEUE, GPU_QUEUE]
    assert conf.task_routes == {
        PLAN_TASK: {"queue": "github"},
        COMMAND_TASK: {"queue": "github"},
        INSTALLATION_TASK: {"queue": "github"},
        TRACK_TASK: {"queue": "github"},
        PUBLISH_TASK: {"queue": "github"},
        PUBLISH_FAILED_TASK: {"queue": "github"},  # a chord's error callback holds GitHub code too
        PROGRESS_TASK: {"queue": "github"},  # a GPU task's start notice and link: GitHub calls, here
        KERNELIZE_TASK: {"queue": "gpu"},
        KERNELIZE_FILE_TASK: {"queue": "gpu"},
    }
    assert conf.task_default_queue == "github"  # unrouted work never reaches a GPU worker
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert (conf.task_serializer, conf.result_serializer) == ("json", "json")
    assert conf.accept_content == ["json"] and conf.result_accept_content == ["json"]
    assert conf.broker_connection_retry_on_startup
    assert conf.broker_connection_timeout == 2
    assert conf.broker_transport_options["socket_connect_timeout"] == 2
    assert conf.broker_transport_options["socket_timeout"] == 5


def test_transport_options_suit_the_transport() -> None:
    # kombu's SQLAlchemy transport passes unknown options to create_engine(), which would reject them.
    assert "socket_connect_timeout" not in make_celery("sqla+sqlite:///x.db").conf.broker_transport_options
    assert (
        "socket_connect_timeout" not in make_celery("amqp://guest@localhost//").conf.broker_transport_options
    )


def test_enqueue_puts_one_message_on_the_github_queue(
    redis_url: str, queued: Callable[[str], list[dict[str, Any]]]
) -> None:
    enqueue = celery_enqueue(make_celery(redis_url))
    job = {"task": PLAN_TASK, "installation_id": 1, "owner": "octo", "repo": "hello", "number": 2}
    assert enqueue(job, "72d3162e") == "delivery-72d3162e"
    [message] = queued("github")
    assert message["headers"]["task"] == PLAN_TASK
    assert message["headers"]["id"] == "delivery-72d3162e"
    assert message["kwargs"] == {"installation_id": 1, "owner": "octo", "repo": "hello", "number": 2}
    assert message["args"] == []
    assert queued("gpu") == []


def test_the_default_task_and_gpu_routing(
    redis_url: str, queued: Callable[[str], list[dict[str, Any]]]
) -> None:
    enqueue = celery_enqueue(make_celery(redis_url))
    enqueue({"number": 1}, "a")
    enqueue({"task": KERNELIZE_TASK, "bundle": "..."}, "b")
    assert [m["headers"]["task"] for m in queued("github")] == [PLAN_TASK]
    assert [m["headers"]["id"] for m in queued("gpu")] == ["delivery-b"]


def test_a_dead_broker_raises_quickly() -> None:
    enqueue = celery_enqueue(make_celery(DEAD_BROKER))
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)connect|refused"):
        enqueue({"number": 1}, "a")
    assert time.monotonic() - started < 1.5  # kombu's default retry loop alone takes 2 s


def test_broker_ok(redis_url: str) -> None:
    assert celery_broker_ok(make_celery(redis_url))() is True
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)connect|refused"):
        celery_broker_ok(make_celery(DEAD_BROKER))()
    assert time.monotonic() - started < 1.5


def test_the_embedded_sqlite_broker_works_without_a_server(tmp_path: Path) -> None:
    """The default broker (kombu's SQLAlchemy transport on a SQLite file): sent here, received there."""
    url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    assert celery_enqueue(make_celery(url))({"number": 5}, "s1") == "delivery-s1"
    assert celery_broker_ok(make_celery(url))()
    with make_celery(url).connection_for_read() as conn:  # a second app: as another process would
        queue = conn.SimpleQueue("github")
        message = queue.get(timeout=5)
        assert message.headers["id"] == "delivery-s1"
        assert message.headers["task"] == PLAN_TASK
        assert message.decode()[1] == {"number": 5}
        message.ack()
        queue.close()


def test_rabbitmq() -> None:
    """The same queues on an AMQP broker, where exchanges and bindings are real."""
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=0.5).close()
    except OSError:
        pytest.skip("RabbitMQ is not running on 127.0.0.1:5672")
    app = make_celery("amqp://guest:guest@127.0.0.1:5672//")
    assert celery_broker_ok(app)()
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.amqp.queues["github"])
        queue.clear()
        celery_enqueue(app)({"number": 7}, "amqp-1")
        message = queue.get(timeout=5)
        assert (message.headers["id"], message.decode()[1]) == ("delivery-amqp-1", {"number": 7})
        message.ack()
        queue.close()


def test_a_real_worker_runs_the_task(
    redis_url: str, redis_client: Any, celery_worker: subprocess.Popen[bytes]
) -> None:
    enqueue = celery_enqueue(make_celery(redis_url))
    enqueue({"installation_id": 1, "owner": "octo", "repo": "hello", "number": 2}, "w1")
    popped = redis_client.blpop("kernelize-test:received", timeout=30)
    assert popped is not None, "the worker did not run the task within 30 s"
    received = json.loads(popped[1])
    assert received == {
        "id": "delivery-w1",
        "kwargs": {"installation_id": 1, "owner": "octo", "repo": "hello", "number": 2},
        "routing_key": "github",
    }
    # Acknowledged late, after the task returned: nothing left queued or unacknowledged.
    deadline = time.monotonic() + 5
    while redis_client.hlen("unacked") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.llen("github") == 0 and redis_client.hlen("unacked") == 0


def test_runners_celery_app_needs_no_web_packages() -> None:
    code = (
        "import sys, runners.celery_app\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'bot', 'fastapi', 'sqlalchemy', 'torch'})\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def chord_worker(start_worker: Callable[..., subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A real worker for both queues running tests/bot/chord_worker_tasks.py."""
    return start_worker("chord_worker_tasks", "github,gpu")


def _chord_outcome(redis_client: Any, timeout_s: float = 60) -> dict[str, Any]:
    got = redis_client.blpop("kernelize-test:chord", timeout=timeout_s)
    assert got is not None, "neither callback of the chord ran"
    return json.loads(got[1])


@pytest.mark.parametrize("explode", [False, True])
def test_a_module_task_that_fails_ends_the_job_through_the_error_callback(
    redis_url: str, redis_client: Any, chord_worker: subprocess.Popen[bytes], explode: bool
) -> None:
    from bot.flows.plan import run_chord
    from runners.celery_app import GPU_QUEUE, KERNELIZE_TASK, make_celery
    from tests.bot.flow import publish_context

    redis_client.delete("kernelize-test:chord")
    app = make_celery(redis_url, redis_url)
    header = [
        app.signature(
            KERNELIZE_TASK,
            kwargs={"request": {"class_name": n, "explode": explode and n == "B"}},
            queue=GPU_QUEUE,
        )
        for n in ("A", "B")
    ]
    job = {"installation_id": 1, "owner": "o", "repo": "r", "number": 1, "check_run_id": 2, "job_id": 7}
    context = publish_context(job)
    run_chord(app, header, context)
    outcome = _chord_outcome(redis_client)
    assert outcome["context"] == context.to_dict()  # the publish step and its error callback get it whole
    if not explode:
        assert sorted(r["module"] for r in outcome["published"]) == ["A", "B"]
    else:
        assert "published" not in outcome
        assert "RuntimeError('module B exploded')" in outcome["why"] or "module B exploded" in outcome["why"]
        assert outcome["why"].startswith("ChordError")
    assert redis_client.blpop("kernelize-test:chord", timeout=3) is None  # exactly one callback ran
