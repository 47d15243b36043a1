"""The GPU-side Celery tasks: thin wrappers around ``runners.together.kernelize_file``.

``kernelize_file`` takes the changed classes of one file (the bot sends one per
file: the file's suggestions are checked applied together); ``kernelize_module``
is the same for one class. Each receives everything in its message (a
``GpuRequest``, ``runners/messages.py``: the source bundle, the targets, the engine
settings), refuses one it cannot read with its one-line reason, and returns a
``ModuleResult``. They never
reach GitHub: no token, no clone, no database. Generator resources that belong to the machine
(model weights, a candidates folder, an inference server) come from its own
environment: ``KERNELIZE_MODEL``, ``KERNELIZE_CANDIDATES_DIR``,
``KERNELIZE_API_BASE``, ``KERNELIZE_API_MODE``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kombu.exceptions import KombuError

from runners import pipeline, sandbox, together
from runners.bundle import BundleError, unpack
from runners.celery_app import GITHUB_QUEUE, PROGRESS_TASK
from runners.discover import DiscoveryError
from runners.generators import GeneratorError, default_portfolio, make_generator
from runners.generators.base import Generator
from runners.inputs import ConfigError, ModuleEntry, parse_module_entry
from runners.messages import GpuRequest, ModuleResult
from runners.results import CandidateResult, MessageError, ModuleReport, Status

KERNELIZE_MODULE = "kernelize.kernelize_module"
KERNELIZE_FILE = "kernelize.kernelize_file"
REFUSED = "this GPU worker runs no code from pull requests without its sandbox (docs/self-hosting.md)"
log = logging.getLogger(__name__)


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


def _skipped(target: str, rel_path: str, class_name: str, reason: str) -> ModuleReport:
    return ModuleReport(target, rel_path, class_name, status="skipped", reason=reason)


def kernelize_file(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: a :class:`~runners.messages.GpuRequest` as it crossed the queue, read strictly (one
    this worker cannot read raises :class:`~runners.results.MessageError`: the task fails with its
    one-line reason, which the pull request's check run shows as the module's error).

    One task per file, so the file's suggestions are checked applied together while every class's
    judge still holds its answers (``runners/together.py``). Returns a
    :class:`~runners.messages.ModuleResult` (one report per class name, in that order), as a dict."""
    return run_request(GpuRequest.from_dict(request)).to_dict()


def run_request(request: GpuRequest) -> ModuleResult:
    """What :func:`kernelize_file` does once its request is read."""
    device = _device(request.device)
    reports = _kernelize_file(request, device)
    return ModuleResult(device=pipeline.describe_device(device), modules=reports)


def _kernelize_file(request: GpuRequest, device: str) -> list[ModuleReport]:
    rel_path, names = request.rel_path, list(request.class_names)
    targets = {name: f"{rel_path}::{name}" for name in names}
    refused = sandbox.refusal(device)
    if refused:  # the pull request's code runs only in a sandbox: none here, so none of it runs
        return [_skipped(targets[n], rel_path, n, f"{refused}; {REFUSED}") for n in names]
    settings = pipeline.EngineSettings(
        device=device,
        timeout_s=request.timeout_s,
        min_speedup=request.min_speedup,
        samples=request.samples,
        dtype=request.dtypes[0] if request.dtypes else None,
        tolerance=request.tolerance,
    )
    with tempfile.TemporaryDirectory(prefix="kernelize-bundle-") as tmp:
        root = Path(tmp)
        try:
            unpack(request.bundle, root)
            entries = module_entries(request.modules)
        except (BundleError, ConfigError, OSError) as exc:
            return [_skipped(targets[n], rel_path, n, str(exc)) for n in names]
        options = worker_options(device)
        wanted: Sequence[str] = request.generators
        unavailable: dict[str, str] = {}
        if not wanted:  # the repository did not choose: everything this worker can run
            wanted, unavailable = default_portfolio(device, options)
        generators: list[Generator] = []
        errors: list[CandidateResult] = []
        for name in wanted:
            try:
                generators.append(make_generator(name, options))
            except GeneratorError as exc:
                errors.append(CandidateResult(name, name, Status.ERROR, f"generator: {exc}"))
        return kernelize_classes(
            root, rel_path, names, entries, generators, settings, errors=errors, unavailable=unavailable
        )


