"""From a webhook event to a job, or to nothing. Pure functions: no I/O, no GitHub calls.

A job is a JSON-ready dict naming the Celery task that starts the work and the
primitives it needs (ids, names, shas); the task loads everything else itself.
"""

from __future__ import annotations

from typing import Any

PLAN_TASK = "kernelize.plan_pull_request"
PR_ACTIONS = frozenset({"opened", "reopened", "synchronize", "ready_for_review"})
CHECK_RUN_ACTIONS = frozenset({"rerequested", "requested_action"})

Job = dict[str, Any]


def _from_bot(payload: dict[str, Any]) -> bool:
    sender = payload.get("sender") or {}
    return sender.get("type") == "Bot" or str(sender.get("login", "")).endswith("[bot]")


def _repo(payload: dict[str, Any]) -> tuple[str, str] | None:
    repo = payload.get("repository") or {}
    full = repo.get("full_name", "")
    owner, _, name = full.partition("/")
    return (owner, name) if owner and name else None


def _installation(payload: dict[str, Any]) -> int | None:
    inst = payload.get("installation") or {}
    return int(inst["id"]) if "id" in inst else None


def decide(
    event: str, payload: dict[str, Any], *, app_id: int | None = None, drafts: bool = False
) -> Job | None:
    """The job for this event, or None when there is nothing to do.

    ``app_id`` is our GitHub App's id: check-run events for other apps' runs are
    not ours. ``drafts``: whether draft pull requests run automatically.
    """
    if _from_bot(payload):
        return None  # bots, this app included, never trigger work
    repo, installation = _repo(payload), _installation(payload)
    if repo is None or installation is None:
        return None
    sender = str((payload.get("sender") or {}).get("login", ""))
    base = {
        "task": PLAN_TASK,
        "installation_id": installation,
        "owner": repo[0],
        "repo": repo[1],
        "sender": sender,
    }
    if event == "pull_request":
        return _pull_request(payload, base, drafts)
    if event == "check_run":
        return _check_run(payload, base, app_id)
    # issue_comment commands arrive with the trust rules that decide who may run them;
    # installation events need no work yet. Both are answered (202) and recorded as ignored.
    return None


def _pull_request(payload: dict[str, Any], base: Job, drafts: bool) -> Job | None:
    action, pr = payload.get("action"), payload.get("pull_request") or {}
    if action not in PR_ACTIONS or pr.get("state", "open") != "open":
        return None
    if pr.get("draft") and not drafts:
        return None
    head = pr.get("head") or {}
    if "number" not in pr or "sha" not in head:
        return None
    return {**base, "number": int(pr["number"]), "head_sha": head["sha"], "reason": f"pull_request.{action}"}


def _check_run(payload: dict[str, Any], base: Job, app_id: int | None) -> Job | None:
    action, run = payload.get("action"), payload.get("check_run") or {}
    if action not in CHECK_RUN_ACTIONS:
        return None
    if app_id is not None and (run.get("app") or {}).get("id") != app_id:
        return None
    pulls = run.get("pull_requests") or []
    if not pulls or "head_sha" not in run:
        return None
    job = {
        **base,
        "number": int(pulls[0]["number"]),
        "head_sha": run["head_sha"],
        "reason": f"check_run.{action}",
    }
    if action == "requested_action":
        job["requested_action"] = (payload.get("requested_action") or {}).get("identifier")
    return job
