"""What became of each suggestion: posted → applied → merged, or outdated / dismissed.

Content decides, not commit messages: a suggestion is *applied* when the pull
request's head holds its code (whitespace-normalized) in its file, however it
got there; GitHub's "Apply suggestion" commits (co-authored by the app's bot
user) are only recognised as such for the record. Every function is idempotent
(a replayed event changes nothing) and takes a session; the caller commits.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from bot.models import Suggestion, SuggestionEvent, utcnow
from runners.discover import DiscoveryError, find_modules

OPEN = ("posted", "applied")
# Where a suggestion may go from each status. merged, outdated and dismissed are final.
MOVES = {
    "posted": {"applied", "outdated", "dismissed"},
    "applied": {"merged", "dismissed", "outdated"},
}


class Reader(Protocol):
    """What detection needs from GitHub, in the pull request's repository (``bot.github.RepoClient``
    is one)."""

    def file_text(self, path: str, ref: str) -> str | None: ...

    def review_comment_reactions(self, comment_id: int) -> list[str]: ...


def normalized(code: str) -> str:
    """Code with every run of whitespace made one space and blank lines dropped (for "is it there?")."""
    return "\n".join(" ".join(line.split()) for line in code.splitlines() if line.strip())


def fingerprint(code: str) -> str:
    return hashlib.sha256(normalized(code).encode()).hexdigest()


def class_source(text: str, path: str, class_name: str) -> str | None:
    """The lines of top-level class ``class_name`` in ``text``, or None."""
    try:
        modules = find_modules(text, path)
    except DiscoveryError:
        return None
    lines = text.splitlines()
    for m in modules:
        if m.name == class_name:
            return "\n".join(lines[m.lineno - 1 : m.end_lineno])
    return None


def move(
    s: Suggestion, status: str, *, sha: str | None = None, actor: str | None = None, detail: str = ""
) -> bool:
    """Change ``s`` to ``status`` when that is a legal step; record the event. False when nothing changed."""
    if status == s.status or status not in MOVES.get(s.status, set()):
        return False
    now = utcnow()
    s.status = status
    if status == "applied":
        s.applied_at, s.applied_sha, s.applied_by = now, sha, actor
    elif status in ("merged", "dismissed", "outdated"):
        s.closed_at = now
    s.events.append(SuggestionEvent(status=status, at=now, sha=sha, actor=actor, detail=detail[:500]))
    return True


def applied_comments(session: Session, repository: str, number: int) -> dict[int, str]:
    """Review comment id → the sha that applied it, for the PR's applied or merged suggestions."""
    query = select(Suggestion).where(
        Suggestion.repository == repository,
        Suggestion.pull_number == number,
        Suggestion.status.in_(("applied", "merged")),
        Suggestion.comment_id.is_not(None),
    )
    return {int(s.comment_id): s.applied_sha or "" for s in session.execute(query).scalars() if s.comment_id}


def applied_here(
    session: Session, repository: str, number: int, path: str, class_name: str, text: str
) -> Suggestion | None:
    """The applied suggestion whose code ``text`` (the file at the head) still holds in full, with
    ``class_name``'s lines all inside it: the class is Kernelize's verified code, unchanged."""
    current = class_source(text, path, class_name)
    if current is None:
        return None
    held, cls = normalized(text), normalized(current)
    for s in open_suggestions(session, repository, number):
        if s.status != "applied" or s.path != path or s.class_name != class_name:
            continue
        code = normalized(s.code)
        if code in held and cls in code:
            return s
    return None


# ---------------------------------------------------------------------------
# Recording


def record_posted(session: Session, rows: Iterable[dict[str, Any]]) -> list[Suggestion]:
    """Store suggestions as posted; one already stored (same repository, PR, sha, target) is kept."""
    out = []
    for row in rows:
        found = session.execute(
            select(Suggestion).where(
                Suggestion.repository == row["repository"],
                Suggestion.pull_number == row["pull_number"],
                Suggestion.head_sha == row["head_sha"],
                Suggestion.target == row["target"],
            )
        ).scalar_one_or_none()
        if found is None:
            found = Suggestion(**row, status="posted")
            found.events.append(SuggestionEvent(status="posted", sha=row["head_sha"], detail="review posted"))
            session.add(found)
        out.append(found)
    session.flush()
    return out