def module_entries(raw: dict[str, Any]) -> dict[str, ModuleEntry]:
    """The repository config's ``modules:`` section, parsed (ConfigError names the bad entry)."""
    return {
        key: parse_module_entry(value, f".github/kernelize.yml: modules.{key}") for key, value in raw.items()
    }


def kernelize_classes(
    root: Path,
    rel_path: str,
    names: list[str],
    entries: dict[str, ModuleEntry],
    generators: list[Generator],
    settings: pipeline.EngineSettings,
    *,
    errors: Sequence[CandidateResult] = (),
    unavailable: dict[str, str] | None = None,
    progress: pipeline.Progress = lambda _: None,
) -> list[ModuleReport]:
    """The reports of the classes ``names`` of ``root/rel_path`` (one per name, in that order), the
    file's suggestions checked applied together. ``errors`` (generators that could not start) lead
    each report's candidates; ``unavailable`` is each report's list of generators not run.

    The GPU task runs it on the unpacked bundle; ``kernelize review`` (bot/local_review.py) on the
    head commit's Python, so a local review runs what the App runs."""
    targets = {name: f"{rel_path}::{name}" for name in names}
    try:
        problems, _ = pipeline.problems_for(str(root / rel_path), str(root), None, entries)
    except (DiscoveryError, OSError) as exc:
        return [_skipped(targets[n], rel_path, n, str(exc)) for n in names]
    by_name = {p.class_name: p for p in problems}
    chosen = [by_name[n] for n in dict.fromkeys(names) if n in by_name]
    done = {r.class_name: r for r in together.kernelize_file(chosen, generators, settings, progress)}
    reports = []
    for n in names:
        report = done.get(n) or _skipped(targets[n], rel_path, n, f"no nn.Module class {n} in {rel_path}")
        if n in done:
            report.candidates[:0] = errors
            report.unavailable = dict(unavailable or {})
        reports.append(report)
    return reports


def kernelize_module(request: dict[str, Any]) -> dict[str, Any]:
    """:func:`kernelize_file` for a request that names one class."""
    read = GpuRequest.from_dict(request)
    if len(read.class_names) != 1:
        raise MessageError(f"the GPU request names {len(read.class_names)} classes, not the one it takes")
    return run_request(read).to_dict()


def announce_start(app: Any, request: GpuRequest) -> None:
    """Tell the github side that this task's classes are running: ``request.notify`` (the bot's
    keyword arguments for ``kernelize.progress``, opaque here) goes back on the github queue with the
    targets. Only a message to the broker: the GitHub call is made there, by a worker holding the
    credentials. A notice that cannot be sent is logged and the work goes on."""
    if not request.notify:
        return
    running = [f"{request.rel_path}::{name}" for name in request.class_names]
    try:
        kwargs = {**request.notify, "running": running}
        app.signature(PROGRESS_TASK, kwargs=kwargs, queue=GITHUB_QUEUE).apply_async()
    except KombuError as exc:
        log.warning("could not announce %s: %s", ", ".join(running), exc)


def _announced(task: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def run(self: Any, request: dict[str, Any]) -> dict[str, Any]:
        announce_start(self.app, GpuRequest.from_dict(request))  # a request it cannot read: no notice
        return task(request)

    run.__name__, run.__doc__ = task.__name__, task.__doc__
    return run


def register(app: Any) -> None:
    """Register the tasks on a Celery app (late acks: a worker that dies mid-task gets it redelivered).
    Each announces its start (:func:`announce_start`); its end reaches the github side through the
    link the bot puts on the task and through the chord."""
    for name, task in ((KERNELIZE_FILE, kernelize_file), (KERNELIZE_MODULE, kernelize_module)):
        app.task(name=name, shared=False, bind=True, acks_late=True, reject_on_worker_lost=True)(
            _announced(task)
        )
