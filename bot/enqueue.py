"""A delivery's first task onto the broker: Celery's own message, through a producer each thread keeps.

``runners.celery_app.celery_enqueue`` sends with ``Celery.send_task`` and nothing more: every call
takes a producer from the app's pool, gives it back, and declares the task's queue on it again:
0.65-0.75 ms of CPU a call, against 0.30 ms on a producer kept with its queues declared once
(docs/benchmarks.md, "Webhook ingest"). :func:`celery_publisher` still calls ``send_task``, so
the message is the one Celery builds (protocol 2 headers, task id ``delivery-<X-GitHub-Delivery>``,
routing, the ``before_task_publish`` signals) and the workers consume it as they do any other,
but on a producer its thread keeps, whose connection declared the app's queues once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from runners.celery_app import PLAN_TASK

Enqueue = Callable[[dict[str, Any], str], str]


def celery_publisher(app: Any) -> Enqueue:
    """An ``enqueue(job, delivery_id) -> task id`` as ``celery_enqueue(app)``, cheaper per call.

    ``job["task"]`` names the task (default ``kernelize.plan_pull_request``), the job's other
    fields are its keyword arguments, and the task id is ``delivery-<delivery id>``. An
    unreachable broker raises at once (no retries); the thread's producer is then dropped, so the
    next call connects afresh."""
    local = threading.local()

    def producer() -> Any:
        held = getattr(local, "producer", None)
        if held is None:
            held = app.amqp.Producer(app.connection_for_write(), auto_declare=False)
            try:
                for queue in app.amqp.queues.values():  # what send_task's declare=[queue] does, once
                    held.maybe_declare(queue, retry=False)
            except Exception:
                held.release()
                raise
            local.producer = held
        return held

    def enqueue(job: dict[str, Any], delivery_id: str) -> str:
        name = str(job.get("task", PLAN_TASK))
        kwargs = {key: value for key, value in job.items() if key != "task"}
        task_id = f"delivery-{delivery_id}"
        held = producer()
        try:
            app.send_task(name, kwargs=kwargs, task_id=task_id, retry=False, producer=held, declare=[])
        except Exception:
            local.producer = None
            held.release()
            raise
        return task_id

    return enqueue
