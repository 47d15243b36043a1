"""Tracking: what became of each suggestion when the pull request moves (a push), closes, or has a
review thread resolved (``bot/tracking.py`` keeps the history)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from bot import tracking
from bot.flows.common import Services
from bot.github import CommitInfo, GitHubError

log = logging.getLogger(__name__)


def push_of(head_sha: str, sender: str, commit: CommitInfo, bot_login: str) -> tracking.Push:
    """A new head as tracking reads it: who pushed (nobody named: unknown), the head commit's
    author and message, and the app's own login (its button's commits name it)."""
    return tracking.Push(head_sha, sender or None, commit.author_login, commit.message, bot_login)


def track_push(svc: Services, number: int, head_sha: str, sender: str) -> None:
    """A new head: which suggestions it applied or made outdated (never blocks the run itself)."""
    github, repository = svc.github, svc.github.full_name
    try:
        push = push_of(head_sha, sender, github.commit(head_sha), github.bot_login())
        with svc.sessions() as session, session.begin():
            tracking.lock_pull(session, repository, number)
            counts = tracking.on_push(session, github, repository, number, push)
            tracking.refresh_feedback(session, github, repository, number)
        if any(counts.values()):
            log.info("%s#%d at %s: %s", repository, number, head_sha[:7], counts)
    except (GitHubError, SQLAlchemyError) as exc:
        log.error("could not track the push to %s#%d: %s", repository, number, exc)


def track(
    svc: Services,
    number: int,
    change: str,
    sender: str = "",
    merged: bool = False,
    comment_ids: Sequence[int] = (),
    head_sha: str = "",
) -> dict[str, Any]:
    """A pull request closed, a review thread resolved, or a push by a bot: update its suggestions."""
    if change == "push":
        track_push(svc, number, head_sha, sender)
        return {"change": change}
    repository = svc.github.full_name
    with svc.sessions() as session, session.begin():
        tracking.lock_pull(session, repository, number)
        if not tracking.open_suggestions(session, repository, number):
            return {"change": change, "open": 0}
        if change == "closed":
            tracking.refresh_feedback(session, svc.github, repository, number)
            return {
                "change": change,
                **tracking.on_closed(session, repository, number, merged, sender or None),
            }
        if change == "thread_resolved":
            n = tracking.on_thread_resolved(session, repository, number, comment_ids, sender or None)
            return {"change": change, "dismissed": n}
    return {"change": change, "unknown": True}
