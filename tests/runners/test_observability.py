"""JSON log lines carry the delivery id, task id and repository of the work in hand."""

from __future__ import annotations

import json
import logging

from runners.observability import JsonFormatter, candidate_outcomes, log_context, task_context


def test_task_context_from_the_root_task_and_the_arguments() -> None:
    plan = task_context(
        "delivery-abc", "kernelize.plan_pull_request", "delivery-abc", {"owner": "o", "repo": "r"}
    )
    assert plan == {
        "task_id": "delivery-abc",
        "task": "kernelize.plan_pull_request",
        "delivery_id": "abc",
        "repository": "o/r",
    }
    # A GPU task fanned out by that plan: the delivery comes from the root id; no repository in its message.
    gpu = task_context("f00", "kernelize.kernelize_module", "delivery-abc", {"request": {"bundle": "…"}})
    assert gpu == {"task_id": "f00", "task": "kernelize.kernelize_module", "delivery_id": "abc"}
    # Under the supervisor the worker is pinned to one GPU: its lines say which.
    pinned = task_context("f01", "kernelize.kernelize_module", None, {}, gpu="1")
    assert pinned == {"task_id": "f01", "task": "kernelize.kernelize_module", "gpu": "1"}
    publish = task_context(
        "p", "kernelize.publish_pull_request", "delivery-x", {"context": {"owner": "o", "repo": "r"}}
    )
    assert publish["repository"] == "o/r"
    install = task_context(
        "i", "kernelize.installation", None, {"payload": {"repository": {"full_name": "a/b"}}}
    )
    assert install == {"task_id": "i", "task": "kernelize.installation", "repository": "a/b"}


def test_json_lines_carry_the_context() -> None:
    record = logging.makeLogRecord(
        {"name": "kernelize.x", "levelname": "INFO", "msg": "hello %s", "args": ("you",)}
    )
    token = log_context.set({"delivery_id": "d-1", "task_id": "t-1", "repository": "o/r"})
    try:
        line = json.loads(JsonFormatter().format(record))
    finally:
        log_context.reset(token)
    assert line["msg"] == "hello you" and line["level"] == "INFO"
    assert (line["delivery_id"], line["task_id"], line["repository"]) == ("d-1", "t-1", "o/r")
    assert "delivery_id" not in json.loads(JsonFormatter().format(record))  # cleared after the task


def test_candidate_outcomes() -> None:
    result = {
        "module": {"candidates": [{"generator": "kernelllm", "status": "incorrect"}, {"generator": "files"}]}
    }
    assert candidate_outcomes(result) == [("kernelllm", "incorrect"), ("files", "?")]
    per_file = {
        "modules": [result["module"], {"candidates": [{"generator": "template", "status": "correct"}]}]
    }
    assert candidate_outcomes(per_file) == [
        ("kernelllm", "incorrect"),
        ("files", "?"),
        ("template", "correct"),
    ]
    assert candidate_outcomes(None) == [] and candidate_outcomes({"skipped": "x"}) == []


def test_each_task_run_ends_in_one_line_saying_where_it_ran(monkeypatch) -> None:
    from celery import signals

    from runners import observability

    class Task:  # what the signals carry of a task: its name and its request's root id
        name = "kernelize.kernelize_module"

        class request:
            root_id = "delivery-d"

    class Lines(logging.Handler):  # formatted when emitted: in the task's log context
        def __init__(self) -> None:
            super().__init__()
            self.setFormatter(JsonFormatter())
            self.lines: list[dict[str, object]] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(json.loads(self.format(record)))

    observability.instrument()
    monkeypatch.setenv(observability.GPU_ENV, "1")
    lines, logger = Lines(), logging.getLogger("kernelize.tasks")
    logger.addHandler(lines)
    monkeypatch.setattr(logger, "level", logging.INFO)
    try:
        signals.task_prerun.send(sender=Task, task_id="t-9", task=Task, kwargs={})
        signals.task_postrun.send(sender=Task, task_id="t-9", task=Task, retval={}, state="SUCCESS")
    finally:
        logger.removeHandler(lines)
    [line] = [x for x in lines.lines if x["msg"] == "task finished"]
    assert (line["task_id"], line["delivery_id"], line["gpu"], line["outcome"]) == (
        "t-9",
        "d",
        "1",
        "success",
    )
    assert isinstance(line["seconds"], float) and line["seconds"] >= 0
    assert log_context.get({}) == {}  # the context is cleared once the task ends
