"""A Celery app for real workers on the embedded broker's transport (bot/broker.py):
``celery -A broker_worker_tasks worker -Q github`` with ``KERNELIZE_TEST_BROKER=sqla+sqlite:///…``.

Its ``kernelize.plan_pull_request`` writes ``<label> <its pid>`` to the file ``log`` when it starts,
then, given ``wait_for``, runs until that file exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bot import broker
from runners.celery_app import PLAN_TASK, make_celery

broker.install()
app = make_celery(os.environ["KERNELIZE_TEST_BROKER"])


@app.task(name=PLAN_TASK)
def plan_pull_request(log: str, label: str, wait_for: str = "") -> None:
    with open(log, "a") as out:
        out.write(f"{label} {os.getpid()}\n")
    while wait_for and not Path(wait_for).exists():
        time.sleep(0.05)
