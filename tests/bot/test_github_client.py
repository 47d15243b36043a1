"""bot.github against the fake GitHub (a real HTTP server): tokens, pagination, reviews, retries, errors."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.github import GitHubApp, GitHubError, InstallationClient, ReviewComment

fake_github = pytest.importorskip("tests.fake_github")
if not hasattr(fake_github, "FakeGitHub"):
    pytest.skip("tests/fake_github is not finished (no FakeGitHub)", allow_module_level=True)
FakeGitHub = fake_github.FakeGitHub
shared_app_key = fake_github.shared_app_key

APP_ID = 4242
INSTALLATION = 77
OWNER, REPO = "octo-org", "kernels"
HEAD, BASE = "a" * 40, "b" * 40
PATCH = "".join(
    f"{line}\n"
    for line in (
        "@@ -0,0 +1,6 @@",
        "+import torch",
        "+",
        "+",
        "+class Scale(torch.nn.Module):",
        "+    def forward(self, x):",
        "+        return x * 2",
    )
)


def new_fake(**kw: Any) -> Any:
    server = FakeGitHub(**kw)
    server.configure_app(APP_ID)
    server.add_repo(OWNER, REPO)
    server.add_installation(INSTALLATION, OWNER, repositories=[REPO])
    server.add_pull(
        OWNER,
        REPO,
        1,
        head_sha=HEAD,
        base_sha=BASE,
        user_login="alice",
        files=[{"filename": "models/scale.py", "status": "added", "patch": PATCH}],
        author_association="CONTRIBUTOR",
    )
    return server


@pytest.fixture
def fake() -> Iterator[Any]:
    server = new_fake()
    yield server
    server.close()
    server.assert_clean()  # every request we made is one GitHub's OpenAPI description allows


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def new_app(fake: Any, **kw: Any) -> GitHubApp:
    return GitHubApp(APP_ID, shared_app_key()[0], base_url=fake.base_url, seconds_between_writes=0, **kw)


@pytest.fixture
def app(fake: Any, clock: Clock) -> GitHubApp:
    return new_app(fake, backoff_factor=0, clock=clock)


@pytest.fixture
def client(app: GitHubApp) -> Iterator[InstallationClient]:
    with app.installation(INSTALLATION) as c:
        yield c


@pytest.fixture
def token_fetches(app: GitHubApp, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every installation token the app fetched, in order."""
    fetched: list[str] = []
    real = app._integration.get_access_token

    def spy(installation_id: int, *args: Any, **kwargs: Any) -> Any:
        auth = real(installation_id, *args, **kwargs)
        fetched.append(auth.token)
        return auth

    monkeypatch.setattr(app._integration, "get_access_token", spy)
    return fetched


def test_pull_reads_shas_author_and_origin(client: InstallationClient) -> None:
    pull = client.pull(OWNER, REPO, 1)
    assert (pull.number, pull.head_sha, pull.base_sha) == (1, HEAD, BASE)
    assert (pull.author_login, pull.author_association, pull.draft, pull.is_fork) == (
        "alice",
        "CONTRIBUTOR",
        False,
        False,
    )
    assert pull.head_repo_full_name == f"{OWNER}/{REPO}"


def test_token_is_cached_across_calls_and_clients(app: GitHubApp, token_fetches: list[str]) -> None:
    app.installation(INSTALLATION).pull(OWNER, REPO, 1)
    app.installation(INSTALLATION).pull_files(OWNER, REPO, 1)
    app.installation(INSTALLATION).permission(OWNER, REPO, "alice")
    assert len(token_fetches) == 1


def test_token_is_refreshed_five_minutes_before_it_expires(
    app: GitHubApp, clock: Clock, token_fetches: list[str]
) -> None:
    client = app.installation(INSTALLATION)
    client.pull(OWNER, REPO, 1)
    clock.now += timedelta(minutes=54)  # a one-hour token has six minutes left: still good
    client.pull(OWNER, REPO, 1)
    assert len(token_fetches) == 1
    clock.now += timedelta(minutes=2)  # four minutes left: inside the margin
    client.pull(OWNER, REPO, 1)
    assert len(token_fetches) == 2 and token_fetches[0] != token_fetches[1]


def test_concurrent_first_calls_fetch_one_token(app: GitHubApp, token_fetches: list[str]) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            app.installation(INSTALLATION).pull(OWNER, REPO, 1)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and len(token_fetches) == 1


