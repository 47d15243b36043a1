"""Run one evaluation in a fresh bubblewrap sandbox; fail closed.

The code under test comes from pull requests and from models: it may loop,
abort, fault the GPU, eat memory, fork, read secrets, phone home or try to
leave something behind for the next evaluation. Each evaluation therefore
runs as ``bwrap … python -I -B`` (bubblewrap, Debian's ``bubblewrap``) with:

- its own user, pid, mount, network, ipc, uts and cgroup namespaces, no
  capabilities and no further user namespaces: only its own processes are
  in its ``/proc``, there is no network (not even loopback), and everything
  it started dies with it (the pid namespace's init; ``--die-with-parent``,
  ``--new-session``);
- a read-only view of the system (``/usr`` and its links, a handful of
  files from ``/etc``), of the interpreter (its prefixes and
  site-packages), of the project's ``runners/`` package and of the paths
  the caller names in ``readable`` (the problem's repository, a candidate
  file, the judge's inputs), each at its own path so requests need no
  rewriting; secret-looking files at the top of those folders (``.env``,
  keys) are hidden;
- one writable place, its working directory (a fresh temp dir, bound at its
  own path, also HOME and TMPDIR, holding the private Triton and Inductor
  caches), plus a small private ``/dev/shm``; no home directory; the parts
  of its ``/proc`` that set the host kernel (``/proc/sys``, sysrq, IRQs)
  read-only;
- only the variables in ``ENV_ALLOW`` (bwrap itself is started with that
  environment, so no process in the sandbox can read the parent's);
- the GPU device nodes (``/dev/nvidia*``) and ``/sys`` only when the request
  says ``"device": "cuda"``;
- limits: wall time, memory (``RLIMIT_AS`` on CPU; everywhere a watchdog on
  the whole sandbox's resident memory: CUDA reserves too much address space
  for ``RLIMIT_AS``), processes (``RLIMIT_NPROC``, counted per sandbox by its
  user namespace, and the same watchdog counting the sandbox's tasks: root
  is exempt from ``RLIMIT_NPROC``), file size (``RLIMIT_FSIZE``) and no core
  files;
- results over a private pipe (length-prefixed JSON frames; a second pipe
  carries the parent's one follow-up request to a target that asks for it);
  the child's stdout/stderr go to a file outside the sandbox and are kept
  only as an untrusted, length-capped tail.

When the sandbox cannot be set up (no bwrap, user namespaces refused, a
container without the rights), the target never runs: the result is an
``"error"`` whose reason starts with ``isolation unavailable:``.
:func:`isolation_problem` checks this once up front (GPU workers at start,
``kernelize run``). Only ``kernelize run --no-isolation`` switches the
sandbox off (:func:`set_isolation`), for one's own code on one's own
machine: a scrubbed environment, the audit hook and a process group are
all that is left then. The bwrap executable is ``$KERNELIZE_BWRAP``
(default ``bwrap`` on PATH).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import glob
import inspect
import json
import os
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BWRAP_ENV = "KERNELIZE_BWRAP"
# Several runners sharing one GPU (a benchmark running problems side by side, or workers of one
# card): the file named here is their timing lock, and the file beside it (".gate") its gate. Each
# sandbox gets its own read-only descriptor of both (their numbers in TIMING_LOCK_FD_ENV and
# TIMING_GATE_FD_ENV). A runner holds a share of the lock while it works (gpu_shared: from its
# request to its reply) and the whole lock while it times (gpu_alone: in runners.bench, from the
# timed calls' warm-up to the last call back to back), so no other runner's work, timed or not,
# overlaps its timed calls. One that wants to time takes the gate first, which keeps new shares out
# while it waits: shares are held seconds at a time, and a runner waits for those already held, not
# for ever.
TIMING_LOCK_ENV = "KERNELIZE_TIMING_LOCK"
TIMING_LOCK_FD_ENV = "KERNELIZE_TIMING_LOCK_FD"
TIMING_GATE_FD_ENV = "KERNELIZE_TIMING_GATE_FD"
ISOLATION_UNAVAILABLE = "isolation unavailable"

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
REASON_CHARS = 2000  # the longest reason a runner's own words may give (it is posted on the PR)
_PR_SET_DUMPABLE = 4
SHM_MB = 256  # the sandbox's private /dev/shm (semaphores of multiprocessing pools), in memory

# What of /etc the interpreter, the loader and a C compiler need; nothing else of it is visible.
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/alternatives",  # /usr/bin/cc and friends on Debian
)
# The parts of a fresh /proc that set the host kernel, not the sandbox (sysctls, sysrq, IRQ and PCI
# settings): read-only, as container runtimes keep them. bwrap covers them only when they look
# writable to it, which misses a sandbox whose uid is the host's root: the kernel lets uid 0 write
# sysctls such as kernel.core_pattern without any capability.
_PROC_READ_ONLY = tuple(
    f"/proc/{name}" for name in ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "keys", "kcore")
)
# Names hidden at the top of each readable folder: a repository's own secrets stay out of reach.
_SECRET_FILES = frozenset({".env", ".netrc", ".git-credentials", ".pgpass", ".pypirc", ".npmrc"})
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx")
_SECRET_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".docker", ".kube", ".config"})

FollowUp = Callable[[Any], "dict[str, Any] | None"]
# Answers a child's :func:`ask` by name, given the child's marks so far (each timestamped on
# arrival): what it returns goes back to the child (None: nothing).
Asker = Callable[[str, "list[tuple[str, float]]"], Any]


@dataclass
class Limits:
    timeout_s: float = 300.0
    memory_mb: int = 8192
    # Tasks (threads count) in the whole sandbox: torch starts a thread per core and Inductor a
    # compile worker per core (up to 32), each with threads of its own.
    processes: int = 4096
    file_mb: int = 65536  # the largest file it may write: output buffers of KernelBench sizes are GiBs


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
    # The child's marks (``mark``), each timestamped by this process's clock when it arrived, in
    # seconds since the child started: the judge's clock around what the child says it did.
    marks: list[tuple[str, float]] = field(default_factory=list)


_isolate = True


def set_isolation(enabled: bool) -> None:
    """Switch the bubblewrap sandbox off (``kernelize run --no-isolation``) or back on.

    Off, untrusted code can read every file this user can, reach the network and leave processes
    behind. Workers refuse to run with it off (:func:`refusal`)."""
    global _isolate
    _isolate = enabled


def isolating() -> bool:
    return _isolate


def untrusted_text(value: Any, limit: int = REASON_CHARS) -> str:
    """Text a runner returned (a reason, a note): a string of at most ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def harden_parent() -> None:
    """Make this process's environment and memory unreadable to same-uid children."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def child_env(extra: dict[str, str], workdir: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    # Compiler caches are the runner's own: a cache poisoned by one candidate never reaches the next.
    env.update(
        TRITON_CACHE_DIR=os.path.join(workdir, ".triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(workdir, ".inductor"),
    )
    return env


# ---------------------------------------------------------------------------
# The bubblewrap command


def bwrap_executable() -> str:
    return os.environ.get(BWRAP_ENV) or "bwrap"


@functools.cache
def _interpreter_dirs(python: str) -> tuple[str, ...]:
    """The folders ``python`` (run isolated, as in the sandbox) loads its standard library and
    packages from: bound read-only. Asked of the interpreter itself (trusted: the operator's)."""
    probe = (
        "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
        "sys.base_exec_prefix, *site.getsitepackages(), *[p for p in sys.path if p]]))"
    )
    dirs: list[str] = []
    with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
        out = subprocess.run(
            [python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True, env={}
        ).stdout
        dirs = [str(d) for d in json.loads(out)]
    real = os.path.realpath(python)
    dirs += [os.path.dirname(os.path.abspath(python)), os.path.dirname(os.path.dirname(real))]
    return tuple(dirs)


def _covering(paths: Sequence[str], *, system: bool) -> list[str]:
    """Existing absolute paths, those inside another one dropped; never ``/``, and for the
    ``system`` binds never the project's root (its ``.env``, its ``.git``) or a folder above it."""
    project = str(PROJECT_ROOT)
    keep: list[str] = []
    for p in sorted({os.path.normpath(os.path.abspath(p)) for p in paths if p}):
        if p == "/" or not os.path.exists(p):
            continue
        if system and (project == p or project.startswith(p.rstrip("/") + "/")):
            continue
        if any(p == k or p.startswith(k.rstrip("/") + "/") for k in keep):
            continue
        keep.append(p)
    return keep


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _secret(name: str) -> bool:
    return name in _SECRET_FILES or name.startswith(".env.") or name.endswith(_SECRET_SUFFIXES)


def _masks(folder: str) -> list[str]:
    """bwrap arguments hiding the secret-looking entries at the top of ``folder``."""
    args: list[str] = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if entry.is_dir(follow_symlinks=False) and entry.name in _SECRET_DIRS:
                args += ["--tmpfs", path, "--remount-ro", path]
            elif not entry.is_dir() and _secret(entry.name):
                args += ["--ro-bind", "/dev/null", path]
    return args


def package_root(file: str) -> str | None:
    """The folder ``file``'s package hangs from (the nearest folder above it without an
    ``__init__.py``), when the file's own folder is a package; None for a loose file."""
    folder = os.path.dirname(os.path.abspath(file))
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        return None
    while os.path.isfile(os.path.join(folder, "__init__.py")) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def problem_paths(file: str, root: str | None) -> list[str]:
    """What a runner of the module in ``file`` reads: its repository (``root``), else its folder;
    and the package it belongs to, where that lies outside them (its relative imports)."""
    base = root or os.path.dirname(os.path.abspath(file))
    package = package_root(file)
    inside = package is not None and (package + "/").startswith(base.rstrip("/") + "/")
    return [base, file] if package is None or inside else [base, file, package]


@functools.cache
def _bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bwrap knows (``--disable-userns`` came with 0.8, ``--size`` with 0.7)."""
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30, env={})
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(word for word in (out.stdout + out.stderr).split() if word.startswith("--"))


def _compiler_dirs() -> list[str]:
    """The C compiler Triton builds its launcher with, when ``$CC`` names one outside ``/usr``:
    its whole installation (``/opt/gcc/bin/gcc`` needs ``/opt/gcc``'s headers and helpers)."""
    return _install_dirs(os.environ.get("CC", ""))


def _install_dirs(program: str) -> list[str]:
    """The installation ``program`` (a name on PATH or a path) lies in, when outside ``/usr``."""
    found = shutil.which(program) if program else None
    if not found:
        return []
    out: list[str] = []
    for path in (os.path.abspath(found), os.path.realpath(found)):  # the link and what it names
        bindir = os.path.dirname(path)
        prefix = os.path.dirname(bindir) if os.path.basename(bindir) == "bin" else bindir
        if prefix not in ("/", "/usr", *out):
            out.append(prefix)
    return out


def bwrap_args(
    workdir: str,
    python: str,
    readable: Sequence[str | Path],
    cuda: bool,
    bwrap: str = "bwrap",
    tools: Sequence[str] = (),
) -> list[str]:
    """Everything between ``bwrap`` and the command (see the module docstring). ``tools``: programs
    the command runs besides Python (a wrapper such as compute-sanitizer), visible read-only."""
    known = _bwrap_options(bwrap)
    args = [
        "--unshare-all",
        "--unshare-user",
        *(["--disable-userns"] if "--disable-userns" in known else []),
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "kernelize-sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in _ETC:
        args += ["--ro-bind-try", path, path]
    system = [*_interpreter_dirs(python), str(PROJECT_ROOT / "runners")]
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        system += [p for p in os.environ.get(var, "").split(os.pathsep) if p.startswith("/")]
    system += _compiler_dirs()
    for tool in tools:
        system += _install_dirs(tool)
    for path in _covering(system, system=True):
        args += ["--ro-bind", path, path]
    args += ["--proc", "/proc"]
    for path in _PROC_READ_ONLY:  # its /proc is its own; these parts of it are the host kernel's
        args += ["--ro-bind-try", path, path]
    args += ["--dev", "/dev"]
    args += [*(["--size", str(SHM_MB * 2**20)] if "--size" in known else []), "--tmpfs", "/dev/shm"]
    if cuda:
        for node in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", node, node]
        args += ["--ro-bind-try", "/sys", "/sys"]
    else:
        args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    # The files named, after the private /dev/shm: a temp folder held in memory there (TMPDIR under
    # /dev/shm) is then bound over it rather than hidden by it. Never a folder that holds the temp
    # folder (every sandbox's and judge's files): only the files named.
    shared_tmp = os.path.realpath(tempfile.gettempdir())
    named = [str(p) for p in readable if not _inside(shared_tmp, os.path.realpath(p))]
    for path in _covering(named, system=False):
        args += ["--ro-bind", path, path]
        if os.path.isdir(path):
            args += _masks(path)
    args += ["--remount-ro", "/dev", "--bind", workdir, workdir, "--chdir", workdir, "--remount-ro", "/"]
    return args


ISOLATION = [
    "bwrap",
    "userns",
    "pidns",
    "netns",
    "ipcns",
    "no-caps",
    "read-only-system",
    "private-tmp",
    "env-allow-list",
    "rlimits",
    "audit",
]


# ---------------------------------------------------------------------------
# The parent


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _pss_mb(pid: int) -> float:
    """Proportional set size: pages shared between the sandbox's processes are counted once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return _rss_mb(pid)


def _children(pid: int) -> tuple[list[int], int]:
    """(child pids, task count) of process ``pid``, from ``/proc/<pid>/task/*/children``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [], 0
    kids: list[int] = []
    for tid in tids:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as fh:
            kids += [int(k) for k in fh.read().split()]
    return kids, len(tids)


def _tree(root: int, most: int) -> tuple[list[int], int]:
    """Every process under ``root`` (itself included) and their tasks; stops past ``most`` tasks."""
    pids, tasks, todo = [], 0, [root]
    while todo and tasks <= most:
        pid = todo.pop()
        kids, n = _children(pid)
        pids.append(pid)
        tasks += n
        todo += kids
    return pids, tasks


def _tail(fh: BinaryIO) -> str:
    """The end of the child's output, read from the parent's own handle (never by path)."""
    try:
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
        "SIGXFSZ": " (file size limit)",
    }.get(name, "")
    return f"{name}{hint}"


# The child's first lines run before anything else is imported: say it started (the sandbox is
# up), then hand over; the same pipe says when its imports are done (only ever used to schedule).
# argv: root, result fd, ask fd, ready fd, target, device.
_BOOTSTRAP = (
    "import os, sys; os.write(int(sys.argv[4]), b'1'); "
    "sys.path.insert(0, sys.argv[1]); from runners.sandbox import _child_main; _child_main()"
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
    readable: Sequence[str | Path] = (),
    wrapper: Sequence[str] = (),
) -> SandboxResult:
    """Call ``target`` (``"package.module:function"``) with ``request`` in a sandbox.

    ``readable``: files and folders the target may read (bound read-only at their own paths): the
    problem's file and repository, a candidate, the judge's inputs; the project's ``runners/``
    and the interpreter are always readable.
    ``collect``: a file name in the sandbox's working directory to hand back as ``blob``, or, with
    ``collect_to``, to move there once the process is gone (no copy: outputs of several GiB).
    ``follow_up``: for a target written as a generator, which yields once midway (the judge's
    reference runner: first the module's build, then the runs on the judge's inputs), called with
    what it yielded; what it returns is sent back into the generator (None stops it).
    ``wrapper``: a command the child's Python runs under, inside the sandbox (``compute-sanitizer
    --tool memcheck …``): the sandbox's exit status is the wrapper's."""
    return _run(
        target, request, limits, env, python, collect, follow_up, collect_to, readable, _isolate, wrapper
    )


def _run(
    target: str,
    request: dict[str, Any],
    limits: Limits,
    env: dict[str, str] | None,
    python: str | None,
    collect: str | None,
    follow_up: FollowUp | None,
    collect_to: Path | None,
    readable: Sequence[str | Path],
    isolate: bool,
    wrapper: Sequence[str] = (),
) -> SandboxResult:
    device = str(request.get("device", "cpu"))
    with _start(target, device, env, python, readable, isolate, wrapper) as started:
        return started.run(request, limits, collect=collect, follow_up=follow_up, collect_to=collect_to)


def start(
    target: str,
    *,
    device: str = "cpu",
    env: dict[str, str] | None = None,
    python: str | None = None,
    readable: Sequence[str | Path] = (),
    wrapper: Sequence[str] = (),
) -> Started:
    """Start ``target``'s sandbox ahead of its request (:meth:`Started.run` sends it; close what is
    not run). Until then the child only imports the target's module and runs the module's
    ``warm_up(device)`` when it has one: the project's own imports (torch, Triton), nothing the caller
    names in ``readable`` and nothing of the request, which it has not seen. Its limits apply from
    the request on. The sandbox is the one :func:`run` sets up, so starting early weakens nothing:
    each evaluation still gets a fresh one of its own."""
    return _start(target, device, env, python, readable, _isolate, wrapper)


def _start(
    target: str,
    device: str,
    env: dict[str, str] | None,
    python: str | None,
    readable: Sequence[str | Path],
    isolate: bool,
    wrapper: Sequence[str],
) -> Started:
    harden_parent()
    python = python or sys.executable
    begun = time.monotonic()
    bwrap = shutil.which(bwrap_executable()) if isolate else None
    if isolate and bwrap is None:
        return Started(failure=_unavailable(f"{bwrap_executable()} not found (install bubblewrap)", 0.0))
    try:
        lock_fds = timing_lock_fds()
    except OSError as exc:
        why = f"the timing lock {os.environ.get(TIMING_LOCK_ENV)}: {exc.strerror or exc}"
        return Started(failure=SandboxResult("error", None, why, None, "", 0.0, []))
    workdir = tempfile.mkdtemp(prefix="kernelize-sbx-")
    read_fd, write_fd = os.pipe()
    ask_read, ask_write = os.pipe()  # the request, then the parent's follow-up answers, to the child
    ready_read, ready_write = os.pipe()  # one byte once the sandbox is up and Python runs in it
    command = [python, "-I", "-B", "-c", _BOOTSTRAP, str(PROJECT_ROOT), str(write_fd), str(ask_read)]
    command += [str(ready_write), target, device]
    command = [*wrapper, *command]
    cuda = device == "cuda"
    isolation = ["none", "audit"]
    if bwrap is not None:
        args = bwrap_args(workdir, python, readable, cuda, bwrap, tools=wrapper[:1])
        command = [bwrap, *args, "--", *command]
        isolation = [*ISOLATION, *(["cuda-devices"] if cuda else [])]
    out = tempfile.TemporaryFile(prefix="kernelize-stdio-")  # noqa: SIM115 (Started.close closes it)
    started = Started(workdir, out, read_fd, ask_write, ready_read, isolation, isolate, command[0])
    try:
        started.proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=child_env({**(env or {}), **_lock_env(lock_fds)}, workdir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd, ask_read, ready_write, *lock_fds),
            start_new_session=True,
        )
    except OSError as exc:
        why = f"{command[0]}: {exc.strerror or exc}"
        wall = time.monotonic() - begun
        started.close()
        if not isolate:
            return Started(failure=SandboxResult("crashed", None, why, None, "", wall, isolation))
        return Started(failure=_unavailable(why, wall))
    finally:
        for fd in (write_fd, ask_read, ready_write, *lock_fds):
            os.close(fd)
    return started


def timing_lock_fds() -> tuple[int, ...]:
    """Descriptors of the timing lock (:data:`TIMING_LOCK_ENV`) and its gate for one child, or none
    without a lock. Opened anew for each child: a lock held through one child's descriptor excludes
    the others'. Read-only: flock needs no more, and a child cannot write to them."""
    path = os.environ.get(TIMING_LOCK_ENV)
    if not path:
        return ()
    flags = os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC
    lock = os.open(path, flags, 0o644)
    try:
        return lock, os.open(path + ".gate", flags, 0o644)
    except OSError:
        os.close(lock)
        raise


def _lock_env(lock_fds: tuple[int, ...]) -> dict[str, str]:
    if not lock_fds:
        return {}
    return {TIMING_LOCK_FD_ENV: str(lock_fds[0]), TIMING_GATE_FD_ENV: str(lock_fds[1])}


def _child_lock_fds() -> tuple[int, int] | None:
    """In a child: its descriptors of the timing lock and its gate, or None without them."""
    lock, gate = os.environ.get(TIMING_LOCK_FD_ENV), os.environ.get(TIMING_GATE_FD_ENV)
    return (int(lock), int(gate)) if lock and gate else None


_SHARED = False  # whether this child holds its share of the timing lock


def _take_share(lock: int, gate: int) -> None:
    """A share of the lock, through the gate: it waits while a runner times or waits to."""
    fcntl.flock(gate, fcntl.LOCK_SH)
    fcntl.flock(lock, fcntl.LOCK_SH)
    fcntl.flock(gate, fcntl.LOCK_UN)


@contextlib.contextmanager
def gpu_shared() -> Iterator[None]:
    """In a child given the timing lock: a share of it for the block (nothing elsewhere)."""
    global _SHARED
    fds = _child_lock_fds()
    if fds is None or _SHARED:
        yield
        return
    _take_share(*fds)
    _SHARED = True
    try:
        yield
    finally:
        _SHARED = False
        fcntl.flock(fds[0], fcntl.LOCK_UN)


@contextlib.contextmanager
def gpu_paused() -> Iterator[None]:
    """In a child holding its share: none for the block (while it waits on the parent), taken
    again through the gate after."""
    fds = _child_lock_fds()
    if fds is None or not _SHARED:
        yield
        return
    fcntl.flock(fds[0], fcntl.LOCK_UN)
    try:
        yield
    finally:
        _take_share(*fds)


@contextlib.contextmanager
def gpu_alone(fds: tuple[int, ...] | None = None) -> Iterator[None]:
    """The whole timing lock for the block: no other holder of a share or of the lock meanwhile.
    ``fds``: the lock's and the gate's descriptors (a child's own by default; none: no lock). A
    child's share is let go before it waits at the gate (the runner there waits for that share) and
    taken again after."""
    fds = _child_lock_fds() if fds is None else fds
    if not fds:
        yield
        return
    lock, gate = fds[0], fds[1]
    shared = _SHARED
    if shared:
        fcntl.flock(lock, fcntl.LOCK_UN)
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_UN)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)


@dataclass
class Started:
    """A sandbox started by :func:`start`: its child imports the target and waits for the request."""

    workdir: str = ""
    out: BinaryIO | None = None  # the child's stdout and stderr
    read_fd: int = -1  # the child's frames, to the parent
    ask_write: int = -1  # the request and follow-up answers, to the child
    ready_read: int = -1
    isolation: list[str] = field(default_factory=list)
    isolate: bool = True
    executable: str = ""
    proc: subprocess.Popen[bytes] | None = None
    failure: SandboxResult | None = None  # it could not be started: what running it answers
    _closed: bool = False
    _ready: bytes = b""  # what the child said on the ready pipe: b"1" up, b"2" imports done

    def _said(self, what: bytes, timeout: float = 0.0) -> bool:
        deadline = time.monotonic() + timeout
        while what not in self._ready and not self._closed:
            left = deadline - time.monotonic()
            if not select.select([self.ready_read], [], [], max(left, 0.0))[0]:
                return False
            data = os.read(self.ready_read, 8)
            if not data:
                return False
            self._ready += data
        return what in self._ready

    def wait_warm(self, timeout: float) -> bool:
        """Wait until the child says its imports are done (the child's word: for scheduling and
        benchmarks, never for a verdict)."""
        return self.failure is None and self._said(b"2", timeout)

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        request: dict[str, Any],
        limits: Limits,
        *,
        collect: str | None = None,
        follow_up: FollowUp | None = None,
        collect_to: Path | None = None,
        asker: Asker | None = None,
    ) -> SandboxResult:
        """Send ``request``, wait for the result under ``limits`` (timed from now), then close.
        A sandbox runs one request: a second call answers an error. ``asker`` answers the child's
        :func:`ask` (without one, every ask is answered with nothing)."""
        if self.failure is not None:
            return self.failure
        proc, out = self.proc, self.out
        if self._closed or proc is None or out is None:
            return SandboxResult("error", None, "the sandbox was already used", None, "", 0.0, [])
        try:
            start = time.monotonic()
            spec = json.dumps({"request": request, "limits": limits.__dict__}).encode("utf-8")
            frames: list[bytes | None] = []
            marks: list[tuple[str, float]] = []
            reader = threading.Thread(
                target=_converse,
                args=(self.read_fd, self.ask_write, follow_up, frames, marks, start, spec, asker),
                daemon=True,
            )
            reader.start()
            killed_for = _watch(proc, limits, sandboxed=self.isolate)
            reader.join(timeout=5)
            wall = time.monotonic() - start
            tail = _tail(out)
            if not self._said(b"1") and killed_for is None:  # the target never ran
                why = _setup_failure(tail, proc.returncode, self.executable)
                if not self.isolate:
                    return SandboxResult("crashed", None, why, proc.returncode, tail, wall, self.isolation)
                return _unavailable(why, wall, tail)
            final = frames[-1] if frames else b""
            result = _result(proc.returncode, final, killed_for, limits, tail, wall, self.isolation)
            result.marks = marks
            if collect:
                _collect(Path(self.workdir) / collect, collect_to, result)
            return result
        finally:
            self.close()

    def close(self) -> None:
        """Kill the child if it still runs (a sandbox started and never used) and remove its folder."""
        if self._closed:
            return
        self._closed = True
        if self.proc is not None and self.proc.poll() is None:
            _kill(self.proc, self.isolate)
            self.proc.wait()
        for fd in (self.read_fd, self.ask_write, self.ready_read):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self.out is not None:
            self.out.close()
        if self.workdir:
            _remove(self.workdir)


def _unavailable(why: str, wall: float, tail: str = "") -> SandboxResult:
    reason = untrusted_text(f"{ISOLATION_UNAVAILABLE}: {why}", 500)
    return SandboxResult("error", None, reason, None, tail, wall, [])


def _setup_failure(tail: str, rc: int | None, executable: str) -> str:
    """bwrap's own complaint ("bwrap: …") when it gave one, else what happened."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("bwrap:")]
    if said:
        return said[-1]
    what = (
        f"exited with code {rc}" if rc is not None and rc >= 0 else f"died from {_describe_signal(rc or 0)}"
    )
    last = f" ({lines[-1][:200]})" if lines else ""
    return f"{os.path.basename(executable)} {what} before the sandbox started{last}"


def _collect(path: Path, collect_to: Path | None, result: SandboxResult) -> None:
    """Hand back the file the runner left: a plain file only (a link could point anywhere here)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return
    with contextlib.suppress(OSError):
        if collect_to is not None:
            os.replace(path, collect_to)
            result.blob_path = collect_to
        else:
            result.blob = path.read_bytes()


def _remove(workdir: str) -> None:
    shutil.rmtree(workdir, ignore_errors=True)
    if os.path.lexists(workdir):  # a runner that took the permissions off its own folders
        for dirpath, dirnames, _ in os.walk(workdir):
            for name in dirnames:
                sub = os.path.join(dirpath, name)
                if not os.path.islink(sub):
                    with contextlib.suppress(OSError):
                        os.chmod(sub, 0o700)
        shutil.rmtree(workdir, ignore_errors=True)


_PROBED: set[tuple[str, str, str]] = set()  # (bwrap, python, device) that passed the probe


def isolation_problem(device: str = "cpu", python: str | None = None) -> str:
    """'' when a sandbox can be set up here now, else why not, in one line (``isolation
    unavailable: …``). Runs a trivial target in a real sandbox; a success is remembered."""
    python = python or sys.executable
    key = (bwrap_executable(), python, device)
    if key in _PROBED:
        return ""
    probe = {"device": device}
    res = _run("runners.sandbox:_probe", probe, Limits(60, 1024), None, python, None, None, None, (), True)
    if res.outcome != "ok" or res.payload is None:
        reason = res.reason or "the sandbox's probe failed"
        if not reason.startswith(ISOLATION_UNAVAILABLE):
            reason = f"{ISOLATION_UNAVAILABLE}: the sandbox's probe failed: {reason}"
        return reason
    p = res.payload
    if p.get("pid", 99) > 8 or p.get("project_writable") or p.get("visible_pids", 99) > 8:
        return f"{ISOLATION_UNAVAILABLE}: the sandbox's probe was not isolated ({json.dumps(p)[:200]})"
    _PROBED.add(key)
    return ""


def refusal(device: str = "cpu") -> str:
    """Why a worker must not take a task now ('' when it may): it runs untrusted code only isolated."""
    if not _isolate:
        return f"{ISOLATION_UNAVAILABLE}: the sandbox is switched off in this process"
    return isolation_problem(device)


def probe_device() -> str:
    """The device a GPU host's probe binds: CUDA's device nodes when there are any."""
    return "cuda" if glob.glob("/dev/nvidia*") else "cpu"


# Frames on both pipes: an 8-byte little-endian length, then that many bytes of JSON.
_FRAME = struct.Struct("<Q")
_MAX_FRAME = 1 << 30
_MAX_MARKS = 64


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


def _converse(
    read_fd: int,
    ask_fd: int,
    follow_up: FollowUp | None,
    frames: list[bytes | None],
    marks: list[tuple[str, float]] | None = None,
    start: float = 0.0,
    request: bytes = b"",
    asker: Asker | None = None,
) -> None:
    """Send the child ``request``; read its frames; answer its one interim frame with
    ``follow_up``'s request. (In this thread: a child that never reads cannot block the watchdog.)

    A final frame lands in ``frames``; anything that is not a whole frame lands as None (the
    channel was corrupted). The child gets at most one follow-up: a second interim frame, or
    any when there is no ``follow_up``, is answered with an empty frame (stop). Mark frames are
    timestamped on arrival into ``marks`` (at most ``_MAX_MARKS``). An ask frame is answered by
    ``asker`` (given the marks so far), or with an empty frame."""
    asked = False
    try:
        _send_frame(ask_fd, request)
        while True:
            head = _read_exact(read_fd, _FRAME.size)
            if head is None:
                return
            (n,) = _FRAME.unpack(head)
            body = _read_exact(read_fd, n) if n <= _MAX_FRAME else None
            if body is None:
                frames.append(None)
                return
            if body.startswith(b'{"_mark"'):
                now = time.monotonic() - start
                try:
                    name = str(json.loads(body)["_mark"])[:40]
                except (ValueError, KeyError, TypeError):
                    frames.append(None)
                    return
                if marks is not None and len(marks) < _MAX_MARKS:
                    marks.append((name, now))
                continue
            if body.startswith(b'{"_ask"'):
                try:
                    what = str(json.loads(body)["_ask"])[:40]
                except (ValueError, KeyError, TypeError):
                    frames.append(None)
                    return
                reply = None
                if asker is not None:
                    try:
                        reply = asker(what, list(marks or []))
                    except Exception:  # the caller's bug must not hang the child
                        reply = None
                _send_frame(ask_fd, b"" if reply is None else json.dumps(reply).encode("utf-8"))
                continue
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


def _kill(proc: subprocess.Popen[bytes], sandboxed: bool) -> None:
    """Kill everything the evaluation started. Sandboxed: the pid namespace's init (bwrap's child),
    whose death takes every process in the namespace with it, then bwrap. Otherwise: the process
    group and whatever is still found below the child (a ``setsid`` escapes both)."""
    pids, _ = _tree(proc.pid, 1 << 20)
    targets = pids[1:2] if sandboxed else pids[::-1]
    for pid in [*targets, proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if not sandboxed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _over_memory(pids: list[int], memory_mb: int) -> bool:
    """Resident sizes count the pages forked processes share once per process: recount by PSS."""
    return sum(_pss_mb(p) for p in pids) > memory_mb


def _watch(proc: subprocess.Popen[bytes], limits: Limits, sandboxed: bool) -> str | None:
    """Wait for the child; kill the sandbox on time, memory or processes. Returns why it was killed."""
    deadline = time.monotonic() + limits.timeout_s
    while True:
        try:
            proc.wait(timeout=0.05)
            # Whatever the evaluation started dies with it: nothing outlives its sandbox (in a pid
            # namespace, the init's exit already took them all).
            if not sandboxed:
                _kill(proc, sandboxed)
            return None
        except subprocess.TimeoutExpired:
            pass
        why = None
        pids, tasks = _tree(proc.pid, limits.processes)
        if time.monotonic() > deadline:
            why = "timeout"
        elif tasks > limits.processes:
            why = "processes"
        elif sum(_rss_mb(p) for p in pids) > limits.memory_mb and _over_memory(pids, limits.memory_mb):
            why = "memory"
        if why:
            _kill(proc, sandboxed)
            proc.wait()
            return why


def _result(
    rc: int,
    raw: bytes | None,
    killed_for: str | None,
    limits: Limits,
    tail: str,
    wall: float,
    isolation: list[str],
) -> SandboxResult:
    def res(outcome: str, reason: str, payload: dict[str, Any] | None = None) -> SandboxResult:
        if payload:
            payload.pop("_isolation", None)  # a claim of the child's: the parent knows what it set up
        return SandboxResult(outcome, payload, reason, rc, tail, wall, list(isolation))

    if killed_for == "timeout":
        return res("timeout", f"exceeded the {limits.timeout_s:g} s time limit")
    if killed_for == "memory":
        return res("crashed", f"exceeded the {limits.memory_mb} MiB memory limit")
    if killed_for == "processes":
        return res("crashed", f"exceeded the limit of {limits.processes} processes and threads")
    payload: dict[str, Any] | None = None
    if raw is None:
        return res("crashed", "the evaluation's result channel was corrupted")
    if raw:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return res("crashed", "the evaluation's result channel was corrupted")
        if not isinstance(payload, dict):
            return res("crashed", "the evaluation's result channel was corrupted")
    if rc < 0:
        return res("crashed", f"the process died from {_describe_signal(rc)}")
    if rc > 128 and payload is None and "bwrap" in isolation:
        # bwrap exits with 128 + the signal that killed the evaluation.
        rc = -(rc - 128)
        return res("crashed", f"the process died from {_describe_signal(rc)}")
    if payload is None:
        return res("crashed", f"the process exited with code {rc} before reporting a result")
    if "_error" in payload:
        return res("error", untrusted_text(payload["_error"]), payload)
    return res("ok", "", payload)


# ---------------------------------------------------------------------------
# Inside the child


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

    def cap(which: int, value: int) -> None:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    if cpu_only:  # CUDA reserves far more address space than it uses
        cap(resource.RLIMIT_AS, int(limits["memory_mb"]) * 2**20)
    cap(resource.RLIMIT_CORE, 0)
    # Counted per sandbox: the user namespace is the sandbox's own (root is exempt: the parent's
    # watchdog counts for it).
    cap(resource.RLIMIT_NPROC, int(limits.get("processes", Limits.processes)))
    cap(resource.RLIMIT_FSIZE, int(limits.get("file_mb", Limits.file_mb)) * 2**20)


def _child_main() -> None:
    import importlib
    import traceback

    global _RESULTS, _ASK
    fd, ask_fd = int(sys.argv[2]), int(sys.argv[3])
    sys.addaudithook(_deny_network)
    module_name, _, func_name = sys.argv[5].partition(":")
    func: Any = None
    failure: BaseException | None = None
    try:  # the project's own code only: the request, and whatever it names, comes next
        module = importlib.import_module(module_name)
        warm_up = getattr(module, "warm_up", None)
        if callable(warm_up):
            with gpu_shared():
                warm_up(sys.argv[6])
        func = getattr(module, func_name)
    except BaseException as exc:
        failure = exc
    with contextlib.suppress(OSError):
        os.write(int(sys.argv[4]), b"2")
        os.close(int(sys.argv[4]))
    head = _read_exact(ask_fd, _FRAME.size)
    body = _read_exact(ask_fd, _FRAME.unpack(head)[0]) if head else None
    if not body:  # closed unused
        os._exit(0)
    spec = json.loads(body)
    request = spec["request"]
    _apply_limits(spec["limits"], cpu_only=request.get("device", "cpu") == "cpu")
    out = _RESULTS = os.fdopen(fd, "wb")
    _ASK = ask_fd
    try:
        if failure is not None:
            raise failure
        with gpu_shared():
            payload = func(request)
            if inspect.isgenerator(payload):
                payload = _run_generator(payload, out, ask_fd)
    except MemoryError:
        payload = {"_error": f"exceeded the {spec['limits']['memory_mb']} MiB memory limit"}
    except BaseException as exc:  # report, never hang: the parent decides what it means
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        payload = {"_error": f"evaluation failed: {last}"}
    with out:
        _write_frame(out, json.dumps(payload, default=str).encode("utf-8"))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: CUDA and Triton atexit hooks can hang or crash


_RESULTS: Any = None  # the child's result pipe, once open
_ASK = -1  # the child's end of the parent's answers, once the request is read


def ask(what: str) -> Any:
    """In a sandboxed child: ask the parent ``what`` and wait for its answer (None: nothing, and
    always outside a sandbox). The parent's asker sees the marks sent before it."""
    if _RESULTS is None or _ASK < 0:
        return None
    _write_frame(_RESULTS, json.dumps({"_ask": what}).encode("utf-8"))
    head = _read_exact(_ASK, _FRAME.size)
    (n,) = _FRAME.unpack(head) if head else (0,)
    body = _read_exact(_ASK, n) if n else b""
    return json.loads(body) if body else None


def mark(name: str) -> None:
    """In a sandboxed child: tell the parent, which timestamps it on arrival (no-op elsewhere)."""
    if _RESULTS is not None:
        _write_frame(_RESULTS, json.dumps({"_mark": name}).encode("utf-8"))


def _write_frame(out: Any, data: bytes) -> None:
    out.write(_FRAME.pack(len(data)) + data)
    out.flush()


def _run_generator(gen: Any, out: Any, ask_fd: int) -> Any:
    """Drive a target written as a generator: each value it yields goes to the parent as an
    interim frame, and the parent's answer (None for an empty frame) is sent back in."""
    try:
        interim = next(gen)
        while True:
            # the share goes before the parent hears of the interim (its answer may take a while,
            # and it may time another runner first: it must find no share held)
            with gpu_paused():
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


def _probe(request: dict[str, Any]) -> dict[str, Any]:
    """What :func:`isolation_problem` checks from inside: a pid namespace, a read-only project."""
    try:
        with open(PROJECT_ROOT / "runners" / ".kernelize-probe", "w"):
            pass
        os.remove(PROJECT_ROOT / "runners" / ".kernelize-probe")
        writable = True
    except OSError:
        writable = False
    visible = sum(1 for name in os.listdir("/proc") if name.isdigit())
    return {"pid": os.getpid(), "project_writable": writable, "visible_pids": visible}
