"""The fake GitHub, driven by the real PyGithub (and raw ``requests``) over HTTP.

Every test runs against a started fake from the ``fake_github`` fixture, which fails the test at
teardown if a request broke GitHub's OpenAPI description or an answer broke its schemas; tests
that break the description on purpose take their violations back with ``take_violations()``.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any

import github
import jwt
import pytest
import requests

from tests.fake_github import (
    AppCredentials,
    FakeGitHub,
    added_file_patch,
    fake_github_fixture,  # noqa: F401  (the ``fake_github`` fixture)
    load_spec,
    make_app_key,
    make_patch,
    parse_patch,
    to_json_schema,
)
from tests.fake_github.diff import PatchError

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "github-webhooks" / "payload-examples"
HEAD = "1" * 40
BASE = "2" * 40
INSTALLATION = 7001
# One file with two hunks: new-file lines 1-4 (hunk 0) and 20-24 (hunk 1).
TWO_HUNKS = make_patch(
    [
        (1, 1, [" import torch", "-import os", "+import triton", "+import triton.language as tl", " "]),
        (18, 20, [" def forward(x):", "-    return x", "+    y = x * 2", "+    return y", " ", " # end"]),
    ]
)


def gh(fake: FakeGitHub, token: str, **kwargs: Any) -> github.Github:
    return github.Github(
        base_url=fake.base_url,
        auth=github.Auth.Token(token),
        seconds_between_requests=0,
        seconds_between_writes=0,
        **kwargs,
    )


def integration(fake: FakeGitHub, creds: AppCredentials, **kwargs: Any) -> github.GithubIntegration:
    return github.GithubIntegration(
        auth=github.Auth.AppAuth(creds.app_id, creds.private_pem),
        base_url=fake.base_url,
        seconds_between_requests=0,
        seconds_between_writes=0,
        **kwargs,
    )


@pytest.fixture
def app(fake_github: FakeGitHub) -> AppCredentials:
    """The app installed on octo/models, with PR #5 (files: kernel.py with two hunks, README.md)."""
    creds = fake_github.configure_app(4242)
    fake_github.add_repo("octo", "models", default_branch="main")
    fake_github.add_installation(INSTALLATION, "octo", ["models"])
    fake_github.add_pull(
        "octo",
        "models",
        5,
        HEAD,
        BASE,
        "alice",
        files=[
            {"filename": "kernel.py", "status": "modified", "patch": TWO_HUNKS},
            {
                "filename": "README.md",
                "status": "added",
                "patch": added_file_patch(["# Models", "", "Fast."]),
            },
        ],
        author_association="CONTRIBUTOR",
    )
    return creds


@pytest.fixture
def bot(fake_github: FakeGitHub, app: AppCredentials) -> github.Github:
    return gh(fake_github, fake_github.issue_token(INSTALLATION))


# -- app authentication ---------------------------------------------------------------------------


def test_app_jwt_installation_token_and_250_files_paginated(fake_github: FakeGitHub) -> None:
    creds = fake_github.configure_app(99)
    fake_github.add_repo("octo", "models")
    fake_github.add_installation(11, "octo", ["models"])
    files = [
        {"filename": f"src/k{i:03}.py", "status": "added", "patch": added_file_patch([f"X = {i}"])}
        for i in range(250)
    ]
    fake_github.add_pull("octo", "models", 1, HEAD, BASE, "alice", files=files)

    gi = integration(fake_github, creds)
    assert gi.get_app().slug == "kernelize"
    token = gi.get_access_token(11)
    assert token.token.startswith("ghs_")
    assert 3500 < (token.expires_at.timestamp() - time.time()) <= 3600
    assert gi.get_repo_installation("octo", "models").id == 11

    pull = gi.get_github_for_installation(11).get_repo("octo/models").get_pull(1)
    got = [f.filename for f in pull.get_files()]
    assert got == [f["filename"] for f in files]

    # per_page is honoured up to GitHub's 100, with Link headers to the rest.
    fast = gh(fake_github, token.token, per_page=100).get_repo("octo/models").get_pull(1)
    assert len(list(fast.get_files())) == 250
    pages = fake_github.requests_to("GET", r"/pulls/1/files$")[-3:]
    assert [r.query.get("page", ["1"])[0] for r in pages] == ["1", "2", "3"]
    raw = requests.get(
        f"{fake_github.base_url}/repos/octo/models/pulls/1/files",
        params={"per_page": 1000, "page": 2},
        headers={"Authorization": f"token {token.token}"},
    )
    assert raw.status_code == 200 and len(raw.json()) == 100
    assert 'rel="next"' in raw.headers["Link"] and 'rel="prev"' in raw.headers["Link"]
    assert raw.links["last"]["url"].startswith(fake_github.base_url) and "page=3" in raw.links["last"]["url"]
    for name in ("limit", "remaining", "reset", "used", "resource"):
        assert f"x-ratelimit-{name}" in {k.lower() for k in raw.headers}


