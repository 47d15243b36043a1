"""The chosen candidate's last checks: memory accesses, and offsets above 2^31 elements.

On CPU the Triton interpreter checks every load and store (runners/bounds.py): the suite's store
one past the end is called correct without it. compute-sanitizer needs a GPU, so here its
plumbing is checked with stand-ins: a wrapper inside the sandbox whose exit status comes back,
the sanitizer's report read, and the verdict decided by the exit status alone. The family above
2^31 elements runs here with a small limit (the same planning, runners and comparison).
The real runs are in tests/runners/test_gpu.py.
"""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners import above_int32, chosen, memcheck, pipeline, sandbox
from runners.judge import Judge
from runners.results import CandidateResult, Status, Verdict

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "tests/candidates/adversarial/memory"
HONEST = ROOT / "tests/candidates/adversarial/add_relu/ok.py"
ENV = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}

REPORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at _add_relu_kernel+0x2f0 in /tmp/kernelize-chosen-1/candidate.py:17
=========     by thread (63,0,0) in block (131247,0,0)
=========     Address 0x7f3a5e000000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a5a000000 of size 67174412 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Invalid __global__ write of size 4 bytes
=========     at _add_relu_kernel+0x2f0 in /tmp/kernelize-chosen-1/candidate.py:17
=========
========= ERROR SUMMARY: 2 errors
"""


def test_the_interpreter_catches_a_store_one_past_the_end(cli, tmp_path):
    report, cands = tmp_path / "report.json", tmp_path / "cands"
    shutil.copytree(MEMORY, cands)
    shutil.copy(HONEST, cands / "ok.py")
    args = ["run", "tests/problems/add_relu.py", "--candidates", str(cands), "--timeout", "120"]
    rc, _, err = cli([*args, "--json", str(report), "--quiet"])
    assert rc == 0, err
    [module] = json.loads(report.read_text())["modules"]
    got = {c["id"]: c for c in module["candidates"]}
    bad = got["store_one_past.py"]
    assert bad["status"] == "incorrect", bad["reason"]
    assert bad["reason"].startswith(
        "memory check (Triton interpreter bounds check): out-of-bounds store of 4 bytes in kernel "
    ), bad["reason"]
    assert "0 bytes past the end of out_ptr (6400 bytes)" in bad["reason"]
    ok = got["ok.py"]
    assert ok["status"] == "correct", ok["reason"]
    assert module["best"] == "ok.py"
    assert ok["provenance"]["memory_check"] == chosen.CPU_MEMORY_CHECK
    assert chosen.CPU_MEMORY_CHECK in ok["notes"]
    assert ok["provenance"]["judge"]["skipped"][above_int32.FAMILY] == above_int32.NOT_ON_CPU


# ---------------------------------------------------------------------------
# compute-sanitizer's verdict


def test_the_first_error_is_read_with_its_details():
    assert memcheck.first_error(REPORT) == (
        "Invalid __global__ write of size 4 bytes "
        "at _add_relu_kernel+0x2f0 in /tmp/kernelize-chosen-1/candidate.py:17 "
        "by thread (63,0,0) in block (131247,0,0) Address 0x7f3a5e000000 is out of bounds "
        "and is 1 bytes after the nearest allocation at 0x7f3a5a000000 of size 67174412 bytes"
    )
    assert memcheck.first_error("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == ""


def _result(outcome: str, rc: int | None, payload: Any = None, log: str = "") -> sandbox.SandboxResult:
    return sandbox.SandboxResult(outcome, payload, "", rc, "", 1.0, ["bwrap"], blob=log.encode())


@pytest.mark.parametrize(
    ("res", "status", "text"),
    [
        (
            _result("ok", 86, {"calls": 3, "errors": []}, REPORT),
            "incorrect",
            "memory check (compute-sanitizer",
        ),
        # The exit status decides: errors on its log alone (the candidate can write there) are not
        # evidence, and a crash after an error is still that error.
        (_result("ok", 0, {"calls": 3, "errors": []}, REPORT), "passed", "memory check: compute-sanitizer"),
        (_result("crashed", 86, None, REPORT), "incorrect", "memory check (compute-sanitizer"),
        (_result("ok", 86, {"calls": 3}, ""), "incorrect", "memory check (compute-sanitizer memcheck): an "),
        (_result("timeout", -9), "skipped", "memory check: not finished under compute-sanitizer"),
        (_result("ok", 0, {"calls": 2, "errors": []}), "skipped", "memory check: not finished"),
        (_result("ok", 0, {"calls": 3, "errors": ["raised: boom"]}), "skipped", "memory check: not finished"),
    ],
)
def test_the_exit_status_decides_and_the_report_is_the_evidence(res, status, text):
    got = memcheck.verdict(res, 3)
    assert (got.status, got.text[: len(text)]) == (status, text), got
    if status == "incorrect" and res.blob:
        assert "Invalid __global__ write of size 4 bytes at _add_relu_kernel" in got.text


def test_without_compute_sanitizer_the_report_says_so(monkeypatch):
    monkeypatch.setenv(memcheck.SANITIZER_ENV, "/nonexistent/compute-sanitizer")
    got = memcheck.check({}, [], sandbox.Limits(), {}, None, 1)
    assert got == memcheck.Outcome("skipped", "memory check: not run (compute-sanitizer not installed)")


def test_a_wrapper_runs_inside_the_sandbox_and_its_exit_status_comes_back():
    wrapper = ["/bin/sh", "-c", '"$@"; exit 86', "wrapper"]
    res = sandbox.run("runners.sandbox:echo", {"device": "cpu"}, sandbox.Limits(60, 1024), wrapper=wrapper)
    assert res.outcome == "ok", res.reason
    assert res.payload is not None and res.payload["echo"] == {"device": "cpu"}
    assert res.returncode == 86
    assert "bwrap" in res.isolation


@pytest.fixture(scope="module")
def judge(tmp_path_factory) -> Any:
    spec = {"tensor": {"shape": [16, 100], "dtype": "float32", "dist": "normal"}}
    judge = Judge(
        device="cpu",
        file=str(ROOT / "tests/problems/add_relu.py"),
        root=None,
        class_name="Model",
        build={"source": "kernelbench", "init_args": [], "init_kwargs": {}, "inputs": [spec, spec]},
        variants=[],
        dtype=None,
        grad=False,
        seed=4321,
    )
    assert judge.run_reference(sandbox.Limits(120, 4096), ENV, None) == ""
    yield judge
    judge.close()


def _request(judge: Judge, candidate: Path) -> tuple[dict[str, Any], list[str]]:
    req = {
        "device": "cpu",
        "file": judge.file,
        "root": None,
        "class_name": "Model",
        "candidate": str(candidate),
        "build": judge.build,
        "dtype": None,
        "original_path": False,
    }
    return req, [*sandbox.problem_paths(judge.file, None), str(candidate)]


def _stand_in(folder: Path, report: str, exit_status: str) -> Path:
    """A compute-sanitizer stand-in: skips its options, runs the runner, writes ``report``."""
    (folder / "bin").mkdir()
    script = folder / "bin" / "compute-sanitizer"
    script.write_text(
        '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift 2; done\n"$@"; rc=$?\n'
        f"cat > {memcheck.LOG} <<'EOF'\n{report}EOF\nexit {exit_status}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _memory_check(judge: Judge, candidate: Path) -> tuple[memcheck.Outcome, int]:
    """The memory check of ``candidate`` on the judge's calls, and how many calls those are."""
    req, readable = _request(judge, candidate)
    calls = judge.request("candidate", memcheck.LOG)
    got = memcheck.check(
        {**req, "judge": calls.to_dict()},
        [*readable, str(judge.inputs_path)],
        sandbox.Limits(120, 4096),
        ENV,
        None,
        len(calls.calls),
    )
    return got, len(calls.calls)


