"""Dashboard pages without a browser: who sees what, and that the numbers are the database's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from bot import db
from bot.settings import load_settings
from bot.web import create_app
from tests.bot.dashboard_seed import PRIVATE, PUBLIC, seed


@pytest.fixture
def client(database_url: str, webhook_secret: str) -> Iterator[TestClient]:
    engine = db.make_engine(database_url)
    db.migrate(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        seed(session)
    settings = load_settings(webhook_secret=webhook_secret, database_url=database_url, _env_file=None)
    app = create_app(settings, decide=lambda e, p: None, enqueue=lambda j, d: "x", session_factory=sessions)
    with TestClient(app) as c:
        yield c
    engine.dispose()


def test_signed_out_visitors_see_public_repositories_only(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert PUBLIC in page.text and PRIVATE not in page.text and "secret" not in page.text
    private = client.get(f"/repos/{PRIVATE}")
    assert private.status_code == 404 and "Hidden" not in private.text and "3.00x" not in private.text


def test_the_repository_page_shows_the_databases_numbers(client: TestClient) -> None:
    page = client.get(f"/repos/{PUBLIC}")
    assert page.status_code == 200
    text = page.text
    assert 'data-stat="posted">3<' in text and 'data-stat="merged">2<' in text
    assert 'data-stat="dismissed">1<' in text and 'data-stat="acceptance">67%<' in text
    assert 'data-stat="geomean">3.00x<' in text
    assert text.count("<svg") == 2 and "#1 Norm" in text
    assert f"https://github.com/{PUBLIC}/pull/1#discussion_r10" in text


def test_sign_in_needs_configuring(client: TestClient) -> None:
    assert client.get("/login", follow_redirects=False).status_code == 503
    forged = client.get("/oauth/callback", params={"code": "x", "state": "y"})
    assert forged.status_code == 400 and "did not come from this site" in forged.text
    assert client.get("/logout", follow_redirects=False).status_code == 303


def test_installation_stats_count_public_repositories_only(client: TestClient) -> None:
    data = client.get("/api/v1/installations/4242/stats").json()
    assert (data["posted"], data["merged"], data["dismissed"]) == (3, 2, 1)  # the private one is left out
    assert data["geomean_speedup_merged"] == 3.0
    assert client.get("/api/v1/installations/1/stats").status_code == 404
