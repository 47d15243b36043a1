"""The flows' decisions (``bot/flows/``), as pure functions of the facts a flow gathered: plain
values in, plain values out; no GitHub, no database, no queue."""

from __future__ import annotations

from typing import Any

import pytest

from bot import commands
from bot.flows import command, plan, progress, publish
from bot.flows.common import dashboard_url, exception_line, job_limits, may_write
from bot.flows.track import push_of
from bot.github import CheckRunInfo, CommitInfo
from bot.models import Job
from bot.publish import ReviewComment, ReviewPlan
from bot.repo_config import load_repo_config
from bot.settings import Settings

HEAD = "a" * 40
TRUSTED = ("OWNER", "MEMBER", "COLLABORATOR")


def _run(status: str, conclusion: str | None = None, run_id: int = 1, key: str | None = "k") -> CheckRunInfo:
    return CheckRunInfo(run_id, status, conclusion, key)


def _target(path: str, cls: str) -> dict[str, Any]:
    return {"path": path, "class_name": cls}


def _settings(**fields: Any) -> Settings:
    given: dict[str, Any] = {
        "generators": ["template"],
        "samples": 4,
        "min_speedup": 1.05,
        "candidate_timeout_s": 300.0,
        "public_url": None,
        "max_concurrent_jobs": 2,
        "gpu_minutes_per_day": 240.0,
    }
    return Settings(**{**given, **fields})


# ---------------------------------------------------------------------------
# Plan: trust


@pytest.mark.parametrize(
    ("reason", "automatic"),
    [
        ("pull_request.opened", True),
        ("pull_request.synchronize", True),
        ("pull_request.labeled", False),
        ("check_run.rerequested", False),
        ("command", False),
    ],
)
def test_a_run_is_automatic_for_pull_request_events_but_a_label(reason: str, automatic: bool) -> None:
    assert plan.is_automatic(reason) is automatic


@pytest.mark.parametrize(
    ("reason", "sender", "association", "decides"),
    [
        ("pull_request.opened", "anyone", "OWNER", None),  # trusted by association: nobody to ask
        ("pull_request.opened", "anyone", "CONTRIBUTOR", "author"),  # the author's write access
        ("pull_request.synchronize", "", "NONE", "author"),
        ("check_run.requested_action", "maint", "NONE", "maint"),  # whoever pressed the button
        ("check_run.rerequested", "", "MEMBER", ""),  # a re-run by nobody known: nobody may
        ("command", "writer", "OWNER", "writer"),  # a command counts who gave it, not the author
        ("pull_request.labeled", "labeller", "OWNER", "labeller"),
    ],
)
def test_whose_write_access_decides(reason: str, sender: str, association: str, decides: str | None) -> None:
    assert plan.who_decides(reason, sender, association, "author", TRUSTED) == decides


def test_a_repository_may_trust_more_associations_or_fewer() -> None:
    assert plan.who_decides("pull_request.opened", "", "CONTRIBUTOR", "a", (*TRUSTED, "CONTRIBUTOR")) is None
    assert plan.who_decides("pull_request.opened", "", "MEMBER", "a", ("OWNER",)) == "a"


@pytest.mark.parametrize(
    ("permission", "may"),
    [("admin", True), ("maintain", True), ("write", True), ("read", False), ("none", False)],
)
def test_write_maintain_and_admin_may_start_work(permission: str, may: bool) -> None:
    assert may_write(permission) is may


def test_one_check_run_asks_for_a_maintainer() -> None:
    assert plan.needs_approval_run([]) is True
    assert plan.needs_approval_run([_run("completed", "success")]) is True
    assert plan.needs_approval_run([_run("completed", "action_required")]) is False


def test_the_approval_summary_names_the_author_and_the_ways_to_start() -> None:
    plain = plan.approval_summary("stranger", None)
    assert "@stranger" in plain and "**Run Kernelize**" in plain and "label" not in plain
    assert "by adding the `run-gpu` label" in plan.approval_summary("stranger", "run-gpu")


# ---------------------------------------------------------------------------
# Plan: what the config lets run


def test_the_config_skips_what_it_turns_off() -> None:
    default = load_repo_config(None)
    assert plan.config_skip(default, "pull_request.opened", False, "") is None
    assert plan.config_skip(default, "pull_request.opened", True, "") == "draft pull request"
    assert plan.config_skip(default, "command", True, "") is None  # a command runs a draft too
    manual = load_repo_config("auto_run: false\n")
    assert (
        plan.config_skip(manual, "pull_request.opened", False, "")
        == "auto_run is off; waiting for /kernelize"
    )
    assert plan.config_skip(manual, "command", False, "") is None
    drafts = load_repo_config("drafts: true\n")
    assert plan.config_skip(drafts, "pull_request.opened", True, "") is None