@pytest.mark.parametrize(("exit_status", "status"), [("86", "incorrect"), ("$rc", "passed")])
def test_the_runner_runs_every_judge_call_under_the_wrapper(
    judge, tmp_path, monkeypatch, exit_status, status
):
    report = REPORT if exit_status == "86" else "========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setenv(memcheck.SANITIZER_ENV, str(_stand_in(tmp_path, report, exit_status)))
    candidate = tmp_path / "candidate.py"
    shutil.copy(HONEST, candidate)
    got, n = _memory_check(judge, candidate)
    assert got.status == status, got.text
    if status == "passed":
        assert (
            got.text
            == f"memory check: compute-sanitizer memcheck found no invalid access in the judge's {n} calls"
        )


# The candidate asks Triton's benchmarker to time a call, as the autotuner does at a new key: with
# the stand-in the call runs once (twice when timed); with Triton's own, dozens of times (or, on a
# machine without a GPU driver, not at all: it raises).
ASKS_FOR_A_TIMING = """\
import torch
import triton.testing


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        ran = []
        triton.testing.do_bench(lambda: ran.append(1), quantiles=(0.5, 0.2, 0.8))
        if len(ran) > 2:
            raise RuntimeError(f"the benchmark ran the call {len(ran)} times")
        return torch.relu(x + y)
"""


