"""bot.enqueue.celery_publisher: the message Celery's send_task writes, on Redis and the embedded broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kombu.exceptions import OperationalError

from bot.enqueue import celery_publisher
from runners.celery_app import GITHUB_QUEUE, INSTALLATION_TASK, PLAN_TASK, celery_enqueue, make_celery

JOB = {"task": PLAN_TASK, "installation_id": 1, "owner": "o", "repo": "r", "number": 2, "draft": False}
PER_TASK = {"id", "root_id"}  # headers that name the task
PER_MESSAGE = {"correlation_id", "delivery_tag"}  # properties that do


def test_the_publisher_sends_what_send_task_sends(redis_url: str, redis_client: Any) -> None:
    app = make_celery(redis_url)
    assert celery_enqueue(app)(JOB, "one") == "delivery-one"
    assert celery_publisher(app)(JOB, "two") == "delivery-two"
    sent, published = (json.loads(raw) for raw in redis_client.lrange(GITHUB_QUEUE, 0, -1)[::-1])
    assert (sent["headers"]["id"], published["headers"]["id"]) == ("delivery-one", "delivery-two")
    assert published["headers"]["root_id"] == "delivery-two"
    for message in (sent, published):
        message["headers"] = {k: v for k, v in message["headers"].items() if k not in PER_TASK}
        message["properties"] = {k: v for k, v in message["properties"].items() if k not in PER_MESSAGE}
    assert published == sent  # body (arguments), headers, routing, delivery mode, reply_to: all alike


def test_the_publisher_routes_as_the_app_does(redis_url: str, redis_client: Any) -> None:
    publish = celery_publisher(make_celery(redis_url))
    job = {"task": INSTALLATION_TASK, "event": "installation", "payload": {"action": "created"}}
    for delivery in ("a", "b", "c"):  # the thread's producer, reused
        publish(job if delivery == "c" else JOB, delivery)
    ids = [json.loads(raw)["headers"]["id"] for raw in redis_client.lrange(GITHUB_QUEUE, 0, -1)]
    assert sorted(ids) == ["delivery-a", "delivery-b", "delivery-c"]
    assert redis_client.llen("gpu") == 0


def test_the_publisher_on_the_embedded_broker(tmp_path: Path) -> None:
    app = make_celery(f"sqla+sqlite:///{tmp_path / 'broker.db'}")
    publish = celery_publisher(app)
    publish(JOB, "one")
    publish(JOB, "two")
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.amqp.queues[GITHUB_QUEUE])
        received = []
        for _ in range(2):
            message = queue.get(timeout=5)
            received.append((message.headers["id"], message.payload[1]["number"]))
            message.ack()
        queue.close()
    assert sorted(received) == [("delivery-one", 2), ("delivery-two", 2)]


def test_an_unreachable_broker_raises_at_once() -> None:
    publish = celery_publisher(make_celery("redis://127.0.0.1:1/0"))
    for _ in range(2):  # the failed producer was dropped: the second call tries afresh, and fails too
        with pytest.raises(OperationalError):
            publish(JOB, "down")