def _jwt(private_pem: str, **claims: Any) -> str:
    now = int(time.time())
    body = {"iat": now - 60, "exp": now + 300, "iss": "4242"} | claims
    return jwt.encode(body, private_pem, algorithm="RS256")


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"exp": 1200}, "'Expiration time' claim ('exp') is too far in the future"),
        ({"exp": -5, "iat": -100}, "'Expiration time' claim ('exp') must be"),
        ({"iat": 600}, "'Issued at' claim ('iat') must be an Integer"),
        ({"iss": "1"}, "Integration not found"),
    ],
)
def test_bad_app_jwts_get_401(
    fake_github: FakeGitHub,
    app: AppCredentials,
    claims: dict[str, Any],
    message: str,
) -> None:
    # Times are offsets from now, taken when the test runs (not when the suite was collected).
    now = int(time.time())
    claims = {k: now + v if k in ("exp", "iat") else v for k, v in claims.items()}
    answer = requests.get(
        f"{fake_github.base_url}/app", headers={"Authorization": f"Bearer {_jwt(app.private_pem, **claims)}"}
    )
    assert answer.status_code == 401
    assert answer.json()["message"].startswith(message)


def test_jwt_signed_by_another_key_or_token_on_app_endpoint_get_401(
    fake_github: FakeGitHub,
    app: AppCredentials,
) -> None:
    other_private, _ = make_app_key()
    impostor = integration(fake_github, AppCredentials(app.app_id, other_private, "", "x"))
    with pytest.raises(github.GithubException) as err:
        impostor.get_access_token(INSTALLATION)
    assert err.value.status == 401 and err.value.data["message"] == "A JSON web token could not be decoded"
    token = fake_github.issue_token(INSTALLATION)
    answer = requests.get(f"{fake_github.base_url}/app", headers={"Authorization": f"token {token}"})
    assert answer.status_code == 401
    # and the app's JWT is no installation token
    answer = requests.get(
        f"{fake_github.base_url}/repos/octo/models/pulls/5",
        headers={"Authorization": f"Bearer {_jwt(app.private_pem)}"},
    )
    assert answer.status_code == 401


def test_unknown_expired_and_narrowed_tokens(fake_github: FakeGitHub, app: AppCredentials) -> None:
    with pytest.raises(github.BadCredentialsException):
        gh(fake_github, "ghs_not_a_token").get_repo("octo/models")
    token = fake_github.issue_token(INSTALLATION)
    repo = gh(fake_github, token).get_repo("octo/models")
    fake_github.expire_token(token)
    with pytest.raises(github.BadCredentialsException) as err:
        repo.get_pull(5)
    assert err.value.status == 401

    # A token asked for with fewer permissions cannot write checks.
    narrow = integration(fake_github, app).get_access_token(
        INSTALLATION, permissions={"pull_requests": "read"}
    )
    with pytest.raises(github.GithubException) as err:
        gh(fake_github, narrow.token).get_repo("octo/models").create_check_run("k", HEAD)
    assert err.value.status == 403 and err.value.data["message"] == "Resource not accessible by integration"
    with pytest.raises(github.GithubException) as err:
        integration(fake_github, app).get_access_token(INSTALLATION, permissions={"administration": "write"})
    assert err.value.status == 422


def test_installation_reaches_only_its_repositories(fake_github: FakeGitHub, app: AppCredentials) -> None:
    fake_github.add_repo("octo", "secret", private=True)
    fake_github.add_repo("octo", "public-other")
    fake_github.add_issue("octo", "public-other", 1, "bob")
    g = gh(fake_github, fake_github.issue_token(INSTALLATION))
    with pytest.raises(github.UnknownObjectException):
        g.get_repo("octo/secret")
    other = g.get_repo("octo/public-other")  # public: readable
    with pytest.raises(github.GithubException) as err:
        other.get_issue(1).create_comment("hi")
    assert err.value.status == 403
    assert not fake_github.issue_comments[("octo", "public-other", 1)]


# -- pull requests and reviews --------------------------------------------------------------------


def test_review_with_multi_line_suggestion_is_stored(fake_github: FakeGitHub, bot: github.Github) -> None:
    repo = bot.get_repo("octo/models")
    pull = repo.get_pull(5)
    assert (pull.head.sha, pull.base.sha, pull.user.login, pull.changed_files) == (HEAD, BASE, "alice", 2)
    suggestion = "```suggestion\n    y = x + x\n    return y\n```"
    review = pull.create_review(
        commit=repo.get_commit(HEAD),
        body="Kernelize found a faster kernel.",
        event="COMMENT",
        comments=[
            {
                "path": "kernel.py",
                "start_line": 21,
                "line": 22,
                "side": "RIGHT",
                "start_side": "RIGHT",
                "body": suggestion,
            },
            {"path": "kernel.py", "line": 2, "side": "LEFT", "body": "why drop os?"},
            {"path": "README.md", "line": 3, "body": "nice"},
        ],
    )
    assert review.state == "COMMENTED" and review.user.login == "kernelize[bot]" and review.commit_id == HEAD

    stored = fake_github.reviews[("octo", "models", 5)]
    assert len(stored) == 1 and stored[0].body == "Kernelize found a faster kernel."
    first = stored[0].comments[0]
    assert (first.path, first.start_line, first.line, first.side, first.body) == (
        "kernel.py",
        21,
        22,
        "RIGHT",
        suggestion,
    )
    assert first.diff_hunk.startswith("@@ -18,4 +20,5 @@") and first.diff_hunk.endswith("+    return y")

    listed = list(pull.get_review_comments())
    assert [(c.path, c.line) for c in listed] == [("kernel.py", 22), ("kernel.py", 2), ("README.md", 3)]
    assert listed[0].start_line == 21 and listed[1].side == "LEFT"
    assert [r.id for r in pull.get_reviews()] == [review.id]


