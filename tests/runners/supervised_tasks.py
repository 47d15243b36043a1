"""A Celery app for the supervisor's tests: ``celery -A supervised_tasks worker -Q gpu``.

Each worker records in the broker's Redis that it is ready (with the GPU it sees); ``slow``
records each start and each finish, so a test can count runs of one task.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import signals

from runners import observability
from runners.celery_app import GPU_QUEUE, make_celery

BROKER = os.environ["KERNELIZE_BROKER_URL"]
READY, STARTED, FINISHED = "kz-test:ready", "kz-test:started", "kz-test:finished"
SLOW_TASK = "kernelize.test.slow"

app = make_celery(BROKER)
app.conf.task_routes = {SLOW_TASK: {"queue": GPU_QUEUE}}
observability.instrument()
_redis = redis.Redis.from_url(BROKER)


@signals.worker_ready.connect
def _ready(sender: Any, **_: Any) -> None:
    entry = {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "hostname": sender.hostname}
    _redis.rpush(READY, json.dumps(entry))


@app.task(name=SLOW_TASK, bind=True)
def slow(self: Any, tag: str, first_s: float, again_s: float) -> dict[str, Any]:
    """Sleeps ``first_s`` on its first run and ``again_s`` on a redelivery."""
    attempt = _redis.rpush(STARTED, json.dumps({"tag": tag, "pid": os.getpid()}))
    time.sleep(first_s if attempt == 1 else again_s)
    _redis.rpush(FINISHED, json.dumps({"tag": tag, "pid": os.getpid(), "task_id": self.request.id}))
    return {"module": {"candidates": [{"generator": "files", "status": "correct"}]}}