def lock_pull(session: Session, repository: str, number: int) -> None:
    """Lock the pull request's suggestions for a read-modify-write, before reading them: PostgreSQL,
    their rows; SQLite, the database's write lock, taken first by a write that changes nothing. (In
    WAL mode a transaction that read before it wrote fails at the write once another writer committed
    meanwhile, as the web process does with each delivery just after queueing its task.)"""
    session.execute(
        update(Suggestion)
        .where(Suggestion.repository == repository, Suggestion.pull_number == number)
        .values(status=Suggestion.status)
        .execution_options(synchronize_session=False)
    )


def open_suggestions(session: Session, repository: str, number: int) -> list[Suggestion]:
    query = select(Suggestion).where(
        Suggestion.repository == repository, Suggestion.pull_number == number, Suggestion.status.in_(OPEN)
    )
    return list(session.execute(query.order_by(Suggestion.id)).scalars())


# ---------------------------------------------------------------------------
# Detection


@dataclass(frozen=True)
class Push:
    head_sha: str
    pusher: str | None  # who pushed (the event's sender)
    author: str | None  # the head commit's author, when GitHub maps it to a user
    message: str  # the head commit's message
    bot_login: str  # the app's bot user, e.g. kernelize[bot]


def on_push(session: Session, reader: Reader, repository: str, number: int, push: Push) -> dict[str, int]:
    """A new head: each open suggestion is applied (its code is there), outdated (its lines changed
    otherwise) or still waiting."""
    counts = {"applied": 0, "outdated": 0}
    texts: dict[str, str | None] = {}
    for s in open_suggestions(session, repository, number):
        if s.head_sha == push.head_sha:
            continue
        if s.path not in texts:
            texts[s.path] = reader.file_text(s.path, push.head_sha)
        text = texts[s.path]
        present = text is not None and normalized(s.code) in normalized(text)
        if present and s.status == "posted":
            button = f"co-authored-by: {push.bot_login.lower()}" in push.message.lower()
            s.applied_via_button = button
            how = "applied with GitHub's button" if button else "the suggested code is in the head"
            if move(s, "applied", sha=push.head_sha, actor=push.author or push.pusher, detail=how):
                counts["applied"] += 1
            continue
        if present:
            continue
        current = class_source(text, s.path, s.class_name) if text is not None else None
        if s.status == "posted" and current is not None and fingerprint(current) == s.original_sha256:
            continue  # untouched: still waiting for someone
        why = (
            "the suggested code was removed again" if s.status == "applied" else "its lines changed otherwise"
        )
        if move(s, "outdated", sha=push.head_sha, actor=push.pusher, detail=why):
            counts["outdated"] += 1
    return counts


def on_closed(
    session: Session, repository: str, number: int, merged: bool, actor: str | None
) -> dict[str, int]:
    counts = {"merged": 0, "dismissed": 0}
    for s in open_suggestions(session, repository, number):
        if merged and s.status == "applied":
            counts["merged"] += move(s, "merged", actor=actor, detail="pull request merged")
        else:
            detail = "merged without the change" if merged else "pull request closed without merging"
            counts["dismissed"] += move(s, "dismissed", actor=actor, detail=detail)
    return counts


def on_thread_resolved(
    session: Session, repository: str, number: int, comment_ids: Sequence[int], actor: str | None
) -> int:
    """A resolved review thread holding a suggestion that was not applied: dismissed."""
    ids = set(comment_ids)
    n = 0
    for s in open_suggestions(session, repository, number):
        if s.status == "posted" and s.comment_id in ids:
            n += move(s, "dismissed", actor=actor, detail="review thread resolved without the change")
    return n


def refresh_feedback(session: Session, reader: Reader, repository: str, number: int) -> None:
    """👍 / 👎 on each suggestion comment of the pull request (GitHub sends no event for reactions)."""
    query = select(Suggestion).where(Suggestion.repository == repository, Suggestion.pull_number == number)
    for s in session.execute(query).scalars():
        if s.comment_id is None:
            continue
        found = reader.review_comment_reactions(s.comment_id)
        s.thumbs_up, s.thumbs_down = found.count("+1"), found.count("-1")


