"""From a webhook event to a task call, or to nothing. Pure functions: no I/O, no GitHub calls.

A :data:`TaskCall` is a JSON-ready dict naming the Celery task that starts the work
(``task``) and the primitives it needs (ids, names, shas); the task loads everything
else itself.
"""

from __future__ import annotations

from typing import Any

from runners.celery_app import COMMAND_TASK, INSTALLATION_TASK, PLAN_TASK, TRACK_TASK

PR_ACTIONS = frozenset({"opened", "reopened", "synchronize", "ready_for_review", "labeled"})
INSTALLATION_EVENTS = frozenset({"installation", "installation_repositories"})
COMMAND_WORD = "/kernelize"
CHECK_RUN_ACTIONS = frozenset({"rerequested", "requested_action"})

TaskCall = dict[str, Any]
"""The task to call (``task``) and its keyword arguments: what ``bot/enqueue.py`` sends."""


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
) -> TaskCall | None:
    """The task call for this event, or None when there is nothing to do.

    ``app_id`` is our GitHub App's id: check-run events for other apps' runs are
    not ours. ``drafts``: whether draft pull requests run automatically.
    """
    if event in INSTALLATION_EVENTS:  # bookkeeping, whoever sent it
        return _installation_event(event, payload)
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
    if _from_bot(payload):
        # Bots, this app included, never start work; what they do to suggestions is still tracked
        # (a merge queue merges, a bot rebases).
        return _tracking_only(event, payload, base)
    if event == "pull_request":
        return _pull_request(payload, base, drafts)
    if event == "check_run":
        return _check_run(payload, base, app_id)
    if event == "issue_comment":
        return _issue_comment(payload, base)
    if event == "pull_request_review_thread":
        return _thread(payload, base)
    return None


def _pull_request(payload: dict[str, Any], base: TaskCall, drafts: bool) -> TaskCall | None:
    """Drafts pass only with ``drafts``; the repository config (read by the task) may allow them too."""
    action, pr = payload.get("action"), payload.get("pull_request") or {}
    if action == "closed" and "number" in pr:  # what became of its suggestions
        return {
            **{**base, "task": TRACK_TASK},
            "number": int(pr["number"]),
            "change": "closed",
            "merged": bool(pr.get("merged")),
        }
    if action not in PR_ACTIONS or pr.get("state", "open") != "open":
        return None
    head = pr.get("head") or {}
    if "number" not in pr or "sha" not in head:
        return None
    call = {
        **base,
        "number": int(pr["number"]),
        "head_sha": head["sha"],
        "reason": f"pull_request.{action}",
        "draft": bool(pr.get("draft")) and not drafts,
    }
    if action == "labeled":
        call["label"] = str((payload.get("label") or {}).get("name", ""))
    return call


def _tracking_only(event: str, payload: dict[str, Any], base: TaskCall) -> TaskCall | None:
    if event == "pull_request_review_thread":
        return _thread(payload, base)
    if event != "pull_request":
        return None
    action, pr = payload.get("action"), payload.get("pull_request") or {}
    if action == "closed":
        return _pull_request(payload, base, drafts=False)
    if action == "synchronize" and "number" in pr and "sha" in (pr.get("head") or {}):
        call = {**base, "task": TRACK_TASK, "number": int(pr["number"]), "change": "push"}
        return {**call, "head_sha": pr["head"]["sha"]}
    return None


def _thread(payload: dict[str, Any], base: TaskCall) -> TaskCall | None:
    pr, thread = payload.get("pull_request") or {}, payload.get("thread") or {}
    if payload.get("action") != "resolved" or "number" not in pr:
        return None
    ids = [int(c["id"]) for c in thread.get("comments") or [] if "id" in c]
    return {
        **{**base, "task": TRACK_TASK},
        "number": int(pr["number"]),
        "change": "thread_resolved",
        "comment_ids": ids,
    }


def _issue_comment(payload: dict[str, Any], base: TaskCall) -> TaskCall | None:
    """A new comment on a pull request that may hold a command; the task parses it."""
    comment, issue = payload.get("comment") or {}, payload.get("issue") or {}
    if payload.get("action") != "created" or not issue.get("pull_request"):
        return None  # edits and deletions never run anything; plain issues are not ours
    body = str(comment.get("body") or "")
    if COMMAND_WORD not in body.lower() or "id" not in comment or "number" not in issue:
        return None
    return {
        **{**base, "task": COMMAND_TASK},
        "number": int(issue["number"]),
        "comment_id": int(comment["id"]),
        "body": body[:65536],
    }


def _installation_event(event: str, payload: dict[str, Any]) -> TaskCall | None:
    if _installation(payload) is None:
        return None
    keep = ("action", "installation", "repositories", "repositories_added", "repositories_removed")
    slim = {k: payload[k] for k in keep if k in payload}
    inst = dict(slim.get("installation") or {})
    slim["installation"] = {k: inst[k] for k in ("id", "account", "repository_selection") if k in inst}
    if isinstance(inst.get("account"), dict):
        slim["installation"]["account"] = {
            k: inst["account"][k] for k in ("login", "type") if k in inst["account"]
        }
    for key in ("repositories", "repositories_added", "repositories_removed"):
        if key in slim:
            slim[key] = [{"full_name": r["full_name"]} for r in slim[key] or [] if "full_name" in r]
    return {"task": INSTALLATION_TASK, "event": event, "payload": slim}


def _check_run(payload: dict[str, Any], base: TaskCall, app_id: int | None) -> TaskCall | None:
    action, run = payload.get("action"), payload.get("check_run") or {}
    if action not in CHECK_RUN_ACTIONS:
        return None
    if app_id is not None and (run.get("app") or {}).get("id") != app_id:
        return None
    pulls = run.get("pull_requests") or []
    if not pulls or "head_sha" not in run:
        return None
    call = {
        **base,
        "number": int(pulls[0]["number"]),
        "head_sha": run["head_sha"],
        "reason": f"check_run.{action}",
    }
    if action == "requested_action":
        call["requested_action"] = (payload.get("requested_action") or {}).get("identifier")
    return call
