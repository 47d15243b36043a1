"""Dashboard pages without a browser: who sees what, and that the numbers are the database's."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from bot import db, tracking
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
    assert 'data-stat="geomean-compile">1.50x<' in text  # each seeded kernel is half as fast vs compile
    assert text.count("<svg") == 3 and "#1 Norm" in text
    assert f"https://github.com/{PUBLIC}/pull/1#discussion_r10" in text


def _figure(text: str, figure_id: str) -> str:
    start = text.index(f'<figure id="{figure_id}">')
    return text[start : text.index("</figure>", start)]


def _values(svg: str, attribute: str) -> dict[str, str]:
    """``data-<attribute>`` -> ``data-value`` of each labelled element of a chart."""
    return dict(re.findall(rf'data-{attribute}="([^"]+)"[^>]*?data-value="([^"]+)"', svg))


def test_the_status_chart_adds_up_to_the_posted_card(client: TestClient) -> None:
    """The five states a suggestion is in now, each once: together they are every one posted."""
    text = client.get(f"/repos/{PUBLIC}").text
    bars = _values(_figure(text, "status-chart"), "bar")
    assert bars == {"waiting": "0", "applied": "0", "merged": "2", "dismissed": "1", "outdated": "0"}
    assert sum(int(v) for v in bars.values()) == 3
    assert "Status of the 3 posted" in text


def test_the_speed_charts_show_both_baselines_and_the_break_even_line(client: TestClient) -> None:
    text = client.get(f"/repos/{PUBLIC}").text
    speed = _figure(text, "speed-chart")
    assert 'data-reference="1.0"' in speed and ">1.0x<" in speed
    assert 'data-legend="eager"' in speed and 'data-legend="compile"' in speed
    drawn = re.findall(r'data-bar="([^"]+)" data-baseline="(\w+)" data-value="([^"]+)"', speed)
    assert sorted(drawn) == sorted(
        [
            ("#1 Norm", "eager", "4"),
            ("#1 Norm", "compile", "2"),
            ("#2 Act", "eager", "2.25"),
            ("#2 Act", "compile", "1.125"),
            ("#3 Mlp", "eager", "1.5"),
            ("#3 Mlp", "compile", "0.75"),  # slower than torch.compile: left of the line
        ]
    )
    trend = _figure(text, "trend-chart")
    assert 'data-reference="1.0"' in trend
    points = re.findall(r'<circle[^>]*data-series="(\w+)" data-value="([^"]+)"', trend)
    # running geometric means in posting order: 4, sqrt(4 * 2.25) = 3, cbrt(4 * 2.25 * 1.5) = 2.381
    assert [v for k, v in points if k == "eager"] == ["4", "3", "2.381"]
    assert [v for k, v in points if k == "compile"] == ["2", "1.5", "1.191"]


def test_charts_scale_to_the_window_and_leave_room_for_their_labels(client: TestClient) -> None:
    text = client.get(f"/repos/{PUBLIC}").text
    for figure_id in ("status-chart", "speed-chart", "trend-chart"):
        svg = _figure(text, figure_id)
        assert 'width="100%"' in svg and "viewBox" in svg
        width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))  # type: ignore[union-attr]
        for x, label in re.findall(r'<text x="([\d.]+)"[^>]*>([^<]+)</text>', svg):
            assert float(x) + len(label) * 7.5 <= width + 1, (figure_id, label)


def test_sign_in_needs_configuring(client: TestClient) -> None:
    for page in (client.get("/"), client.get(f"/repos/{PRIVATE}")):
        assert "Sign-in is not configured on this server" in page.text
        assert 'id="no-sign-in"' in page.text and 'href="/login"' not in page.text
    assert client.get("/login", follow_redirects=False).status_code == 503
    forged = client.get("/oauth/callback", params={"code": "x", "state": "y"})
    assert forged.status_code == 400 and "did not come from this site" in forged.text
    assert client.get("/logout", follow_redirects=False).status_code == 303


def test_installation_stats_count_public_repositories_only(client: TestClient) -> None:
    data = client.get("/api/v1/installations/4242/stats").json()
    assert (data["posted"], data["merged"], data["dismissed"]) == (3, 2, 1)  # the private one is left out
    assert data["geomean_speedup_merged"] == 3.0
    assert data["geomean_speedup_compile_merged"] == 1.5
    assert client.get("/api/v1/installations/1/stats").status_code == 404


def test_the_api_page_is_served_without_a_cdn(client: TestClient) -> None:
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/api/v1/docs/assets/") for a in assets), assets
    assert "//" not in "".join(assets)  # nothing from another host
    for asset in assets:
        got = client.get(asset)
        assert got.status_code == 200 and len(got.content) > 500, asset
    assert "'/api/v1/openapi.json'" in page.text


def test_the_stats_comment_names_both_baselines(client: TestClient) -> None:
    """What ``/kernelize stats`` posts, from the same numbers the API gives."""
    data = client.get(f"/api/v1/repos/{PUBLIC}/stats").json()
    comment = tracking.stats_markdown(data, PUBLIC)
    header, _, row = comment.splitlines()[2:5]
    assert header.endswith("| merged: geomean vs eager | vs torch.compile |")
    assert row.startswith("| 3 | 0 | 2 | 1 | 0 | 0 | 67% |") and row.endswith("| 3.00x | 1.50x |")
