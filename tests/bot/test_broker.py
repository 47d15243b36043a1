"""The embedded broker's transport (bot/broker.py) under real Celery workers on a SQLite file: the
task of a worker SIGKILLed mid-way runs again on the next worker, a live worker's task is never
taken from it, and acknowledged messages leave the file."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from subprocess import Popen

import pytest

from bot import broker, db
from runners.celery_app import PLAN_TASK, make_celery


def _wait(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: never happened"
        time.sleep(0.05)


class Broker:
    """A SQLite file as the embedded broker, a Celery app sending to it, and what its tasks wrote."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "broker.db"
        self.url = f"sqla+sqlite:///{self.path}"
        self.log = folder / "ran.log"
        db.prepare_sqlite_files(self.url)
        self.app = make_celery(self.url)

    def send(self, label: str, wait_for: Path | None = None) -> None:
        kwargs = {"log": str(self.log), "label": label, "wait_for": str(wait_for or "")}
        self.app.send_task(PLAN_TASK, kwargs=kwargs)

    def ran(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        with closing(sqlite3.connect(self.path)) as conn:
            try:
                return list(conn.execute(sql))
            except sqlite3.OperationalError:  # the table is not there yet
                return []

    def messages(self) -> list[tuple[object, ...]]:
        return self.rows("SELECT id, visible FROM kombu_message ORDER BY id")

    def deliveries(self) -> list[tuple[object, ...]]:
        return self.rows("SELECT message_id, owner FROM kernelize_delivery ORDER BY message_id")


@pytest.fixture
def sqla(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


@pytest.fixture
def worker(sqla: Broker, start_worker: Callable[..., Popen[bytes]]) -> Callable[[], Popen[bytes]]:
    """``worker() -> Popen``: a real Celery worker on ``sqla``'s file (stopped after the test)."""
    return lambda: start_worker("broker_worker_tasks", "github", env={"KERNELIZE_TEST_BROKER": sqla.url})


def _taken(sqla: Broker, worker: Callable[[], Popen[bytes]], label: str, go: Path) -> Popen[bytes]:
    """A task that runs until ``go`` exists, taken by a new worker; that worker."""
    sqla.send(label, wait_for=go)
    first = worker()
    _wait("the first worker took the task", lambda: sqla.ran() == [f"{label} {first.pid}"])
    return first


def test_a_worker_killed_mid_task_leaves_it_to_the_next_worker(
    sqla: Broker, worker: Callable[[], Popen[bytes]], tmp_path: Path
) -> None:
    killed = _taken(sqla, worker, "first", tmp_path / "go")
    killed.kill()  # no chance to acknowledge it or put it back
    killed.wait()
    [(message, visible)] = sqla.messages()
    assert not visible and [m for m, _ in sqla.deliveries()] == [message]
    (tmp_path / "go").touch()
    second = worker()
    _wait("the task ran again", lambda: sqla.ran() == [f"first {killed.pid}", f"first {second.pid}"])
    _wait("the acknowledged message left the file", lambda: not sqla.messages() and not sqla.deliveries())


def test_a_live_workers_task_is_never_taken_from_it(
    sqla: Broker, worker: Callable[[], Popen[bytes]], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    busy = _taken(sqla, worker, "long", go)
    other = worker()
    # A worker looks for dead workers' tasks before it takes its first: by the time this one has run
    # a task, it has looked at the first worker's.
    sqla.send("short")
    _wait("the second worker ran a task", lambda: f"short {other.pid}" in sqla.ran())
    assert sqla.ran() == [f"long {busy.pid}", f"short {other.pid}"]
    [(owner,)] = sqla.rows("SELECT owner FROM kernelize_delivery")
    assert str(owner).rsplit("|", 2)[1] == str(busy.pid)
    go.touch()
    _wait("every message acknowledged", lambda: not sqla.messages() and not sqla.deliveries())
    assert sqla.ran() == [f"long {busy.pid}", f"short {other.pid}"]  # each once


def test_whose_deliveries_are_given_back() -> None:
    now = broker._utcnow()
    mine = broker.owner_of_this_process()
    assert not broker.orphaned(mine, now - timedelta(days=1), now)  # this process runs
    machine, pid, started = mine.rsplit("|", 2)
    gone = Popen(["true"])
    gone.wait()
    assert broker.orphaned(f"{machine}|{gone.pid}|1", now, now)  # exited: at once
    assert broker.orphaned(f"{machine}|{pid}|{int(started) + 1}", now, now)  # another process, same pid
    # Another machine (or container): only after the visibility timeout, as Redis does.
    elsewhere = f"other-host|pid:[1]|{pid}|{started}"
    timeout = timedelta(seconds=float(os.environ.get("KERNELIZE_VISIBILITY_TIMEOUT_S", 6 * 3600)))
    assert not broker.orphaned(elsewhere, now - timeout + timedelta(minutes=1), now)
    assert broker.orphaned(elsewhere, now - timeout - timedelta(minutes=1), now)
