"""The queue's messages (runners/messages.py): round trips through JSON, and a receiver that refuses
what it cannot read (another version, a field missing or unknown, a value of the wrong type) with
one line saying why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runners import pipeline, tasks
from runners.messages import (
    GPU_REQUEST_VERSION,
    MODULE_RESULT_VERSION,
    PUBLISH_CONTEXT_VERSION,
    GpuRequest,
    ModuleResult,
    PublishContext,
)
from runners.results import (
    DEFAULT_MIN_SPEEDUP,
    Baselines,
    CandidateResult,
    DeviceInfo,
    MessageError,
    ModuleReport,
    RunReport,
    Status,
    TensorInfo,
    Timing,
    Verdict,
    module_from_dict,
)

ROOT = Path(__file__).resolve().parents[2]


def over_json(d: dict[str, Any]) -> dict[str, Any]:
    """What the other side gets: the message through Celery's JSON."""
    out: dict[str, Any] = json.loads(json.dumps(d))
    return out


def request() -> GpuRequest:
    return GpuRequest(
        bundle="H4sIAAAA",
        rel_path="models/layers.py",
        class_names=["RMSNorm", "GatedMLP"],
        generators=["files"],
        samples=2,
        min_speedup=1.25,
        timeout_s=60.0,
        dtypes=["float16"],
        tolerance={"float16": [1e-3, 1e-3, 1e-4]},
        device="cpu",
        modules={"models/layers.py::RMSNorm": {"init": {"dim": 64}}},
        notify={"context": {"job_id": 3, "owner": "octo"}},
    )


def result() -> ModuleResult:
    winner = CandidateResult(
        "t1",
        "template",
        Status.CORRECT,
        source_sha256="ab" * 32,
        max_abs_error=1e-6,
        median_ms=0.05,
        speedup_vs_eager=1.5,
        speedup_vs_compile=1.1,
        verdict=Verdict.FASTER,
        notes=["TF32"],
        shapes_checked=[[[2, 64]]],
        timings={"eager": Timing(0.075, 0.07, 0.08, 30), "candidate": Timing(0.05, 0.049, 0.051, 30)},
        provenance={"model": "m", "seed": 7},
        wall_s=1.5,
    )
    loser = CandidateResult("t2", "template", Status.INCORRECT, "max abs err 0.5")
    report = ModuleReport(
        target="models/layers.py::RMSNorm",
        file="models/layers.py",
        class_name="RMSNorm",
        build_source="config",
        init_kwargs={"dim": 64},
        inputs=[TensorInfo([2, 64], "float32")],
        baselines=Baselines(eager_ms=0.075, compile_ms=0.055),
        candidates=[winner, loser],
        best="t1",
        best_source="class RMSNorm: ...",
        unavailable={"kernelllm": "no weights"},
    )
    skipped = ModuleReport("models/layers.py::GatedMLP", "models/layers.py", "GatedMLP", "skipped", "no way")
    device = DeviceInfo("cuda", "Test GPU", "2.5", "3.2", driver="550", cuda="12.4")
    return ModuleResult(device=device, modules=[report, skipped])


def context() -> PublishContext:
    return PublishContext(
        installation_id=4242,
        owner="octo",
        repo="models",
        number=5,
        head_sha="a" * 40,
        check_run_id=11,
        key="octo/models#5@aaaa:123",
        job_id=3,
        targets=[{"path": "models/layers.py", "class_name": "RMSNorm", "start": 3, "end": 9}],
        patches={"models/layers.py": "@@ -0,0 +1,9 @@"},
        mode="suggestions",
        when_nothing_found="silent",
        max_modules=10,
        over=["models/layers.py::Big"],
        comment_id=99,
        min_speedup=1.2,
        min_speedup_vs_compile=1.0,
        private=False,
    )


SAMPLES: dict[Any, Any] = {GpuRequest: request, ModuleResult: result, PublishContext: context}


@pytest.mark.parametrize("message", [request(), result(), context()], ids=lambda m: type(m).__name__)
def test_each_message_comes_back_whole_through_json(message: Any) -> None:
    sent = message.to_dict()
    assert sent["version"] == 1
    assert type(message).from_dict(over_json(sent)) == message


def test_the_defaults_have_one_home() -> None:
    """A request that leaves them out runs the engine's defaults, which the engine's settings share."""
    least = GpuRequest.from_dict({"version": 1, "bundle": "b", "rel_path": "m.py", "class_names": ["M"]})
    settings = pipeline.EngineSettings()
    assert (least.min_speedup, least.samples, least.timeout_s) == (
        settings.min_speedup,
        settings.samples,
        settings.timeout_s,
    )
    assert least.min_speedup == DEFAULT_MIN_SPEEDUP == RunReport(DeviceInfo("cpu", "", "", "")).min_speedup
    assert (least.generators, least.dtypes, least.tolerance, least.device, least.notify) == (
        [],
        [],
        None,
        "auto",
        None,
    )