@pytest.mark.parametrize(
    ("comment", "error"),
    [
        (
            {"path": "kernel.py", "line": 10, "side": "RIGHT"},
            "Pull request review thread line must be part of the diff and "
            "Pull request review thread diff hunk can't be blank",
        ),
        (
            {"path": "kernel.py", "line": 3, "side": "LEFT"},  # old line 3: hunk 0's last context line
            None,
        ),
        (
            {"path": "kernel.py", "start_line": 2, "line": 21, "side": "RIGHT"},
            "Pull request review thread start line must be part of the same hunk as the line.",
        ),
        (
            {"path": "kernel.py", "start_line": 22, "line": 22, "side": "RIGHT"},
            "Pull request review thread start line must precede the end line.",
        ),
        (
            {"path": "nope.py", "line": 1},
            "Pull request review thread path is invalid and "
            "Pull request review thread diff hunk can't be blank",
        ),
    ],
)
def test_review_comments_must_sit_on_the_diff(
    fake_github: FakeGitHub,
    bot: github.Github,
    comment: dict[str, Any],
    error: str | None,
) -> None:
    pull = bot.get_repo("octo/models").get_pull(5)
    if error is None:  # old line 3 is the trailing context line of hunk 0: commentable
        pull.create_review(body="ok", event="COMMENT", comments=[comment | {"body": "x"}])
        return
    with pytest.raises(github.GithubException) as err:
        pull.create_review(body="x", event="COMMENT", comments=[comment | {"body": "x"}])
    assert err.value.status == 422
    assert err.value.data["message"] == "Unprocessable Entity"
    assert err.value.data["errors"] == [error]
    assert fake_github.reviews[("octo", "models", 5)] == []


def test_review_and_comment_bodies_at_most_65536_characters(
    fake_github: FakeGitHub,
    bot: github.Github,
) -> None:
    pull = bot.get_repo("octo/models").get_pull(5)
    for body, comments in (
        ("x" * 65537, []),
        ("ok", [{"path": "README.md", "line": 1, "body": "y" * 65537}]),
    ):
        with pytest.raises(github.GithubException) as err:
            pull.create_review(body=body, event="COMMENT", comments=comments)
        assert err.value.status == 422
        assert err.value.data["errors"] == ["Body is too long (maximum is 65536 characters)"]
    pull.create_review(body="x" * 65536, event="COMMENT")
    with pytest.raises(github.GithubException) as err:
        pull.create_issue_comment("z" * 65537)
    assert err.value.status == 422 and err.value.data["message"] == "Validation Failed"
    assert err.value.data["errors"][0]["message"] == "Body is too long (maximum is 65536 characters)"
    assert len(fake_github.reviews[("octo", "models", 5)]) == 1


def test_review_commit_rules(fake_github: FakeGitHub, bot: github.Github) -> None:
    repo = bot.get_repo("octo/models")
    pull = repo.get_pull(5)
    old_commit = repo.get_commit(HEAD)
    new_head = "3" * 40
    fake_github.push(
        "octo", "models", 5, new_head, files=[{"filename": "other.py", "patch": added_file_patch(["a"])}]
    )
    # A review on the old head is checked against the old head's diff.
    pull.create_review(
        commit=old_commit, body="b", event="COMMENT", comments=[{"path": "kernel.py", "line": 2, "body": "c"}]
    )
    answer = requests.post(
        f"{fake_github.base_url}/repos/octo/models/pulls/5/reviews",
        json={"commit_id": "9" * 40, "body": "b", "event": "COMMENT"},
        headers={"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"},
    )
    assert answer.status_code == 422
    # A legacy "position" comment lands on the line it points at.
    review = pull.create_review(
        body="p", event="COMMENT", comments=[{"path": "other.py", "position": 1, "body": "d"}]
    )
    placed = fake_github.reviews[("octo", "models", 5)][-1].comments[0]
    assert review.commit_id == new_head and (placed.line, placed.side) == (1, "RIGHT")
    # The author may not approve their own pull request.
    alice = gh(fake_github, fake_github.add_user_token("alice"))
    with pytest.raises(github.GithubException) as err:
        alice.get_repo("octo/models").get_pull(5).create_review(event="APPROVE")
    assert err.value.data["errors"] == ["Can not approve your own pull request"]


# -- issue comments and reactions -----------------------------------------------------------------


