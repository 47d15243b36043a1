"""``kernelize worker --gpus``: one real Celery worker per GPU on the local Redis, stopped and restarted.

Redis database 15 is this file's own, flushed around each test. The workers run
tests/runners/supervised_tasks.py (a slow task that records its runs) under
``python -m runners.supervisor``, the same supervisor ``kernelize worker --gpus`` runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runners.supervisor import BACKOFF_MAX_S, GpuListError, backoff_s, parse_gpus

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REDIS_URL = "redis://127.0.0.1:6379/15"
READY, STARTED, FINISHED = "kz-test:ready", "kz-test:started", "kz-test:finished"
WORKER = [
    *("-m", "celery", "-A", "supervised_tasks", "worker", "-Q", "gpu", "--pool", "solo"),
    *("--hostname", "gpu{gpu}@%h", "--without-mingle", "--without-gossip", "--without-heartbeat"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def redis_client() -> Iterator[Any]:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
    except OSError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def _entries(client: Any, key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(key, 0, -1)]


class Supervised:
    """``python -m runners.supervisor`` in a subprocess, its log in a file."""

    def __init__(self, tmp_path: Path, gpus: str, command: list[str] | None = None, **env: str) -> None:
        self.port = _free_port()
        self.log_path = tmp_path / f"supervisor-{self.port}.log"
        base = [sys.executable, "-m", "runners.supervisor", "--gpus", gpus, "--health-port", str(self.port)]
        environ = {
            **os.environ,
            "KERNELIZE_BROKER_URL": REDIS_URL,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}",
            **env,
        }
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*base, "--", *(command or [sys.executable, *WORKER])],
                cwd=tmp_path,
                env=environ,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)

    def health(self) -> dict[str, Any] | None:
        try:
            return dict(self.get("/healthz").json())
        except httpx.HTTPError:
            return None

    def stop(self, *signals: signal.Signals, timeout: float = 60) -> int:
        for signum in signals:
            self.proc.send_signal(signum)
            time.sleep(0.5)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the supervisor did not stop:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    started: list[Supervised] = []

    def start(gpus: str, **env: str) -> Supervised:
        started.append(Supervised(tmp_path, gpus, **env))
        return started[-1]

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(10)


def _send_slow(tag: str, first_s: float, again_s: float = 0.2) -> str:
    from runners.celery_app import make_celery

    app = make_celery(REDIS_URL)
    result = app.send_task("kernelize.test.slow", args=[tag, first_s, again_s], queue="gpu")
    return str(result.id)


def _nothing_left(client: Any) -> bool:
    """Nothing waiting in the gpu queue and nothing delivered but unacknowledged (kombu's Redis keys)."""
    return client.llen("gpu") == 0 and client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0


def test_gpu_lists() -> None:
    assert parse_gpus("0") == ["0"]
    assert parse_gpus(" 0, 1,3 ") == ["0", "1", "3"]
    assert parse_gpus("01,2") == ["1", "2"]
    for bad, why in [
        ("", "comma-separated"),
        ("0,,1", "comma-separated"),
        ("0,", "comma-separated"),
        ("a", "'a' is not a GPU index"),
        ("-1", "'-1' is not a GPU index"),
        ("0,1,0", "GPU 0 is listed twice"),
    ]:
        with pytest.raises(GpuListError, match=why):
            parse_gpus(bad)


def test_backoff_doubles_up_to_a_minute() -> None:
    assert [backoff_s(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_s(100) == BACKOFF_MAX_S


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queues", "gpu", "--gpus", "0,,1"], "--gpus takes comma-separated GPU indices"),
        (["--queues", "gpu", "--gpus", "x"], "'x' is not a GPU index"),
        (["--queues", "gpu", "--gpus", "1,1"], "GPU 1 is listed twice"),
        (["--queues", "github", "--gpus", "0"], "use them with --queues gpu"),
        (["--queues", "gpu", "--health-port", "9100"], "--health-port needs --gpus"),
        (["--queues", "gpu", "--gpus", "0", "--health-port", "0"], "--health-port must be between"),
        (["--queues", "gpu", "--gpus", "0", "--concurrency", "2"], "drop --concurrency"),
    ],
)
def test_bad_worker_options_exit_2_with_one_line(
    cli: Callable[..., tuple[int, str, str]], args: list[str], message: str
) -> None:
    code, out, err = cli(["worker", *args], timeout=60)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("kernelize: error: ") and message in err, err


def test_one_worker_per_gpu_each_pinned_to_its_own(redis_client: Any, supervised: Any) -> None:
    s = supervised("0,1")
    ready = _wait(
        "two workers", lambda: len(_entries(redis_client, READY)) == 2 and _entries(redis_client, READY)
    )
    assert sorted(r["gpu"] for r in ready) == ["0", "1"]
    assert sorted(r["hostname"].split("@")[0] for r in ready) == ["gpu0", "gpu1"]
    health = _wait("healthy", lambda: (h := s.health()) and h["ok"] and h)
    assert {w["gpu"]: w["pid"] for w in health["workers"]} == {r["gpu"]: r["pid"] for r in ready}
    assert s.get("/healthz").status_code == 200
    assert s.stop(signal.SIGTERM) == 0, s.log()
    for r in ready:  # the children are gone too
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)


