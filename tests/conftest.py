"""Shared helpers: the CLI as a subprocess, and a TCP listener that counts who called.

Helpers reach tests through fixtures (``cli``, ``start_listener``) so no test
module imports this file by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PROBLEMS = TESTS / "problems"
CANDIDATES = TESTS / "candidates"


def run_cli(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> tuple[int, str, str]:
    """``python -m bot.cli ARGS`` from the repository root: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


class Listener:
    """A TCP server on 127.0.0.1 (ephemeral port) that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(addr)
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="session")
def cli() -> Callable[..., tuple[int, str, str]]:
    """``cli(args, env=None, timeout=600) -> (rc, stdout, stderr)``."""
    return run_cli


@pytest.fixture(scope="session")
def start_listener() -> Iterator[Callable[[], Listener]]:
    """``start_listener() -> Listener``; every listener is closed at the end of the session."""
    started: list[Listener] = []

    def start() -> Listener:
        listener = Listener()
        started.append(listener)
        return listener

    yield start
    for listener in started:
        listener.close()