def test_only_the_configured_label_starts_a_run() -> None:
    none = load_repo_config(None)
    assert (
        plan.config_skip(none, "pull_request.labeled", False, "x")
        == "label 'x' is not the configured trust label"
    )
    labelled = load_repo_config("trust:\n  label: run-gpu\n")
    assert plan.config_skip(labelled, "pull_request.labeled", False, "run-gpu") is None
    assert plan.config_skip(labelled, "pull_request.labeled", False, "bug") is not None


def test_nothing_found_says_whether_targets_were_asked_for() -> None:
    assert plan.nothing_found_text([]) == "No `nn.Module` class was changed in this pull request."
    assert plan.nothing_found_text([_target("a.py", "A")]) == "No `nn.Module` class matches your targets."


def test_modules_past_the_limit_are_kept_apart_in_order() -> None:
    found = [_target("a.py", c) for c in "ABC"]
    assert plan.within_limit(found, 2) == (found[:2], found[2:])
    assert plan.within_limit(found, 5) == (found, [])


def test_the_engine_takes_the_repositorys_choices_else_the_servers() -> None:
    settings = _settings()
    engine = plan.engine_settings(load_repo_config(None), settings)
    assert engine["generators"] == ["template"] and engine["samples"] == 4 and engine["min_speedup"] == 1.05
    assert engine["timeout_s"] == 300.0 and engine["dtypes"] == []
    chosen = plan.engine_settings(load_repo_config("samples: 2\ngenerators: [files]\n"), settings)
    assert chosen["generators"] == ["files"] and chosen["samples"] == 2


def test_the_limits_come_from_the_settings() -> None:
    limits = job_limits(_settings(max_concurrent_jobs=3, gpu_minutes_per_day=60.0))
    assert (limits.concurrent_jobs, limits.gpu_minutes_per_day) == (3, 60.0)


# ---------------------------------------------------------------------------
# Plan: idempotency


def test_the_key_names_the_pull_request_the_head_and_how_the_engine_runs() -> None:
    engine = plan.engine_settings(load_repo_config(None), _settings())
    found = [_target("b.py", "B"), _target("a.py", "A")]
    key = plan.idempotency_key("octo/models", 5, HEAD, engine, found, [], "suggestions")
    assert key.startswith(f"octo/models#5@{HEAD}:") and len(key.rsplit(":", 1)[1]) == 12
    assert key == plan.idempotency_key("octo/models", 5, HEAD, engine, found[:1], [], "suggestions")
    assert key != plan.idempotency_key("octo/models", 5, HEAD, engine, found, [], "summary-only")
    assert key != plan.idempotency_key(
        "octo/models", 5, HEAD, {**engine, "samples": 1}, found, [], "suggestions"
    )
    # A command's targets count as the modules they found, in any order.
    asked = [_target("a.py", "A")]
    scoped = plan.idempotency_key("octo/models", 5, HEAD, engine, found, asked, "suggestions")
    assert scoped != key
    assert scoped == plan.idempotency_key("octo/models", 5, HEAD, engine, found[::-1], asked, "suggestions")


def test_the_settings_hash_reads_only_how_the_engine_runs() -> None:
    base = {"generators": ["files"], "samples": 2}
    assert plan.settings_hash(base) == plan.settings_hash({**base, "timeout_s": 1, "unrelated": True})
    assert plan.settings_hash(base) != plan.settings_hash({**base, "samples": 3})


@pytest.mark.parametrize(
    ("runs", "reason", "done"),
    [
        ([], "pull_request.opened", False),
        ([_run("in_progress")], "pull_request.opened", False),  # a redelivered plan carries on
        ([_run("completed", "success")], "pull_request.opened", True),
        ([_run("completed", "success")], "pull_request.reopened", True),
        ([_run("completed", "success")], "check_run.rerequested", False),  # asked for again
        ([_run("completed", "success")], "command", False),
    ],
)
def test_a_completed_run_is_not_redone_unless_asked_for(
    runs: list[CheckRunInfo], reason: str, done: bool
) -> None:
    assert plan.is_done(runs, reason) is done


def test_the_check_run_to_go_on_with() -> None:
    assert plan.check_run_to_reuse(7, [_run("in_progress", run_id=8)]) == 7
    assert plan.check_run_to_reuse(None, [_run("completed", run_id=8), _run("queued", run_id=9)]) == 9
    assert plan.check_run_to_reuse(None, [_run("completed", run_id=8)]) is None


