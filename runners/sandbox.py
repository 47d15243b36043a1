"""Run one evaluation in a fresh, isolated subprocess.

The code under test comes from pull requests and from models: it may loop,
abort, fault the GPU, eat memory, read secrets or phone home. Each evaluation
therefore runs in its own process with:

- a scrubbed environment (only ``ENV_ALLOW`` passes) and its own temp dir as
  cwd, HOME and TMPDIR;
- no network: a new network namespace where the OS allows it (inside a new
  user namespace when it can, so the child also loses its capabilities over
  the parent), and always an audit hook that refuses socket connections;
- a wall-time limit that kills the whole process group, and a memory limit
  (``RLIMIT_AS`` on CPU, an RSS watchdog everywhere: CUDA reserves too much
  address space for ``RLIMIT_AS``);
- results over a private pipe (length-prefixed JSON frames; a second pipe carries the
  parent's one follow-up request to a target that asks for it); the child's own stdout/stderr are captured
  and kept only as an untrusted tail for debugging.

The parent marks itself non-dumpable, so a child running under the same uid
cannot read its ``/proc/<pid>/environ`` or memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Variables a kernel evaluation may see. Everything else (tokens, database
# URLs, cloud credentials) stays in the parent.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "CC",
    "OMP_NUM_THREADS",
)
STDIO_TAIL_BYTES = 4000
_PR_SET_DUMPABLE = 4
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000


FollowUp = Callable[[Any], "dict[str, Any] | None"]


@dataclass
class Limits:
    timeout_s: float = 300.0
    memory_mb: int = 8192


@dataclass
class SandboxResult:
    outcome: str  # "ok" | "timeout" | "crashed" | "error"
    payload: dict[str, Any] | None
    reason: str
    returncode: int | None
    stdout_tail: str
    wall_s: float
    isolation: list[str] = field(default_factory=list)
    # The file the caller asked to collect from the working directory, read once the process and
    # its group were gone (b"" when it wrote none): the runner's output buffers.
    blob: bytes = b""
    blob_path: Path | None = None  # with collect_to: where the collected file now lies


def harden_parent() -> None:
    """Make this process's environment and memory unreadable to same-uid children."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def child_env(extra: dict[str, str], workdir: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - STDIO_TAIL_BYTES))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _describe_signal(rc: int) -> str:
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    hint = {
        "SIGSEGV": " (segmentation fault)",
        "SIGABRT": " (aborted)",
        "SIGKILL": " (killed)",
        "SIGBUS": " (bus error)",
    }.get(name, "")
    return f"{name}{hint}"


# The child's first lines run before anything else is imported: isolate,
# limit, then hand over to the target function.
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); from runners.sandbox import _child_main; _child_main()"
)


