"""What became of each suggestion, from real octokit payloads through the webhook, on both databases.

``pull_request/synchronize`` (applied: the suggested code is in the new head; outdated: its lines
changed otherwise), ``pull_request/closed`` (merged / dismissed), ``pull_request_review_thread/
resolved`` (dismissed), 👍/👎 on the suggestion comment, replays, the stats API and ``/kernelize stats``.
"""

from __future__ import annotations

import json

import httpx

from bot import tracking
from bot.models import Suggestion
from tests.bot.flow import EXAMPLES, HEAD, INSTALLATION, NUMBER, OWNER, REPO, SOURCE, World, pr_event
from tests.fake_github import added_file_patch, fake_sha

RUN = "/kernelize models/layers.py::RMSNorm"


def _push(
    world: World, sha: str, text: str, message: str = "Update layers.py", author: str | None = None
) -> None:
    patch = added_file_patch(text.splitlines())
    files = [{"filename": "models/layers.py", "status": "added", "patch": patch}]
    world.fake.push(OWNER, REPO, NUMBER, sha, files)
    world.fake.set_file(OWNER, REPO, sha, "models/layers.py", text)
    world.fake.set_commit(OWNER, REPO, sha, message, author)
    assert world.post("pull_request", pr_event("synchronize", sha)).status_code == 202


def _applied_source(code: str) -> str:
    """layers.py with RMSNorm replaced by the suggested code, as the "Apply suggestion" button does."""
    lines = SOURCE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("class RMSNorm"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace())
    return "\n".join([*lines[:start], *code.rstrip("\n").splitlines(), "", "", *lines[end:]]) + "\n"


def _thumbs(world: World, comment_id: int, login: str, content: str) -> None:
    token = world.fake.add_user_token(login)
    url = f"{world.fake.base_url}/repos/{OWNER}/{REPO}/pulls/comments/{comment_id}/reactions"
    headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json"}
    assert httpx.post(url, json={"content": content}, headers=headers).status_code == 201


def test_posted_applied_merged_with_feedback_and_stats(world: World) -> None:
    world.comment(RUN)
    [s] = world.suggestions()
    assert (s.status, s.head_sha, s.class_name, s.generator) == ("posted", HEAD, "RMSNorm", "files")
    assert s.comment_id is not None and s.comment_url and s.code_sha256
    original = tracking.class_source(SOURCE, "models/layers.py", "RMSNorm")
    assert original is not None and original.startswith("class RMSNorm")
    assert "_forward_eager" in s.code and s.original_sha256 == tracking.fingerprint(original)
    [review] = world.reviews()
    assert any(c.id == s.comment_id for c in review.comments)

    # Someone pushes a commit unrelated to the class: still waiting.
    unrelated = SOURCE + "\n\n# a note\n"
    _push(world, fake_sha("head", 51), unrelated)
    [s] = world.suggestions()
    assert s.status == "posted"

    # "Apply suggestion": GitHub's commit, co-authored by the app's bot user, with the code in place.
    applied_sha = fake_sha("head", 52)
    message = (
        "Apply suggestions from code review\n\n"
        "Co-authored-by: kernelize[bot] <1+kernelize[bot]@users.noreply.github.com>"
    )
    _thumbs(world, s.comment_id, "fan", "+1")
    _push(world, applied_sha, _applied_source(s.code), message, author="maintainer")
    [s] = world.suggestions()
    assert (s.status, s.applied_sha, s.applied_by, s.applied_via_button) == (
        "applied",
        applied_sha,
        "maintainer",
        True,
    )
    assert s.thumbs_up == 1 and s.thumbs_down == 0

    # The same delivery again (a replay) and the same push again: nothing changes.
    _push(world, applied_sha, _applied_source(s.code), message, author="maintainer")
    assert [e.status for e in world.suggestions()[0].events] == ["posted", "applied"]

    closed = pr_event("closed", applied_sha, merged=True)
    assert world.post("pull_request", closed).status_code == 202
    [s] = world.suggestions()
    assert s.status == "merged" and s.closed_at is not None
    assert [e.status for e in s.events] == ["posted", "applied", "merged"]
    assert world.post("pull_request", closed).status_code == 202  # a new delivery of the same close
    assert [e.status for e in world.suggestions()[0].events] == ["posted", "applied", "merged"]

    # The stats API (public repository) and /kernelize stats agree with the database.
    stats = world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/stats").json()
    assert (stats["posted"], stats["merged"], stats["accepted"], stats["acceptance_rate"]) == (1, 1, 1, 1.0)
    assert stats["by_generator"] == {"files": {"posted": 1, "accepted": 1, "acceptance_rate": 1.0}}
    listed = world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/suggestions", params={"status": "merged"})
    assert listed.json()["total"] == 1 and listed.json()["items"][0]["comment_url"] == s.comment_url
    assert [h["status"] for h in listed.json()["items"][0]["history"]] == ["posted", "applied", "merged"]
    assert (
        world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/suggestions", params={"status": "posted"}).json()[
            "total"
        ]
        == 0
    )
    world.comment("/kernelize stats", login="reader")
    reply = world.replies()[-1]
    assert "| 1 | 0 | 1 | 0 | 0 | 0 | 100% |" in reply and "| files | 1 | 1 | 100% |" in reply


