"""GPU workers under load: one supervised worker per GPU, N engine tasks, where each one ran.

    python bench/gpu_workers.py --gpus 0,1 [--tasks N] [--problem FILE::CLASS] [--generator NAME]
                                [--device auto|cpu|cuda] [--small] [--compare] [--broker URL]
                                [--backend URL] [--timeout S] [--json PATH] [--markdown PATH]

Starts ``kernelize worker --queues gpu --gpus LIST --health-port P`` (or, where the web side is not
installed, the same supervisor as ``python -m runners.supervisor``), enqueues ``--tasks``
``kernelize_module`` tasks of one problem (default: the RMSNorm of bench/problems, template
generator) and waits for them all. Meanwhile it samples ``nvidia-smi`` (when there is one) every
half second and the supervisor's ``/healthz`` and ``/metrics`` every two seconds. Then it reads the
workers' JSON log: each task a worker runs ends in one ``task finished`` line carrying the task id
and the GPU the worker is pinned to (runners/observability.py).

What it reports, per configuration (``--compare``: the first GPU alone, then all of them):
tasks per minute from the first enqueue to the last result; how many tasks each GPU ran; whether
every task ran exactly once; each GPU's busiest and mean utilisation while the tasks ran; the
workers ``/healthz`` listed; the task counts ``/metrics`` gave. Exit status 1 when a task failed,
ran twice or never, or a worker was not up; 2 on bad arguments.

The broker is the embedded SQLite one by default (nothing to install), in a scratch folder;
``--broker``/``--backend`` take Redis or RabbitMQ URLs. ``--small`` binds the problem file's
``get_small_inputs`` (CPU runs: the workers then compute on the CPU through Triton's
interpreter, one "GPU" index each, which exercises everything but the GPUs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_PROBLEM = "bench/problems/rmsnorm.py::RMSNorm"
SMALL_BINDING = "\n\nget_inputs = get_small_inputs\nget_init_inputs = get_small_init_inputs\n"


@dataclass
class Sampled:
    """What the samplers saw while the tasks ran."""

    utilisation: dict[str, list[float]] = field(default_factory=dict)  # GPU index -> % samples
    health: list[dict[str, Any]] = field(default_factory=list)  # every /healthz answer
    metrics_tasks: dict[str, float] = field(default_factory=dict)  # the last /metrics task counts


@dataclass
class Outcome:
    """One configuration's run."""

    gpus: list[str]
    tasks: int
    wall_s: float
    tasks_per_minute: float
    ran_on: dict[str, int]  # GPU index -> tasks it ran
    ran_twice: list[str]  # task ids that finished more than once
    never_ran: list[str]  # task ids no worker logged
    failed: list[str]  # "task id: why" for tasks that did not return a result
    statuses: dict[str, int]  # the modules' status (ok, skipped, ...) -> tasks
    best: dict[str, int]  # the winning candidate (or "none") -> tasks
    busiest: dict[str, float]  # GPU index -> highest utilisation sampled (%)
    mean_busy: dict[str, float]  # GPU index -> mean utilisation sampled (%)
    workers_up: list[str]  # GPUs /healthz listed as up, at the busiest sample
    metrics_tasks: dict[str, float]
    task_seconds: dict[str, float]  # GPU index -> median seconds per task, from the log

    @property
    def ok(self) -> bool:
        return not (self.ran_twice or self.never_ran or self.failed) and sorted(self.workers_up) == sorted(
            self.gpus
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError as exc:  # not listening yet, or an error status
        return getattr(exc, "code", 0) or 0, str(exc)


def worker_command(gpus: list[str], port: int) -> list[str]:
    """``kernelize worker --gpus``, or its supervisor directly where the web side is not installed."""
    try:
        import bot.cli  # noqa: F401
    except ImportError:
        worker = [sys.executable, "-m", "runners.worker", "--queues", "gpu", "--hostname", "gpu{gpu}@%h"]
        gpu_list = ",".join(gpus)
        return [sys.executable, "-m", "runners.supervisor", "--gpus", gpu_list, "--health-port", str(port),
                "--check-isolation", "--", *worker]  # fmt: skip
    return [sys.executable, "-m", "bot.cli", "worker", "--queues", "gpu", "--gpus", ",".join(gpus),
            "--health-port", str(port)]  # fmt: skip


def _sample(port: int, stop: threading.Event, sampled: Sampled) -> None:
    smi = shutil.which("nvidia-smi")
    last_health = 0.0
    while not stop.is_set():
        if smi:
            query = [smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                out = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
                for line in out.splitlines():
                    index, _, busy = line.partition(",")
                    with contextlib.suppress(ValueError):
                        sampled.utilisation.setdefault(index.strip(), []).append(float(busy))
        if time.monotonic() - last_health >= 2.0:
            last_health = time.monotonic()
            status, body = _get(f"http://127.0.0.1:{port}/healthz")
            if status:
                with contextlib.suppress(ValueError):
                    sampled.health.append(json.loads(body))
            status, body = _get(f"http://127.0.0.1:{port}/metrics")
            if status == 200:
                sampled.metrics_tasks = metrics_task_counts(body)
        stop.wait(0.5)


def metrics_task_counts(text: str) -> dict[str, float]:
    """``kernelize_task_seconds_count`` by outcome, summed over tasks and workers."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("kernelize_task_seconds_count{"):
            continue
        labels, _, value = line.rpartition(" ")
        outcome = labels.split('outcome="', 1)[1].split('"', 1)[0] if 'outcome="' in labels else "?"
        counts[outcome] = counts.get(outcome, 0.0) + float(value)
    return counts


def finished_lines(log_text: str) -> list[dict[str, Any]]:
    """The workers' ``task finished`` lines (JSON), in order."""
    out = []
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("msg") == "task finished":
                out.append(entry)
    return out


def summarize(
    gpus: list[str],
    task_ids: list[str],
    results: dict[str, Any],
    finished: list[dict[str, Any]],
    sampled: Sampled,
    wall_s: float,
) -> Outcome:
    """One configuration's figures from what was sent, returned, logged and sampled."""
    seen: dict[str, int] = {}
    ran_on: dict[str, int] = dict.fromkeys(gpus, 0)
    seconds: dict[str, list[float]] = {}
    for entry in finished:
        tid = str(entry.get("task_id"))
        if tid not in task_ids:
            continue
        seen[tid] = seen.get(tid, 0) + 1
        gpu = str(entry.get("gpu", "?"))
        ran_on[gpu] = ran_on.get(gpu, 0) + 1
        seconds.setdefault(gpu, []).append(float(entry.get("seconds", 0.0)))
    statuses: dict[str, int] = {}
    best: dict[str, int] = {}
    failed = []
    for tid in task_ids:
        got = results.get(tid)
        if not isinstance(got, dict):
            failed.append(f"{tid}: {got}")
            continue
        for module in got.get("modules", []):
            statuses[module.get("status", "?")] = statuses.get(module.get("status", "?"), 0) + 1
            name = module.get("best") or "none"
            best[name] = best.get(name, 0) + 1
    busiest = {g: max(xs) for g, xs in sampled.utilisation.items() if xs}
    mean_busy = {g: round(statistics.mean(xs), 1) for g, xs in sampled.utilisation.items() if xs}
    up: list[str] = []
    for health in sampled.health:
        now = [str(w.get("gpu")) for w in health.get("workers", []) if w.get("up")]
        up = now if len(now) > len(up) else up
    return Outcome(
        gpus=gpus,
        tasks=len(task_ids),
        wall_s=round(wall_s, 2),
        tasks_per_minute=round(60.0 * len(task_ids) / wall_s, 2) if wall_s > 0 else 0.0,
        ran_on=ran_on,
        ran_twice=sorted(t for t, n in seen.items() if n > 1),
        never_ran=sorted(t for t in task_ids if t not in seen),
        failed=failed,
        statuses=statuses,
        best=best,
        busiest=busiest,
        mean_busy=mean_busy,
        workers_up=sorted(up),
        metrics_tasks=sampled.metrics_tasks,
        task_seconds={g: round(statistics.median(xs), 2) for g, xs in seconds.items()},
    )


def request_for(problem: str, small: bool, generator: str, device: str) -> dict[str, Any]:
    """The GPU request of one task: the problem's file as a bundle, its class, the generator."""
    from runners import bundle
    from runners.messages import GpuRequest

    file, _, class_name = problem.partition("::")
    path = (ROOT / file).resolve()
    if not path.is_file() or not class_name:
        raise SystemExit(f"gpu_workers: --problem takes FILE::CLASS of an existing file, got {problem!r}")
    source = path.read_text(encoding="utf-8") + (SMALL_BINDING if small else "")
    rel = path.name
    request = GpuRequest(
        bundle=bundle.pack({rel: source}),
        rel_path=rel,
        class_names=[class_name],
        generators=[generator],
        device=device,
    )
    return request.to_dict()


def run_config(args: argparse.Namespace, gpus: list[str], scratch: Path) -> Outcome:
    from runners.celery_app import GPU_QUEUE, KERNELIZE_TASK, make_celery

    folder = Path(tempfile.mkdtemp(prefix=f"gpus-{'-'.join(gpus)}-", dir=scratch))
    broker = args.broker or f"sqla+sqlite:///{folder / 'broker.db'}"
    backend = args.backend or f"db+sqlite:///{folder / 'results.db'}"
    port = _free_port()
    env = {
        **os.environ,
        "KERNELIZE_BROKER_URL": broker,
        "KERNELIZE_RESULT_BACKEND": backend,
        "KERNELIZE_LOG_FORMAT": "json",
    }
    log_path = folder / "workers.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            worker_command(gpus, port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    sampled, stop = Sampled(), threading.Event()
    try:
        _wait_up(port, gpus, proc, log_path, args.timeout)
        app = make_celery(broker, backend)
        request = request_for(args.problem, args.small, args.generator, args.device)
        sampler = threading.Thread(target=_sample, args=(port, stop, sampled), daemon=True)
        sampler.start()
        start = time.monotonic()
        sent = [
            app.send_task(KERNELIZE_TASK, kwargs={"request": request}, queue=GPU_QUEUE)
            for _ in range(args.tasks)
        ]
        results: dict[str, Any] = {}
        for result in sent:
            try:
                results[result.id] = result.get(timeout=max(1.0, args.timeout - (time.monotonic() - start)))
            except Exception as exc:  # a task that failed or never came back: reported, not raised
                results[result.id] = f"{type(exc).__name__}: {exc}"
        wall = time.monotonic() - start
        time.sleep(2.5)  # one more /healthz and /metrics sample after the last task
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    finished = finished_lines(log_path.read_text(encoding="utf-8", errors="replace"))
    return summarize(gpus, [r.id for r in sent], results, finished, sampled, wall)


def _wait_up(
    port: int, gpus: list[str], proc: subprocess.Popen[bytes], log_path: Path, timeout: float
) -> None:
    deadline = time.monotonic() + min(timeout, 300.0)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise SystemExit(f"gpu_workers: the workers exited with {proc.returncode}:\n{tail}")
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        if status == 200:
            with contextlib.suppress(ValueError):
                up = [str(w["gpu"]) for w in json.loads(body).get("workers", []) if w.get("up")]
                if sorted(up) == sorted(gpus):
                    time.sleep(3.0)  # a worker is up before Celery has connected to the broker
                    return
        time.sleep(0.5)
    raise SystemExit(f"gpu_workers: the workers for GPUs {','.join(gpus)} were not up within the time")


def markdown(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    lines = [
        f"Problem: `{args.problem}`{' (small inputs)' if args.small else ''}, generator `{args.generator}`, "
        f"device `{args.device}`, {args.tasks} tasks per configuration.",
        "",
        "| GPUs | tasks | wall s | tasks/min | ran on (GPU: tasks) | s per task (median) | ran twice "
        "| never ran | failed | modules (status: tasks) | best | busiest % | mean % | up in /healthz "
        "| /metrics tasks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:

        def pairs(d: dict[str, Any]) -> str:
            return ", ".join(f"{k}: {v}" for k, v in sorted(d.items())) or "—"

        lines.append(
            f"| {','.join(o.gpus)} | {o.tasks} | {o.wall_s} | {o.tasks_per_minute} | {pairs(o.ran_on)} "
            f"| {pairs(o.task_seconds)} | {len(o.ran_twice)} | {len(o.never_ran)} | {len(o.failed)} "
            f"| {pairs(o.statuses)} | {pairs(o.best)} | {pairs(o.busiest)} | {pairs(o.mean_busy)} "
            f"| {','.join(o.workers_up) or '—'} | {pairs(o.metrics_tasks)} |"
        )
    if len(outcomes) == 2 and outcomes[0].tasks_per_minute:
        ratio = outcomes[1].tasks_per_minute / outcomes[0].tasks_per_minute
        lines += ["", f"Throughput with {len(outcomes[1].gpus)} workers: {ratio:.2f}x one worker's."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", required=True, help="comma-separated GPU indices, e.g. 0,1")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--problem", default=DEFAULT_PROBLEM, help="FILE::CLASS, relative to the repository")
    parser.add_argument("--generator", default="template")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--small", action="store_true", help="bind the file's get_small_inputs (CPU runs)")
    parser.add_argument("--compare", action="store_true", help="the first GPU alone, then all of them")
    parser.add_argument("--broker", default=None, help="default: the embedded SQLite broker")
    parser.add_argument("--backend", default=None, help="default: SQLite results beside it")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for all the tasks of a run")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    from runners import supervisor

    try:
        args.gpu_list = supervisor.parse_gpus(args.gpus)
    except supervisor.GpuListError as exc:
        parser.error(str(exc))
    if args.tasks < 1:
        parser.error(f"--tasks must be at least 1, got {args.tasks}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configs = (
        [args.gpu_list[:1], args.gpu_list] if args.compare and len(args.gpu_list) > 1 else [args.gpu_list]
    )
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="kernelize-gpu-workers-") as scratch:
        for gpus in configs:
            outcomes.append(run_config(args, gpus, Path(scratch)))
    page = markdown(outcomes, args)
    print(page, end="")
    if args.markdown:
        Path(args.markdown).write_text(page, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=2), encoding="utf-8")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
