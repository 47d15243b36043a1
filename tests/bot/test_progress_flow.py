"""The check run follows the modules while they run: every module named with its state, a finished
one's verdict while others still run, the end never overwritten, a failed update never the job's.

Real workers on the local Redis (tests/bot/progress_worker_tasks.py): a github worker with
bot/tasks.py against the fake GitHub, and a GPU worker with runners/tasks.py whose engine returns
canned reports when the test releases each file. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot import db, tasks
from bot.github import InstallationClient
from bot.models import Job
from runners.celery_app import PLAN_TASK, PROGRESS_TASK, make_celery
from runners.messages import GPU_REQUEST_VERSION
from tests.bot.flow import HEAD, INSTALLATION, NUMBER, OWNER, REPO, World, publish_context
from tests.fake_github import FakeGitHub, added_file_patch, fake_sha

RELEASE, EXPLODE = "kernelize-test:release:", "kernelize-test:explode:"
READS = "kernelize-test:gpu-request-version"  # the version the GPU worker reads (progress_worker_tasks.py)
PATCH_RUN = r"/check-runs/\d+$"
A, B = "models/a.py::A", "models/b.py::B"
SOURCES = {
    path: f"import torch\nfrom torch import nn\n\n\nclass {name}(nn.Module):\n"
    f"    def forward(self, x):\n        return x * 2\n"
    for path, name in (("models/a.py", "A"), ("models/b.py", "B"))
}


def rows(summary: str) -> dict[str, list[str]]:
    """The check run's module table: target -> [state, result]."""
    found = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| (.+) \|$", summary, re.MULTILINE)
    return {target: [state.strip(), result.strip()] for target, state, result in found}