# ---------------------------------------------------------------------------
# Plan: waiting for the installation's limits


def test_a_wait_is_said_once_per_reason() -> None:
    assert plan.says_queued("2 jobs are running", "") is True
    assert plan.says_queued("2 jobs are running", "2 jobs are running") is False
    assert plan.says_queued("the GPU-minutes are used", "2 jobs are running") is True
    assert plan.says_queued(None, "") is False


def test_a_wait_for_a_running_job_retries_soon_one_for_the_days_minutes_after_midnight() -> None:
    assert plan.retry_countdown("2 Kernelize job(s) are running", 50_000.0) == plan.WAIT_RETRY_S
    assert plan.retry_countdown("used its 240 GPU-minutes", 100.0) == 105.0
    assert plan.retry_countdown("used its 240 GPU-minutes", 50_000.0) == 3600.0


def test_the_check_run_names_every_module_in_the_order_of_the_results() -> None:
    found, over = [_target("a.py", "A")], [_target("a.py", "B")]
    kernelized = [{"target": "c.py::C", "applied_sha": "b" * 40, "verified_sha": "c" * 40}]
    entries = plan.progress_entries(found, over, kernelized, 1)
    assert [(e.target, e.state) for e in entries] == [
        ("a.py::A", "queued"),
        ("a.py::B", "done"),
        ("c.py::C", "done"),
    ]


def test_one_gpu_task_per_file() -> None:
    found = [_target("a.py", "A"), _target("b.py", "B"), _target("a.py", "C")]
    assert plan.by_file(found) == {"a.py": ["A", "C"], "b.py": ["B"]}


# ---------------------------------------------------------------------------
# Progress


@pytest.mark.parametrize(
    ("state", "latest", "final", "step"),
    [
        ("running", 3, False, "done"),  # this write is the latest
        ("running", 4, False, "again"),  # a newer write may have been overtaken: show the latest again
        ("done", 3, True, "final"),  # ended meanwhile: its last word goes last
        ("done", 3, False, "done"),
        (None, None, False, "done"),  # the job is gone
    ],
)
def test_what_follows_a_progress_write(state: str | None, latest: int | None, final: bool, step: str) -> None:
    assert progress.after_write(state, latest, 3, final) == step


# ---------------------------------------------------------------------------
# Publish


def _plan(comments: int) -> ReviewPlan:
    return ReviewPlan("body", [ReviewComment("a.py", 3, None, "x")] * comments, [])


def test_a_review_is_posted_once() -> None:
    marker = publish.review_marker("k")
    assert marker == "<!-- kernelize:review key=k -->"
    assert publish.should_post_review(_plan(1), ["other"], marker) is True
    assert publish.should_post_review(_plan(1), [f"body\n{marker}"], marker) is False  # redelivered
    assert publish.should_post_review(_plan(0), [], marker) is False  # nothing to suggest


@pytest.mark.parametrize(
    ("winners", "when", "comment_id", "speak"),
    [
        ({}, "silent", None, False),
        ({("a.py::A", "c1"): "code"}, "silent", None, True),
        ({}, "summary", None, True),
        ({}, "silent", 12, True),  # a command gets its answer
    ],
)
def test_when_the_summary_comment_may_be_created(
    winners: dict[tuple[str, str], str], when: str, comment_id: int | None, speak: bool
) -> None:
    assert publish.should_speak(winners, when, comment_id) is speak


def test_which_reviews_are_stale() -> None:
    ours = "results\n<!-- kernelize:review key=k -->"
    assert publish.is_stale_review(ours, "old", HEAD) is True
    assert publish.is_stale_review(ours, HEAD, HEAD) is False  # for this head
    assert publish.is_stale_review("someone else's", "old", HEAD) is False
    assert publish.is_stale_review(f"{ours}\n{publish.OUTDATED_MARKER}", "old", HEAD) is False
    assert publish.is_stale_review(f"{ours}\n{publish.APPLIED_MARKER}", "old", HEAD) is False


