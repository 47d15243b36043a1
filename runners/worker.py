"""A Celery worker for the GPU side: ``python -m runners.worker [--queues gpu] [--warm GENERATOR]``.

It reads only what it needs from its environment (``KERNELIZE_BROKER_URL``,
``KERNELIZE_RESULT_BACKEND``, and the generator resources listed in
runners/tasks.py): no webhook secret, no GitHub key, no database password.
One task at a time, acknowledged late, so a task on a worker that dies is
delivered again. ``--warm kernelllm`` loads the model before the first task
is taken, so the first pull request does not wait for it. A worker whose
sandbox cannot be set up (runners/sandbox.py) exits at once with the reason.
``kernelize worker --queues gpu --gpus 0,1`` runs one of these per GPU
(runners/supervisor.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from runners import observability, sandbox, tasks
from runners.celery_app import GPU_QUEUE, make_celery
from runners.generators import GeneratorError

DEFAULT_BROKER = "sqla+sqlite:///kernelize-broker.db"
log = logging.getLogger("kernelize.worker")


def build_app() -> Any:
    broker = os.environ.get("KERNELIZE_BROKER_URL", DEFAULT_BROKER)
    app = make_celery(broker, os.environ.get("KERNELIZE_RESULT_BACKEND"))
    tasks.register(app)
    observability.instrument()
    return app


def warm(names: list[str]) -> None:
    """Load what the named generators need before taking a task (the model, once per process)."""
    from runners.generators import make_generator

    device = tasks._device("auto")
    for name in names:
        generator = make_generator(name, tasks.worker_options(device))
        if name == "kernelllm":
            from runners.generators.kernelllm import _LOAD_LOCK, KernelLLMGenerator, load

            assert isinstance(generator, KernelLLMGenerator)
            with _LOAD_LOCK:  # the same cache entry the generator's first call reads
                load(generator.model_id, generator.device, generator.dtype)
        log.info("generator ready", extra={"generator": name, "device": device})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--queues", default=GPU_QUEUE)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--hostname", default=None)
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument(
        "--warm", action="append", default=[], metavar="GENERATOR", help="load before the first task"
    )
    args = parser.parse_args(argv)
    observability.configure_logging()
    refused = sandbox.refusal(sandbox.probe_device())
    if refused:  # a worker that cannot isolate takes no task
        print(f"kernelize: error: {refused}; {tasks.REFUSED}", file=sys.stderr)
        return 2
    try:
        warm(args.warm)
    except GeneratorError as exc:
        print(f"kernelize: error: --warm: {exc}", file=sys.stderr)
        return 2
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
    app.worker_main(worker_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
