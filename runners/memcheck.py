"""The candidate about to be suggested, once more on the judge's inputs under compute-sanitizer (CUDA).

A kernel whose tail store is unmasked (or off by one) writes past its output, into the caching
allocator's slack or a neighbouring tensor; every output still compares equal, so every other
check calls it correct. Before a candidate is suggested (``runners/chosen.py``), a runner of its
own runs the judge's calls again in the same bubblewrap sandbox, with the runner's Python started
by ``compute-sanitizer --tool memcheck`` (``sandbox.run(wrapper=...)``) and
``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: every tensor is its own allocation, so a store past its end
falls outside every allocation, and ``--padding`` puts unallocated bytes after each one, so a
store that would reach the next allocation is seen too.

The verdict is the sanitizer's, from outside the candidate's process: its exit status
(``--error-exitcode``) and its first error, read from its log. The runner's own reply only says
whether every call ran.

- an invalid access: ``incorrect``, with the sanitizer's first error as the evidence;
- compute-sanitizer not installed (``$KERNELIZE_COMPUTE_SANITIZER``, ``compute-sanitizer`` on
  PATH, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``): suggested, with the note
  ``memory check: not run (compute-sanitizer not installed)``;
- a run that does not finish (time, memory, the sanitizer failing): suggested, the note says so.

On CPU the Triton interpreter checks every load and store instead (``runners/bounds.py``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from runners import sandbox

SANITIZER_ENV = "KERNELIZE_COMPUTE_SANITIZER"
TOOL = "compute-sanitizer memcheck"
NOT_INSTALLED = "memory check: not run (compute-sanitizer not installed)"
EXIT_CODE = 86  # the sanitizer's exit status when it found an error: no runner exits with it
LOG = "memcheck.log"  # in the sandbox's working directory, collected once it has exited
# Unallocated bytes after every allocation: a store up to 64 KiB past its tensor (a whole block
# of 16384 float32 lanes) lands in no allocation, not in the next tensor.
PADDING = 65536
TIME_FACTOR = 3  # memcheck slows every kernel and every allocation (each a cudaMalloc here)
SANITIZER_MB = 4096  # the sanitizer's own host memory, above the runner's limit


@dataclass(frozen=True)
class Outcome:
    """One check of the chosen candidate: ``passed``, ``skipped`` (``text`` says why), or the
    status it earns, ``incorrect`` or ``rejected`` (``text`` is the evidence)."""

    status: str
    text: str


def sanitizer() -> str | None:
    """The compute-sanitizer executable, or None when it is not installed."""
    named = os.environ.get(SANITIZER_ENV)
    if named:
        return shutil.which(named)
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    places = ["compute-sanitizer", *(os.path.join(h, "bin", "compute-sanitizer") for h in homes if h)]
    return next((found for p in places if (found := shutil.which(p))), None)


def command(executable: str) -> list[str]:
    """The wrapper: memcheck only, one process (not the compilers Triton starts), no leak or
    device-heap checks and no API error reports (only invalid accesses count), device backtraces
    only (the host's are slow), its report in ``LOG``."""
    return [
        executable,
        "--tool",
        "memcheck",
        "--error-exitcode",
        str(EXIT_CODE),
        "--log-file",
        LOG,
        "--target-processes",
        "application-only",
        "--leak-check",
        "no",
        "--check-device-heap",
        "no",
        "--report-api-errors",
        "no",
        "--padding",
        str(PADDING),
        "--show-backtrace",
        "device",
        "--print-limit",
        "10",
    ]


def check(
    req: dict[str, Any],
    readable: list[str],
    limits: sandbox.Limits,
    env: dict[str, str],
    python: str | None,
    calls: int,
) -> Outcome:
    """Run the candidate in ``req`` on the judge's ``calls`` under memcheck; the sanitizer's verdict."""
    executable = sanitizer()
    if executable is None:
        return Outcome("skipped", NOT_INSTALLED)
    res = sandbox.run(
        "runners.memcheck:target",
        req,
        sandbox.Limits(limits.timeout_s * TIME_FACTOR, limits.memory_mb + SANITIZER_MB),
        env={**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
        python=python,
        collect=LOG,
        readable=readable,
        wrapper=command(executable),
    )
    return verdict(res, calls)


def verdict(res: sandbox.SandboxResult, calls: int) -> Outcome:
    """The sanitizer's exit status decides; its log gives the evidence."""
    if res.returncode == EXIT_CODE:
        first = first_error(res.blob.decode("utf-8", "replace"))
        return Outcome(
            "incorrect", f"memory check ({TOOL}): {first or 'an invalid access (its log is unreadable)'}"
        )
    payload = res.payload or {}
    if res.outcome != "ok" or res.returncode != 0:
        why = res.reason or f"exit status {res.returncode}"
        return Outcome("skipped", f"memory check: not finished under compute-sanitizer ({why})")
    errors = payload.get("errors") if isinstance(payload.get("errors"), list) else []
    if payload.get("calls") != calls or errors:
        first = (
            sandbox.untrusted_text(errors[0], 300)
            if errors
            else f"{payload.get('calls')} of {calls} calls ran"
        )
        return Outcome("skipped", f"memory check: not finished under compute-sanitizer ({first})")
    return Outcome("passed", f"memory check: {TOOL} found no invalid access in the judge's {calls} calls")


def first_error(log: str) -> str:
    """The sanitizer's first error with its details, on one line ('' when it reported none).

    Its report: each error a line ``========= Invalid __global__ write of size 4 bytes``, its
    details indented below it (where, which thread, the address against the nearest allocation),
    then backtraces, then ``========= ERROR SUMMARY: 1 error``."""
    prefix = "========="
    lines = [line[len(prefix) :] for line in log.splitlines() if line.startswith(prefix)]
    for i, body in enumerate(lines):
        head = body.strip()
        if not head or body.startswith("  ") or head.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY")):
            continue
        details = []
        for more in lines[i + 1 :]:
            text = more.strip()
            if not more.startswith("  ") or text.startswith(
                ("Saved host backtrace", "Device Frame", "Host Frame")
            ):
                break
            details.append(text)
        return sandbox.untrusted_text(" ".join([head, *details[:4]]), 600)
    return ""


def target(req: dict[str, Any]) -> dict[str, Any]:
    """Inside the sandbox, under the sanitizer: the candidate on the judge's calls, outputs
    discarded (the sanitizer's report is what counts); how many calls ran and their errors."""
    import torch

    from runners import buffers, runner, tuning, verify
    from runners.protocol import RunRequest

    tuning.install(timed=False)  # each config once: the sanitizer needs its accesses, not a timing
    problem = verify.BuiltModule(req, req["build"])
    _, cand = verify.load_candidate(req, problem)
    judged = RunRequest.from_dict(req["judge"])
    data = runner.read_inputs(judged.inputs_path)
    weights = runner.Weights(problem.module)
    with buffers.Writer(os.devnull) as writer:
        replies = runner.run_calls(cand, judged.calls, data, req["device"], writer, weights=weights)
    if req["device"] == "cuda":
        torch.cuda.synchronize()
    return {"calls": len(replies), "errors": [r.error for r in replies if r.error][:3]}
