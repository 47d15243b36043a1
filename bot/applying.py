"""``/kernelize apply CLASS``: commit a suggestion's verified code to the pull request's branch.

What a maintainer gets with GitHub's "Commit suggestion" button, also for code that fits no single
review hunk (the summary comment shows it, to be copied by hand otherwise). Only what was verified
goes, and only where it was verified:

- the suggestion Kernelize recorded for the pull request's current head (``bot/tracking.py``), never
  new code: its stored code must still hash to what was verified;
- the class's lines in the file at that head must be the lines that were checked (their
  fingerprint, and the class spanning exactly them);
- the file after the change keeps every other definition as it was (``runners/apply.py``, the check
  the engine ran);
- the branch must be one the App can write: a branch in a fork is not.

Anything else is refused with one line on why and what to do. A retried or repeated command
commits once: the commit message carries a marker naming the suggestion and the head it was made
for; the head's own commit is looked at first, and a write GitHub refuses or leaves unknown is
looked for on the branch (``InstallationClient.commit_file``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload, sessionmaker

from bot import tracking
from bot.commands import Target
from bot.github import GitHubError, PullInfo, RepoClient
from bot.models import Suggestion
from runners.apply import ApplyError, check_applied

TRAILER = "Kernelize-Apply"
_TRAILER_RE = re.compile(rf"^{TRAILER}: suggestion=(\d+) head=([0-9a-f]+)$", re.MULTILINE)
REPLY_MARKER = "<!-- kernelize:apply comment={} -->"
RERUN = "Comment `/kernelize {}` to verify it on the current head, then `/kernelize apply {}` again."


class Refused(Exception):
    """Nothing was committed: ``message`` says why and what to do (markdown, for the pull request)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Applied:
    """The commit that carries the suggestion (``already``: made earlier, by a command like this one)."""

    suggestion_id: int
    target: str
    sha: str
    html_url: str
    branch: str
    verified_sha: str
    already: bool = False
    waiting: int = 0  # other suggestions made for the same head, still waiting


def marker(suggestion_id: int, head_sha: str) -> str:
    """The commit message's last line: which suggestion, made for which head."""
    return f"{TRAILER}: suggestion={suggestion_id} head={head_sha}"


def marked(message: str) -> tuple[int, str] | None:
    """(suggestion id, head sha) from a commit message this command wrote, else None."""
    found = _TRAILER_RE.search(message)
    return (int(found.group(1)), found.group(2)) if found else None


def _speed(s: Suggestion) -> str:
    figures = [
        f"{value:.2f}x {name}"
        for name, value in (("eager", s.speedup_eager), ("torch.compile", s.speedup_compile))
        if value is not None
    ]
    if not figures:
        return "correctness checked; speed not measured"
    return ", ".join(figures) + (f" on {s.gpu}" if s.gpu else "")


def commit_message(s: Suggestion, sender: str) -> str:
    """Names the class and Kernelize in the subject; says what was verified where in the body."""
    return (
        f"Kernelize: apply the verified Triton version of {s.class_name}\n\n"
        f"Replaces class {s.class_name} in {s.path} (lines {s.start_line}-{s.end_line}) with the code\n"
        f"Kernelize verified on {s.head_sha[:7]} (candidate {s.candidate_id} from {s.generator}; "
        f"{_speed(s)}),\nas @{sender} asked with `/kernelize apply`.\n\n"
        f"{marker(s.id, s.head_sha)}\n"
    )


def _command(target: str) -> str:
    return target if " " not in target else f"'{target}'"