def test_issue_comment_create_edit_and_reactions(fake_github: FakeGitHub, bot: github.Github) -> None:
    pull = bot.get_repo("octo/models").get_pull(5)
    comment = pull.create_issue_comment("Kernelize is on it.")
    assert comment.user.login == "kernelize[bot]" and comment.body == "Kernelize is on it."
    comment.edit("Kernelize is done: 2.1x faster.")
    assert comment.body == "Kernelize is done: 2.1x faster."
    stored = fake_github.issue_comments[("octo", "models", 5)]
    assert [c.body for c in stored] == ["Kernelize is done: 2.1x faster."]
    assert stored[0].updated_at >= stored[0].created_at

    assert comment.create_reaction("rocket").content == "rocket"
    comment.create_reaction("rocket")  # the same reaction again: GitHub answers 200 with the first
    assert [r.content for r in fake_github.reactions[("issue_comment", comment.id)]] == ["rocket"]
    statuses = [r.status for r in fake_github.requests_to("POST", r"/reactions$")]
    assert statuses == [201, 200]
    assert [r.content for r in comment.get_reactions()] == ["rocket"]
    assert [c.body for c in bot.get_repo("octo/models").get_issue(5).get_comments()] == [comment.body]

    with pytest.raises(github.GithubException) as err:
        comment.create_reaction("thumbsup")  # not one of GitHub's eight
    assert err.value.status == 422
    assert [v.kind for v in fake_github.take_violations()] == ["body"]


# -- check runs -----------------------------------------------------------------------------------


def test_check_run_create_and_update_with_output(fake_github: FakeGitHub, bot: github.Github) -> None:
    repo = bot.get_repo("octo/models")
    run = repo.create_check_run("kernelize", HEAD, status="in_progress", external_id="job-1")
    assert run.status == "in_progress" and run.conclusion is None and run.app.slug == "kernelize"
    assert [p.number for p in run.pull_requests] == [5]
    annotation = {
        "path": "kernel.py",
        "start_line": 21,
        "end_line": 22,
        "annotation_level": "notice",
        "message": "m",
    }
    run.edit(output={"title": "Benchmarking", "summary": "1 of 2", "annotations": [annotation]})
    run.edit(
        conclusion="success",
        output={"title": "2.1x faster", "summary": "done", "text": "details", "annotations": [annotation]},
        actions=[{"label": "Apply", "description": "Push the kernel", "identifier": "apply"}],
    )
    assert (run.status, run.conclusion, run.output.title, run.output.annotations_count) == (
        "completed",
        "success",
        "2.1x faster",
        2,
    )
    fetched = repo.get_check_run(run.id)
    assert fetched.completed_at is not None and fetched.output.summary == "done"
    stored = fake_github.check_runs[("octo", "models")]
    assert (
        len(stored) == 1 and len(stored[0].annotations) == 2 and stored[0].actions[0]["identifier"] == "apply"
    )
    assert [r.name for r in repo.get_commit(HEAD).get_check_runs()] == ["kernelize"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"output": {"title": "t", "summary": "s" * 65536}},
            "Only 65535 characters are allowed; 65536 were supplied.",
        ),
        (
            {"output": {"title": "t", "summary": "s", "text": "t" * 70000}},
            "Only 65535 characters are allowed",
        ),
        (
            {
                "output": {
                    "title": "t",
                    "summary": "s",
                    "annotations": [
                        {
                            "path": "a",
                            "start_line": 1,
                            "end_line": 1,
                            "annotation_level": "notice",
                            "message": "m",
                        }
                    ]
                    * 51,
                }
            },
            "only 50 items are allowed",
        ),
        (
            {"actions": [{"label": "a", "description": "d", "identifier": str(i)} for i in range(4)]},
            "only 3 items",
        ),
        ({"status": "completed"}, '"conclusion" wasn\'t supplied.'),
        ({"head_sha": "f" * 40}, "No commit found for SHA: " + "f" * 40),
    ],
)
def test_check_run_limits(
    fake_github: FakeGitHub,
    app: AppCredentials,
    change: dict[str, Any],
    message: str,
) -> None:
    answer = requests.post(
        f"{fake_github.base_url}/repos/octo/models/check-runs",
        json={"name": "kernelize", "head_sha": HEAD} | change,
        headers={"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"},
    )
    assert answer.status_code == 422
    assert message in answer.json()["message"]
    assert fake_github.check_runs[("octo", "models")] == []
    fake_github.take_violations()  # the schema-breaking ones were recorded; that is what they test


# -- collaborators, contents ----------------------------------------------------------------------


def test_collaborator_permission(fake_github: FakeGitHub, bot: github.Github) -> None:
    fake_github.set_permission("octo", "models", "carol", "maintain")
    fake_github.set_permission("octo", "models", "dave", "triage")
    repo = bot.get_repo("octo/models")
    assert repo.get_collaborator_permission("carol") == "write"
    assert repo.get_collaborator_role_name("carol") == "maintain"
    assert repo.get_collaborator_permission("dave") == "read"
    assert repo.get_collaborator_permission("octo") == "admin"
    assert repo.get_collaborator_permission("alice") == "read"  # public repository, no role
    with pytest.raises(github.UnknownObjectException):
        repo.get_collaborator_permission("nobody-at-all")


