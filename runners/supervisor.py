"""One worker process per GPU: ``python -m runners.supervisor --gpus 0,1 [--health-port N] -- COMMAND...``.

``kernelize worker --queues gpu --gpus 0,1`` runs this with ``python -m runners.worker`` as the
command. Each child sees only its own GPU (``CUDA_VISIBLE_DEVICES``); ``{gpu}`` in the command is
replaced by the child's GPU index (its Celery node name, ``gpu0@host``).

- SIGTERM or SIGINT: forwarded to every child as SIGTERM, Celery's warm shutdown: a child finishes
  its current task, acknowledges it and exits. A second signal kills the children (SIGKILL): the
  current task was never acknowledged, so the broker delivers it again (late acks; Redis after its
  visibility timeout). Not Celery's cold shutdown (SIGQUIT): with the solo pool a GPU worker uses,
  Celery 5.7 fails the running task there ("solo.TaskPool does not implement kill_job"), which
  acknowledges it and loses it.
- A child that exits while nobody asked it to is started again after a pause that doubles with each
  quick failure (1 s, 2 s, 4 s … at most 60 s) and starts over once a child has run for a minute.
- ``--health-port``: ``GET /healthz`` (200 when every child is running, else 503, with each child's
  state as JSON) and ``GET /metrics`` (Prometheus: the children's task metrics and the supervisor's
  own), on 0.0.0.0.
- ``--check-isolation`` (what ``kernelize worker --gpus`` does): no child starts while the sandbox
  cannot be set up on this host (runners/sandbox.py); ``/healthz`` says why (503, ``isolation``)
  and the check is repeated every 30 s, so a fixed host starts its workers without a restart.

Imports neither Celery nor torch: the supervisor only starts, watches and stops processes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from runners.observability import GPU_ENV

log = logging.getLogger("kernelize.supervisor")

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_AFTER_S = 60.0  # a child that ran this long failed for a new reason: its backoff starts over
POLL_S = 0.2
RECHECK_S = 30.0  # how often a host that cannot isolate is checked again


class GpuListError(ValueError):
    """``--gpus`` cannot be used; the message says why in one line."""


def parse_gpus(text: str) -> list[str]:
    """``"0,1,3"`` -> ``["0", "1", "3"]``: device indices, each once."""
    items = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise GpuListError(f"--gpus takes comma-separated GPU indices such as 0,1, got {text!r}")
    bad = [item for item in items if not item.isdigit()]
    if bad:
        raise GpuListError(f"--gpus: {bad[0]!r} is not a GPU index (0, 1, …)")
    normalized = [str(int(item)) for item in items]
    repeated = sorted({g for g in normalized if normalized.count(g) > 1}, key=int)
    if repeated:
        raise GpuListError(f"--gpus: GPU {repeated[0]} is listed twice (one worker process per GPU)")
    return normalized


def backoff_s(failures: int) -> float:
    """Pause before restarting a child after ``failures`` quick failures in a row (1, 2, 4, … 60 s)."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, failures - 1)))


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the supervisor dies, so no worker is orphaned."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Child:
    gpu: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    failures: int = 0  # quick failures in a row, for the backoff
    start_after: float = 0.0
    last_exit: int | None = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Supervisor:
    gpus: Sequence[str]
    command: Sequence[str]  # "{gpu}" is replaced by each child's GPU index
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    metrics_dir: str | None = None  # the children's Prometheus multiprocess folder
    # '' when untrusted code can be isolated here, else why not: no child starts until it says ''.
    check: Callable[[], str] | None = None
    isolation: str = field(default="", init=False)
    children: list[Child] = field(init=False)
    signals: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.children = [Child(gpu) for gpu in self.gpus]

    def _start(self, child: Child) -> None:
        env = {**self.env, "CUDA_VISIBLE_DEVICES": child.gpu, GPU_ENV: child.gpu}
        if self.metrics_dir:
            env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir
        argv = [part.replace("{gpu}", child.gpu) for part in self.command]
        # A session of its own: a terminal's Ctrl-C reaches the supervisor only, which forwards it once.
        child.proc = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        child.started_at = time.monotonic()
        log.info("worker started", extra={"gpu": child.gpu, "pid": child.proc.pid})

    def _reap(self, child: Child, now: float) -> None:
        """A child exited without being asked to: schedule its restart."""
        assert child.proc is not None
        code = child.proc.returncode
        if self.metrics_dir:
            _mark_dead(child.proc.pid, self.metrics_dir)
        ran = now - child.started_at
        child.failures = 1 if ran >= STABLE_AFTER_S else child.failures + 1
        child.start_after = now + backoff_s(child.failures)
        child.last_exit, child.proc = code, None
        child.restarts += 1
        log.error(
            "worker exited unexpectedly; restarting in %.0f s",
            child.start_after - now,
            extra={"gpu": child.gpu, "exit_code": code, "ran_s": round(ran, 1)},
        )

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only counted here; the loop in run() forwards it (no locks or logging inside a handler).
        self.signals += 1

    def _forward(self, nth: int) -> None:
        forward = signal.SIGTERM if nth == 1 else signal.SIGKILL
        what = "warm shutdown, finishing current tasks" if nth == 1 else "stopping now, tasks are redelivered"
        log.warning("stop requested (%s): %s", signal.Signals(forward).name, what)
        for child in self.children:
            if child.running():
                assert child.proc is not None
                child.proc.send_signal(forward)

    def run(self) -> int:
        """Start the children and watch them until a signal stops everything; 0 when all stopped cleanly."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        forwarded, codes = 0, []
        checked_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if (
                    self.check is not None
                    and not forwarded
                    and (checked_at is None or (self.isolation and now - checked_at >= RECHECK_S))
                ):
                    self._check_isolation()
                    checked_at = now
                with self._lock:
                    if self.signals > forwarded:
                        forwarded = self.signals
                        self._forward(forwarded)
                    for child in self.children:
                        if child.proc is not None and child.proc.poll() is not None:
                            if forwarded:
                                codes.append(child.proc.returncode)
                                log.info("worker stopped", extra={"gpu": child.gpu, "exit_code": codes[-1]})
                                child.last_exit, child.proc = child.proc.returncode, None
                            else:
                                self._reap(child, now)
                        elif (
                            child.proc is None
                            and now >= child.start_after
                            and not (forwarded or self.isolation)
                        ):
                            self._start(child)
                    if forwarded and not any(c.running() for c in self.children):
                        return 0 if all(code == 0 for code in codes) else 1
                time.sleep(POLL_S)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _check_isolation(self) -> None:
        assert self.check is not None
        why = self.check()
        if why and why != self.isolation:
            log.error("no worker starts: %s", why)
        elif self.isolation and not why:
            log.info("the sandbox works now: starting the workers")
        with self._lock:
            self.isolation = why

    def health(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            workers = [
                {
                    "gpu": c.gpu,
                    "pid": c.proc.pid if c.proc is not None else None,
                    "up": c.running(),
                    "uptime_s": round(now - c.started_at, 1) if c.running() else 0.0,
                    "restarts": c.restarts,
                    "last_exit": c.last_exit,
                }
                for c in self.children
            ]
        state: dict[str, Any] = {"ok": all(w["up"] for w in workers) and not self.signals, "workers": workers}
        if self.check is not None:
            state["ok"] = state["ok"] and not self.isolation
            state["isolation"] = self.isolation or "ok"
        return state


def _mark_dead(pid: int, metrics_dir: str) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]


def _metrics_text(supervisor: Supervisor) -> bytes:
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, multiprocess

    registry = CollectorRegistry()
    if supervisor.metrics_dir:
        multiprocess.MultiProcessCollector(registry, path=supervisor.metrics_dir)  # type: ignore[no-untyped-call]
    up = Gauge("kernelize_worker_up", "1 while the GPU's worker process runs", ["gpu"], registry=registry)
    restarts = Counter(
        "kernelize_worker_restarts", "Unexpected worker exits, restarted", ["gpu"], registry=registry
    )
    for worker in supervisor.health()["workers"]:
        up.labels(worker["gpu"]).set(1 if worker["up"] else 0)
        restarts.labels(worker["gpu"]).inc(worker["restarts"])
    return bytes(generate_latest(registry))


def serve_health(supervisor: Supervisor, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """``/healthz`` and ``/metrics`` in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                state = supervisor.health()
                body, kind = json.dumps(state).encode(), "application/json"
                status = 200 if state["ok"] else 503
            elif self.path == "/metrics":
                body, status, kind = _metrics_text(supervisor), 200, "text/plain; version=0.0.4"
            else:
                body, status, kind = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: no access log
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def supervise(
    gpus: Sequence[str],
    command: Sequence[str],
    *,
    health_port: int | None = None,
    on_ready: Callable[[Supervisor], None] | None = None,
    check: Callable[[], str] | None = None,
) -> int:
    """Run one ``command`` per GPU until SIGTERM/SIGINT; the children's metrics go to a private folder.
    ``check``: '' when the children may start, else why not (see ``--check-isolation``)."""
    metrics_dir = tempfile.mkdtemp(prefix="kernelize-metrics-")
    supervisor = Supervisor(gpus, command, metrics_dir=metrics_dir, check=check)
    server = serve_health(supervisor, health_port) if health_port else None
    try:
        if on_ready is not None:
            on_ready(supervisor)
        return supervisor.run()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", required=True, help="comma-separated GPU indices, e.g. 0,1")
    parser.add_argument("--health-port", type=int, default=None, help="serve /healthz and /metrics here")
    parser.add_argument(
        "--check-isolation", action="store_true", help="start no child while the sandbox cannot be set up"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND... ({gpu}: the GPU index)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        gpus = parse_gpus(args.gpus)
    except GpuListError as exc:
        print(f"kernelize: error: {exc}", file=sys.stderr)
        return 2
    if not command:
        print("kernelize: error: no command to run (-- COMMAND...)", file=sys.stderr)
        return 2
    from runners.observability import configure_logging

    configure_logging()
    return supervise(
        gpus, command, health_port=args.health_port, check=isolation_check if args.check_isolation else None
    )


def isolation_check() -> str:
    """'' when this host can sandbox untrusted code (bwrap; the GPU's device nodes), else why not."""
    from runners import sandbox  # the standard library only: no torch, no Celery

    return sandbox.refusal(sandbox.probe_device())


if __name__ == "__main__":
    sys.exit(main())