class Progress:
    """The fake GitHub with one pull request adding two files, and the two workers around it."""

    def __init__(self, fake: FakeGitHub, redis: Any, broker: str, sessions: Any, tmp: Path) -> None:
        self.fake, self.redis, self.sessions, self.tmp = fake, redis, sessions, tmp
        self.celery = make_celery(broker, broker)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in self.tmp.glob("*.log")
        )

    def until(self, what: str, found: Callable[[], Any], timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while not (got := found()):
            assert time.monotonic() < deadline, f"{what}\n{self.logs()}"
            time.sleep(0.1)
        return got

    def plan(self) -> None:
        kwargs = {"installation_id": INSTALLATION, "owner": OWNER, "repo": REPO, "number": NUMBER}
        self.celery.send_task(PLAN_TASK, kwargs={**kwargs, "reason": "command", "sender": "maintainer"})

    def release(self, path: str) -> None:
        self.redis.set(RELEASE + path, 1)

    def patches(self) -> list[Any]:
        return self.fake.requests_to("PATCH", PATCH_RUN)

    def shown(self, table: dict[str, list[str]]) -> dict[str, Any]:
        """Wait for a progress update whose table has these rows; its body."""

        def find() -> dict[str, Any] | None:
            for r in self.patches():
                if r.status == 200 and rows(r.json["output"]["summary"]) == table:
                    return dict(r.json)
            return None

        return dict(self.until(f"no check run update showing {table}", find))

    def run(self) -> Any:
        [run] = self.fake.check_runs[(OWNER, REPO)]
        return run

    def job(self) -> Job:
        with self.sessions() as session:
            return session.query(Job).one()


@pytest.fixture
def progress(
    redis_url: str,
    redis_client: Any,
    database_url: str,
    tmp_path: Path,
    start_worker: Callable[..., subprocess.Popen[bytes]],
) -> Iterator[Progress]:
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo(OWNER, REPO)
        fake.add_installation(INSTALLATION, OWNER, [REPO])
        files = [
            {"filename": path, "status": "added", "patch": added_file_patch(text.splitlines())}
            for path, text in SOURCES.items()
        ]
        fake.add_pull(OWNER, REPO, NUMBER, HEAD, fake_sha("base", 5), "author", files)
        for path, text in SOURCES.items():
            fake.set_file(OWNER, REPO, HEAD, path, text)
        fake.set_permission(OWNER, REPO, "maintainer", "write")
        engine = db.make_engine(database_url)
        db.create_schema(engine)
        world = Progress(fake, redis_client, redis_url, db.session_factory(engine), tmp_path)
        # The GPU side gets the broker alone; the github side the App, GitHub and the database.
        start_worker("progress_worker_tasks", "gpu", {"KERNELIZE_TEST_ROLE": "gpu"})
        github_env = {
            "KERNELIZE_TEST_ROLE": "github",
            "KERNELIZE_GITHUB_APP_ID": str(creds.app_id),
            "KERNELIZE_GITHUB_PRIVATE_KEY": creds.private_pem,
            "KERNELIZE_GITHUB_API_URL": fake.base_url,
            "KERNELIZE_DATABASE_URL": database_url,
            "KERNELIZE_SECONDS_BETWEEN_WRITES": "0",
        }
        start_worker("progress_worker_tasks", "github", github_env)
        yield world
        engine.dispose()
        fake.assert_clean()


def test_the_check_run_follows_each_module_and_its_end_stays(progress: Progress) -> None:
    fake = progress.fake
    progress.plan()
    waiting = "waiting for a GPU worker"
    progress.shown({A: ["queued", waiting], B: ["queued", waiting]})
    progress.shown({A: ["running", "generating and verifying candidates"], B: ["queued", waiting]})

    # A's result comes back while B waits; GitHub answers that update with 503 once: a PATCH is
    # retried like a GET (setting fields twice is setting them once), so it is shown all the same.
    fake.fail_next("PATCH", PATCH_RUN, 503)
    progress.release("models/a.py")
    middle = progress.shown(
        {
            A: ["done", "verified: 1.52x eager, 1.10x torch.compile"],
            B: ["running", "generating and verifying candidates"],
        }
    )
    assert middle["status"] == "in_progress" and "conclusion" not in middle
    assert middle["output"]["title"] == "Checking 2 modules: 1 done, 1 running"
    patches = progress.patches()
    failed = [i for i, r in enumerate(patches) if r.injected]
    assert [patches[i].status for i in failed] == [503]
    retried = patches[failed[0] + 1]
    assert (retried.status, retried.json) == (200, patches[failed[0]].json)
    assert "not shown" not in progress.logs()

    progress.release("models/b.py")
    progress.until("the check run was not completed", lambda: progress.run().status == "completed")
    run = progress.run()
    assert run.conclusion == "success" and run.output["title"] == "1 verified Triton suggestion"
    [review] = fake.reviews[(OWNER, REPO, NUMBER)]
    assert len(review.comments) == 1 and "```suggestion" in review.comments[0].body
    job = progress.job()
    assert job.state == "done" and job.check_final is not None
    assert [m["state"] for m in job.progress["modules"]] == ["done", "done"]
    ended = progress.patches()[-1]
    assert ended.json["conclusion"] == "success" and ended.json["output"] == job.check_final["output"]

    # A late update (B's start notice again, after the end): not shown, the end stays.
    notice = {
        "job_id": job.id,
        "installation_id": INSTALLATION,
        "owner": OWNER,
        "repo": REPO,
        "check_run_id": run.id,
    }
    late = progress.celery.send_task(PROGRESS_TASK, kwargs={"context": notice, "running": [B]})
    progress.until(
        "the late update never ran", lambda: f"kernelize.progress[{late.id}] succeeded" in progress.logs()
    )
    assert progress.patches()[-1] is ended
    assert (progress.run().status, progress.run().output) == ("completed", ended.json["output"])


def test_a_module_whose_task_fails_is_named_with_its_error(progress: Progress) -> None:
    progress.redis.set(EXPLODE + "models/b.py", 1)
    progress.plan()
    progress.shown(
        {A: ["running", "generating and verifying candidates"], B: ["queued", "waiting for a GPU worker"]}
    )
    progress.release("models/a.py")
    progress.until("the check run was not completed", lambda: progress.run().status == "completed")
    run = progress.run()
    assert (run.conclusion, run.output["title"]) == ("failure", "Kernelize failed")
    assert "models/b.py exploded" in run.output["summary"] and "/kernelize" in run.output["summary"]
    assert rows(run.output["summary"]) == {
        A: ["done", "verified: 1.52x eager, 1.10x torch.compile"],
        B: ["error", "RuntimeError: models/b.py exploded"],
    }
    assert progress.job().state == "failed"
    assert not progress.fake.reviews.get((OWNER, REPO, NUMBER))


def test_a_gpu_worker_of_another_release_refuses_the_request_and_the_check_run_says_why(
    progress: Progress,
) -> None:
    """The GPU worker reads another version of the GPU request: it refuses it before running
    anything (no start notice), and its one-line reason, carried back through the result backend,
    is what the check run says for the module and the job."""
    progress.redis.set(READS, GPU_REQUEST_VERSION + 1)
    progress.plan()

    def completed() -> bool:
        return any(r.status == "completed" for r in progress.fake.check_runs.get((OWNER, REPO), []))

    progress.until("the check run was not completed", completed)
    run = progress.run()
    reason = (
        f"the GPU request is version {GPU_REQUEST_VERSION}; this GPU worker reads version "
        f"{GPU_REQUEST_VERSION + 1} only (another Kernelize release)"
    )
    assert (run.conclusion, run.output["title"]) == ("failure", "Kernelize failed")
    table = rows(run.output["summary"])
    assert table[A] == ["error", f"MessageError: {reason}"]
    assert table[B] in (table[A], ["stopped", "—"])  # refused as well, unless the job ended first
    job = progress.job()
    assert job.state == "failed" and reason in job.detail
    assert not progress.fake.reviews.get((OWNER, REPO, NUMBER))
    shown = [rows(r.json["output"]["summary"]) for r in progress.patches()]
    assert all(t[A][0] != "running" for t in shown)  # never started: refused first


# ---------------------------------------------------------------------------
# A progress update that reaches GitHub after the end (two github workers racing), in-process


def test_an_update_that_reaches_github_after_the_end_is_followed_by_the_end_again(
    world: World, running_job: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    context = running_job(
        modules=2,
        progress={
            "sent": "2026-12-01T10:00:00.000000+00:00",
            "seq": 0,
            "modules": [{"target": A, "state": "queued"}, {"target": B, "state": "queued"}],
            "tasks": {"task-a": [A], "task-b": [B]},
        },
    )
    real = InstallationClient.update_check_run
    ended: list[bool] = []

    def end_first(self: InstallationClient, *args: Any, **kwargs: Any) -> None:
        # The progress update is on its way when the job ends, and arrives after the end.
        if kwargs.get("status") == "in_progress" and not ended:
            ended.append(True)
            failed = {"task-b": "RuntimeError: boom"}
            tasks.publish_failed("chord-1", publish_context(context), "ChordError: boom", failed)
        real(self, *args, **kwargs)

    monkeypatch.setattr(InstallationClient, "update_check_run", end_first)
    assert tasks.record_progress(context, running=[A]) == {"shown": 1}
    bodies = [r.json for r in world.fake.requests_to("PATCH", PATCH_RUN)]
    assert [b.get("conclusion") or b["status"] for b in bodies] == ["failure", "in_progress", "failure"]
    assert bodies[0] == bodies[2]
    [run] = world.checks()
    assert (run.status, run.conclusion, run.output["title"]) == ("completed", "failure", "Kernelize failed")
    assert rows(run.output["summary"]) == {A: ["stopped", "—"], B: ["error", "RuntimeError: boom"]}
    # News after the end is not shown at all.
    assert tasks.record_progress(context, running=[B]) == {"skipped": "the job is not running"}
    assert len(world.fake.requests_to("PATCH", PATCH_RUN)) == 3
