"""The host's lock of the family above 2^31 elements: one process at a time writes its GiBs.

Another process really holds the lock here (a second Python); the family is planned with a small
limit on a stand-in judge, and the free-space check or the original's runner is replaced where a
test stops there, so no sandbox starts. The family's full run is in tests/runners/test_memcheck.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners import above_int32, memcheck, sandbox
from runners.protocol import CallReply, RunReply

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"tensor": {"shape": [16, 100], "dtype": "float32", "dist": "normal"}}

# Takes the lock, says so, holds it for argv[2] seconds, then exits (which lets it go).
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""

# The paths of the descriptors a child process inherits.
OPEN_FILES = "import os; print([os.path.realpath('/proc/self/fd/' + n) for n in os.listdir('/proc/self/fd')])"


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return tmp_path / "large-family.lock"


@pytest.fixture
def family(tmp_path: Path, lock: Path) -> Iterator[above_int32.Family]:
    """The family on a stand-in judge (what planning reads of it), waiting at most 0.5 s."""
    folder = tmp_path / "judge"
    folder.mkdir()
    judge: Any = SimpleNamespace(
        device="cpu",
        dir=folder,
        file=str(ROOT / "tests/problems/add_relu.py"),
        root=None,
        class_name="Model",
        build={"source": "kernelbench", "init_args": [], "init_kwargs": {}, "inputs": [SPEC, SPEC]},
        dtype=None,
        seed=4321,
        planned=[],
        reference={},
    )
    family = above_int32.Family(judge, 120, 4096, {}, None, limit=4096, lock=lock, wait_s=0.5)
    yield family
    family.close()


def _hold(lock: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the lock for ``seconds``, started once it holds it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _free(lock: Path) -> bool:
    """Whether the lock can be had now (through a descriptor of its own, as another process would)."""
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        assert exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
        return False
    finally:
        os.close(fd)


def _request() -> tuple[dict[str, Any], list[str]]:
    return {"device": "cpu", "build": {}}, []


def _stop_at_the_check(monkeypatch: pytest.MonkeyPatch, lock: Path, seen: list[bool]) -> None:
    """The free-space check records whether the lock was held then, and skips the family."""

    def shortfall(*args: Any) -> str:
        seen.append(_free(lock))
        return "stopped at the free-space check"

    monkeypatch.setattr(above_int32, "shortfall", shortfall)


def test_the_family_waits_for_another_process_then_skips_with_the_reason(family, lock, monkeypatch):
    seen: list[bool] = []
    _stop_at_the_check(monkeypatch, lock, seen)
    holder = _hold(lock, 30)
    try:
        begun = time.monotonic()
        got = family.check(*_request(), tf32=False)
        waited = time.monotonic() - begun
        assert got.status == "skipped"
        assert re.fullmatch(r"another module on this host is running it; waited \d+\.\d s", got.text), (
            got.text
        )
        assert 0.5 <= waited < 2, waited
        assert seen == []  # nothing checked or written without the lock
        assert family.check(*_request(), tf32=False) == got  # the module waits once
        assert not _free(lock)
    finally:
        holder.kill()
        holder.wait()
    assert _free(lock)


def test_the_family_goes_on_once_the_other_process_lets_the_lock_go(family, lock, monkeypatch):
    seen: list[bool] = []
    _stop_at_the_check(monkeypatch, lock, seen)
    family.wait_s = 10
    holder = _hold(lock, 0.3)
    try:
        got = family.check(*_request(), tf32=False)
    finally:
        holder.wait(5)
    assert got == memcheck.Outcome("skipped", "stopped at the free-space check")
    assert seen == [False]  # the check ran with the lock held
    assert _free(lock)  # and skipped, the family let it go at once


def test_the_lock_is_let_go_when_the_family_raises(family, lock, monkeypatch):
    def shortfall(*args: Any) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(above_int32, "shortfall", shortfall)
    with pytest.raises(RuntimeError, match="boom"):
        family.check(*_request(), tf32=False)
    assert _free(lock)


def test_the_lock_is_held_until_the_family_is_closed_and_not_inherited(family, lock, monkeypatch):
    """The original passes and a candidate crashes (both runners replaced): the inputs and the
    original's outputs stay for the next candidate, and so does the lock, until ``close``."""
    inherited: list[str] = []

    def run(target: str, req: dict[str, Any], *args: Any, **kwargs: Any) -> sandbox.SandboxResult:
        # A child of this process, started while the lock is held: its descriptor must not follow.
        inherited.append(
            subprocess.run(
                [sys.executable, "-c", OPEN_FILES],
                close_fds=False,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        if target.endswith("reference_target"):
            kwargs["collect_to"].write_bytes(b"")
            reply = RunReply(calls=(CallReply(name="call 0"),)).to_dict()
            return sandbox.SandboxResult("ok", reply, "", 0, "", 0.0)
        return sandbox.SandboxResult("crashed", None, "killed by signal 9", -9, "", 0.0)

    monkeypatch.setattr(above_int32.sandbox, "run", run)
    got = family.check(*_request(), tf32=False)
    assert got.status == "incorrect" and "the candidate's runner crashed: killed by signal 9" in got.text
    assert (family.dir / above_int32.INPUTS).exists()
    assert not _free(lock)
    assert len(inherited) == 2 and all(str(lock) not in line for line in inherited), inherited
    family.close()
    assert _free(lock)
    assert not any((family.dir / n).exists() for n in (above_int32.INPUTS, above_int32.REFERENCE))


def test_a_lock_that_cannot_be_opened_skips_the_family(family, tmp_path):
    family.lock = tmp_path / "missing" / "large-family.lock"
    got = family.check(*_request(), tf32=False)
    assert got.status == "skipped"
    assert got.text.startswith(f"its host-wide lock {family.lock}: "), got.text


def test_the_lock_file_is_in_the_temp_folder_unless_named(monkeypatch, tmp_path):
    monkeypatch.delenv(above_int32.LOCK_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(above_int32.tempfile, "tempdir", None)  # read TMPDIR again
    assert above_int32.lock_path() == tmp_path / above_int32.LOCK_NAME
    monkeypatch.setenv(above_int32.LOCK_ENV, "/shared/large.lock")
    assert above_int32.lock_path() == Path("/shared/large.lock")
