"""A Celery app for a real worker in tests: a module's GPU task that fails, and the chord callbacks
of bot/flows/plan.py's ``run_chord`` recording what they got into the broker's Redis
(list ``kernelize-test:chord``). ``celery -A chord_worker_tasks worker -Q github,gpu``."""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from bot.tasks import _failure
from runners.celery_app import KERNELIZE_TASK, PUBLISH_FAILED_TASK, PUBLISH_TASK, make_celery

BROKER = os.environ["KERNELIZE_TEST_BROKER"]
SEEN = "kernelize-test:chord"

app = make_celery(BROKER, BROKER)
_redis = redis.Redis.from_url(BROKER)


@app.task(name=KERNELIZE_TASK)
def kernelize_module(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("explode"):
        raise RuntimeError(f"module {request['class_name']} exploded")
    return {"module": request["class_name"]}


@app.task(name=PUBLISH_TASK)
def publish(results: list[dict[str, Any]], context: dict[str, Any]) -> None:
    _redis.rpush(SEEN, json.dumps({"published": results, "context": context}))


@app.task(name=PUBLISH_FAILED_TASK, bind=True)
def publish_failed(self: Any, failed_task_id: str, context: dict[str, Any]) -> None:
    why = _failure(self.app, failed_task_id)
    _redis.rpush(SEEN, json.dumps({"failed": failed_task_id, "why": why, "context": context}))
