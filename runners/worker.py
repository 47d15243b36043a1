"""A Celery worker for the GPU side: ``python -m runners.worker [--queues gpu] [--concurrency 1]``.

It reads only what it needs from its environment (``KERNELIZE_BROKER_URL``,
``KERNELIZE_RESULT_BACKEND``, and the generator resources listed in
runners/tasks.py): no webhook secret, no GitHub key, no database password.
One task at a time, acknowledged late, so a task on a worker that dies is
delivered again.
"""

from __future__ import annotations

import argparse
import os
import sys

from runners import tasks
from runners.celery_app import GPU_QUEUE, make_celery

DEFAULT_BROKER = "sqla+sqlite:///kernelize-broker.db"


def build_app() -> object:
    broker = os.environ.get("KERNELIZE_BROKER_URL", DEFAULT_BROKER)
    app = make_celery(broker, os.environ.get("KERNELIZE_RESULT_BACKEND"))
    tasks.register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--queues", default=GPU_QUEUE)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--hostname", default=None)
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    app = build_app()
    worker_args = [
        "worker",
        "-Q",
        args.queues,
        "--pool",
        "solo" if args.concurrency == 1 else "prefork",
        "--concurrency",
        str(args.concurrency),
        "--loglevel",
        args.loglevel,
        "--without-gossip",
        "--without-mingle",
    ]
    if args.hostname:
        worker_args += ["--hostname", args.hostname]
    app.worker_main(worker_args)  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