def test_the_memory_checks_runner_has_the_stand_in_before_the_candidate_loads(judge, tmp_path, monkeypatch):
    """Triton's autotuner runs each config once under the sanitizer (runners/tuning.py)."""
    report = "========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setenv(memcheck.SANITIZER_ENV, str(_stand_in(tmp_path, report, "$rc")))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(ASKS_FOR_A_TIMING)
    got, _ = _memory_check(judge, candidate)
    assert got.status == "passed", got.text


# ---------------------------------------------------------------------------
# The family above 2^31 elements


def test_the_leading_dimension_grows_until_one_input_passes_the_limit():
    x = {"tensor": {"shape": [16, 100], "dtype": "float32"}}
    w = {"tensor": {"shape": [100], "dtype": "float32"}}
    specs, lead, rows = above_int32.scaled([x, x, w, {"value": 3}])
    assert (lead, rows) == (16, 21474837) and rows * 100 > 2**31
    assert [s.get("tensor", {}).get("shape") for s in specs] == [[rows, 100], [rows, 100], [100], None]
    assert above_int32.tensor_bytes(specs, "bfloat16") == [rows * 100 * 2, rows * 100 * 2, 200]
    assert above_int32.scaled([{"value": 1}]) == "no tensor input with a leading dimension to scale"
    assert above_int32.scaled([{"tensor": {"shape": [2, 2**31], "dtype": "int8"}}]).startswith(
        "the normal inputs already have more than"
    )


def test_the_family_is_skipped_with_the_figures_when_it_does_not_fit():
    gib = above_int32.GIB
    needed = above_int32.need(16 * gib, 8 * gib, 8 * gib)
    assert needed == above_int32.Need(gpu=50 * gib, disk=33 * gib, host=18 * gib)
    assert above_int32.shortfall(needed, 140 * gib, 60 * gib, 100 * gib) == ""
    assert above_int32.shortfall(needed, 40 * gib, 60 * gib, 100 * gib) == (
        "needs about 50.0 GiB of GPU memory, 40.0 GiB free"
    )
    assert above_int32.shortfall(needed, 140 * gib, 20 * gib, 100 * gib).endswith("of disk, 20.0 GiB free")
    # Files in a folder held in memory take host memory as well as the folder's space.
    in_memory = above_int32.need(16 * gib, 8 * gib, 8 * gib, in_memory=True)
    assert in_memory == above_int32.Need(gpu=50 * gib, disk=33 * gib, host=51 * gib)
    assert above_int32.shortfall(in_memory, 140 * gib, 60 * gib, 40 * gib) == (
        "needs about 51.0 GiB of host memory, 40.0 GiB free"
    )


