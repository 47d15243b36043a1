"""Targets for ``runners.sandbox.run`` in tests/runners/test_sandbox.py.

The sandbox child imports this file as ``tests.runners.sandbox_targets`` (the
project root is on its ``sys.path``; ``tests`` is a namespace package). Each
target takes the request dict and returns a dict. Only the standard library
is used, so a child starts in a fraction of a second.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any


def echo(req: dict[str, Any]) -> dict[str, Any]:
    return {"request": req, "pid": os.getpid()}


def peek_environment(req: dict[str, Any]) -> dict[str, Any]:
    """Everything a hostile evaluation could learn about its parent's environment."""
    out: dict[str, Any] = {"environ": dict(os.environ), "ppid": os.getppid()}
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as fh:
            out["parent_environ"] = fh.read().decode("latin-1")
    except OSError as exc:
        out["parent_environ_error"] = f"{type(exc).__name__}: {exc}"
    # The same read on ourselves proves the probe itself works.
    with open("/proc/self/environ", "rb") as fh:
        out["self_environ"] = fh.read().decode("latin-1")
    return out


def connect(req: dict[str, Any]) -> dict[str, Any]:
    """Try a TCP connection to the test's listener; say what happened."""
    try:
        with socket.create_connection(("127.0.0.1", int(req["port"])), timeout=3) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return {"connected": True, "reply": s.recv(100).decode("latin-1")}
    except Exception as exc:
        return {"connected": False, "error": f"{type(exc).__name__}: {exc}"}


def sleep_forever(req: dict[str, Any]) -> dict[str, Any]:
    while True:
        time.sleep(1)


