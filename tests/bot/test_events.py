"""Event decisions on GitHub's real webhook payloads (octokit/webhooks examples)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bot.events import PLAN_TASK, decide

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
    }


@pytest.mark.parametrize(
    "name",
    [
        "pull_request/closed.payload.json",
        "pull_request/labeled.payload.json",
        "pull_request/assigned.payload.json",
    ],
)
def test_other_pull_request_actions_do_nothing(name):
    assert decide("pull_request", payload(name)) is None


def test_drafts_are_skipped_unless_configured():
    data = payload("pull_request/opened.payload.json")
    data["pull_request"]["draft"] = True
    assert decide("pull_request", data) is None
    assert decide("pull_request", data, drafts=True) is not None


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


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ("issue_comment", "issue_comment/created.payload.json"),
        ("ping", "ping/payload.json"),
        ("installation", "installation/created.payload.json"),
    ],
)
def test_events_with_no_work_yet(event, name):
    assert decide(event, copy.deepcopy(payload(name))) is None
