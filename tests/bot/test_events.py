"""Event decisions on GitHub's real webhook payloads (octokit/webhooks examples)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bot.events import COMMAND_TASK, INSTALLATION_TASK, PLAN_TASK, TRACK_TASK, decide

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "github-webhooks" / "payload-examples"


def payload(name: str) -> dict:
    data = json.loads((EXAMPLES / name).read_text())
    data.setdefault("installation", {"id": 4242, "node_id": "x"})
    return data


@pytest.mark.parametrize(
    "name",
    [
        "pull_request/opened.payload.json",
        "pull_request/reopened.payload.json",
        "pull_request/synchronize.payload.json",
        "pull_request/ready_for_review.payload.json",
    ],
)
def test_pull_request_actions_plan_a_run(name):
    data = payload(name)
    data["sender"]["type"] = "User"
    data["pull_request"]["draft"] = False
    data["pull_request"]["state"] = "open"
    job = decide("pull_request", data)
    owner, repo = data["repository"]["full_name"].split("/")
    assert job == {
        "task": PLAN_TASK,
        "installation_id": data["installation"]["id"],
        "owner": owner,
        "repo": repo,
        "number": data["pull_request"]["number"],
        "head_sha": data["pull_request"]["head"]["sha"],
        "reason": f"pull_request.{data['action']}",
        "sender": data["sender"]["login"],
        "draft": False,
    }


def test_other_pull_request_actions_do_nothing():
    assert decide("pull_request", payload("pull_request/assigned.payload.json")) is None


def test_a_close_is_tracked_whoever_closes_it():
    data = payload("pull_request/closed.payload.json")
    job = decide("pull_request", data)
    assert job is not None and job["task"] == TRACK_TASK
    assert (job["change"], job["merged"], job["number"]) == ("closed", False, data["pull_request"]["number"])
    data["sender"].update(type="Bot", login="merge-queue[bot]")
    data["pull_request"]["merged"] = True
    job = decide("pull_request", data)
    assert job is not None and job["task"] == TRACK_TASK and job["merged"] is True


def test_a_bots_push_is_tracked_but_starts_no_run():
    data = payload("pull_request/synchronize.payload.json")
    data["sender"].update(type="Bot", login="rebase[bot]")
    job = decide("pull_request", data)
    assert job is not None and (job["task"], job["change"]) == (TRACK_TASK, "push")
    assert job["head_sha"] == data["pull_request"]["head"]["sha"]


def test_a_resolved_review_thread_is_tracked():
    data = payload("pull_request_review_thread/resolved.payload.json")
    job = decide("pull_request_review_thread", data)
    assert job is not None and job["change"] == "thread_resolved"
    assert job["comment_ids"] == [c["id"] for c in data["thread"]["comments"]]
    data["action"] = "unresolved"
    assert decide("pull_request_review_thread", data) is None


def test_a_label_may_start_a_run_and_the_task_checks_which():
    data = payload("pull_request/labeled.payload.json")
    data["sender"]["type"] = "User"
    data["pull_request"]["state"] = "open"
    job = decide("pull_request", data)
    assert job is not None and job["reason"] == "pull_request.labeled"
    assert job["label"] == data["label"]["name"]


def test_drafts_are_marked_for_the_repository_config_to_decide():
    data = payload("pull_request/opened.payload.json")
    data["pull_request"]["draft"] = True
    job = decide("pull_request", data)
    assert job is not None and job["draft"] is True
    job = decide("pull_request", data, drafts=True)
    assert job is not None and job["draft"] is False


def test_bots_never_trigger_work():
    data = payload("pull_request/opened.payload.json")
    data["sender"] = {**data["sender"], "type": "Bot", "login": "kernelize[bot]"}
    assert decide("pull_request", data) is None
    data["sender"] = {**data["sender"], "type": "User", "login": "dependabot[bot]"}
    assert decide("pull_request", data) is None


def test_events_without_an_installation_are_ignored():
    data = payload("pull_request/opened.payload.json")
    del data["installation"]
    assert decide("pull_request", data) is None


def test_check_run_rerequested_replans_our_run_only():
    data = payload("check_run/rerequested.payload.json")
    data["sender"]["type"] = "User"
    data["check_run"]["pull_requests"] = [{"number": 7, "head": {}, "base": {}}]
    ours = data["check_run"]["app"]["id"]
    job = decide("check_run", data, app_id=ours)
    assert job is not None and job["number"] == 7 and job["head_sha"] == data["check_run"]["head_sha"]
    assert job["reason"] == "check_run.rerequested"
    assert decide("check_run", data, app_id=ours + 1) is None


def test_check_run_requested_action_carries_the_identifier():
    data = payload("check_run/requested_action.payload.json")
    data["sender"]["type"] = "User"
    data["check_run"]["pull_requests"] = [{"number": 3}]
    job = decide("check_run", data)
    assert job is not None and job["requested_action"] == data["requested_action"]["identifier"]


def _comment_payload(body: str = "/kernelize", action: str = "created") -> dict:
    data = payload(f"issue_comment/{action}.payload.json")
    data["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    data["comment"]["body"] = body
    data["sender"]["type"] = "User"
    return data


def test_a_command_comment_on_a_pull_request_becomes_a_command_job():
    data = _comment_payload("LGTM\n/kernelize --samples 2")
    job = decide("issue_comment", data)
    owner, repo = data["repository"]["full_name"].split("/")
    assert job == {
        "task": COMMAND_TASK,
        "installation_id": data["installation"]["id"],
        "owner": owner,
        "repo": repo,
        "sender": data["sender"]["login"],
        "number": data["issue"]["number"],
        "comment_id": data["comment"]["id"],
        "body": "LGTM\n/kernelize --samples 2",
    }


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["issue"].pop("pull_request"),  # a plain issue
        lambda d: d["comment"].update(body="nice work"),  # no command word
        lambda d: d.update(action="edited"),  # edits never run anything
        lambda d: d.update(action="deleted"),
        lambda d: d["sender"].update(type="Bot", login="kernelize[bot]"),  # bots, ourselves included
    ],
)
def test_comments_that_are_not_commands_do_nothing(change):
    data = _comment_payload()
    change(data)
    assert decide("issue_comment", data) is None


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ("installation", "installation/created.payload.json"),
        ("installation", "installation/deleted.payload.json"),
        ("installation_repositories", "installation_repositories/added.payload.json"),
    ],
)
def test_installation_events_are_recorded_whoever_sends_them(event, name):
    data = copy.deepcopy(payload(name))
    job = decide(event, data)
    assert job is not None and job["task"] == INSTALLATION_TASK and job["event"] == event
    assert job["payload"]["installation"]["id"] == data["installation"]["id"]
    assert set(job["payload"]["installation"]) <= {"id", "account", "repository_selection"}


def test_ping_needs_no_job():
    assert decide("ping", payload("ping/payload.json")) is None
