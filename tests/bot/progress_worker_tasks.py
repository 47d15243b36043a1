"""A Celery app for the real workers of tests/bot/test_progress_flow.py, one side each
(``KERNELIZE_TEST_ROLE``): ``celery -A progress_worker_tasks worker -Q github|gpu``.

``github``: bot/tasks.py's tasks, reaching the fake GitHub the test serves (its address and the
App's key come in the environment, with the database). ``gpu``: runners/tasks.py's tasks as
registered for production (each announces its start), with the engine replaced by canned reports
so the test decides when each file finishes: a file's task waits for the Redis key
``kernelize-test:release:<path>``, and raises when ``kernelize-test:explode:<path>`` is set. While
``kernelize-test:gpu-request-version`` is set, the GPU side reads that version of the GPU request
only (a worker of another release). The GPU side gets the broker only: no GitHub key, no database.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import redis
from celery.signals import task_prerun

from runners.celery_app import make_celery
from runners.messages import GPU_REQUEST_VERSION, GpuRequest, ModuleResult
from runners.results import CandidateResult, DeviceInfo, ModuleReport, Status, Verdict

BROKER = os.environ["KERNELIZE_TEST_BROKER"]
RELEASE, EXPLODE = "kernelize-test:release:", "kernelize-test:explode:"
READS = "kernelize-test:gpu-request-version"
DEVICE = DeviceInfo(kind="cuda", name="Test GPU", torch="0.0", triton="0.0", driver="0", cuda="0")

app = make_celery(BROKER, BROKER)
_redis = redis.Redis.from_url(BROKER)


def _report(path: str, name: str) -> ModuleReport:
    """``A``: a verified winner (1.52x eager, 1.10x torch.compile); any other class: two incorrect."""
    report = ModuleReport(target=f"{path}::{name}", file=path, class_name=name)
    if name != "A":
        report.candidates = [
            CandidateResult(f"t{i}", "template", Status.INCORRECT, "max abs err 0.5") for i in (1, 2)
        ]
        return report
    code = f"class {name}(nn.Module):\n    def forward(self, x):\n        return x\n"
    report.candidates = [
        CandidateResult(
            "t1",
            "template",
            Status.CORRECT,
            source_sha256=hashlib.sha256(code.encode()).hexdigest(),
            median_ms=0.05,
            speedup_vs_eager=1.52,
            speedup_vs_compile=1.10,
            verdict=Verdict.FASTER,
        )
    ]
    report.best, report.best_source = "t1", code
    return report


def kernelize_file(request: dict[str, Any]) -> dict[str, Any]:
    read = GpuRequest.from_dict(request)
    path = read.rel_path
    deadline = time.monotonic() + 120
    while not _redis.exists(RELEASE + path):
        if _redis.exists(EXPLODE + path):
            raise RuntimeError(f"{path} exploded")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} was never released")
        time.sleep(0.05)
    return ModuleResult(DEVICE, [_report(path, name) for name in read.class_names]).to_dict()


if os.environ["KERNELIZE_TEST_ROLE"] == "github":
    from bot import tasks

    tasks.register(app)
else:
    from runners import tasks as runner_tasks

    runner_tasks.kernelize_file = kernelize_file  # what register() wraps and registers
    runner_tasks.register(app)

    @task_prerun.connect  # type: ignore[untyped-decorator]
    def _reads(**_: Any) -> None:
        GpuRequest.VERSION = int(_redis.get(READS) or GPU_REQUEST_VERSION)