def test_sigterm_lets_the_task_in_flight_finish_once(redis_client: Any, supervised: Any) -> None:
    s = supervised("0")
    _wait("the worker", lambda: _entries(redis_client, READY))
    task_id = _send_slow("warm", first_s=3)
    _wait("the task to start", lambda: _entries(redis_client, STARTED))
    assert s.stop(signal.SIGTERM) == 0, s.log()
    finished = _entries(redis_client, FINISHED)
    assert [(f["tag"], f["task_id"]) for f in finished] == [("warm", task_id)], s.log()
    assert len(_entries(redis_client, STARTED)) == 1
    assert _nothing_left(redis_client)  # acknowledged: it will never run again


def test_a_worker_killed_mid_task_is_restarted_and_its_task_redelivered_once(
    redis_client: Any, supervised: Any
) -> None:
    # Redis gives an unacknowledged task back after the visibility timeout (kombu checks every 10 s).
    s = supervised("0", KERNELIZE_VISIBILITY_TIMEOUT_S="3")
    _wait("the worker", lambda: _entries(redis_client, READY))
    _send_slow("killed", first_s=60, again_s=0.5)
    started = _wait("the task to start", lambda: _entries(redis_client, STARTED))
    os.kill(started[0]["pid"], signal.SIGKILL)  # a crash: no warm shutdown, no acknowledgement
    ready = _wait(
        "a new worker", lambda: len(_entries(redis_client, READY)) == 2 and _entries(redis_client, READY)
    )
    assert ready[1]["gpu"] == "0" and ready[1]["pid"] != started[0]["pid"]
    finished = _wait("the task to run again", lambda: _entries(redis_client, FINISHED), timeout=90)
    assert [f["tag"] for f in finished] == ["killed"]
    assert [w["restarts"] for w in s.health()["workers"]] == [1]
    assert 'kernelize_worker_restarts_total{gpu="0"} 1.0' in s.get("/metrics").text
    assert s.stop(signal.SIGTERM) == 0, s.log()
    assert len(_entries(redis_client, FINISHED)) == 1 and len(_entries(redis_client, STARTED)) == 2
    assert _nothing_left(redis_client)
    assert "worker exited unexpectedly" in s.log()


def test_a_second_signal_stops_now_and_the_task_comes_back(redis_client: Any, supervised: Any) -> None:
    s = supervised("0", KERNELIZE_VISIBILITY_TIMEOUT_S="3")
    _wait("the worker", lambda: _entries(redis_client, READY))
    _send_slow("cold", first_s=60, again_s=0.5)
    _wait("the task to start", lambda: _entries(redis_client, STARTED))
    t0 = time.monotonic()
    s.stop(signal.SIGTERM, signal.SIGINT, timeout=30)  # warm, then cold: it does not wait 60 s
    assert time.monotonic() - t0 < 30
    assert _entries(redis_client, FINISHED) == []
    again = supervised("0", KERNELIZE_VISIBILITY_TIMEOUT_S="3")
    finished = _wait("the task to run again", lambda: _entries(redis_client, FINISHED), timeout=90)
    assert [f["tag"] for f in finished] == ["cold"]
    assert again.stop(signal.SIGTERM) == 0, again.log()
    assert len(_entries(redis_client, FINISHED)) == 1
    assert _nothing_left(redis_client)


