"""``/kernelize apply``, driven through the webhook endpoint on both databases (tests/bot/flow.py).

The suggestions come from a real run (the ``files`` generator, on CPU) or, for the refusals, are
stored the way publishing stores them: the command only trusts the database's record, the file at
the head and GitHub's answers, so a record is all it needs to be refused or committed.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from bot import applying, publish, tasks, tracking
from bot.models import Suggestion
from runners.apply import applied
from runners.discover import find_modules
from tests.bot.flow import HEAD, INSTALLATION, NUMBER, OWNER, REPO, SOURCE, World, pr_event
from tests.fake_github import fake_sha

PATH = "models/layers.py"
RUN = f"/kernelize {PATH}::RMSNorm"
PUTS = rf"^/repos/{OWNER}/{REPO}/contents/{PATH}$"
# What a stored suggestion for RMSNorm may hold (the checks compare hashes and lines, not behaviour).
CODE = """class RMSNorm(tnn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = tnn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * scale * self.weight
"""


def _store(world: World, **fields: Any) -> Suggestion:
    """A suggestion for RMSNorm at the pull request's head, recorded as publishing records one."""
    [m] = [m for m in find_modules(SOURCE, PATH) if m.name == "RMSNorm"]
    original = "\n".join(SOURCE.splitlines()[m.lineno - 1 : m.end_lineno])
    row = {
        "installation_id": INSTALLATION,
        "repository": f"{OWNER}/{REPO}",
        "private": False,
        "pull_number": NUMBER,
        "head_sha": HEAD,
        "path": PATH,
        "start_line": m.lineno,
        "end_line": m.end_lineno,
        "class_name": "RMSNorm",
        "target": f"{PATH}::RMSNorm",
        "generator": "files",
        "candidate_id": "ok.py",
        "code": CODE,
        "code_sha256": hashlib.sha256(CODE.encode()).hexdigest(),
        "original_sha256": tracking.fingerprint(original),
        "gpu": "",
        "comment_url": "",
    } | fields
    with world.sessions() as session, session.begin():
        [s] = tracking.record_posted(session, [row])
        session.expunge(s)
    return s


def _branch_head(world: World) -> str:
    return world.fake.repo(OWNER, REPO).refs["feature-5"]


def _apply_and_reply(world: World, line: str, login: str = "maintainer") -> tuple[Any, str]:
    c = world.comment(line, login=login)
    return c, world.replies()[-1]


def test_apply_commits_the_verified_code_once_and_it_stays_applied(world: World) -> None:
    world.comment(RUN)
    [s] = world.suggestions()
    [review] = world.reviews()
    evidence = review.comments[0].body.split("```suggestion")[0].strip()

    c, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    head = _branch_head(world)
    assert head != HEAD and world.fake.pull(OWNER, REPO, NUMBER).head_sha == head
    # The head file with the class's lines replaced by the stored, verified code: nothing else.
    tree = world.fake.repo(OWNER, REPO).trees[head]
    assert tree[PATH].decode() == applied(SOURCE, s.start_line, s.end_line, s.code)
    author, message = world.fake.commit_details[head]
    assert author == "kernelize[bot]"
    assert message.startswith("Kernelize: apply the verified Triton version of RMSNorm\n")
    assert f"verified on {HEAD[:7]} (candidate {s.candidate_id} from files" in message
    assert "speed not measured" in message and "@maintainer" in message
    assert message.rstrip().endswith(applying.marker(s.id, HEAD))
    assert reply.startswith(f"Committed Kernelize's suggestion for `{PATH}::RMSNorm` to `feature-5` as [`")
    assert f"/commit/{head})" in reply and f"verified on `{HEAD[:7]}`" in reply
    assert world.reactions(c.id) == ["eyes", "rocket"]
    [s] = world.suggestions()
    assert (s.status, s.applied_sha, s.applied_by) == ("applied", head, "maintainer")
    assert s.events[-1].detail == "committed by /kernelize apply"

    # GitHub tells the App about its own push (sender kernelize[bot]): tracked, never run; still applied.
    assert (
        world.post("pull_request", pr_event("synchronize", head, sender="kernelize[bot]")).status_code == 202
    )
    assert [e.status for e in world.suggestions()[0].events] == ["posted", "applied"]

    # The same command again, and the same delivery handled twice: one commit, one reply per comment.
    _, again = _apply_and_reply(world, "/kernelize apply models/layers.py::RMSNorm")
    assert again.startswith(
        f"Already committed: Kernelize's suggestion for `{PATH}::RMSNorm` is [`{head[:7]}`]"
    )
    tasks.handle_command(
        None, INSTALLATION, OWNER, REPO, NUMBER, c.id, "/kernelize apply RMSNorm", "maintainer"
    )
    mine = [r for r in world.replies() if applying.REPLY_MARKER.format(c.id) in r]
    assert len(mine) == 1 and mine[0].startswith("Already committed")
    assert [r.status for r in world.fake.requests_to("PUT", PUTS)] == [200]
    assert _branch_head(world) == head

    # A run on the new head: the class is the applied suggestion, unchanged: already kernelized ✓, and
    # the review comment says applied, with its evidence.
    world.comment(RUN)
    summary = next(r for r in reversed(world.replies()) if "kernelize:summary" in r)
    assert "already kernelized ✓" in summary and "rejected" not in summary and "outdated" not in summary
    [review] = world.reviews()
    assert review.comments[0].body.startswith(f"**Applied ✓** in `{head[:7]}`")
    assert evidence in review.comments[0].body
    assert world.suggestions()[0].status == "applied"


def test_code_shown_only_in_the_summary_is_committed_too(world: World) -> None:
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "comment:\n  mode: summary-only\n")
    world.comment(RUN)
    assert not world.reviews()
    summary = next(r for r in world.replies() if "kernelize:summary" in r)
    assert "<details><summary>Code to replace <code>RMSNorm</code>" in summary
    assert f"comment `/kernelize apply {PATH}::RMSNorm` to have Kernelize commit this code" in summary
    assert "`/kernelize apply Class` commits a suggestion to this branch" in summary  # the commands
    [s] = world.suggestions()
    assert s.comment_id is None and s.status == "posted" and s.head_sha == HEAD
    assert publish.fence(s.code, "python") in summary  # what the summary shows is what is stored

    _, reply = _apply_and_reply(world, f"/kernelize apply {PATH}::RMSNorm")
    head = _branch_head(world)
    assert reply.startswith("Committed") and head in reply
    assert world.fake.repo(OWNER, REPO).trees[head][PATH].decode() == applied(
        SOURCE, s.start_line, s.end_line, s.code
    )
    assert world.suggestions()[0].status == "applied"