def test_a_stale_review_says_what_became_of_its_suggestions() -> None:
    note = publish.outdated_note("1234567890", HEAD)
    assert note.startswith("**Outdated:** this review was for `1234567`") and f"`{HEAD[:7]}`" in note
    applied = publish.review_after({"applied"}, note, HEAD, "body")
    assert applied.startswith("**Applied ✓:**") and applied.endswith(f"{publish.APPLIED_MARKER}\n\nbody")
    outdated = publish.review_after({"outdated"}, note, HEAD, "body")
    assert outdated == f"{note}\n{publish.OUTDATED_MARKER}\n\nbody"
    both = publish.review_after({"applied", "outdated"}, note, HEAD, "body")
    assert "marked **Applied ✓** are in the pull request" in both and publish.OUTDATED_MARKER in both


def test_an_applied_suggestion_keeps_its_evidence_but_no_code_to_apply() -> None:
    body = "evidence\n```suggestion\ncode\n```"
    out = publish.as_applied(body, "b" * 40)
    assert (
        out.startswith("**Applied ✓** in `bbbbbbb`")
        and "```python\ncode" in out
        and "```suggestion" not in out
    )
    assert out.endswith(publish.APPLIED_MARKER)


def test_an_applied_class_is_reported_as_kernelized_with_what_it_was_verified_as() -> None:
    k = {
        "target": "m/a.py::A",
        "applied_sha": "b" * 40,
        "verified_sha": "c" * 40,
        "gpu": "H100",
        "speedup_eager": 2.0,
        "speedup_compile": None,
        "comment_url": "https://x/1",
    }
    report = publish.kernelized_report(k)
    assert (report.file, report.class_name, report.status) == ("m/a.py", "A", "kernelized")
    assert (
        "applied in `bbbbbbb`" in report.reason
        and "verified on `ccccccc`; 2.00x eager on H100" in report.reason
    )
    assert "([the suggestion](https://x/1))" in report.reason


def test_the_dashboard_link_needs_a_public_address() -> None:
    assert dashboard_url(_settings(), "octo/models") is None
    assert dashboard_url(_settings(public_url="https://k.example/"), "octo/models") == (
        "https://k.example/repos/octo/models"
    )


def test_an_exception_reads_as_its_type_and_first_line() -> None:
    assert exception_line(ValueError("bad\nmore")) == "ValueError: bad"
    assert exception_line(KeyError()) == "KeyError"


# ---------------------------------------------------------------------------
# Track


def test_a_push_names_who_pushed_the_author_and_the_apps_login() -> None:
    commit = CommitInfo(HEAD, "author", "Apply suggestion\n\nCo-authored-by: kernelize[bot]")
    push = push_of(HEAD, "", commit, "kernelize[bot]")
    assert (push.head_sha, push.pusher, push.author, push.bot_login) == (
        HEAD,
        None,
        "author",
        "kernelize[bot]",
    )
    assert push_of(HEAD, "pusher", commit, "kernelize[bot]").pusher == "pusher"


# ---------------------------------------------------------------------------
# Commands


def test_every_action_of_the_grammar_has_a_handler() -> None:
    assert set(command.COMMANDS) == set(commands.ACTIONS)


@pytest.mark.parametrize(
    ("action", "needs_write"),
    [("help", False), ("status", False), ("stats", False), ("cancel", True), ("apply", True), ("run", True)],
)
def test_which_commands_need_write_access(action: commands.Action, needs_write: bool) -> None:
    assert command.COMMANDS[action].needs_write is needs_write


def test_a_refusal_says_what_the_command_does_and_who_may() -> None:
    apply = command.COMMANDS["apply"]
    text = command.refusal("reader", "apply", apply.does)
    assert text.startswith("Sorry @reader, `/kernelize apply` commits to this pull request's branch")
    assert "write, maintain or admin" in text
    assert "runs code on this repository's GPUs" in command.refusal("r", "run", command.COMMANDS["run"].does)


def test_status_lists_the_jobs() -> None:
    assert command.status_text([]) == "Nothing is queued or running for this pull request."
    job = Job(
        id=3, head_sha=HEAD, state="running", modules=2, reason="command", requested_by="m", detail="a|b"
    )
    text = command.status_text([job])
    assert f"| 3 | `{HEAD[:7]}` | running | 2 | command @m | a\\|b |" in text


def test_cancel_names_the_jobs_it_cancelled() -> None:
    assert command.cancelled_text([]).startswith("Nothing is queued or running")
    assert command.cancelled_text([4, 5]) == "Cancelled 2 job(s): 4, 5."


def test_a_run_commands_targets_and_options_as_the_plan_takes_them() -> None:
    parsed = commands.parse("/kernelize m/a.py::A --samples 2", ["files"])
    assert parsed is not None
    assert command.run_arguments(parsed) == {
        "targets": [{"path": "m/a.py", "class_name": "A"}],
        "options": {"samples": 2},
    }
