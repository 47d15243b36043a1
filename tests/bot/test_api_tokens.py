"""The API for private repositories: a GitHub token that can read the repository, checked against
GitHub (the fake one, a real HTTP server) and cached briefly; everyone else gets the same 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from bot import db
from bot.api import TokenAccess
from bot.github import GitHubError
from bot.settings import load_settings
from bot.web import create_app
from tests.bot.dashboard_seed import PRIVATE, PUBLIC, seed
from tests.fake_github import FakeGitHub, fake_github_fixture  # noqa: F401  (the ``fake_github`` fixture)

OWNER, NAME = PRIVATE.split("/")


@pytest.fixture
def api(database_url: str, webhook_secret: str, fake_github: FakeGitHub) -> Iterator[TestClient]:
    fake_github.add_repo(OWNER, NAME, private=True)
    fake_github.add_repo(*PUBLIC.split("/"))
    fake_github.add_user("mallory")
    engine = db.make_engine(database_url)
    db.migrate(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        seed(session)
    settings = load_settings(
        webhook_secret=webhook_secret,
        database_url=database_url,
        github_api_url=fake_github.base_url,
        _env_file=None,
    )
    app = create_app(settings, decide=lambda e, p: None, enqueue=lambda j, d: "x", session_factory=sessions)
    with TestClient(app) as c:
        yield c
    engine.dispose()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_that_reads_the_private_repository_sees_its_stats(api, fake_github):
    token = fake_github.add_user_token(OWNER)  # the owner's personal access token
    got = api.get(f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(token))
    assert got.status_code == 200, got.text
    assert got.json()["repository"] == PRIVATE and got.json()["posted"] >= 1
    page = api.get(f"/api/v1/repos/{PRIVATE}/suggestions", headers=_bearer(token))
    assert page.status_code == 200 and page.json()["total"] >= 1
    assert token not in page.text


def test_a_collaborator_reads_it_and_a_stranger_gets_the_plain_404(api, fake_github):
    fake_github.set_permission(OWNER, NAME, "carol", "read")
    carol = fake_github.add_user_token("carol")
    assert api.get(f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(carol)).status_code == 200
    stranger = api.get(
        f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(fake_github.add_user_token("mallory"))
    )
    anonymous = api.get(f"/api/v1/repos/{PRIVATE}/stats")
    never_seen = api.get("/api/v1/repos/octo/never-seen/stats")
    assert stranger.status_code == anonymous.status_code == never_seen.status_code == 404
    # The same words as for a repository Kernelize has never seen: nothing about what it holds.
    assert (
        stranger.json() == anonymous.json() == {"detail": f"no public repository {PRIVATE} with suggestions"}
    )
    assert "Hidden" not in stranger.text


def test_public_repositories_need_no_token_and_ask_github_nothing(api, fake_github):
    assert api.get(f"/api/v1/repos/{PUBLIC}/stats").status_code == 200
    assert api.get(f"/api/v1/repos/{PUBLIC}/stats", headers=_bearer("not-even-a-token")).status_code == 200
    assert fake_github.requests_to("GET", r"/repos/") == []


def test_a_token_github_refuses_is_401(api, fake_github):
    token = fake_github.add_user_token(OWNER)
    fake_github.expire_token(token)
    got = api.get(f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(token))
    assert got.status_code == 401 and got.json() == {"detail": "GitHub did not accept this token"}
    assert got.headers["WWW-Authenticate"] == "Bearer"


def test_github_down_is_503_not_a_leak(api, fake_github):
    token = fake_github.add_user_token(OWNER)
    fake_github.fail_next("GET", rf"/repos/{OWNER}/{NAME}$", status=502, times=3)
    got = api.get(f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(token))
    assert got.status_code == 503 and "try again" in got.json()["detail"]


def test_the_answer_is_cached_per_token_and_repository(api, fake_github):
    token = fake_github.add_user_token(OWNER)
    for _ in range(3):
        assert api.get(f"/api/v1/repos/{PRIVATE}/stats", headers=_bearer(token)).status_code == 200
    assert len(fake_github.requests_to("GET", rf"/repos/{OWNER}/{NAME}$")) == 1


def test_the_cache_expires_and_keeps_only_digests():
    asked: list[tuple[str, str]] = []

    def reads(token: str, repository: str) -> bool:
        asked.append((token, repository))
        if token == "bad":
            raise GitHubError("GET", "/repos/x", 401, "Bad credentials")
        return token == "good"

    access = TokenAccess(reads, ttl_s=0.0, size=2)
    assert access.reads("good", "a/b") and access.reads("good", "a/b")
    assert len(asked) == 2  # a zero TTL asks every time
    assert not access.reads("other", "a/b")
    assert all("good" not in key[0] and "other" not in key[0] for key in access._seen)
    assert len(access._seen) <= 2


def test_the_openapi_description_names_the_token(api):
    spec = api.get("/api/v1/openapi.json").json()
    scheme = spec["components"]["securitySchemes"]["GitHub token"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert "private repositories" in scheme["description"]
    stats = spec["paths"]["/api/v1/repos/{owner}/{repo}/stats"]["get"]
    assert stats["security"] == [{"GitHub token": []}]