@pytest.mark.parametrize(
    ("cls", "version", "what", "reader"),
    [
        (GpuRequest, GPU_REQUEST_VERSION, "the GPU request", "GPU worker"),
        (ModuleResult, MODULE_RESULT_VERSION, "the module result", "github worker"),
        (PublishContext, PUBLISH_CONTEXT_VERSION, "the publish context", "github worker"),
    ],
)
def test_another_version_is_refused_with_its_reason(cls: Any, version: int, what: str, reader: str) -> None:
    sent = SAMPLES[cls]().to_dict()
    reads = f"this {reader} reads version {version} only (another Kernelize release)"
    with pytest.raises(MessageError) as newer:
        cls.from_dict({**sent, "version": version + 1})
    assert str(newer.value) == f"{what} is version {version + 1}; {reads}"
    with pytest.raises(MessageError) as older:
        cls.from_dict({k: v for k, v in sent.items() if k != "version"})
    assert str(older.value) == f"{what} has no version; {reads}"
    with pytest.raises(MessageError) as odd:
        cls.from_dict({**sent, "version": "1"})
    assert str(odd.value) == f"{what} is version '1'; {reads}"
    # What a module's row on the check run holds (120 characters) has room for the whole reason.
    assert len(f"MessageError: {older.value}") <= 120


@pytest.mark.parametrize(
    ("cls", "change", "reason"),
    [
        (GpuRequest, lambda d: d.pop("rel_path"), "the GPU request lacks the required field rel_path"),
        (GpuRequest, lambda d: d.update(samples="4"), "the GPU request: samples is a string, not an integer"),
        (
            GpuRequest,
            lambda d: d.update(samples=True),
            "the GPU request: samples is true or false, not an integer",
        ),
        (
            GpuRequest,
            lambda d: d.update(class_names="M"),
            "the GPU request: class_names is a string, not a list",
        ),
        (
            GpuRequest,
            lambda d: d.update(tolerance={"float16": [1e-3, "tight"]}),
            "the GPU request: tolerance['float16'][1] is a string, not a number",
        ),
        # A field from a newer release would be a setting this worker drops: refused, not ignored.
        (
            GpuRequest,
            lambda d: d.update(max_ms=3.0),
            "the GPU request has a field this release does not know: max_ms",
        ),
        (
            ModuleResult,
            lambda d: d["modules"][0].pop("target"),
            "the module result lacks the required field modules[0].target",
        ),
        (
            ModuleResult,
            lambda d: d["modules"][0]["candidates"][1].update(verdict="quick"),
            "the module result: modules[0].candidates[1].verdict is 'quick', not one of faster, no faster, "
            "not measured",
        ),
        (
            ModuleResult,
            lambda d: d["modules"][0]["candidates"][0]["timings"]["eager"].update(runs=None),
            "the module result: modules[0].candidates[0].timings['eager'].runs is null, not an integer",
        ),
        (
            ModuleResult,
            lambda d: d["modules"][1].update(energy_j=3.0),
            "the module result: modules[1] has a field this release does not know: energy_j",
        ),
        (ModuleResult, lambda d: d.update(device=None), "the module result: device is null, not an object"),
        (
            PublishContext,
            lambda d: d.update(job_id="3"),
            "the publish context: job_id is a string, not an integer",
        ),
    ],
)
def test_a_message_that_does_not_fit_is_refused(cls: Any, change: Any, reason: str) -> None:
    sent = over_json(SAMPLES[cls]().to_dict())
    change(sent)
    with pytest.raises(MessageError) as refused:
        cls.from_dict(sent)
    assert str(refused.value) == reason


def test_a_report_is_read_as_strictly_as_a_message() -> None:
    """``module_from_dict`` (reports read back from a file) refuses a field it does not know with
    the same kind of reason, where it used to fail with Python's ``unexpected keyword``."""
    report = over_json(result().to_dict())["modules"][0]
    assert module_from_dict(report) == result().modules[0]
    with pytest.raises(MessageError, match=r"^a module report has a field this release does not know: x$"):
        module_from_dict({**report, "x": 1})


def test_the_gpu_task_refuses_a_request_it_cannot_read_before_running_anything() -> None:
    sent = request().to_dict()
    with pytest.raises(MessageError) as refused:
        tasks.kernelize_file({**sent, "version": GPU_REQUEST_VERSION + 1})
    assert str(refused.value).startswith(f"the GPU request is version {GPU_REQUEST_VERSION + 1}; this GPU")
    with pytest.raises(MessageError, match=r"^the GPU request names 2 classes, not the one it takes$"):
        tasks.kernelize_module(sent)


def test_the_messages_import_without_the_bot_or_torch() -> None:
    """The github side reads them without the engine; the GPU side without the bot."""
    code = (
        "import sys\nimport runners.messages\nassert 'torch' not in sys.modules\nimport runners.tasks\n"
        "assert not [m for m in sys.modules if m == 'bot' or m.startswith('bot.')]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