def test_outdated_then_dismissed_by_a_resolved_thread_or_a_close(world: World) -> None:
    world.comment(RUN)
    [s] = world.suggestions()
    # The class changes in another way: the suggestion no longer fits its lines.
    changed = SOURCE.replace("self.eps = eps", "self.eps = float(eps)")
    _push(world, fake_sha("head", 61), changed)
    [s] = world.suggestions()
    assert s.status == "outdated" and s.events[-1].detail == "its lines changed otherwise"

    # A fresh run on the new head posts a new suggestion; resolving its thread dismisses it.
    world.comment(RUN)
    first, second = world.suggestions()
    assert (first.status, second.status) == ("outdated", "posted")
    thread = json.loads((EXAMPLES / "pull_request_review_thread/resolved.payload.json").read_text())
    thread["repository"]["full_name"] = f"{OWNER}/{REPO}"
    thread["installation"] = {"id": INSTALLATION}
    thread["pull_request"]["number"] = NUMBER
    thread["thread"]["comments"][0]["id"] = second.comment_id
    thread["sender"].update(login="maintainer", type="User")
    assert world.post("pull_request_review_thread", thread).status_code == 202
    first, second = world.suggestions()
    assert second.status == "dismissed" and "resolved" in second.events[-1].detail

    # Closing without merging leaves final states alone.
    assert world.post("pull_request", pr_event("closed", second.head_sha, merged=False)).status_code == 202
    assert [s.status for s in world.suggestions()] == ["outdated", "dismissed"]


def test_a_close_without_merging_dismisses_what_is_waiting_even_when_a_bot_closes_it(world: World) -> None:
    world.comment(RUN)
    closed = pr_event("closed", HEAD, sender="stale[bot]", merged=False)  # a bot: type "Bot"
    assert world.post("pull_request", closed).status_code == 202
    [s] = world.suggestions()
    assert s.status == "dismissed" and s.events[-1].detail == "pull request closed without merging"


def test_private_repositories_are_not_served(world: World) -> None:
    world.comment(RUN)
    assert world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/stats").status_code == 200
    with world.sessions() as session, session.begin():
        session.query(Suggestion).update({"private": True})
    assert world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/stats").status_code == 404
    assert world.client.get(f"/api/v1/repos/{OWNER}/{REPO}/suggestions").status_code == 404
    assert world.client.get("/api/v1/repos/nobody/nothing/stats").status_code == 404
    paths = world.client.get("/api/v1/openapi.json").json()["paths"]
    assert (
        "/api/v1/repos/{owner}/{repo}/stats" in paths and "/api/v1/repos/{owner}/{repo}/suggestions" in paths
    )


def test_the_success_path_reads_as_success(world: World) -> None:
    """Posted → applied by the author → the re-run on the new head: the applied comment keeps its
    evidence and says so, the class is "already kernelized ✓" (not rejected), nothing new is posted."""
    world.comment(RUN)
    [s] = world.suggestions()
    [review] = world.reviews()
    evidence = review.comments[0].body
    applied_sha = fake_sha("head", 61)
    _push(world, applied_sha, _applied_source(s.code), "Apply suggestion", author="author")
    assert world.suggestions()[0].status == "applied"
    world.comment(RUN)  # a maintainer asks again on the applied head

    [old] = world.reviews()  # nothing new to review
    assert old.body.startswith("**Applied ✓:**") and applied_sha[:7] in old.body
    [line] = old.comments
    assert line.body.startswith(f"**Applied ✓** in `{applied_sha[:7]}`")
    assert "```suggestion" not in line.body and "```python" in line.body  # nothing to apply twice
    assert evidence.split("```suggestion")[0].strip() in line.body  # the evidence it was posted with
    summary = next(r for r in reversed(world.replies()) if "kernelize:summary" in r)
    assert "Nothing was run on this head." in summary
    assert "already kernelized ✓" in summary and "rejected" not in summary
    assert f"verified on `{HEAD[:7]}`" in summary and "not run again" in summary
    check = world.checks()[-1]
    assert check.head_sha == applied_sha and check.conclusion == "neutral"
    assert "already kernelized ✓" in check.output["summary"]
