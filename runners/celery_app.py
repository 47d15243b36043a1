"""Celery configuration shared by the web process (which only sends) and the workers.

Two queues: ``github`` (CPU workers holding GitHub credentials) and ``gpu`` (GPU
workers holding none). Tasks are idempotent and acknowledged late, one at a
time, so a worker that dies mid-task gives its task back to the queue.
Imports nothing from ``bot/`` and nothing of the web stack but Celery.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

GITHUB_QUEUE, GPU_QUEUE = "github", "gpu"
PLAN_TASK = "kernelize.plan_pull_request"
PUBLISH_TASK = "kernelize.publish_pull_request"
PUBLISH_FAILED_TASK = "kernelize.publish_failed"  # a chord's error callback: a module's task failed
PROGRESS_TASK = "kernelize.progress"  # a file's GPU task started or finished: the check run says so
KERNELIZE_TASK = "kernelize.kernelize_module"  # one class
KERNELIZE_FILE_TASK = "kernelize.kernelize_file"  # the changed classes of one file, checked together
COMMAND_TASK = "kernelize.command"
INSTALLATION_TASK = "kernelize.installation"
TRACK_TASK = "kernelize.track"
TASK_ROUTES = {
    PLAN_TASK: {"queue": GITHUB_QUEUE},
    COMMAND_TASK: {"queue": GITHUB_QUEUE},
    INSTALLATION_TASK: {"queue": GITHUB_QUEUE},
    TRACK_TASK: {"queue": GITHUB_QUEUE},
    PUBLISH_TASK: {"queue": GITHUB_QUEUE},
    PUBLISH_FAILED_TASK: {"queue": GITHUB_QUEUE},
    PROGRESS_TASK: {"queue": GITHUB_QUEUE},
    KERNELIZE_TASK: {"queue": GPU_QUEUE},
    KERNELIZE_FILE_TASK: {"queue": GPU_QUEUE},
}
# Seconds to wait for a broker socket: the web process must answer GitHub within 10 s.
CONNECT_TIMEOUT_S = 2
SOCKET_TIMEOUT_S = 5


def visibility_timeout() -> float:
    """Seconds before Redis redelivers an unacknowledged task (``KERNELIZE_VISIBILITY_TIMEOUT_S``)."""
    return float(os.environ.get("KERNELIZE_VISIBILITY_TIMEOUT_S", 6 * 3600))


def _transport_options(broker_url: str) -> dict[str, Any]:
    # One immediate retry, then fail: an unreachable broker turns into a 503 in milliseconds
    # instead of kombu's default retry loop (2 s and more). Workers reconnect through their
    # own loop (broker_connection_retry), which does not read these.
    options: dict[str, Any] = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 1}
    if broker_url.startswith(("redis://", "rediss://", "unix://")):
        options["socket_connect_timeout"] = CONNECT_TIMEOUT_S
        # A Redis that accepts but never answers must not hold a web request past GitHub's 10 s.
        options["socket_timeout"] = SOCKET_TIMEOUT_S
        # With late acks, Redis hands an unacknowledged task to another worker after this long: it
        # must outlast the longest task (kombu's default, 1 h, is shorter than a big module's run),
        # and is what brings back the task of a worker that died.
        options["visibility_timeout"] = visibility_timeout()
        # How often a worker looks for such tasks: kombu 5.7 scans every 10th sweep of 10 s (100 s).
        # Every sweep is one ZRANGE on a small index; a short timeout is also swept sooner.
        options["unacked_restore_throttle"] = 1
        options["unacked_restore_interval"] = max(1.0, min(10.0, visibility_timeout() / 3))
    # Not for sqla+: that transport hands unknown options to create_engine(), which rejects them.
    return options


def _queue(name: str) -> Queue:
    # kombu ships py.typed but leaves its constructors unannotated.
    return Queue(name, Exchange(name), routing_key=name)  # type: ignore[no-untyped-call]


def make_celery(broker_url: str, result_backend: str | None = None) -> Celery:
    app = Celery("kernelize", broker=broker_url, backend=result_backend, set_as_current=False)
    app.conf.update(
        task_queues=(_queue(GITHUB_QUEUE), _queue(GPU_QUEUE)),
        # Anything unrouted goes to the CPU side, never to a GPU worker running PR code.
        task_default_queue=GITHUB_QUEUE,
        task_default_exchange=GITHUB_QUEUE,
        task_default_routing_key=GITHUB_QUEUE,
        task_routes=TASK_ROUTES,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=CONNECT_TIMEOUT_S,
        broker_transport_options=_transport_options(broker_url),
        enable_utc=True,
    )
    return app


def celery_enqueue(app: Celery) -> Callable[[dict[str, Any], str], str]:
    """An ``enqueue(job, delivery_id) -> task id`` that sends one task and raises if it cannot.

    ``job["task"]`` names the task (default ``kernelize.plan_pull_request``); the job's
    other fields are its keyword arguments. The task id is ``delivery-<delivery id>``,
    the same for a redelivery, so a task can tell it has seen this delivery before.
    """

    def enqueue(job: dict[str, Any], delivery_id: str) -> str:
        name = str(job.get("task", PLAN_TASK))
        kwargs = {key: value for key, value in job.items() if key != "task"}
        task_id = f"delivery-{delivery_id}"
        # retry=False: an unreachable broker raises now (kombu OperationalError), not after retries.
        app.send_task(name, kwargs=kwargs, task_id=task_id, retry=False)
        return task_id

    return enqueue


def celery_broker_ok(app: Celery) -> Callable[[], bool]:
    """A ``broker_ok()`` for /healthz: True when a broker connection can be opened now."""

    def broker_ok() -> bool:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_TIMEOUT_S)
        return True

    return broker_ok


def celery_queue_depth(app: Celery) -> Callable[[], dict[str, int]]:
    """A ``queue_depth()`` for /metrics: tasks waiting in each queue (not those being run)."""

    def depth() -> dict[str, int]:
        counts = {}
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_TIMEOUT_S)
            for name in (GITHUB_QUEUE, GPU_QUEUE):
                channel = conn.channel()
                try:
                    counts[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
                except conn.channel_errors:  # never declared, or Redis dropped the empty list: none waiting
                    counts[name] = 0
                finally:
                    channel.close()
        return counts

    return depth
