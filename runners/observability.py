"""Logs and metrics for every process: one JSON object a line, carrying what the line is about.

- :data:`log_context` holds the delivery id, task id and repository of the work in hand; the
  :class:`JsonFormatter` adds them to every line, so ``grep <delivery id>`` follows one webhook
  from the web process through the github and gpu queues.
- :func:`instrument` connects a Celery app's signals: the context is set when a task starts and
  cleared when it ends; task durations and candidate outcomes (by generator) go to Prometheus.
  Under ``runners.supervisor`` the children write to its multiprocess folder and the supervisor
  serves them on ``/metrics``.

The delivery id of a task comes from its root task id: the web process names the first task
``delivery-<X-GitHub-Delivery>`` and Celery hands that root id down to every task it fans out.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

log_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("kernelize_log_context")
LOG_FORMAT_ENV = "KERNELIZE_LOG_FORMAT"  # json (default in containers) or text
GPU_ENV = "KERNELIZE_GPU"  # the GPU index a supervised worker is pinned to (runners/supervisor.py)
log = logging.getLogger("kernelize.tasks")
TASK_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the log context and the record's ``extra``."""

    # uvicorn adds color_message (the same text with ANSI colours) to its records.
    _SKIP = frozenset(logging.makeLogRecord({}).__dict__) | {
        "message",
        "asctime",
        "taskName",
        "color_message",
    }

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry |= log_context.get({})
        entry |= {key: value for key, value in record.__dict__.items() if key not in self._SKIP}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(fmt: str | None = None, level: int = logging.INFO) -> None:
    """Root logging to stderr: JSON unless ``KERNELIZE_LOG_FORMAT=text``."""
    fmt = fmt or os.environ.get(LOG_FORMAT_ENV, "json")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "text":
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


def task_context(
    task_id: str, name: str, root_id: str | None, kwargs: dict[str, Any], gpu: str | None = None
) -> dict[str, Any]:
    """The log context of a task: its id and name, the delivery that started it, its repository,
    and the GPU its worker is pinned to (``KERNELIZE_GPU``, set by runners/supervisor.py)."""
    context: dict[str, Any] = {"task_id": task_id, "task": name}
    if gpu:
        context["gpu"] = gpu
    for candidate in (root_id, task_id):
        if candidate and candidate.startswith("delivery-"):
            context["delivery_id"] = candidate.removeprefix("delivery-")
            break
    if kwargs.get("owner") and kwargs.get("repo"):
        context["repository"] = f"{kwargs['owner']}/{kwargs['repo']}"
    elif isinstance(kwargs.get("context"), dict) and kwargs["context"].get("owner"):
        context["repository"] = f"{kwargs['context']['owner']}/{kwargs['context'].get('repo')}"
    elif isinstance(kwargs.get("payload"), dict):
        repository = kwargs["payload"].get("repository") or {}
        if repository.get("full_name"):
            context["repository"] = repository["full_name"]
    return context


def candidate_outcomes(result: Any) -> list[tuple[str, str]]:
    """(generator, status) of each candidate in a ``kernelize_module`` or ``kernelize_file``
    result; [] for anything else."""
    if not isinstance(result, dict):
        return []
    many = result.get("modules")
    modules = many if isinstance(many, list) else [result.get("module")]
    return [
        (str(c.get("generator", "?")), str(c.get("status", "?")))
        for m in modules
        if isinstance(m, dict)
        for c in m.get("candidates") or []
        if isinstance(c, dict)
    ]


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.task_seconds = Histogram(
            "kernelize_task_seconds", "Task run time", ["task", "outcome"], buckets=TASK_BUCKETS
        )
        self.candidates = Counter(
            "kernelize_candidates",
            "Candidate kernels checked, by generator and verdict",
            ["generator", "status"],
        )


_metrics: _Metrics | None = None
_started: dict[str, tuple[float, contextvars.Token[dict[str, Any]]]] = {}


def instrument() -> None:
    """Log context and Prometheus metrics for every task this process runs (Celery signals, once)."""
    global _metrics
    from celery import signals

    if _metrics is not None:
        return
    metrics = _metrics = _Metrics()

    def prerun(task_id: str, task: Any, kwargs: dict[str, Any] | None = None, **_: Any) -> None:
        root = getattr(task.request, "root_id", None)
        context = task_context(task_id, task.name, root, kwargs or {}, os.environ.get(GPU_ENV))
        _started[task_id] = (time.monotonic(), log_context.set(context))

    def postrun(task_id: str, task: Any, retval: Any = None, state: str | None = None, **_: Any) -> None:
        started = _started.pop(task_id, None)
        if started is None:
            return
        outcome = (state or "unknown").lower()
        seconds = time.monotonic() - started[0]
        metrics.task_seconds.labels(task.name, outcome).observe(seconds)
        # One line per task run, in its context: which task ran where, for how long, how it ended.
        log.info("task finished", extra={"outcome": outcome, "seconds": round(seconds, 3)})
        for generator, status in candidate_outcomes(retval):
            metrics.candidates.labels(generator, status).inc()
        try:
            log_context.reset(started[1])
        except ValueError:  # set in another context (a thread pool): clear instead
            log_context.set({})

    # weak=False: the receivers are closures that nothing else keeps alive.
    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)

    @signals.setup_logging.connect(weak=False)  # type: ignore[untyped-decorator]
    def _logging(**_: Any) -> None:
        # Connecting this stops Celery from installing its own handlers: our JSON lines stay.
        configure_logging()