def test_a_folder_held_in_memory_is_told_from_one_on_disk(tmp_path):
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    kinds = {f[1]: f[2] for f in (line.split() for line in mounts) if len(f) > 2}
    if kinds.get("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm here")
    assert above_int32.in_memory(Path("/dev/shm"))
    with tempfile.TemporaryDirectory(dir="/dev/shm") as inside:
        assert above_int32.in_memory(Path(inside) / "not yet made")
    assert above_int32.in_memory(Path("/proc")) is False  # proc, not tmpfs


TRUNCATED = """\
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, y):  # right below 4096 elements, zeros past them (as int32 offsets wrap)
        out = torch.relu(x + y).reshape(-1)
        out[4096:] = 0
        return out.reshape(x.shape)
"""


def test_the_family_runs_the_original_once_and_compares_each_candidate(judge, tmp_path):
    family = above_int32.Family(judge, 120, 4096, ENV, None, limit=4096)
    try:
        honest, truncated = tmp_path / "ok.py", tmp_path / "truncated.py"
        shutil.copy(HONEST, honest)
        truncated.write_text(TRUNCATED)
        got = family.check(*_request(judge, honest), tf32=False)
        assert got == memcheck.Outcome("passed", above_int32.FAMILY), got
        assert family.shapes == [[41, 100], [41, 100]]
        bad = family.check(*_request(judge, truncated), tf32=False)
        assert bad.status == "incorrect"
        assert bad.text.startswith(
            "judge, above 2^31 elements, shape [[41, 100], [41, 100]]: output: max abs"
        )
        # Where its time went (the log's line): the inputs and the original once, beside the first
        # candidate; each candidate's run and comparison.
        assert set(family.spent) == {"inputs", "original", "candidate", "waiting for the original", "compare"}
        assert all(sec >= 0 for sec in family.spent.values())
        assert family.spent["original"] > 0 and family.spent["candidate"] > 0
    finally:
        family.close()
    assert not any((judge.dir / name).exists() for name in (above_int32.INPUTS, above_int32.REFERENCE))


def test_the_familys_runner_has_the_stand_in_before_the_candidate_loads(judge, tmp_path):
    """A config picked from one timed call each, not dozens (runners/tuning.py)."""
    family = above_int32.Family(judge, 120, 4096, ENV, None, limit=4096)
    try:
        candidate = tmp_path / "candidate.py"
        candidate.write_text(ASKS_FOR_A_TIMING)
        got = family.check(*_request(judge, candidate), tf32=False)
        assert got == memcheck.Outcome("passed", above_int32.FAMILY), got
    finally:
        family.close()


CANDIDATE_OOM = """\
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 22.01 GiB.")
"""
ORIGINAL_OOM = """\
import torch


class Model(torch.nn.Module):
    def forward(self, x, y):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 22.01 GiB.")
"""


def _short_of_memory(monkeypatch, tmp_path, candidate_runs: int, original_runs: int) -> dict[str, int]:
    """Real runners, but the first ``candidate_runs`` candidate runs and the first ``original_runs``
    original runs get a module that raises CUDA's out-of-memory error instead, as the two did beside
    each other on an H100 (llama_mlp: 22 GiB asked for, 15.9 free while the original ran). Returns
    the count of runs by target."""
    oom_candidate, oom_original = tmp_path / "oom_candidate.py", tmp_path / "oom_original.py"
    oom_candidate.write_text(CANDIDATE_OOM)
    oom_original.write_text(ORIGINAL_OOM)
    real, runs = sandbox.run, {"candidate": 0, "reference": 0}

    def run(target: str, req: dict[str, Any], *args: Any, **kwargs: Any) -> sandbox.SandboxResult:
        role = target.rsplit(":", 1)[1].removesuffix("_target")
        runs[role] += 1
        if role == "candidate" and runs[role] <= candidate_runs:
            req = {**req, "candidate": str(oom_candidate)}
            kwargs["readable"] = [*kwargs["readable"], str(oom_candidate)]
        if role == "reference" and runs[role] <= original_runs:
            req = {**req, "file": str(oom_original)}
            kwargs["readable"] = [*kwargs["readable"], str(oom_original)]
        return real(target, req, *args, **kwargs)

    monkeypatch.setattr(above_int32.sandbox, "run", run)
    return runs