def test_contents_at_a_ref(fake_github: FakeGitHub, bot: github.Github) -> None:
    fake_github.set_file("octo", "models", HEAD, "models/net.py", "class Net: ...\n")
    fake_github.set_file("octo", "models", HEAD, "models/big.bin", b"\0" * (1024 * 1024 + 1))
    fake_github.set_file("octo", "models", "main", "models/net.py", "old\n")
    repo = bot.get_repo("octo/models")
    assert repo.get_contents("models/net.py", ref=HEAD).decoded_content == b"class Net: ...\n"
    assert repo.get_contents("models/net.py").decoded_content == b"old\n"  # default branch
    listing = repo.get_contents("models", ref=HEAD)
    assert sorted(c.path for c in listing) == ["models/big.bin", "models/net.py"]
    big = requests.get(
        f"{fake_github.base_url}/repos/octo/models/contents/models/big.bin",
        params={"ref": HEAD},
        headers={"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"},
    ).json()
    assert (big["encoding"], big["content"], big["size"]) == ("none", "", 1024 * 1024 + 1)
    blob = repo.get_git_blob(big["sha"])  # the way to read it
    assert blob.size == 1024 * 1024 + 1 and base64.b64decode(blob.content) == b"\0" * (1024 * 1024 + 1)
    with pytest.raises(github.UnknownObjectException):
        repo.get_contents("models/missing.py", ref=HEAD)


def test_contents_put_commits_to_a_branch_and_its_pull_request_follows(
    fake_github: FakeGitHub, bot: github.Github
) -> None:
    fake_github.set_file("octo", "models", BASE, "models/net.py", "a\nb\nc\n")
    fake_github.set_file("octo", "models", HEAD, "models/net.py", "a\nb\nc\nd\n")
    fake_github.set_file("octo", "models", HEAD, "kernel.py", "import torch\n")
    repo = bot.get_repo("octo/models")
    blob = repo.get_contents("models/net.py", ref=HEAD).sha
    made = repo.update_file(
        "models/net.py", "Edit net\n\nMarker: 1", "a\nB\nc\nd\n", blob, branch="feature-5"
    )
    commit = made["commit"]
    assert commit.sha != HEAD and commit.html_url.endswith(f"/octo/models/commit/{commit.sha}")
    assert made["content"].path == "models/net.py"
    # Later reads see the commit: by branch, by sha, the pull request's head and files, the commit.
    assert repo.get_contents("models/net.py", ref="feature-5").decoded_content == b"a\nB\nc\nd\n"
    assert repo.get_contents("models/net.py", ref=commit.sha).decoded_content == b"a\nB\nc\nd\n"
    assert repo.get_contents("kernel.py", ref=commit.sha).decoded_content == b"import torch\n"  # kept
    assert repo.get_contents("models/net.py", ref=HEAD).decoded_content == b"a\nb\nc\nd\n"  # unchanged
    pull = repo.get_pull(5)
    assert pull.head.sha == commit.sha and pull.head.ref == "feature-5"
    files = {f.filename: f for f in pull.get_files()}
    assert files["models/net.py"].status == "modified"
    assert files["models/net.py"].patch == "@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d"
    assert files["kernel.py"].patch == TWO_HUNKS  # the other files as they were
    shown = repo.get_commit("feature-5")
    assert shown.sha == commit.sha and shown.commit.message == "Edit net\n\nMarker: 1"
    assert shown.author.login == "kernelize[bot]"
    # A new file answers 201; no change to the pull request's other files.
    created = repo.create_file("models/new.py", "Add new", "x = 1\n", branch="feature-5")
    assert repo.get_contents("models/new.py", ref="feature-5").decoded_content == b"x = 1\n"
    assert repo.get_pull(5).head.sha == created["commit"].sha
    assert fake_github.requests_to("PUT", r"/contents/models/new.py$")[0].status == 201


def test_contents_put_follows_githubs_rules(fake_github: FakeGitHub, app: AppCredentials) -> None:
    fake_github.set_file("octo", "models", HEAD, "models/net.py", "a\n")
    token = fake_github.issue_token(INSTALLATION)
    repo = gh(fake_github, token, retry=None).get_repo("octo/models")
    stale = "0" * 40
    with pytest.raises(github.GithubException) as err:  # not the file's blob: nothing is written
        repo.update_file("models/net.py", "m", "b\n", stale, branch="feature-5")
    assert err.value.status == 409 and "does not match" in err.value.data["message"]
    with pytest.raises(github.GithubException) as err:
        repo.update_file("models/net.py", "m", "b\n", stale, branch="no-such-branch")
    assert err.value.status == 404
    url = f"{fake_github.base_url}/repos/octo/models/contents/models/net.py"
    headers = {"Authorization": f"token {token}"}
    no_sha = requests.put(
        url, json={"message": "m", "content": "Yg==", "branch": "feature-5"}, headers=headers
    )
    assert no_sha.status_code == 422 and "sha" in no_sha.json()["message"]
    assert repo.get_pull(5).head.sha == HEAD
    reader = gh(
        fake_github, fake_github.issue_token(INSTALLATION, permissions={"contents": "read"}), retry=None
    )
    sha = repo.get_contents("models/net.py", ref=HEAD).sha
    with pytest.raises(github.GithubException) as err:  # an installation that may only read
        reader.get_repo("octo/models").update_file("models/net.py", "m", "b\n", sha, branch="feature-5")
    assert err.value.status == 403
    # GitHub carries the write out and answers 502: the same write again finds the blob moved on.
    fake_github.fail_next("PUT", r"/contents/models/net.py$", 502, after=True)
    with pytest.raises(github.GithubException) as err:
        repo.update_file("models/net.py", "m", "b\n", sha, branch="feature-5")
    assert err.value.status == 502
    head = repo.get_pull(5).head.sha
    assert head != HEAD and repo.get_contents("models/net.py", ref=head).decoded_content == b"b\n"
    with pytest.raises(github.GithubException) as err:
        repo.update_file("models/net.py", "m", "b\n", sha, branch="feature-5")
    assert err.value.status == 409
    assert repo.get_pull(5).head.sha == head
    invalid = requests.put(url, json={"message": "m"}, headers=headers)  # content is required
    assert invalid.status_code == 422
    assert [v.kind for v in fake_github.take_violations()] == ["body"]