def test_a_repository_requiring_compile_gets_nothing_it_could_not_show_beats_compile(world: World) -> None:
    """``min_speedup_vs_compile`` on the default branch: a winner not timed against torch.compile
    (this run has no GPU) is reported, not suggested, and not left to commit."""
    world.fake.set_file(OWNER, REPO, "main", ".github/kernelize.yml", "min_speedup_vs_compile: 1.0\n")
    world.comment(RUN)
    assert not world.reviews() and not world.suggestions()
    summary = next(r for r in world.replies() if "kernelize:summary" in r)
    assert "correct, held by `min_speedup_vs_compile`" in summary
    assert "not timed (no GPU), and this repository suggests only what runs at 1x torch.compile" in summary
    assert "/kernelize apply" not in summary.split("**Commands**")[0]
    _, reply = _apply_and_reply(world, f"/kernelize apply {PATH}::RMSNorm")
    assert reply.startswith(f"Kernelize has no suggestion for `{PATH}::RMSNorm` on this pull request")
    assert "summary comment says why" in reply and "`min_speedup_vs_compile` held back" in reply


def test_apply_refuses_what_it_cannot_commit_and_says_why(world: World) -> None:
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm", login="reader")
    assert "@reader" in reply and "commits to this pull request's branch" in reply

    c, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert reply.startswith("Kernelize has no suggestion for `RMSNorm` on this pull request")
    assert world.reactions(c.id) == ["eyes", "confused"]

    s = _store(world, start_line=9, end_line=17)  # lines that are not the class's any more
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert f"`{PATH}` at `{HEAD[:7]}` no longer matches what was checked" in reply
    assert f"Comment `/kernelize {PATH}::RMSNorm` to verify it on the current head" in reply
    with world.sessions() as session, session.begin():
        session.query(Suggestion).delete()

    _store(world, code_sha256="0" * 64)  # the stored code is not what was verified
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert "does not match the hash it was verified with" in reply
    with world.sessions() as session, session.begin():
        session.query(Suggestion).delete()

    s = _store(world)
    moved = fake_sha("head", 77)
    world.fake.push(OWNER, REPO, NUMBER, moved)
    world.fake.set_file(OWNER, REPO, moved, PATH, SOURCE)
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert f"was verified on `{HEAD[:7]}`, and the pull request's head is now `{moved[:7]}`" in reply
    assert world.suggestions()[0].status == "posted" and world.suggestions()[0].id == s.id

    world.fake.pull(OWNER, REPO, NUMBER).state = "closed"
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert reply == "This pull request is closed; nothing to commit.\n" + applying.REPLY_MARKER.format(_.id)
    assert not world.fake.requests_to("PUT", PUTS)