@pytest.mark.parametrize(
    ("candidate_runs", "original_runs", "status", "runs"),
    [
        (1, 0, "passed", {"candidate": 2, "reference": 1}),  # short beside the original only
        (1, 1, "passed", {"candidate": 2, "reference": 2}),  # both short beside each other
        (0, 1, "passed", {"candidate": 1, "reference": 2}),  # as a candidate hogging memory would make it
        (2, 0, "incorrect", {"candidate": 2, "reference": 1}),  # short alone too: it fails the user
        (0, 2, "skipped", {"candidate": 1, "reference": 2}),  # the original's own limit
    ],
)
def test_out_of_memory_beside_each_other_runs_again_alone_and_alone_decides(
    judge, tmp_path, monkeypatch, candidate_runs, original_runs, status, runs
):
    seen = _short_of_memory(monkeypatch, tmp_path, candidate_runs, original_runs)
    family = above_int32.Family(judge, 120, 4096, ENV, None, limit=4096)
    try:
        honest = tmp_path / "ok.py"
        shutil.copy(HONEST, honest)
        got = family.check(*_request(judge, honest), tf32=False)
        assert got.status == status, got
        assert seen == runs
        if status == "incorrect":
            assert "out of GPU memory alone, where the original fits" in got.text, got.text
        if status == "skipped":
            assert got.text.startswith("the original raised (raised: torch.OutOfMemoryError"), got.text
            return
        # A later candidate runs alone from the start: its out-of-memory error decides at once.
        later = tmp_path / "later.py"
        later.write_text(CANDIDATE_OOM)
        again = family.check(*_request(judge, later), tf32=False)
        assert again.status == "incorrect" and "alone, where the original fits" in again.text, again
        assert seen["candidate"] == runs["candidate"] + 1
    finally:
        family.close()
    assert not any((judge.dir / name).exists() for name in (above_int32.INPUTS, above_int32.CANDIDATE))


def test_only_the_gpus_out_of_memory_error_buys_a_second_run():
    assert above_int32.out_of_memory("raised: torch.OutOfMemoryError: CUDA out of memory.")
    assert above_int32.out_of_memory("raised: RuntimeError: CUDA out of memory.")
    assert not above_int32.out_of_memory("raised: RuntimeError: shape mismatch")
    assert not above_int32.out_of_memory("")


@pytest.mark.parametrize(("exit_status", "memory_status"), [("$rc", "passed"), ("86", "incorrect")])
def test_the_last_checks_run_side_by_side_and_a_failed_memory_check_decides(
    judge, tmp_path, monkeypatch, exit_status, memory_status
):
    """The memory check and the family run at once; the family's outcome is kept only when the
    memory check passes."""
    report = REPORT if exit_status == "86" else "========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setenv(memcheck.SANITIZER_ENV, str(_stand_in(tmp_path, report, exit_status)))
    problem = SimpleNamespace(file=judge.file, root=None, class_name="Model", build=judge.build)
    cand = SimpleNamespace(source=HONEST.read_text(), generated="")
    settings = pipeline.EngineSettings(device="cpu", timeout_s=120, memory_mb=4096, original_path=False)
    family = above_int32.Family(judge, 120, 4096, ENV, None, limit=4096)
    try:
        memory, offsets, seconds = chosen._run(problem, cand, settings, ENV, judge, family)
    finally:
        family.close()
    assert memory.status == memory_status, memory.text
    assert set(seconds) == {"memory", "above 2^31"}
    if memory_status == "passed":
        assert offsets == memcheck.Outcome("passed", above_int32.FAMILY)
    else:
        assert offsets is None  # its run finished, and was dropped
        assert family.reference is not None  # the original's run stands for the next choice
    assert not any((judge.dir / name).exists() for name in (above_int32.INPUTS, above_int32.CANDIDATE))


# ---------------------------------------------------------------------------
# What lands in the report