# -- failures, retries, rate limits ---------------------------------------------------------------


def test_fail_next_503_once_then_pygithub_retry_succeeds(
    fake_github: FakeGitHub, app: AppCredentials
) -> None:
    token = fake_github.issue_token(INSTALLATION)
    fake_github.fail_next("GET", r"^/repos/octo/models/pulls/5$", 503)
    retrying = gh(fake_github, token, retry=github.GithubRetry(total=3, backoff_factor=0))
    repo = retrying.get_repo("octo/models")
    assert repo.get_pull(5).number == 5
    seen = fake_github.requests_to("GET", r"/pulls/5$")
    assert [(r.status, r.injected) for r in seen] == [(503, True), (200, False)]

    fake_github.fail_next("POST", r"/issues/5/comments$", 502, times=2)
    with pytest.raises(github.GithubException) as err:
        gh(fake_github, token, retry=None).get_repo("octo/models").get_issue(5).create_comment("x")
    assert err.value.status == 502
    repo.get_issue(5).create_comment("y")  # the second planned failure, retried away
    assert [c.body for c in fake_github.issue_comments[("octo", "models", 5)]] == ["y"]


def test_rate_limits(fake_github: FakeGitHub, app: AppCredentials) -> None:
    token = fake_github.issue_token(INSTALLATION)
    fake_github.fail_rate_limited("GET", r"/pulls/5$", reset_in_s=60)
    with pytest.raises(github.RateLimitExceededException) as err:
        gh(fake_github, token, retry=None).get_repo("octo/models").get_pull(5)
    assert err.value.headers["x-ratelimit-remaining"] == "0"

    # Secondary limits (403 or 429 with Retry-After) are retried by GithubRetry.
    fake_github.fail_secondary_rate_limit("GET", r"/pulls/5$", retry_after_s=0)
    fake_github.fail_secondary_rate_limit("GET", r"/pulls/5$", retry_after_s=0, status=429)
    g = gh(fake_github, token, retry=github.GithubRetry(total=3, backoff_factor=0, secondary_rate_wait=0))
    assert g.get_repo("octo/models").get_pull(5).number == 5
    assert [r.status for r in fake_github.requests_to("GET", r"/pulls/5$")][-3:] == [403, 429, 200]

    # The primary limit itself, counted per token.
    fake_github.set_rate_limit(2, reset_in_s=600)
    limited = gh(fake_github, token, retry=None)
    limited.get_repo("octo/models")
    assert limited.get_rate_limit().resources.core.remaining == 1
    limited.get_repo("octo/models")
    with pytest.raises(github.RateLimitExceededException):
        limited.get_repo("octo/models")


def test_fail_next_when_and_pending_failures(fake_github: FakeGitHub, app: AppCredentials) -> None:
    headers = {"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"}
    url = f"{fake_github.base_url}/repos/octo/models/check-runs"
    run = requests.post(url, json={"name": "k", "head_sha": HEAD}, headers=headers).json()["id"]
    fake_github.fail_next("PATCH", r"/check-runs/\d+$", 503, when=lambda body: "conclusion" in body)
    assert fake_github.pending_failures() == [r"PATCH /check-runs/\d+$ -> 503 (1 left)"]
    progress = requests.patch(f"{url}/{run}", json={"status": "in_progress"}, headers=headers)
    assert progress.status_code == 200  # not the one planned for
    done = requests.patch(f"{url}/{run}", json={"conclusion": "success"}, headers=headers)
    assert done.status_code == 503 and fake_github.pending_failures() == []
    first, second = fake_github.requests_to("PATCH", r"/check-runs/")
    assert first.at <= second.at


def test_hold_next_keeps_a_request_waiting_until_released(
    fake_github: FakeGitHub, app: AppCredentials
) -> None:
    token = fake_github.issue_token(INSTALLATION)
    hold = fake_github.hold_next("GET", r"/pulls/5$")
    answers: list[int] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            gh(fake_github, token, retry=None).get_repo("octo/models").get_pull(5).number
        )
    )
    caller.start()
    assert hold.wait_reached(10)
    caller.join(0.3)
    assert caller.is_alive() and answers == [] and not fake_github.requests_to("GET", r"/pulls/5$")
    assert gh(fake_github, token, retry=None).get_repo("octo/models").get_pull(5).number == 5  # once only
    hold.release()
    caller.join(10)
    assert answers == [5]