def test_short_lived_tokens_are_fetched_again_before_they_expire() -> None:
    fake = new_fake(token_ttl_s=240)  # expires inside the five-minute margin: never reused
    try:
        client = new_app(fake, backoff_factor=0).installation(INSTALLATION)
        client.pull(OWNER, REPO, 1)
        client.pull(OWNER, REPO, 1)
        assert len(fake.requests_to("POST", r"/access_tokens$")) == 2
    finally:
        fake.close()
    fake.assert_clean()


def test_github_enterprise_base_url(fake: Any) -> None:
    app = GitHubApp(APP_ID, shared_app_key()[0], base_url=fake.enterprise_url, seconds_between_writes=0)
    assert app.installation(INSTALLATION).pull(OWNER, REPO, 1).head_sha == HEAD
    assert fake.requests_to("GET", rf"/repos/{OWNER}/{REPO}/pulls/1$")[0].raw_path.startswith("/api/v3/")


def test_a_pull_from_a_fork(fake: Any, client: InstallationClient) -> None:
    fake.add_pull(
        OWNER, REPO, 3, head_sha="d" * 40, base_sha=BASE, user_login="mallory", head_owner="mallory"
    )
    pull = client.pull(OWNER, REPO, 3)
    assert pull.is_fork and pull.head_repo_full_name == f"mallory/{REPO}"


def test_pull_files_reads_every_page(fake: Any, client: InstallationClient) -> None:
    files = [
        {"filename": f"pkg/m{i:03}.py", "status": "added", "patch": "@@ -0,0 +1 @@\n+x = 1\n"}
        for i in range(250)
    ]
    fake.add_pull(OWNER, REPO, 2, head_sha="c" * 40, base_sha=BASE, user_login="bob", files=files)
    got = client.pull_files(OWNER, REPO, 2)
    assert [f.filename for f in got] == [f["filename"] for f in files]
    assert got[0].status == "added" and got[0].patch == "@@ -0,0 +1 @@\n+x = 1\n"


def test_file_text_and_missing_files(fake: Any, client: InstallationClient) -> None:
    fake.set_file(OWNER, REPO, HEAD, "models/scale.py", "x = 'é'\n")
    assert client.file_text(OWNER, REPO, "models/scale.py", HEAD) == "x = 'é'\n"
    assert client.file_text(OWNER, REPO, "models/nope.py", HEAD) is None