def run(
    target: str,
    request: dict[str, Any],
    limits: Limits,
    *,
    env: dict[str, str] | None = None,
    python: str | None = None,
    collect: str | None = None,
    follow_up: FollowUp | None = None,
    collect_to: Path | None = None,
) -> SandboxResult:
    """Call ``target`` (``"package.module:function"``) with ``request`` in a sandbox.

    ``collect``: a file name in the sandbox's working directory to hand back as ``blob``, or, with
    ``collect_to``, to move there once the process is gone (no copy: outputs of several GiB).
    ``follow_up``: for a target written as a generator, which yields once midway (the judge's
    reference runner: first the module's build, then the runs on the judge's inputs), called with
    what it yielded; what it returns is sent back into the generator (None stops it)."""
    harden_parent()
    workdir = tempfile.mkdtemp(prefix="kernelize-sbx-")
    read_fd, write_fd = os.pipe()
    ask_read, ask_write = os.pipe()  # the parent's follow-up requests, to the child
    out_path = Path(workdir) / ".stdio"
    request_path = Path(workdir) / ".request.json"
    request_path.write_text(json.dumps({"target": target, "request": request, "limits": limits.__dict__}))
    start = time.monotonic()
    try:
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                [
                    python or sys.executable,
                    "-I",
                    "-c",
                    _BOOTSTRAP,
                    str(PROJECT_ROOT),
                    str(write_fd),
                    str(ask_read),
                ],
                cwd=workdir,
                env=child_env(env or {}, workdir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd, ask_read),
                start_new_session=True,
            )
        os.close(write_fd)
        os.close(ask_read)
        frames: list[bytes | None] = []
        reader = threading.Thread(target=_converse, args=(read_fd, ask_write, follow_up, frames), daemon=True)
        reader.start()
        killed_for = _watch(proc, limits)
        reader.join(timeout=5)
        wall = time.monotonic() - start
        tail = _tail(out_path)
        final = frames[-1] if frames else b""
        result = _result(proc.returncode, final, killed_for, limits, tail, wall)
        if collect:
            with contextlib.suppress(OSError):
                if collect_to is not None:
                    os.replace(Path(workdir) / collect, collect_to)
                    result.blob_path = collect_to
                else:
                    result.blob = (Path(workdir) / collect).read_bytes()
        return result
    finally:
        for fd in (read_fd, ask_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


# Frames on both pipes: an 8-byte little-endian length, then that many bytes of JSON.
_FRAME = struct.Struct("<Q")
_MAX_FRAME = 1 << 30


def _send_frame(fd: int, data: bytes) -> None:
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        data = os.read(fd, min(n - len(buf), 1 << 20))
        if not data:
            return None
        buf += data
    return buf


def _converse(read_fd: int, ask_fd: int, follow_up: FollowUp | None, frames: list[bytes | None]) -> None:
    """Read the child's frames; answer its one interim frame with ``follow_up``'s request.

    A final frame lands in ``frames``; anything that is not a whole frame lands as None (the
    channel was corrupted). The child gets at most one follow-up: a second interim frame, or
    any when there is no ``follow_up``, is answered with an empty frame (stop)."""
    asked = False
    try:
        while True:
            head = _read_exact(read_fd, _FRAME.size)
            if head is None:
                return
            (n,) = _FRAME.unpack(head)
            body = _read_exact(read_fd, n) if n <= _MAX_FRAME else None
            if body is None:
                frames.append(None)
                return
            interim = None
            if body.startswith(b'{"_interim"'):
                try:
                    interim = json.loads(body)["_interim"]
                except (ValueError, KeyError, TypeError):
                    frames.append(None)
                    return
                answer = None
                if follow_up is not None and not asked:
                    asked = True
                    try:
                        answer = follow_up(interim)
                    except Exception:  # the caller's bug must not hang the child
                        answer = None
                _send_frame(ask_fd, b"" if answer is None else json.dumps(answer).encode("utf-8"))
                continue
            frames.append(body)
    except OSError:
        return


def _watch(proc: subprocess.Popen[bytes], limits: Limits) -> str | None:
    """Wait for the child; kill its process group on timeout or memory. Returns why it was killed."""
    deadline = time.monotonic() + limits.timeout_s
    while True:
        try:
            proc.wait(timeout=0.05)
            # Whatever the evaluation started dies with it: nothing outlives its sandbox.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return None
        except subprocess.TimeoutExpired:
            pass
        why = None
        if time.monotonic() > deadline:
            why = "timeout"
        elif _rss_mb(proc.pid) > limits.memory_mb:
            why = "memory"
        if why:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return why


def _result(
    rc: int, raw: bytes | None, killed_for: str | None, limits: Limits, tail: str, wall: float
) -> SandboxResult:
    def res(outcome: str, reason: str, payload: dict[str, Any] | None = None) -> SandboxResult:
        isolation = list(payload.pop("_isolation", [])) if payload else []
        return SandboxResult(outcome, payload, reason, rc, tail, wall, isolation)

    if killed_for == "timeout":
        return res("timeout", f"exceeded the {limits.timeout_s:g} s time limit")
    if killed_for == "memory":
        return res("crashed", f"exceeded the {limits.memory_mb} MiB memory limit")
    payload: dict[str, Any] | None = None
    if raw is None:
        return res("crashed", "the evaluation's result channel was corrupted")
    if raw:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return res("crashed", "the evaluation's result channel was corrupted")
    if rc < 0:
        return res("crashed", f"the process died from {_describe_signal(rc)}")
    if payload is None:
        return res("crashed", f"the process exited with code {rc} before reporting a result")
    if "_error" in payload:
        return res("error", str(payload["_error"]), payload)
    return res("ok", "", payload)


# ---------------------------------------------------------------------------
# Inside the child


def _isolate() -> list[str]:
    """Cut the network and drop capabilities over the parent, as far as the OS allows."""
    done = []
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        done += ["userns", "netns"]
    elif libc.unshare(_CLONE_NEWNET) == 0:
        done.append("netns")
    sys.addaudithook(_deny_network)
    done.append("audit")
    return done


_NET_EVENTS = {
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "socket.getaddrinfo",
}


def _deny_network(event: str, args: tuple[Any, ...]) -> None:
    if event in _NET_EVENTS:
        raise PermissionError(f"network access is disabled in the sandbox ({event})")


def _apply_limits(limits: dict[str, Any], cpu_only: bool) -> None:
    import resource

    if cpu_only:  # CUDA reserves far more address space than it uses
        cap = int(limits["memory_mb"]) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child_main() -> None:
    import importlib
    import traceback

    fd = int(sys.argv[2])
    isolation = _isolate()
    with open(".request.json") as fh:
        spec = json.load(fh)
    os.remove(".request.json")
    request = spec["request"]
    _apply_limits(spec["limits"], cpu_only=request.get("device", "cpu") == "cpu")
    module_name, _, func_name = spec["target"].partition(":")
    out = os.fdopen(fd, "wb")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        payload = func(request)
        if inspect.isgenerator(payload):
            payload = _run_generator(payload, out, int(sys.argv[3]))
    except MemoryError:
        payload = {"_error": f"exceeded the {spec['limits']['memory_mb']} MiB memory limit"}
    except BaseException as exc:  # report, never hang: the parent decides what it means
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        payload = {"_error": f"evaluation failed: {last}"}
    payload["_isolation"] = isolation
    with out:
        _write_frame(out, json.dumps(payload, default=str).encode("utf-8"))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: CUDA and Triton atexit hooks can hang or crash


def _write_frame(out: Any, data: bytes) -> None:
    out.write(_FRAME.pack(len(data)) + data)
    out.flush()


def _run_generator(gen: Any, out: Any, ask_fd: int) -> Any:
    """Drive a target written as a generator: each value it yields goes to the parent as an
    interim frame, and the parent's answer (None for an empty frame) is sent back in."""
    try:
        interim = next(gen)
        while True:
            _write_frame(out, json.dumps({"_interim": interim}, default=str).encode("utf-8"))
            head = _read_exact(ask_fd, _FRAME.size)
            (n,) = _FRAME.unpack(head) if head else (0,)
            body = _read_exact(ask_fd, n) if n else b""
            interim = gen.send(json.loads(body) if body else None)
    except StopIteration as stop:
        return stop.value if stop.value is not None else {}


def echo(request: dict[str, Any]) -> dict[str, Any]:
    """The cheapest target: measures the sandbox's own cost (no torch import)."""
    return {"echo": request, "pid": os.getpid()}