# -- OpenAPI checking -----------------------------------------------------------------------------


def test_body_breaking_the_schema_gets_422_and_is_recorded(
    fake_github: FakeGitHub, app: AppCredentials
) -> None:
    headers = {"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"}
    url = f"{fake_github.base_url}/repos/octo/models/check-runs"
    answer = requests.post(url, json={"head_sha": HEAD}, headers=headers)
    assert answer.status_code == 422
    assert answer.json()["message"] == 'Invalid request.\n\n"name" wasn\'t supplied.'
    assert answer.json()["documentation_url"].startswith("https://docs.github.com/rest/")
    answer = requests.post(url, json={"name": "k", "head_sha": 123, "status": "done"}, headers=headers)
    assert answer.status_code == 422
    violations = fake_github.take_violations()
    assert [(v.operation, v.kind) for v in violations] == [("checks/create", "body")] * 3
    assert (
        "123 is not a string" in violations[1].message and '"done" is not a member' in violations[2].message
    )
    assert fake_github.check_runs[("octo", "models")] == []


def test_paths_params_and_fields_outside_the_description_are_recorded(
    fake_github: FakeGitHub,
    app: AppCredentials,
) -> None:
    headers = {"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"}
    base = fake_github.base_url
    answer = requests.get(f"{base}/repos/octo/models/kernels", headers=headers)
    assert answer.status_code == 404 and answer.json()["message"] == "Not Found"
    assert requests.put(f"{base}/repos/octo/models/pulls/5", json={}, headers=headers).status_code == 404
    assert requests.get(f"{base}/repos/octo/models/pulls/five", headers=headers).status_code == 404
    assert (
        requests.get(f"{base}/repos/octo/models/pulls/5/files?per_page=ten", headers=headers).status_code
        == 422
    )
    # GitHub ignores what it does not know; the fake answers the same but records it.
    assert (
        requests.get(f"{base}/repos/octo/models/pulls/5/files?perpage=10", headers=headers).status_code == 200
    )
    answer = requests.post(
        f"{base}/repos/octo/models/issues/5/comments", json={"body": "hi", "bodyy": "typo"}, headers=headers
    )
    assert answer.status_code == 201
    kinds = [v.kind for v in fake_github.take_violations()]
    assert kinds == ["no-operation", "no-operation", "path", "query", "unknown-query", "unknown-field"]
    # Not JSON at all.
    answer = requests.post(f"{base}/repos/octo/models/issues/5/comments", data=b"{nope", headers=headers)
    assert answer.status_code == 400 and answer.json()["message"] == "Problems parsing JSON"
    assert [v.kind for v in fake_github.take_violations()] == ["json"]


def test_enterprise_prefix_and_user_agent(fake_github: FakeGitHub, app: AppCredentials) -> None:
    token = fake_github.issue_token(INSTALLATION)
    ghe = github.Github(
        base_url=fake_github.enterprise_url,
        auth=github.Auth.Token(token),
        seconds_between_requests=0,
        seconds_between_writes=0,
        per_page=1,
    )
    pull = ghe.get_repo("octo/models").get_pull(5)
    assert pull.url.startswith(f"{fake_github.base_url}/api/v3/")
    assert [f.filename for f in pull.get_files()] == ["kernel.py", "README.md"]  # via /api/v3 Link headers
    assert all(r.raw_path.startswith("/api/v3/") for r in fake_github.requests)
    conn = http.client.HTTPConnection("127.0.0.1", fake_github.port, timeout=10)
    conn.request("GET", "/repos/octo/models", headers={"Authorization": f"token {token}"})  # no User-Agent
    answer = conn.getresponse()
    assert answer.status == 403 and "User-Agent" in json.loads(answer.read())["message"]
    conn.close()


def test_assert_clean_reports_violations() -> None:
    with FakeGitHub() as fake:
        requests.get(f"{fake.base_url}/no/such/endpoint")
        with pytest.raises(AssertionError, match="no-operation"):
            fake.assert_clean()


def test_openapi_to_json_schema() -> None:
    converted = to_json_schema(
        {
            "type": "object",
            "nullable": True,
            "x-github": {"a": 1},
            "example": {"id": 1},
            "properties": {
                "state": {"type": "string", "enum": ["a", "b"], "nullable": True},
                "nullable": {"type": "integer", "maximum": 3, "exclusiveMaximum": True},
                "ref": {"$ref": "#/components/schemas/simple-user", "description": "ignored sibling"},
                "any": {"allOf": [{"$ref": "#/components/schemas/x"}], "nullable": True},
            },
        }
    )
    assert converted == {
        "type": ["object", "null"],
        "properties": {
            "state": {"type": ["string", "null"], "enum": ["a", "b", None]},
            "nullable": {"type": "integer", "exclusiveMaximum": 3},
            "ref": {"$ref": "urn:github-openapi#/components/schemas/simple-user"},
            "any": {
                "anyOf": [{"allOf": [{"$ref": "urn:github-openapi#/components/schemas/x"}]}, {"type": "null"}]
            },
        },
    }
    spec = load_spec()
    assert spec.match("GET", "/repos/o/r/issues/comments/1").operation.operation_id == "issues/get-comment"
    assert spec.match("GET", "/repos/o/r/issues/1/comments").operation.operation_id == "issues/list-comments"
    found = spec.match("GET", "/repos/o/r/contents/a/b/c.py")
    assert found.operation.operation_id == "repos/get-content" and found.path_params["path"] == "a/b/c.py"
    assert (
        spec.match("GET", "/repos/o/r/commits/abc/check-runs").operation.operation_id == "checks/list-for-ref"
    )
    assert spec.match("POST", "/repos/o/r") is None