def _spawn_sleeper(marker: str) -> subprocess.Popen[bytes]:
    """A grandchild whose command line carries ``marker``: the test finds it in the host's /proc."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", marker],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def spawn_then_sleep(req: dict[str, Any]) -> Any:
    """Start a grandchild (same process group), let the parent look for it, then hang."""
    _spawn_sleeper(req["marker"])
    yield {"spawned": True}
    while True:
        time.sleep(1)


def spawn_then_return(req: dict[str, Any]) -> Any:
    """Start a grandchild (same process group), let the parent look for it, and finish normally."""
    child = _spawn_sleeper(req["marker"])
    yield {"spawned": True}
    return {"grandchild": child.pid}


def abort(req: dict[str, Any]) -> dict[str, Any]:
    os.abort()


def segfault(req: dict[str, Any]) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)
    return {"survived": True}


def exit_early(req: dict[str, Any]) -> dict[str, Any]:
    os._exit(3)


def corrupt_channel(req: dict[str, Any]) -> dict[str, Any]:
    """Write junk into the result pipe itself (its fd is the child's argv[2])."""
    os.write(int(sys.argv[2]), b"\xff\xfe not json")
    return {"fine": True}


def raises(req: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("kaboom from the target")


def noisy(req: dict[str, Any]) -> dict[str, Any]:
    print("JUNK-ON-STDOUT {not json", flush=True)
    print("JUNK-ON-STDERR \x00\x01", file=sys.stderr, flush=True)
    os.write(1, b"RAW-FD1-JUNK\n")
    os.write(2, b"RAW-FD2-JUNK\n")
    return {"answer": 42, "nested": {"list": [1, 2, 3]}}


def allocate(req: dict[str, Any]) -> dict[str, Any]:
    """Allocate and touch ``chunk_mb`` blocks until ``total_mb`` is held."""
    chunk = int(req["chunk_mb"]) * 2**20
    hoard = []
    for _ in range(int(req["total_mb"]) // int(req["chunk_mb"])):
        block = bytearray(chunk)
        block[::4096] = b"\x01" * len(range(0, chunk, 4096))  # touch every page
        hoard.append(block)
    return {"held_mb": len(hoard) * int(req["chunk_mb"])}


def where_am_i(req: dict[str, Any]) -> dict[str, Any]:
    return {
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "tmpdir": os.environ.get("TMPDIR"),
        "listing": sorted(os.listdir(".")),
    }


def read_and_list(req: dict[str, Any]) -> dict[str, Any]:
    """The named file's text, and what the sandbox's /dev/shm holds."""
    with open(req["path"]) as fh:
        text = fh.read()
    with open("written", "w") as fh:
        fh.write("ok")
    return {"text": text, "shm": sorted(os.listdir("/dev/shm")), "cwd": os.getcwd()}


def two_phase(req: dict[str, Any]) -> Any:
    """Yields midway: the parent's follow-up comes back in; a second yield gets None (one round)."""
    follow = yield {"phase": 1, "pid": os.getpid()}
    again = yield {"phase": 2}
    return {"follow": follow, "again": again, "pid": os.getpid()}


def warm_up(device: str) -> None:
    """Run by the sandbox before the request (``sandbox.start``): leaves a trace the target reports."""
    global _WARMED
    _WARMED = (device, time.monotonic())


_WARMED: tuple[str, float] | None = None


def warmed(req: dict[str, Any]) -> dict[str, Any]:
    """Whether ``warm_up`` ran before the request, and how long ago (this process's clock)."""
    if _WARMED is None:
        return {"warmed": None}
    return {"warmed": _WARMED[0], "seconds_ago": time.monotonic() - _WARMED[1], "pid": os.getpid()}


def try_timing_lock(req: dict[str, Any]) -> dict[str, Any]:
    """What a runner can do with the timing lock it was given: take it whole (without waiting),
    write it or its gate."""
    import fcntl

    fd, gate = os.environ.get("KERNELIZE_TIMING_LOCK_FD"), os.environ.get("KERNELIZE_TIMING_GATE_FD")
    if fd is None or gate is None:
        return {"fd": fd, "gate": gate}
    try:
        fcntl.flock(int(fd), fcntl.LOCK_EX | fcntl.LOCK_NB)
        got = True
    except BlockingIOError:
        got = False
    writable = []
    for each in (fd, gate):
        try:
            os.write(int(each), b"x")
            writable.append(True)
        except OSError:
            writable.append(False)
    return {"fd": fd, "got": got, "writable": any(writable)}


def _shared_elsewhere_blocks() -> bool:
    """Whether a descriptor of the timing lock of this child's own cannot be taken whole: its
    share is held."""
    import fcntl

    other = os.open("/proc/self/fd/" + os.environ["KERNELIZE_TIMING_LOCK_FD"], os.O_RDONLY)  # a new open
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(other)


def two_phase_holding(req: dict[str, Any]) -> Any:
    """Yields midway, saying whether this child held its share before the yield and after it.
    Each frame it sends is followed by a pause (a child descheduled right after writing): the parent
    must find no share held however soon it reads the interim frame."""
    from runners import sandbox

    written = sandbox._write_frame

    def slow(out: Any, data: bytes) -> None:
        written(out, data)
        time.sleep(0.3)

    sandbox._write_frame = slow  # type: ignore[assignment]
    before = _shared_elsewhere_blocks()
    yield {"phase": 1}
    return {"share_before": before, "share_after": _shared_elsewhere_blocks()}


def hog_timing_lock(req: dict[str, Any]) -> dict[str, Any]:
    """Hostile: takes the whole timing lock and never lets it go, and leaves a process of its own
    session holding the descriptor too (the lock goes only with its last holder)."""
    import fcntl

    fcntl.flock(int(os.environ["KERNELIZE_TIMING_LOCK_FD"]), fcntl.LOCK_EX)
    if os.fork() == 0:
        os.setsid()
    while True:
        time.sleep(1)


def share_held(req: dict[str, Any]) -> dict[str, Any]:
    """A runner at work for ``seconds`` (the sandbox holds its share of the timing lock meanwhile)."""
    start = time.time()
    time.sleep(req["seconds"])
    return {"start": start, "end": time.time()}


def timed_alone(req: dict[str, Any]) -> dict[str, Any]:
    """A runner timing for ``seconds`` (the whole timing lock), after ``before`` seconds of work."""
    from runners.sandbox import gpu_alone

    time.sleep(req.get("before", 0))
    asked = time.time()
    with gpu_alone():
        start = time.time()
        time.sleep(req["seconds"])
        end = time.time()
    return {"asked": asked, "start": start, "end": end}