def choose(rows: Sequence[Suggestion], target: Target, head_sha: str) -> Suggestion:
    """The suggestion ``target`` names among the pull request's ``rows`` (its class's, oldest first),
    made for ``head_sha``; Refused when there is none to commit."""
    named = f"`{target.path}::{target.class_name}`" if target.path else f"`{target.class_name}`"
    if not rows:
        raise Refused(
            f"Kernelize has no suggestion for {named} on this pull request, so there is nothing to "
            "commit. Where it has run, its summary comment says why (no verified kernel faster than "
            "eager, or one the repository's `min_speedup_vs_compile` held back); where it has not, "
            "comment `/kernelize` first."
        )
    done = [s for s in rows if s.status in ("applied", "merged")]
    if done:
        s = done[-1]
        where = f" in `{s.applied_sha[:7]}`" if s.applied_sha else ""
        raise Refused(
            f"Kernelize's suggestion for `{s.target}` is applied already{where}; nothing to commit."
        )
    here = [s for s in rows if s.head_sha == head_sha]
    if not here:
        s = rows[-1]
        raise Refused(
            f"Kernelize's suggestion for `{s.target}` was verified on `{s.head_sha[:7]}`, and the pull "
            f"request's head is now `{head_sha[:7]}`: what was checked there may not hold here, so it "
            f"is not committed. " + RERUN.format(_command(s.target), _command(s.target))
        )
    if len({s.path for s in here}) > 1:
        choices = ", ".join(f"`/kernelize apply {_command(s.target)}`" for s in here)
        raise Refused(f"More than one file has a class {named} with a suggestion: say which, with {choices}.")
    s = here[-1]
    if s.status != "posted":
        why = f" ({s.events[-1].detail})" if s.events and s.events[-1].detail else ""
        raise Refused(
            f"Kernelize's suggestion for `{s.target}` is {s.status}{why}, so it is not committed. "
            + RERUN.format(_command(s.target), _command(s.target))
        )
    return s


def file_after(s: Suggestion, text: str) -> str:
    """``text`` (the file at the suggestion's head) with the suggestion applied, after checking that
    the code is what was verified and the class's lines are what was checked; Refused otherwise."""
    again = RERUN.format(_command(s.target), _command(s.target))
    if hashlib.sha256(s.code.encode("utf-8")).hexdigest() != s.code_sha256:
        raise Refused(
            f"The stored code of the suggestion for `{s.target}` does not match the hash it was verified "
            f"with (sha256 `{s.code_sha256[:12]}`), so it is not committed. {again}"
        )
    lines = "\n".join(text.splitlines()[s.start_line - 1 : s.end_line])
    current = tracking.class_source(text, s.path, s.class_name)
    if current != lines or tracking.fingerprint(lines) != s.original_sha256:
        raise Refused(
            f"`{s.path}` at `{s.head_sha[:7]}` no longer matches what was checked: lines "
            f"{s.start_line}-{s.end_line} are not the `{s.class_name}` Kernelize verified the suggestion "
            f"against (their fingerprint differs), so it is not committed. {again}"
        )
    try:
        return check_applied(text, s.start_line, s.end_line, s.code, s.class_name)
    except ApplyError as exc:
        raise Refused(
            f"Applying the suggestion for `{s.target}` would not keep the file intact: {exc}."
        ) from None


def _fork_refusal(s: Suggestion, pull: PullInfo) -> Refused:
    where = (
        f"[the suggestion in the review]({s.comment_url}) with GitHub's **Commit suggestion** button"
        if s.comment_url
        else f"the code Kernelize's summary comment shows for `{s.target}`, copied over the class"
    )
    fork = f"the fork `{pull.head_repo_full_name}`" if pull.head_repo_full_name else "a fork since deleted"
    return Refused(
        f"This pull request's branch is in {fork}, and "
        f"a GitHub App can only push to repositories it is installed on, so Kernelize cannot commit "
        f"to it. @{pull.author_login} can apply {where}."
    )


def _push_refusal(exc: GitHubError, branch: str, target: str) -> Refused:
    if exc.status == 409:
        why = f"`{branch}` moved while Kernelize was committing. " + RERUN.format(target, target)
    elif exc.status == 403:
        why = (
            "the App may not write to this repository or branch: it needs the **Contents: write** "
            "permission (an owner accepts it in the installation's settings), and a protected branch "
            "must let it push."
        )
    elif exc.status == 404:
        why = f"the branch `{branch}` is gone."
    else:
        why = f"GitHub answered {exc.status or 'nothing'}: {exc.detail}"
    return Refused(f"Nothing was committed: {why}")


def _rows(sessions: sessionmaker[Session], repository: str, number: int, target: Target) -> list[Suggestion]:
    """The pull request's suggestions for ``target``'s class, oldest first, with their history."""
    query = select(Suggestion).where(
        Suggestion.repository == repository,
        Suggestion.pull_number == number,
        Suggestion.class_name == target.class_name,
    )
    if target.path:
        query = query.where(Suggestion.path == target.path)
    with sessions() as session:  # read, then let go: GitHub is called with no transaction open
        query = query.options(selectinload(Suggestion.events)).order_by(Suggestion.id)
        return list(session.execute(query).scalars())