def test_file_text_of_a_file_over_one_megabyte(fake: Any, client: InstallationClient) -> None:
    big = "# " + "x" * 80 + "\n"
    text = big * (1_200_000 // len(big))  # the contents API sends no content above 1 MB: read as a blob
    fake.set_file(OWNER, REPO, HEAD, "models/big.py", text)
    try:
        got = client.file_text(OWNER, REPO, "models/big.py", HEAD)
    except GitHubError:
        if any("/git/blobs/" in op for op in fake.unimplemented):
            pytest.xfail("the fake GitHub does not serve GET /repos/{owner}/{repo}/git/blobs/{file_sha} yet")
        raise
    assert got == text


def test_permission(fake: Any, client: InstallationClient) -> None:
    fake.set_permission(OWNER, REPO, "carol", "write")
    assert client.permission(OWNER, REPO, "carol") == "write"


def test_review_with_a_valid_anchor(fake: Any, client: InstallationClient) -> None:
    comment = ReviewComment("models/scale.py", 6, 4, "```suggestion\nclass Scale: ...\n```")
    review_id = client.create_review(OWNER, REPO, 1, HEAD, "Kernelize found one replacement.", [comment])
    [review] = fake.reviews[(OWNER, REPO, 1)]
    assert review.id == review_id and review.state == "COMMENTED" and review.commit_id == HEAD
    [posted] = review.comments
    assert (posted.path, posted.start_line, posted.line, posted.side, posted.start_side) == (
        "models/scale.py",
        4,
        6,
        "RIGHT",
        "RIGHT",
    )


def test_review_outside_the_diff_is_a_github_error_with_githubs_message(
    fake: Any, client: InstallationClient
) -> None:
    comment = ReviewComment("models/scale.py", 40, 30, "nope")
    with pytest.raises(GitHubError) as info:
        client.create_review(OWNER, REPO, 1, HEAD, "body", [comment])
    err = info.value
    assert err.status == 422 and not err.transient
    assert "must be part of the diff" in str(err)
    assert f"POST /repos/{OWNER}/{REPO}/pulls/1/reviews" in str(err)
    assert fake.reviews.get((OWNER, REPO, 1), []) == []


def test_upsert_comment_edits_in_place(fake: Any, client: InstallationClient) -> None:
    marker = "<!-- kernelize:summary -->"
    first = client.upsert_comment(OWNER, REPO, 1, marker, f"{marker}\nfirst")
    second = client.upsert_comment(OWNER, REPO, 1, marker, f"{marker}\nsecond")
    assert first == second
    [comment] = fake.issue_comments[(OWNER, REPO, 1)]
    assert comment.body == f"{marker}\nsecond"


def test_upsert_comment_leaves_a_users_quote_of_the_marker_alone(
    fake: Any, client: InstallationClient
) -> None:
    marker = "<!-- kernelize:summary -->"
    quoted = fake.add_issue_comment(OWNER, REPO, 1, "alice", f"> {marker} quoted by a user")
    ours = client.upsert_comment(OWNER, REPO, 1, marker, f"{marker}\nours")
    assert ours != quoted.id
    assert [c.body for c in fake.issue_comments[(OWNER, REPO, 1)]] == [
        f"> {marker} quoted by a user",
        f"{marker}\nours",
    ]


def test_check_runs_and_reactions(fake: Any, client: InstallationClient) -> None:
    run_id = client.create_check_run(
        OWNER, REPO, HEAD, "Kernelize", "in_progress", output={"title": "Checking", "summary": "1 module"}
    )
    client.update_check_run(
        OWNER, REPO, run_id, conclusion="success", output={"title": "Done", "summary": "ok", "text": "t"}
    )
    [run] = fake.check_runs[(OWNER, REPO)]
    assert (run.id, run.status, run.conclusion, run.output["title"]) == (
        run_id,
        "completed",
        "success",
        "Done",
    )
    comment_id = client.upsert_comment(OWNER, REPO, 1, "<!-- m -->", "<!-- m -->\nhi")
    client.react(OWNER, REPO, comment_id, "eyes")
    assert [r.content for r in fake.reactions[next(iter(fake.reactions))]] == ["eyes"]
    with pytest.raises(ValueError):
        client.react(OWNER, REPO, comment_id, "thumbsup")
    with pytest.raises(ValueError):
        client.create_check_run(OWNER, REPO, HEAD, "Kernelize", "queued", actions=[{"label": "x"}] * 4)


def test_a_503_once_is_retried(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("GET", rf"/repos/{OWNER}/{REPO}/pulls/1$", status=503, times=1)
    assert client.pull(OWNER, REPO, 1).head_sha == HEAD


@pytest.mark.parametrize("status", [403, 429])
def test_a_rate_limit_with_retry_after_is_waited_out(
    fake: Any, client: InstallationClient, status: int
) -> None:
    fake.fail_next(
        "GET", rf"/repos/{OWNER}/{REPO}/pulls/1$", status=status, times=1, headers={"Retry-After": "0"}
    )
    assert client.pull(OWNER, REPO, 1).head_sha == HEAD


def test_a_503_that_never_clears_is_a_github_error(
    fake: Any, client: InstallationClient, token_fetches: list[str]
) -> None:
    client.pull_files(OWNER, REPO, 1)  # a token is in hand
    fake.fail_next("GET", rf"/repos/{OWNER}/{REPO}/pulls/1$", status=503, times=100)
    with pytest.raises(GitHubError) as info:
        client.pull(OWNER, REPO, 1)
    err = info.value
    assert err.status == 503 and err.transient
    assert len(fake.requests_to("GET", rf"/repos/{OWNER}/{REPO}/pulls/1$")) == 6  # one try and five retries
    assert f"GET /repos/{OWNER}/{REPO}/pulls/1" in str(err)
    text = "".join(traceback.format_exception(err)) + repr(err) + str(err.__dict__)
    assert token_fetches and all(token not in text for token in token_fetches)
    assert "RetryError" not in text  # the requests exception does not leak through


def test_errors_never_carry_the_token(
    fake: Any, client: InstallationClient, token_fetches: list[str]
) -> None:
    with pytest.raises(GitHubError) as info:
        client.create_review(OWNER, REPO, 1, HEAD, "body", [ReviewComment("nope.py", 1, None, "x")])
    text = "".join(traceback.format_exception(info.value)) + repr(info.value)
    assert token_fetches and all(token not in text for token in token_fetches)
    assert token_fetches[0] not in repr(client) and token_fetches[0] not in repr(client._gh.requester.auth)


# A POST GitHub carried out but answered 5xx (or never answered): posting again would post twice.
# The client looks for what it wrote (its marker, its external id) before trying again.

MARKER = "<!-- kernelize:review key=abc -->"


def _review(client: InstallationClient) -> int:
    comments = [ReviewComment("models/scale.py", 6, None, "looks fine")]
    return client.create_review(OWNER, REPO, 1, HEAD, f"review\n{MARKER}", comments, MARKER)


def test_a_review_created_then_answered_502_is_posted_once(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("POST", r"/pulls/1/reviews$", status=502, times=1, after=True)
    review_id = _review(client)
    posted = fake.reviews[(OWNER, REPO, 1)]
    assert [r.id for r in posted] == [review_id]
    assert len(fake.requests_to("POST", r"/pulls/1/reviews$")) == 1  # looked, found, did not post again


def test_a_review_refused_with_502_is_posted_after_looking(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("POST", r"/pulls/1/reviews$", status=502, times=2)
    review_id = _review(client)
    assert [r.id for r in fake.reviews[(OWNER, REPO, 1)]] == [review_id]
    assert len(fake.requests_to("POST", r"/pulls/1/reviews$")) == 3
    assert len(fake.requests_to("GET", r"/pulls/1/reviews$")) == 2  # a look before each new try


def test_a_review_that_keeps_failing_is_a_github_error_and_posts_nothing(
    fake: Any, client: InstallationClient
) -> None:
    fake.fail_next("POST", r"/pulls/1/reviews$", status=503, times=10)
    with pytest.raises(GitHubError) as info:
        _review(client)
    assert info.value.status == 503 and info.value.transient
    assert fake.reviews[(OWNER, REPO, 1)] == []


def test_a_422_is_not_tried_again(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("POST", r"/pulls/1/reviews$", status=422, times=1)
    with pytest.raises(GitHubError):
        _review(client)
    assert len(fake.requests_to("POST", r"/pulls/1/reviews$")) == 1


def test_a_summary_comment_created_then_answered_502_is_posted_once(
    fake: Any, client: InstallationClient
) -> None:
    fake.fail_next("POST", r"/issues/1/comments$", status=502, times=1, after=True)
    first = client.upsert_comment(
        OWNER, REPO, 1, "<!-- kernelize:summary -->", "summary\n<!-- kernelize:summary -->"
    )
    assert [c.id for c in fake.issue_comments[(OWNER, REPO, 1)]] == [first]


def test_a_check_run_created_then_answered_502_is_opened_once(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("POST", r"/check-runs$", status=502, times=1, after=True)
    run_id = client.create_check_run(OWNER, REPO, HEAD, "Kernelize", "queued", external_id="job-7")
    assert [c.id for c in fake.check_runs[(OWNER, REPO)]] == [run_id]


def test_a_secondary_rate_limit_on_a_post_is_still_waited_out(fake: Any, client: InstallationClient) -> None:
    fake.fail_next("POST", r"/pulls/1/reviews$", status=403, times=1, headers={"Retry-After": "0"})
    review_id = _review(client)
    assert [r.id for r in fake.reviews[(OWNER, REPO, 1)]] == [review_id]
    assert len(fake.requests_to("GET", r"/pulls/1/reviews$")) == 0  # a rate limit creates nothing


@pytest.mark.parametrize(
    ("status", "headers"), [(502, None), (503, None), (403, {"Retry-After": "0"})], ids=["502", "503", "403"]
)
def test_a_patch_failing_once_is_retried(
    fake: Any, client: InstallationClient, status: int, headers: dict[str, str] | None
) -> None:
    """Completing a check run (a PATCH: the same fields twice are the same fields once)."""
    run_id = client.create_check_run(OWNER, REPO, HEAD, "Kernelize", "in_progress")
    fake.fail_next("PATCH", r"/check-runs/\d+$", status=status, times=1, headers=headers)
    client.update_check_run(OWNER, REPO, run_id, conclusion="success", output={"title": "t", "summary": "s"})
    [run] = fake.check_runs[(OWNER, REPO)]
    assert (run.status, run.conclusion) == ("completed", "success")
    assert [r.status for r in fake.requests_to("PATCH", r"/check-runs/\d+$")] == [status, 200]
