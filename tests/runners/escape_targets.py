"""Hostile targets for tests/runners/test_isolation.py: each tries one way out of the sandbox.

The sandbox child imports this file as ``tests.runners.escape_targets`` (the tests folder is
passed as ``readable``). Each target says what it tried and what happened; the tests check the
outcome from outside (files, processes, the listener, everything returned). Standard library
only, so a child starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def write_everywhere(req: dict[str, Any]) -> dict[str, Any]:
    """Write each of ``req["paths"]`` (and the working directory, which must work)."""
    done: dict[str, str] = {}
    for path in [*req["paths"], os.path.join(os.getcwd(), "mine.txt")]:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w") as fh:
                fh.write("import os; os.system('echo pwned')\n")
            done[path] = "written"
        except OSError as exc:
            done[path] = _error(exc)
    return {"done": done}


def _spawn(marker: str, setsid: bool) -> int:
    argv = [sys.executable, "-c", "import time; time.sleep(600)", marker]
    return os.posix_spawn(sys.executable, argv, {}, setsid=setsid)


def _double_fork(marker: str) -> None:
    """A classic daemon: fork, setsid, fork again, the middle process exits."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", marker])
        os._exit(0)
    os.waitpid(pid, 0)


def daemonize(req: dict[str, Any]) -> Any:
    """Leave daemons behind (``posix_spawn`` with ``setsid``, a double fork), let the parent see
    them, then finish or hang."""
    _spawn(req["marker"], setsid=True)
    _spawn(req["marker"], setsid=False)
    _double_fork(req["marker"])
    yield {"spawned": 3}
    while req.get("hang"):
        time.sleep(1)
    return {"spawned": 3}


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16).decode("latin-1")
    except OSError as exc:
        return _error(exc)


def steal_secrets(req: dict[str, Any]) -> dict[str, Any]:
    """Everything a hostile evaluation could read: its environment, every environ in /proc (its
    ancestors' first), and the files the test names (a .env, a key beside the working dir)."""
    loot: dict[str, str] = {"environ": repr(dict(os.environ))}
    pid = os.getpid()
    while pid > 1:  # the ancestors, by /proc/<pid>/status
        status = _read(f"/proc/{pid}/status")
        pid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
        loot[f"ancestor {pid}"] = _read(f"/proc/{pid}/environ")
    for name in os.listdir("/proc"):
        if name.isdigit():
            loot[f"/proc/{name}/environ"] = _read(f"/proc/{name}/environ")
    parent = os.path.dirname(os.getcwd())
    for path in [*req.get("files", []), os.path.join(parent, ".env"), os.path.join(parent, "id_rsa")]:
        loot[path] = _read(path)
    try:
        loot["listing of the parent folder"] = repr(os.listdir(parent))
    except OSError as exc:
        loot["listing of the parent folder"] = _error(exc)
    text = "\n".join(f"{k}: {v}" for k, v in loot.items())
    print(text, flush=True)  # into the stdout tail
    if req.get("raise"):
        raise RuntimeError(text)  # into the reason
    return {"loot": loot, "reason": text, "notes": [text]}


def connect_socket(req: dict[str, Any]) -> dict[str, Any]:
    try:
        with socket.create_connection(("127.0.0.1", int(req["port"])), timeout=3) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return {"connected": True}
    except Exception as exc:
        return {"connected": False, "error": _error(exc)}


def connect_ctypes(req: dict[str, Any]) -> dict[str, Any]:
    """connect(2) through libc: no audit hook sees it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    if fd < 0:
        return {"connected": False, "error": f"socket: {os.strerror(ctypes.get_errno())}"}
    addr = struct.pack("!HH4s8x", socket.AF_INET, int(req["port"]), socket.inet_aton("127.0.0.1"))
    # sockaddr_in's family is in host byte order.
    addr = struct.pack("=H", socket.AF_INET) + addr[2:]
    rc = libc.connect(fd, ctypes.c_char_p(addr), len(addr))
    err = ctypes.get_errno()
    os.close(fd)
    return {"connected": rc == 0, "error": "" if rc == 0 else os.strerror(err)}


def connect_spawned(req: dict[str, Any]) -> dict[str, Any]:
    """A fresh interpreter (no audit hook of ours in it) tries the connection."""
    code = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {int(req['port'])}), timeout=3).close()\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    return {"connected": out.stdout.startswith("connected"), "output": out.stdout + out.stderr}


def fork_bomb(req: dict[str, Any]) -> dict[str, Any]:
    """Fork up to ``req["most"]`` sleepers (bounded: a failed containment cannot take the host down;
    each sleeper carries the test's marker and exits by itself after a minute)."""
    forked, error = 0, ""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", req["marker"]]
    for _ in range(int(req["most"])):
        try:
            pid = os.fork()
        except OSError as exc:
            error = _error(exc)
            break
        if pid == 0:
            try:
                os.execv(sys.executable, argv)
            finally:
                os._exit(1)
        forked += 1
        time.sleep(0.001)
    if error:
        time.sleep(2)  # let the parent's watchdog see the sleepers before answering
    return {"forked": forked, "error": error}


def memory_hog(req: dict[str, Any]) -> dict[str, Any]:
    """Spread ``req["total_mb"]`` over ``req["processes"]`` forked processes, each touching its
    pages and holding them: no single process is large."""
    per = int(req["total_mb"]) // int(req["processes"]) * 2**20
    kids = []
    for _ in range(int(req["processes"])):
        pid = os.fork()
        if pid == 0:
            block = bytearray(per)
            block[::4096] = b"\x01" * len(range(0, per, 4096))
            time.sleep(60)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    return {"held_mb": int(req["total_mb"])}


def side_effect(req: dict[str, Any]) -> dict[str, Any]:
    """Proof that a target ran at all: a file where the test looks (writable only unsandboxed)."""
    Path(req["path"]).write_text("it ran\n")
    return {"ran": True}


def write_kernel_settings(req: dict[str, Any]) -> dict[str, Any]:
    """Write each of ``req["paths"]`` (sysctls under /proc/sys, /sys) with the value it already has:
    a sandbox whose uid is the host's root must still change nothing of the host's kernel."""
    done: dict[str, str] = {}
    for path in req["paths"]:
        try:
            with open(path) as fh:
                current = fh.read()
            with open(path, "w") as fh:
                fh.write(current)
            done[path] = "written"
        except OSError as exc:
            done[path] = _error(exc)
    return {"done": done}


def reach_neighbours(req: dict[str, Any]) -> dict[str, Any]:
    """Go after a runner started ahead for the next candidate: kill every process in sight, write
    into its working directory (``req["paths"]``, as seen from the host), signal its process group."""
    import signal

    if os.getpid() > 8:  # not in a pid namespace of its own: killing all in sight would hit the host
        raise RuntimeError("refusing to run outside a sandbox")
    me = {os.getpid(), os.getppid(), 1}
    seen = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    killed = []
    for pid in seen:
        if pid in me:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    for pgid in req.get("groups", []):
        try:
            os.killpg(pgid, signal.SIGKILL)
            killed.append(-pgid)
        except OSError:
            pass
    written: dict[str, str] = {}
    for path in req["paths"]:
        try:
            with open(os.path.join(path, "planted.py"), "w") as fh:
                fh.write("raise SystemExit('planted')\n")
            written[path] = "written"
        except OSError as exc:
            written[path] = _error(exc)
    return {"seen": seen, "killed": killed, "written": written}
