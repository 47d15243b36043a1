"""A Celery app for a real worker in tests: ``celery -A celery_worker_tasks worker -Q github``.

Its ``kernelize.plan_pull_request`` records what it received into the broker's own
Redis (list ``kernelize-test:received``), where the test reads it back.
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from runners.celery_app import PLAN_TASK, make_celery

BROKER = os.environ["KERNELIZE_TEST_BROKER"]
RECEIVED = "kernelize-test:received"

app = make_celery(BROKER)
_redis = redis.Redis.from_url(BROKER)


@app.task(name=PLAN_TASK, bind=True)
def plan_pull_request(self: Any, **kwargs: Any) -> None:
    info = self.request.delivery_info or {}
    entry = {"id": self.request.id, "kwargs": kwargs, "routing_key": info.get("routing_key")}
    _redis.rpush(RECEIVED, json.dumps(entry))
