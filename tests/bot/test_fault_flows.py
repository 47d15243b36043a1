"""The whole service under faults, end to end: a worker killed mid-job, the fake GitHub failing.

A signed ``pull_request`` delivery reaches ``kernelize serve`` (a subprocess); real Celery workers
plan it, kernelize its one module on CPU and publish to the fake GitHub (the World of
tests/e2e/test_github_flow.py). Two shapes: production's (web, a github worker and a GPU worker on
a Redis of the test's own, the database on SQLite or PostgreSQL) and the one-machine defaults
(``kernelize serve`` alone with no database, broker or result-backend setting: SQLite files, the
embedded broker and its own worker). Whatever the fault, nothing is lost, nothing is posted twice
and every job ends: the pull request gets exactly one review and one summary comment, its one check
run completes, and no job is left queued or running.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bot import db
from bot.models import Job
from tests.bot import test_faults
from tests.bot.test_faults import PrivateRedis
from tests.e2e.test_github_flow import RMSNORM, World

private_redis = test_faults.private_redis  # a Redis of the test's own (fixture shared by assignment)

FILES = {"models/norm.py": (None, f"import torch\nfrom torch import nn\n\n\n{RMSNORM}")}  # one module
SUMMARY = "<!-- kernelize:summary -->"
# Longer than the GPU task (~20 s here), which must not come back while it runs; what a killed
# worker's task waits before Redis hands it out again.
VISIBILITY_S = 60
RETRY_AFTER_S = 2


@pytest.fixture
def redis_world(
    tmp_path: Path, private_redis: PrivateRedis, database_url: str
) -> Iterator[Callable[..., World]]:
    """``redis_world(**env) -> World``: web, a github worker and a GPU worker on the test's Redis and
    ``database_url``, with ``env`` added; stopped before the Redis and the database go."""
    started: list[World] = []

    def start(**env: str) -> World:
        base = private_redis.url.rsplit("/", 1)[0]
        started.append(
            World(tmp_path, "redis", f"{base}/0", f"{base}/1", env, files=FILES, database_url=database_url)
        )
        return started[-1]

    yield start
    for world in started:
        world.close()


@pytest.fixture
def defaults_world(tmp_path: Path) -> Iterator[World]:
    """``kernelize serve`` alone, set up as a new user sets it up (the secret, the App, GitHub's URL)."""
    world = World(tmp_path, "defaults", "", "", {}, files=FILES)
    try:
        yield world
    finally:
        world.close()


def _defaults_database(world: World) -> str:
    return f"sqlite:///{world.tmp / 'kernelize.db'}"


def _job_states(database_url: str) -> list[str]:
    engine = db.make_engine(database_url)
    try:
        with db.session_factory(engine)() as session:
            return list(session.scalars(select(Job.state).order_by(Job.id)))
    finally:
        engine.dispose()


def _posted_once(world: World, database_url: str) -> None:
    """One review with a suggestion, one summary comment, one check run completed, every job done."""
    key = (world.owner, world.repo, world.number)
    reviews = world.fake.reviews[key]
    assert len(reviews) == 1, f"{len(reviews)} reviews\n" + world.logs()
    assert any("```suggestion" in c.body for c in reviews[0].comments)
    assert len([c for c in world.fake.issue_comments[key] if SUMMARY in c.body]) == 1, world.logs()
    [check] = world.fake.check_runs[(world.owner, world.repo)]
    assert (check.status, check.conclusion) == ("completed", "success"), check.output
    assert _job_states(database_url) == ["done"]
    world.fake.assert_clean()


# -- a worker killed mid-plan ---------------------------------------------------------------------

HOLD_PLAN = ("GET", r"/git/trees/")  # the plan reading the head's files: its job running, no GPU task sent


def _mid_plan(world: World, delivery: str, database_url: str) -> Any:
    """Send the delivery and hold the plan where its job runs and its check run is open; the hold."""
    held = world.fake.hold_next(*HOLD_PLAN)
    assert world.post(delivery).status_code == 202
    assert held.wait_reached(120), "the plan never read the head's files\n" + world.logs()
    assert _job_states(database_url) == ["running"]
    assert [c.status for c in world.fake.check_runs[(world.owner, world.repo)]] == ["queued"]
    return held


@pytest.mark.timeout(900)
def test_a_github_worker_killed_mid_plan_is_replaced_and_posts_once(
    redis_world: Callable[..., World], database_url: str
) -> None:
    """Late acknowledgement and Redis's visibility timeout: the plan of a github worker SIGKILLed
    mid-way comes back to a new worker, which carries on with the job and check run it opened."""
    world = redis_world(KERNELIZE_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S))
    held = _mid_plan(world, "kill-plan", database_url)
    world.procs["github"].kill()  # no chance to acknowledge, requeue or say anything
    world.procs["github"].wait()
    held.release()
    world.start_github("github2")
    world.wait_for_completed_check(timeout=600)
    _posted_once(world, database_url)
    assert len(world.fake.requests_to(*HOLD_PLAN)) == 2  # planned again, by the new worker
    assert "plan_pull_request[delivery-kill-plan] succeeded" in world.log("github2")


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[1] == str(pid) and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _worker_of(serve: int) -> int:
    """The pid of ``kernelize serve``'s own worker (its child process)."""
    [worker] = _children(serve)
    return worker