# ---------------------------------------------------------------------------
# Stats


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the values given (None where there are none)."""
    known = [v for v in values if v]
    return round(math.exp(sum(math.log(v) for v in known) / len(known)), 4) if known else None


def stats(
    session: Session,
    *,
    repository: str | None = None,
    installation_id: int | None = None,
    public_only: bool = False,
) -> dict[str, Any]:
    """Posted, applied, merged, dismissed, outdated, acceptance rate (applied or merged over all
    posted), median time to apply, geometric-mean speedup of merged suggestions over eager PyTorch
    and over torch.compile, and by generator."""
    query = select(Suggestion)
    if repository is not None:
        query = query.where(Suggestion.repository == repository)
    if installation_id is not None:
        query = query.where(Suggestion.installation_id == installation_id)
    if public_only:
        query = query.where(Suggestion.private.is_(False))
    rows = list(session.execute(query).scalars())
    accepted = [s for s in rows if s.status in ("applied", "merged") or s.applied_at is not None]
    count = {
        status: sum(1 for s in rows if s.status == status)
        for status in (*OPEN, "merged", "dismissed", "outdated")
    }
    waits = [(s.applied_at - s.posted_at).total_seconds() for s in accepted if s.applied_at and s.posted_at]
    merged = [s for s in rows if s.status == "merged"]
    generators: dict[str, dict[str, Any]] = {}
    for s in rows:
        g = generators.setdefault(s.generator, {"posted": 0, "accepted": 0})
        g["posted"] += 1
        g["accepted"] += s in accepted
    for g in generators.values():
        g["acceptance_rate"] = _rate(g["accepted"], g["posted"])
    return {
        "posted": len(rows),  # ever posted
        "waiting": count["posted"],  # posted, nothing happened yet
        "applied": count["applied"],  # applied, pull request still open
        "merged": count["merged"],
        "dismissed": count["dismissed"],
        "outdated": count["outdated"],
        "accepted": len(accepted),  # applied at some point (applied or merged now)
        "acceptance_rate": _rate(len(accepted), len(rows)),
        "median_seconds_to_apply": median(waits) if waits else None,
        "geomean_speedup_merged": _geomean([s.speedup_eager for s in merged]),
        "geomean_speedup_compile_merged": _geomean([s.speedup_compile for s in merged]),
        "by_generator": dict(sorted(generators.items())),
    }


def times(value: float | None) -> str:
    """A speedup as shown everywhere: ``2.40x``, or a dash when there is none."""
    return "—" if value is None else f"{value:.2f}x"


def stats_markdown(data: dict[str, Any], repository: str) -> str:
    if not data["posted"]:
        return f"Kernelize has not posted any suggestions on `{repository}` yet."
    rate = f"{data['acceptance_rate']:.0%}" if data["acceptance_rate"] is not None else "—"
    wait = data["median_seconds_to_apply"]
    wait_text = "—" if wait is None else (f"{wait / 3600:.1f} h" if wait >= 3600 else f"{wait / 60:.0f} min")
    geo, geo_compile = data["geomean_speedup_merged"], data["geomean_speedup_compile_merged"]
    lines = [
        f"### Kernelize on `{repository}`",
        "",
        "| posted | applied | merged | dismissed | outdated | waiting | acceptance | median time to apply "
        "| merged: geomean vs eager | vs torch.compile |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| "
        + " | ".join(
            str(data[k]) for k in ("posted", "applied", "merged", "dismissed", "outdated", "waiting")
        )
        + f" | {rate} | {wait_text} | {times(geo)} | {times(geo_compile)} |",
        "",
        "| generator | posted | accepted | acceptance |",
        "|---|---|---|---|",
    ]
    for name, g in data["by_generator"].items():
        share = "—" if g["acceptance_rate"] is None else f"{g['acceptance_rate']:.0%}"
        lines.append(f"| {name} | {g['posted']} | {g['accepted']} | {share} |")
    return "\n".join(lines) + "\n"


def as_dict(s: Suggestion) -> dict[str, Any]:
    """A suggestion for the JSON API."""

    def when(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": s.id,
        "repository": s.repository,
        "pull_number": s.pull_number,
        "head_sha": s.head_sha,
        "path": s.path,
        "lines": [s.start_line, s.end_line],
        "class_name": s.class_name,
        "generator": s.generator,
        "candidate": s.candidate_id,
        "code_sha256": s.code_sha256,
        "max_abs_error": s.max_abs_error,
        "eager_ms": s.eager_ms,
        "compile_ms": s.compile_ms,
        "kernel_ms": s.kernel_ms,
        "speedup_eager": s.speedup_eager,
        "speedup_compile": s.speedup_compile,
        "gpu": s.gpu,
        "status": s.status,
        "applied_sha": s.applied_sha,
        "applied_by": s.applied_by,
        "applied_via_button": s.applied_via_button,
        "thumbs_up": s.thumbs_up,
        "thumbs_down": s.thumbs_down,
        "comment_url": s.comment_url,
        "posted_at": when(s.posted_at),
        "applied_at": when(s.applied_at),
        "closed_at": when(s.closed_at),
        "history": [
            {"status": e.status, "at": when(e.at), "sha": e.sha, "actor": e.actor, "detail": e.detail}
            for e in s.events
        ],
    }