def test_patch_parsing() -> None:
    patch = parse_patch(TWO_HUNKS)
    assert [sorted(h.right) for h in patch.hunks] == [[1, 2, 3, 4], [20, 21, 22, 23, 24]]
    assert [sorted(h.left) for h in patch.hunks] == [[1, 2, 3], [18, 19, 20, 21]]
    assert (patch.additions, patch.deletions) == (4, 2)
    assert patch.hunk_of("RIGHT", 10) is None and patch.hunk_of("RIGHT", 22) is patch.hunks[1]
    with pytest.raises(PatchError):
        parse_patch("@@ -1,2 +1,2 @@\n a\n")
    with pytest.raises(ValueError, match="do not match"):
        FakeGitHub(start=False).add_pull(
            "o",
            "r",
            1,
            HEAD,
            BASE,
            "u",
            files=[{"filename": "a", "patch": "@@ -1 +1 @@\n-a\n+b", "additions": 5}],
        )


# -- webhook payloads -----------------------------------------------------------------------------


def test_state_from_webhook_payloads(fake_github: FakeGitHub) -> None:
    opened = json.loads((PAYLOADS / "pull_request" / "opened.payload.json").read_text())
    made = fake_github.adopt_payload(
        opened, files=[{"filename": "README.md", "patch": added_file_patch(["hi"])}]
    )
    creds = fake_github.configure_app()
    installation_id = opened["installation"]["id"]
    assert made["installation"].id == installation_id
    g = integration(fake_github, creds).get_github_for_installation(installation_id)
    repo = g.get_repo(opened["repository"]["full_name"])
    assert repo.id == opened["repository"]["id"]
    pull = repo.get_pull(opened["number"])
    pr = opened["pull_request"]
    assert (pull.head.sha, pull.base.sha, pull.user.login, pull.id) == (
        pr["head"]["sha"],
        pr["base"]["sha"],
        pr["user"]["login"],
        pr["id"],
    )
    pull.create_review(body="hi", event="COMMENT", comments=[{"path": "README.md", "line": 1, "body": "x"}])

    created = json.loads((PAYLOADS / "issue_comment" / "created.payload.json").read_text())
    fake_github.adopt_payload(created)
    comment_id = created["comment"]["id"]
    comment = repo.get_issue(created["issue"]["number"]).get_comment(comment_id)
    assert comment.body == created["comment"]["body"]
    comment.create_reaction("eyes")
    assert [r.content for r in fake_github.reactions[("issue_comment", comment_id)]] == ["eyes"]

    with FakeGitHub.from_payload(opened) as other:
        assert other.pull(opened["repository"]["owner"]["login"], opened["repository"]["name"], 2).number == 2


def test_single_review_comments_replies_and_listing_pulls(
    fake_github: FakeGitHub, bot: github.Github
) -> None:
    repo = bot.get_repo("octo/models")
    pull = repo.get_pull(5)
    commit = repo.get_commit(HEAD)
    first = pull.create_review_comment("look here", commit, "kernel.py", line=22, side="RIGHT")
    assert (first.line, first.path, first.user.login) == (22, "kernel.py", "kernelize[bot]")
    reply = pull.create_review_comment_reply(first.id, "and here")
    assert reply.in_reply_to_id == first.id and reply.line == 22
    whole_file = pull.create_review_comment("whole file", commit, "README.md", subject_type="file")
    assert whole_file.subject_type == "file"
    with pytest.raises(github.GithubException) as err:
        pull.create_review_comment("x", commit, "kernel.py", line=10, side="RIGHT")
    assert err.value.data["errors"][0].startswith("Pull request review thread line must be part of the diff")
    assert [c.body for c in pull.get_review_comments()] == ["look here", "and here", "whole file"]
    assert [p.number for p in repo.get_pulls()] == [5]
    assert [p.number for p in repo.get_pulls(state="closed")] == []
    assert [p.number for p in repo.get_pulls(head="octo:feature-5")] == [5]


def test_response_bodies_are_checked_against_their_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fake_github.render import Renderer

    real = Renderer.repo
    monkeypatch.setattr(
        Renderer, "repo", lambda self, r: {k: v for k, v in real(self, r).items() if k != "full_name"}
    )
    with FakeGitHub() as fake:
        fake.add_repo("o", "r")
        assert requests.get(f"{fake.base_url}/repos/o/r").status_code == 200
        assert (
            len(fake.response_violations) == 1
            and "'full_name' is a required property" in fake.response_violations[0]
        )
        with pytest.raises(AssertionError, match="broke the schema"):
            fake.assert_clean()