def _record(sessions: sessionmaker[Session], repository: str, number: int, done: Applied, sender: str) -> int:
    """The suggestion is applied by ``done.sha`` (a replay changes nothing: see ``tracking.move``);
    returns how many other suggestions made for the same head still wait."""
    with sessions() as session, session.begin():
        tracking.lock_pull(session, repository, number)
        s = session.get(Suggestion, done.suggestion_id)
        if s is None:
            return 0
        tracking.move(
            s, "applied", sha=done.sha, actor=sender or None, detail="committed by /kernelize apply"
        )
        waiting = select(Suggestion.id).where(
            Suggestion.repository == s.repository,
            Suggestion.pull_number == s.pull_number,
            Suggestion.head_sha == s.head_sha,
            Suggestion.status == "posted",
        )
        return len(session.execute(waiting).all())


def apply(
    github: RepoClient,
    sessions: sessionmaker[Session],
    number: int,
    target: Target,
    sender: str,
) -> Applied:
    """Commit the suggestion ``target`` names to the pull request's branch; Refused says why not."""
    pull = github.pull(number)
    if pull.state != "open":
        raise Refused("This pull request is closed; nothing to commit.")
    rows = _rows(sessions, github.full_name, number, target)
    head = github.commit(pull.head_sha)
    mine = marked(head.message)
    earlier = next((s for s in rows if mine is not None and s.id == mine[0]), None)
    if mine is not None and earlier is not None:  # done already: a retry, or the same command twice
        done = Applied(earlier.id, earlier.target, head.sha, head.html_url, pull.head_ref, mine[1], True)
    else:
        s = choose(rows, target, pull.head_sha)
        if pull.is_fork:
            raise _fork_refusal(s, pull)
        found = github.file_at(s.path, pull.head_sha)
        if found is None:
            raise Refused(
                f"`{s.path}` is not in the pull request's head `{pull.head_sha[:7]}`; nothing to commit."
            )
        text = file_after(s, found.text)
        mark = marker(s.id, s.head_sha)
        try:
            pushed = github.commit_file(
                pull.head_ref, s.path, text, found.blob_sha, commit_message(s, sender), mark
            )
        except GitHubError as exc:
            raise _push_refusal(exc, pull.head_ref, _command(s.target)) from None
        done = Applied(s.id, s.target, pushed.sha, pushed.html_url, pull.head_ref, s.head_sha)
    waiting = _record(sessions, github.full_name, number, done, sender)
    return dataclasses.replace(done, waiting=waiting)


def reply(done: Applied) -> str:
    """What the pull request is told once the commit is there."""
    link = f"[`{done.sha[:7]}`]({done.html_url})" if done.html_url else f"`{done.sha[:7]}`"
    if done.already:
        return f"Already committed: Kernelize's suggestion for `{done.target}` is {link} on `{done.branch}`."
    text = (
        f"Committed Kernelize's suggestion for `{done.target}` to `{done.branch}` as {link}: the code "
        f"verified on `{done.verified_sha[:7]}` now replaces the class; the rest of the file is as it was."
    )
    if done.waiting:
        text += (
            f" The {done.waiting} other suggestion(s) made for `{done.verified_sha[:7]}` need a fresh "
            "`/kernelize` run on the new head before `/kernelize apply` takes them."
        )
    return text


def answer(
    github: RepoClient,
    sessions: sessionmaker[Session],
    number: int,
    comment_id: int,
    target: Target,
    sender: str,
) -> dict[str, Any]:
    """Run ``/kernelize apply`` and answer the command: one reply (edited, not repeated, when the
    same command is handled again) and 🚀, or 😕 with the reason."""
    mark = REPLY_MARKER.format(comment_id)
    try:
        done = apply(github, sessions, number, target, sender)
    except Refused as refused:
        github.react(comment_id, "confused")
        github.upsert_comment(number, mark, f"{refused.message}\n{mark}")
        return {"action": "apply", "refused": refused.message}
    github.upsert_comment(number, mark, f"{reply(done)}\n{mark}")
    github.react(comment_id, "rocket")
    return {"action": "apply", "commit": done.sha, "suggestion": done.suggestion_id, "already": done.already}