def test_a_branch_in_a_fork_is_not_pushed_to(world: World) -> None:
    fork = world.fake.add_repo("author", REPO, fork_of=world.fake.repo(OWNER, REPO))
    world.fake.pull(OWNER, REPO, NUMBER).head_repo = fork
    _store(world, comment_url="https://github.com/octo/models/pull/5#discussion_r1")
    c, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert reply.startswith("This pull request's branch is in the fork `author/models`")
    assert "a GitHub App can only push to repositories it is installed on" in reply
    assert (
        "@author can apply [the suggestion in the review](https://github.com/octo/models/pull/5#discussion_r1)"
        in reply
    )
    assert world.reactions(c.id) == ["eyes", "confused"]
    assert not world.fake.requests_to("PUT", PUTS)


def test_an_installation_that_may_only_read_says_what_to_grant(world: World) -> None:
    world.fake.installations[INSTALLATION].permissions["contents"] = "read"
    _store(world)
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    assert reply.startswith("Nothing was committed: the App may not write to this repository or branch")
    assert "**Contents: write**" in reply
    assert world.suggestions()[0].status == "posted"


@pytest.mark.parametrize("status", [409, 502])
def test_a_refused_or_lost_write_is_looked_for_and_never_repeated(world: World, status: int) -> None:
    """409: the file moved between the read and the write (here: GitHub says so, nothing written):
    refused. 502 after the write went through (the retry gets GitHub's 409): the commit on the
    branch carries the marker, so it is this one: answered as committed, once."""
    s = _store(world)
    world.fake.fail_next("PUT", PUTS, status, after=status == 502)
    _, reply = _apply_and_reply(world, "/kernelize apply RMSNorm")
    puts = world.fake.requests_to("PUT", PUTS)
    if status == 409:
        assert reply.startswith("Nothing was committed: `feature-5` moved while Kernelize was committing")
        assert [r.status for r in puts] == [409] and _branch_head(world) == HEAD
        assert world.suggestions()[0].status == "posted"
        return
    head = _branch_head(world)
    assert [r.status for r in puts] == [502, 409]
    assert reply.startswith("Committed") and head in reply
    assert applying.marker(s.id, HEAD) in world.fake.commit_details[head][1]
    assert world.suggestions()[0].applied_sha == head