def test_metrics_of_the_children(redis_client: Any, supervised: Any) -> None:
    s = supervised("0")
    _wait("the worker", lambda: _entries(redis_client, READY))
    _send_slow("metrics", first_s=0.1)
    _wait("the task", lambda: _entries(redis_client, FINISHED))
    text = _wait(
        "the task's metrics", lambda: "kernelize_task_seconds_count" in (t := s.get("/metrics").text) and t
    )
    assert 'kernelize_task_seconds_count{outcome="success",task="kernelize.test.slow"} 1.0' in text
    assert 'kernelize_candidates_total{generator="files",status="correct"} 1.0' in text
    assert 'kernelize_worker_up{gpu="0"} 1.0' in text
    assert s.stop(signal.SIGTERM) == 0


def test_kernelize_worker_gpus_runs_the_engine_task(redis_client: Any, tmp_path: Path) -> None:
    """The real command: ``kernelize worker --queues gpu --gpus 0`` takes a kernelize_module task."""
    from runners.celery_app import KERNELIZE_TASK, make_celery
    from runners.messages import GpuRequest

    port = _free_port()
    env = {**os.environ, "KERNELIZE_BROKER_URL": REDIS_URL, "KERNELIZE_RESULT_BACKEND": REDIS_URL}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        command = [sys.executable, "-m", "bot.cli", "worker", "--queues", "gpu", "--gpus", "0"]
        proc = subprocess.Popen(
            [*command, "--health-port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        app = make_celery(REDIS_URL, REDIS_URL)
        request = GpuRequest(bundle="not a bundle", rel_path="m.py", class_names=["M"], device="cpu")
        result = app.send_task(KERNELIZE_TASK, kwargs={"request": request.to_dict()}, queue="gpu")
        [module] = result.get(timeout=120)["modules"]
        assert module["status"] == "skipped"
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert [(w["gpu"], w["up"]) for w in health["workers"]] == [("0", True)]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert code == 0, log_path.read_text()[-4000:]
    assert any(line.get("task_id") == result.id for line in lines)  # JSON lines carry the task id


def test_a_host_that_cannot_isolate_starts_no_worker(tmp_path: Path) -> None:
    """``kernelize worker --gpus`` where the sandbox cannot be set up: no worker process takes a
    task (none starts, so no broker is needed), and /healthz says why."""
    port = _free_port()
    env = {**os.environ, "KERNELIZE_BWRAP": "/bin/false", "KERNELIZE_BROKER_URL": "redis://127.0.0.1:1/0"}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        command = [sys.executable, "-m", "bot.cli", "worker", "--queues", "gpu", "--gpus", "0,1"]
        proc = subprocess.Popen(
            [*command, "--health-port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:

        def health() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            except httpx.HTTPError:
                return None

        response = _wait("/healthz", health)
        time.sleep(1)  # a worker that was going to start would have by now
        response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert response.status_code == 503
        state = response.json()
        assert state["ok"] is False
        assert (
            state["isolation"] == "isolation unavailable: false exited with code 1 before the sandbox started"
        )
        assert [(w["gpu"], w["up"], w["pid"]) for w in state["workers"]] == [
            ("0", False, None),
            ("1", False, None),
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, log_path.read_text()[-4000:]
    assert "no worker starts: isolation unavailable" in log_path.read_text()


@pytest.mark.parametrize(
    ("command", "who"),
    [
        (["-m", "runners.worker", "--queues", "gpu"], "this GPU worker"),
        (["-m", "bot.cli", "worker", "--queues", "gpu"], "this GPU worker"),
        # One machine doing both (what ``kernelize serve`` starts): refused before any settings.
        (["-m", "bot.cli", "worker", "--queues", "github,gpu"], "this worker"),
    ],
)
def test_a_gpu_worker_that_cannot_isolate_exits_with_the_reason(command: list[str], who: str) -> None:
    env = {
        **os.environ,
        "KERNELIZE_BWRAP": "/nonexistent/bwrap",
        "KERNELIZE_BROKER_URL": "redis://127.0.0.1:1/0",
    }
    out = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "kernelize: error: isolation unavailable: /nonexistent/bwrap not found (install bubblewrap); "
        f"{who} runs no code from pull requests"
    ), out.stderr
