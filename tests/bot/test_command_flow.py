"""``/kernelize`` commands, trust and the repository config, driven through the webhook endpoint.

The real octokit ``issue_comment`` payloads (with ``issue.pull_request`` added, which the examples
lack) go through ``tests/bot/flow.py``'s world, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from bot import tasks
from bot.flows import plan
from bot.models import Installation, Job
from runners.messages import MODULE_RESULT_VERSION, ModuleResult
from runners.results import DeviceInfo, ModuleReport
from tests.bot.flow import EXAMPLES, HEAD, INSTALLATION, NUMBER, OWNER, REPO, SOURCE, World, publish_context
from tests.fake_github import added_file_patch, fake_sha


def test_help_replies_with_the_grammar_and_the_config(world: World) -> None:
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "samples: 3\n")
    c = world.comment("/kernelize help", login="reader")  # help runs nothing: anyone may ask
    [reply] = world.replies()
    assert "--samples" in reply and "--generator" in reply and "files" in reply
    assert "3" in reply.split("Current configuration", 1)[1]
    assert world.reactions(c.id) == ["eyes"]
    assert not world.checks()


def test_an_unknown_option_gets_the_help_with_the_word_pointed_out(world: World) -> None:
    c = world.comment("/kernelize --sampels 2")
    [reply] = world.replies()
    assert "`--sampels`" in reply and "--samples" in reply
    assert world.reactions(c.id) == ["confused"]
    assert not world.checks()


def test_a_reader_may_not_run_code(world: World) -> None:
    c = world.comment("/kernelize", login="reader")
    [reply] = world.replies()
    assert "@reader" in reply and "write, maintain or admin" in reply
    assert world.reactions(c.id) == ["eyes", "confused"]
    assert not world.checks() and not world.reviews()


def test_edits_plain_issues_and_bots_are_ignored(world: World) -> None:
    payload = json.loads((EXAMPLES / "issue_comment/edited.payload.json").read_text())
    payload["issue"]["pull_request"] = {"url": "x"}
    payload["comment"]["body"] = "/kernelize"
    payload["installation"] = {"id": INSTALLATION}
    assert world.post("issue_comment", payload).json()["status"] == "ignored"
    created = json.loads((EXAMPLES / "issue_comment/created.payload.json").read_text())
    created["comment"]["body"] = "/kernelize"
    created["installation"] = {"id": INSTALLATION}
    assert world.post("issue_comment", copy.deepcopy(created)).json()["status"] == "ignored"  # an issue
    created["issue"]["pull_request"] = {"url": "x"}
    created["sender"].update(type="Bot", login="kernelize[bot]")
    assert world.post("issue_comment", created).json()["status"] == "ignored"
    assert not world.replies()


def test_an_invalid_config_fails_the_check_and_runs_nothing(world: World) -> None:
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "samples: 99\n")
    c = world.comment("/kernelize")
    [check] = world.checks()
    assert check.conclusion == "failure" and ".github/kernelize.yml" in check.output["title"]
    assert "samples" in check.output["summary"]
    assert world.reactions(c.id) == ["eyes", "confused"]
    assert not world.reviews()


def test_the_config_comes_from_the_default_branch_not_the_pull_request(world: World) -> None:
    world.fake.set_file(OWNER, REPO, HEAD, ".github/kernelize.yml", "enabled: false\n")  # the PR's own
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "paths:\n  exclude: ['models/**']\n")
    world.comment("/kernelize")
    assert "No `nn.Module` class" in world.replies()[-1]
    assert not world.checks()


def test_a_maintainer_runs_one_target_with_options(world: World) -> None:
    c = world.comment("/kernelize models/layers.py::RMSNorm --samples 2 --min-speedup 1.2")
    [check] = world.checks()
    assert check.status == "completed" and check.conclusion == "success", check.output["summary"]
    [review] = world.reviews()
    [suggestion] = review.comments
    assert "```suggestion" in suggestion.body and "_forward_eager" in suggestion.body
    summary = next(b for b in world.replies() if "kernelize:summary" in b)
    assert "RMSNorm" in summary and "GatedMLP" not in summary  # the target only
    assert world.reactions(c.id) == ["eyes", "rocket"]
    with world.sessions() as session:
        [job] = session.query(Job).all()
        assert (job.state, job.reason, job.requested_by, job.modules) == ("done", "command", "maintainer", 1)


def test_status_and_cancel(world: World, running_job: Callable[..., dict[str, Any]]) -> None:
    context = running_job(requested_by="maintainer", modules=2, task_ids=["gpu-task-1"])
    world.comment("/kernelize status", login="reader")
    assert "running" in world.replies()[-1] and HEAD[:7] in world.replies()[-1]
    world.comment("/kernelize cancel", login="reader")
    assert "write, maintain or admin" in world.replies()[-1]
    world.comment("/kernelize cancel")
    assert world.replies()[-1].startswith("Cancelled 1 job")
    with world.sessions() as session:
        [job] = session.query(Job).all()
        assert job.state == "cancelled" and "maintainer" in job.detail
        # Its check run's last word, kept for a progress update still on its way (bot/flows/progress.py).
        assert job.check_final is not None and job.check_final["conclusion"] == "cancelled"
    [run] = world.checks()
    assert (run.id, run.conclusion) == (context["check_run_id"], "cancelled")
    world.comment("/kernelize status")
    assert "Nothing is queued or running" in world.replies()[-1]


def test_limits_make_a_run_wait_with_a_message(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELIZE_MAX_CONCURRENT_JOBS", "1")
    tasks._settings.cache_clear()
    with world.sessions() as session, session.begin():
        other = Job(
            key="other",
            installation_id=INSTALLATION,
            repository=f"{OWNER}/other",
            pull_number=1,
            head_sha=HEAD,
            reason="pull_request.opened",
            state="running",
        )
        session.add(other)
    with pytest.raises(tasks.Deferred) as waited:
        tasks.plan_pull_request(
            None, INSTALLATION, OWNER, REPO, NUMBER, reason="command", sender="maintainer"
        )
    assert waited.value.countdown == plan.WAIT_RETRY_S
    [check] = world.checks()
    assert check.status == "queued" and "limit 1" in check.output["summary"]
    with world.sessions() as session:
        mine = session.query(Job).filter(Job.repository == f"{OWNER}/{REPO}").one()
        assert mine.state == "queued" and "limit 1" in mine.detail


def test_installation_events_are_kept(world: World) -> None:
    created = json.loads((EXAMPLES / "installation/created.payload.json").read_text())
    assert world.post("installation", created).status_code == 202
    added = json.loads((EXAMPLES / "installation_repositories/added.payload.json").read_text())
    added["installation"]["id"] = created["installation"]["id"]
    assert world.post("installation_repositories", added).status_code == 202
    deleted = json.loads((EXAMPLES / "installation/deleted.payload.json").read_text())
    deleted["installation"]["id"] = created["installation"]["id"]
    assert world.post("installation", deleted).status_code == 202
    with world.sessions() as session:
        row = session.get(Installation, created["installation"]["id"])
        assert row is not None and row.deleted
        assert row.account == deleted["installation"]["account"]["login"]  # the latest word
        names = {r["full_name"] for r in created["repositories"]} | {
            r["full_name"] for r in added["repositories_added"]
        }
        assert set(row.repositories) == names


def test_a_new_push_marks_the_earlier_suggestions_outdated(world: World) -> None:
    world.comment("/kernelize models/layers.py::RMSNorm")
    [old] = world.reviews()
    assert "```suggestion" in old.comments[0].body
    new_head = fake_sha("head", 6)
    edited = SOURCE.replace("return x\n", "return x  # unchanged behaviour\n")
    patch = added_file_patch(edited.splitlines())
    world.fake.push(
        OWNER, REPO, NUMBER, new_head, [{"filename": "models/layers.py", "status": "added", "patch": patch}]
    )
    world.fake.set_file(OWNER, REPO, new_head, "models/layers.py", edited)
    world.comment("/kernelize models/layers.py::RMSNorm")
    old_review, new_review = world.reviews()
    assert old_review.id == old.id and new_review.commit_id == new_head
    assert old_review.body.startswith("**Outdated:**") and new_head[:7] in old_review.body
    assert "```suggestion" not in old_review.comments[0].body  # nothing stale left to apply
    assert "```suggestion" in new_review.comments[0].body
    # Marking is done once: a third run leaves the outdated review as it is.
    world.comment("/kernelize models/layers.py::RMSNorm")
    assert world.reviews()[0].body == old_review.body


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("admin", True),
        ("maintain", True),
        ("write", True),
        ("triage", False),
        ("read", False),
        ("none", False),
    ],
)
def test_each_permission_level(world: World, role: str, allowed: bool) -> None:
    world.fake.set_permission(OWNER, REPO, "someone", role)
    c = world.comment("/kernelize cancel", login="someone")
    reply = world.replies()[-1]
    if allowed:
        assert reply.startswith("Nothing is queued or running") and world.reactions(c.id) == ["eyes"]
    else:
        assert "write, maintain or admin" in reply and world.reactions(c.id) == ["eyes", "confused"]


def test_a_label_starts_a_run_only_when_configured_and_added_by_a_maintainer(world: World) -> None:
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "trust:\n  label: kernelize\n")
    other = tasks.plan_pull_request(
        None,
        INSTALLATION,
        OWNER,
        REPO,
        NUMBER,
        HEAD,
        reason="pull_request.labeled",
        sender="maintainer",
        label="bug",
    )
    assert "not the configured trust label" in other["skipped"]
    stranger = tasks.plan_pull_request(
        None,
        INSTALLATION,
        OWNER,
        REPO,
        NUMBER,
        HEAD,
        reason="pull_request.labeled",
        sender="reader",
        label="kernelize",
    )
    assert stranger["skipped"].startswith("waiting for a maintainer")
    [check] = world.checks()
    assert check.conclusion == "action_required" and "`kernelize` label" in check.output["summary"]


def test_auto_run_off_and_drafts(world: World) -> None:
    world.fake.set_permission(OWNER, REPO, "author", "write")
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "auto_run: false\n")
    off = tasks.plan_pull_request(None, INSTALLATION, OWNER, REPO, NUMBER, HEAD, reason="pull_request.opened")
    assert off == {"skipped": "auto_run is off; waiting for /kernelize"}
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "enabled: true\n")
    draft = tasks.plan_pull_request(
        None, INSTALLATION, OWNER, REPO, NUMBER, HEAD, reason="pull_request.opened", draft=True
    )
    assert draft == {"skipped": "draft pull request"}
    assert not world.checks()


def test_a_failed_module_task_fails_the_job_and_completes_the_check_run(
    world: World, running_job: Callable[..., dict[str, Any]]
) -> None:
    """The chord's error callback (bot.flows.plan.run_chord): no results will come, so the job ends
    failed, the check run is completed with the reason, and the command that started it is answered."""
    from bot import tasks

    context = running_job(requested_by="maintainer", modules=1)
    check_run_id, job_id = context["check_run_id"], context["job_id"]
    world.comment("/kernelize status")  # a comment to answer on
    comment_id = world.fake.issue_comments[(OWNER, REPO, NUMBER)][0].id
    why = "ChordError: Dependency 1234 raised TimeLimitExceeded(600)"
    for _ in range(2):  # a redelivered callback says the same, and changes nothing more
        assert tasks.publish_failed("1234", publish_context(context, comment_id=comment_id), why) == {
            "failed": f"a module's GPU task failed ({why}); no results were published"
        }
    [run] = [c for c in world.checks() if c.id == check_run_id]
    assert run.status == "completed" and run.conclusion == "failure"
    assert "TimeLimitExceeded" in run.output["summary"] and "/kernelize" in run.output["summary"]
    with world.sessions() as session:
        done = session.get(Job, job_id)
        assert done.state == "failed" and "TimeLimitExceeded" in done.detail
    assert "Kernelize could not finish" in world.replies()[-1]


def test_a_result_the_github_worker_cannot_read_fails_the_job_with_its_reason(
    world: World, running_job: Callable[..., dict[str, Any]]
) -> None:
    """A GPU worker of a newer release answers with a newer module result: publishing refuses it
    rather than read part of it, and the reason reaches what the user sees: the check run's summary
    and the module's row, the job's detail and the command's reply. Nothing is reviewed."""
    target = "models/layers.py::RMSNorm"
    progress = {"seq": 0, "modules": [{"target": target, "state": "running"}], "tasks": {"gpu-1": [target]}}
    context = running_job(requested_by="maintainer", modules=1, task_ids=["gpu-1"], progress=progress)
    world.comment("/kernelize status")  # a comment to answer on
    comment_id = world.fake.issue_comments[(OWNER, REPO, NUMBER)][0].id
    report = ModuleReport(target, "models/layers.py", "RMSNorm")
    newer = ModuleResult(DeviceInfo("cuda", "Test GPU", "", ""), [report]).to_dict()
    newer["version"] = MODULE_RESULT_VERSION + 1
    # Its start notice came first; its link (the result) is only logged: the chord reports it.
    assert tasks.record_progress(context, newer)["refused"].startswith("the module result is version")

    out = tasks.publish_pull_request([newer], publish_context(context, comment_id=comment_id))

    reason = (
        f"MessageError: the module result is version {MODULE_RESULT_VERSION + 1}; this github worker "
        f"reads version {MODULE_RESULT_VERSION} only (another Kernelize release)"
    )
    assert out == {"failed": f"a module's GPU task failed ({reason}); no results were published"}
    [run] = world.checks()
    assert (run.status, run.conclusion, run.output["title"]) == ("completed", "failure", "Kernelize failed")
    assert reason in run.output["summary"] and "Task `gpu-1`" in run.output["summary"]
    assert f"| `{target}` | error | {reason} |" in run.output["summary"]
    with world.sessions() as session:
        job = session.get(Job, context["job_id"])
        assert job.state == "failed" and reason in job.detail
    assert reason in world.replies()[-1] and world.reactions(comment_id)[-1] == "confused"
    assert not world.reviews()