def _chosen(families: list[str]) -> CandidateResult:
    return CandidateResult(
        "ok.py",
        "files",
        Status.CORRECT,
        median_ms=0.1,
        speedup_vs_eager=1.5,
        verdict=Verdict.FASTER,
        provenance={"judge": {"families": families, "skipped": {}}},
    )


def test_a_failed_check_becomes_the_status_and_the_rest_lands_in_the_report():
    failed = _chosen(["normal"])
    chosen._record(failed, memcheck.Outcome("incorrect", "memory check (x): y"), None)
    assert (failed.status, failed.reason, failed.verdict) == (
        Status.INCORRECT,
        "memory check (x): y",
        Verdict.NOT_MEASURED,
    )
    assert failed.median_ms is None and failed.speedup_vs_eager is None
    passed = _chosen(["normal"])
    chosen._record(passed, memcheck.Outcome("passed", "memory check: fine"), memcheck.Outcome("passed", "x"))
    assert passed.status is Status.CORRECT and passed.notes == ["memory check: fine"]
    assert passed.provenance["judge"]["families"] == ["normal", above_int32.FAMILY]
    skipped = _chosen(["normal"])
    chosen._record(
        skipped, memcheck.Outcome("skipped", memcheck.NOT_INSTALLED), memcheck.Outcome("skipped", "why")
    )
    assert skipped.status is Status.CORRECT and skipped.notes == [memcheck.NOT_INSTALLED]
    assert skipped.provenance["memory_check"] == memcheck.NOT_INSTALLED
    assert skipped.provenance["judge"]["skipped"] == {above_int32.FAMILY: "why"}


CANCELLING = """\
import torch


class Model(torch.nn.Module):
    def forward(self, x):  # float32 rounds x + 1e4 to 1e-3: the result is off by up to ~5e-4
        return (x + 1e4) - 1e4


def get_inputs():
    return [torch.randn(16, 100)]


def get_init_inputs():
    return []
"""
EXACT = """\
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):  # exact: off from the original in float32 by the original's own error
        return x.clone()
"""
EXACT_BUT_ONE = """\
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):  # exact but for one element, as a wrapped offset writes garbage
        out = x.clone().reshape(-1)
        out[4099] += 0.05
        return out.reshape(x.shape)
"""


def test_above_2_31_the_original_is_allowed_its_own_error_and_nothing_more(tmp_path):
    """The family's reference is the original in float32 (no float64 copy at that size). A candidate
    more exact than the original differs from it by the original's rounding, measured on the normal
    family against float64: allowed. Without that measure it is called incorrect; one garbage element
    still is."""
    problem = tmp_path / "cancelling.py"
    problem.write_text(CANCELLING)
    spec = {"tensor": {"shape": [16, 100], "dtype": "float32", "dist": "normal"}}
    judge = Judge(
        device="cpu",
        file=str(problem),
        root=None,
        class_name="Model",
        build={"source": "kernelbench", "init_args": [], "init_kwargs": {}, "inputs": [spec]},
        variants=[],
        dtype=None,
        grad=False,
        seed=99,
    )
    exact, one_off = tmp_path / "exact.py", tmp_path / "one_off.py"
    exact.write_text(EXACT)
    one_off.write_text(EXACT_BUT_ONE)
    try:
        assert judge.run_reference(sandbox.Limits(120, 4096), ENV, None) == ""
        (own,) = judge.own_error()
        assert 1e-4 < own[0] < 1e-3  # the original's largest error over its RMS, against float64
        family = above_int32.Family(judge, 120, 4096, ENV, None, limit=4096)
        try:
            passed = family.check(*_request(judge, exact), tf32=False)
            assert passed == memcheck.Outcome("passed", above_int32.FAMILY), passed
            garbage = family.check(*_request(judge, one_off), tf32=False)
            assert garbage.status == "incorrect" and "1 of 4100 elements off" in garbage.text, garbage
            judge._own = [(0.0, 0.0)]  # as before: no allowance for the original's own error
            strict = family.check(*_request(judge, exact), tf32=False)
            assert strict.status == "incorrect" and "elements off" in strict.text, strict
        finally:
            family.close()
    finally:
        judge.close()
