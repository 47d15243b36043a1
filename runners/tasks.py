"""The GPU-side Celery task: a thin wrapper around ``runners.pipeline.kernelize``.

It receives everything in its message (the source bundle, the target, the
engine settings) and returns a plain report. It never reaches GitHub: no
token, no clone, no database. Generator resources that belong to the machine
(model weights, a candidates folder, an inference server) come from its own
environment: ``KERNELIZE_MODEL``, ``KERNELIZE_CANDIDATES_DIR``,
``KERNELIZE_API_BASE``, ``KERNELIZE_API_MODE``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from runners import pipeline, sandbox
from runners.bundle import BundleError, unpack
from runners.discover import DiscoveryError
from runners.generators import GeneratorError, default_portfolio, make_generator
from runners.generators.base import Generator
from runners.inputs import ConfigError, ModuleEntry, parse_module_entry
from runners.results import CandidateResult, ModuleReport, Status, to_dict

KERNELIZE_MODULE = "kernelize.kernelize_module"
REFUSED = "this GPU worker runs no code from pull requests without its sandbox (docs/self-hosting.md)"


def worker_options(device: str) -> dict[str, Any]:
    env = os.environ
    return {
        "device": device,
        "model": env.get("KERNELIZE_MODEL"),
        "candidates": env.get("KERNELIZE_CANDIDATES_DIR"),
        "api_base": env.get("KERNELIZE_API_BASE"),
        "api_mode": env.get("KERNELIZE_API_MODE"),
    }


def _device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def _result(device: str, report: ModuleReport) -> dict[str, Any]:
    return {"device": to_dict(pipeline.describe_device(device)), "module": to_dict(report)}


def _skipped(device: str, target: str, rel_path: str, class_name: str, reason: str) -> dict[str, Any]:
    report = ModuleReport(target, rel_path, class_name, status="skipped", reason=reason)
    return _result(device, report)


def kernelize_module(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: bundle, rel_path, class_name, generators, samples, min_speedup, timeout_s,
    device ("auto"), modules (the repo config's ``modules:`` section).

    Returns ``{"device": DeviceInfo dict, "module": ModuleReport dict}``."""
    rel_path, class_name = request["rel_path"], request["class_name"]
    target = f"{rel_path}::{class_name}"
    device = _device(request.get("device", "auto"))
    refused = sandbox.refusal(device)
    if refused:  # the pull request's code runs only in a sandbox: none here, so none of it runs
        return _skipped(device, target, rel_path, class_name, f"{refused}; {REFUSED}")
    settings = pipeline.Settings(
        device=device,
        timeout_s=float(request.get("timeout_s", 300)),
        min_speedup=float(request.get("min_speedup", 1.05)),
        samples=int(request.get("samples", 4)),
        dtype=(request.get("dtypes") or [None])[0],
        tolerance=request.get("tolerance"),
    )
    with tempfile.TemporaryDirectory(prefix="kernelize-bundle-") as tmp:
        root = Path(tmp)
        try:
            unpack(request["bundle"], root)
            entries: dict[str, ModuleEntry] = {
                key: parse_module_entry(raw, f".github/kernelize.yml: modules.{key}")
                for key, raw in (request.get("modules") or {}).items()
            }
            problems, _ = pipeline.problems_for(str(root / rel_path), str(root), class_name, entries)
        except (BundleError, ConfigError, DiscoveryError, OSError) as exc:
            return _skipped(device, target, rel_path, class_name, str(exc))
        if not problems:
            why = f"no nn.Module class {class_name} in {rel_path}"
            return _skipped(device, target, rel_path, class_name, why)
        options = worker_options(device)
        names = request.get("generators")
        unavailable: dict[str, str] = {}
        if not names:  # the repository did not choose: everything this worker can run
            names, unavailable = default_portfolio(device, options)
        generators: list[Generator] = []
        errors: list[CandidateResult] = []
        for name in names:
            try:
                generators.append(make_generator(name, options))
            except GeneratorError as exc:
                errors.append(CandidateResult(name, name, Status.ERROR, f"generator: {exc}"))
        report = pipeline.kernelize(problems[0], generators, settings)
        report.candidates[:0] = errors
        report.unavailable = unavailable
        return _result(device, report)


def register(app: Any) -> Any:
    """Register the task on a Celery app (late acks: a worker that dies mid-task gets it redelivered)."""
    return app.task(name=KERNELIZE_MODULE, shared=False, acks_late=True, reject_on_worker_lost=True)(
        kernelize_module
    )