def _broker_messages(world: World) -> int:
    with closing(sqlite3.connect(world.tmp / "kernelize-broker.db")) as conn:
        return int(conn.execute("SELECT count(*) FROM kombu_message").fetchone()[0])


@pytest.mark.timeout(900)
def test_the_defaults_worker_killed_mid_plan_is_replaced_by_serve_and_posts_once(
    defaults_world: World,
) -> None:
    """The embedded broker: ``kernelize serve``'s worker SIGKILLed mid-plan is replaced by serve
    itself (no restart of the service), the plan is given back to the new worker, and it ends once."""
    world, database = defaults_world, _defaults_database(defaults_world)
    held = _mid_plan(world, "defaults-kill", database)
    serve = world.procs["web"].pid
    killed = _worker_of(serve)
    os.kill(killed, signal.SIGKILL)
    world.wait("serve's new worker", lambda: [c for c in _children(serve) if c != killed] != [], timeout=60)
    held.release()
    world.wait_for_completed_check(timeout=600)
    _posted_once(world, database)
    assert world.procs["web"].poll() is None  # the same serve throughout
    assert len(world.fake.requests_to(*HOLD_PLAN)) == 2  # planned again, by the new worker
    # Every message acknowledged is gone from the broker's file, the killed worker's too.
    world.wait("the broker's file emptied", lambda: _broker_messages(world) == 0, timeout=60)


# -- the fake GitHub answering 502, 503 and 403 (a secondary rate limit) ------------------------------


def _completes(body: Any) -> bool:
    return "conclusion" in (body or {})


# The calls a pull request's run makes that each fault meets once: a read, each kind of write, and
# the PATCH that completes the check run (the progress PATCHes before it are left alone).
CALLS = (
    ("GET", r"/pulls/\d+$", None),  # the plan's first read
    ("POST", r"/check-runs$", None),  # the check run opened
    ("POST", r"/pulls/\d+/reviews$", None),  # the review
    ("POST", r"/issues/\d+/comments$", None),  # the summary comment
    ("PATCH", r"/check-runs/\d+$", _completes),  # the check run completed
)
FAULTS: dict[str, dict[str, Any]] = {
    "502-after-writing": {"status": 502, "after": True},  # GitHub did it, then answered 502
    "503": {"status": 503},  # GitHub did nothing
    "403-secondary-limit": {"status": 403, "headers": {"Retry-After": str(RETRY_AFTER_S)}},
}


def _fail_each_call_once(world: World, fault: str) -> None:
    for method, path, when in CALLS:
        world.fake.fail_next(method, path, when=when, **FAULTS[fault])


def _met_and_waited_out(world: World, fault: str) -> None:
    """Every planned failure met; after a secondary rate limit, no call again before Retry-After."""
    assert world.fake.pending_failures() == [], world.logs()
    if not fault.startswith("403"):
        return
    requests = world.fake.requests
    for i, failed in enumerate(requests):
        if failed.injected:
            again = next(r for r in requests[i + 1 :] if (r.method, r.path) == (failed.method, failed.path))
            assert again.at - failed.at >= RETRY_AFTER_S - 0.05, f"{failed.method} {failed.path} too soon"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_github_failing_each_kind_of_call_once_posts_once(
    redis_world: Callable[..., World], database_url: str, fault: str
) -> None:
    world = redis_world()
    _fail_each_call_once(world, fault)
    assert world.post(f"github-{fault}").status_code == 202
    world.wait_for_completed_check(timeout=150)
    _met_and_waited_out(world, fault)
    _posted_once(world, database_url)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_defaults_with_github_failing_each_kind_of_call_once_post_once(
    defaults_world: World, fault: str
) -> None:
    _fail_each_call_once(defaults_world, fault)
    assert defaults_world.post(f"defaults-{fault}").status_code == 202
    defaults_world.wait_for_completed_check(timeout=150)
    _met_and_waited_out(defaults_world, fault)
    _posted_once(defaults_world, _defaults_database(defaults_world))
