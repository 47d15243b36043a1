"""The dashboard in a real headless browser (Chromium through WebDriver), signed out and signed in.

uvicorn serves the app on 127.0.0.1; "Sign in with GitHub" goes through the fake GitHub's OAuth
web flow (authorize page → redirect with a code → token exchange → /user and the user's
installations), so the browser follows every redirect itself.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from bot import db
from bot.settings import load_settings
from bot.web import create_app
from tests.bot.dashboard_seed import PRIVATE, PUBLIC, seed
from tests.fake_github import FakeGitHub

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if os.environ.get("CI") == "true" and not (CHROMIUM and CHROMEDRIVER):  # CI installs them: never skip there
    pytest.fail("Chromium and ChromeDriver are missing in CI", pytrace=False)
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Chromium and ChromeDriver (Debian: chromium chromium-driver)",
)


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def site(
    database_url: str, webhook_secret: str, serve: Callable[[FastAPI], str]
) -> Iterator[tuple[str, FakeGitHub]]:
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo("octo", "public-models")
        fake.add_repo("octo", "secret-models", private=True)
        fake.add_installation(4242, "octo", ["public-models", "secret-models"])
        fake.set_permission("octo", "secret-models", "insider", "read")
        engine = db.make_engine(database_url)
        db.migrate(engine)
        sessions = db.session_factory(engine)
        with sessions() as session, session.begin():
            seed(session)
        settings = load_settings(
            webhook_secret=webhook_secret,
            database_url=database_url,
            github_api_url=fake.base_url,
            github_web_url=fake.web_url,
            github_client_id=creds.client_id,
            github_client_secret=creds.client_secret,
            _env_file=None,
        )
        app = create_app(
            settings, decide=lambda e, p: None, enqueue=lambda j, d: "x", session_factory=sessions
        )
        yield serve(app), fake
        engine.dispose()
        fake.assert_clean()


def _cells(browser: Any) -> dict[str, dict[str, str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, "#repos tbody tr")
    return {
        r.get_attribute("data-repository"): {
            c.get_attribute("data-field"): c.text for c in r.find_elements(By.CSS_SELECTOR, "td[data-field]")
        }
        for r in rows
    }


def test_signed_out_then_signed_in(browser: Any, site: tuple[str, FakeGitHub]) -> None:
    url, fake = site
    browser.get(url + "/")
    assert _cells(browser) == {
        PUBLIC: {
            "posted": "3",
            "applied": "0",
            "merged": "2",
            "dismissed": "1",
            "acceptance": "67%",
            "geomean": "3.00x",
            "geomean-compile": "1.50x",
        }
    }
    assert PRIVATE not in browser.page_source
    browser.get(url + f"/repos/{PRIVATE}")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text
    assert "Hidden" not in browser.page_source

    browser.get(url + f"/repos/{PUBLIC}")
    stats = {
        e.get_attribute("data-stat"): e.text for e in browser.find_elements(By.CSS_SELECTOR, "[data-stat]")
    }
    assert (stats["posted"], stats["merged"], stats["acceptance"], stats["geomean"]) == (
        "3",
        "2",
        "67%",
        "3.00x",
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure svg")) == 3  # status, speedups, trend
    link = browser.find_element(By.LINK_TEXT, "#1")
    assert link.get_attribute("href") == f"https://github.com/{PUBLIC}/pull/1#discussion_r10"

    # Sign in as someone who can read the private repository: it appears, with its numbers.
    fake.sign_in_browser("insider")
    browser.get(url + "/")
    browser.find_element(By.ID, "sign-in").click()
    assert browser.find_element(By.ID, "login").text == "insider"
    cells = _cells(browser)
    assert set(cells) == {PUBLIC, PRIVATE}
    assert (cells[PRIVATE]["posted"], cells[PRIVATE]["merged"], cells[PRIVATE]["geomean"]) == (
        "1",
        "1",
        "3.00x",
    )
    browser.get(url + f"/repos/{PRIVATE}")
    assert browser.find_element(By.ID, "repository").text == PRIVATE

    # Signed out again: gone.
    browser.get(url + "/logout")
    assert PRIVATE not in browser.page_source
    browser.get(url + f"/repos/{PRIVATE}")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text


def test_someone_without_access_sees_no_private_repository(
    browser: Any, site: tuple[str, FakeGitHub]
) -> None:
    url, fake = site
    fake.sign_in_browser("outsider")
    browser.get(url + "/login")
    assert browser.find_element(By.ID, "login").text == "outsider"
    assert set(_cells(browser)) == {PUBLIC}
    browser.get(url + f"/repos/{PRIVATE}")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text


@pytest.mark.parametrize("width", [1400, 800])
def test_pages_fit_the_window(browser: Any, site: tuple[str, FakeGitHub], width: int) -> None:
    """No page scrolls sideways at a desktop or a narrow window; every chart is drawn inside it, and
    at 800 px the tables drop their secondary columns rather than overflow."""
    url, _ = site
    browser.set_window_size(width, 900)
    inner = browser.execute_script("return window.innerWidth")
    for path in ("/", f"/repos/{PUBLIC}", f"/repos/{PRIVATE}"):
        browser.get(url + path)
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= inner, (path, scroll, inner)
        for table in browser.find_elements(By.TAG_NAME, "table"):
            assert table.rect["x"] + table.rect["width"] <= inner, (path, table.get_attribute("id"))
    charts = browser.find_elements(By.CSS_SELECTOR, "figure svg")
    assert len(charts) == 0  # the private repository's page (signed out) draws none
    browser.get(url + f"/repos/{PUBLIC}")
    charts = browser.find_elements(By.CSS_SELECTOR, "figure svg")
    assert len(charts) == 3
    for svg in charts:
        assert 0 < svg.rect["width"] <= inner - svg.rect["x"]
    generator_column = browser.find_element(By.CSS_SELECTOR, "#suggestions th.wide")
    assert generator_column.is_displayed() is (width > 900)


def test_the_api_page_renders_offline(browser: Any, site: tuple[str, FakeGitHub]) -> None:
    """This machine reaches no CDN: Swagger UI comes from the app and lists the API's operations."""
    url, _ = site
    browser.get(url + "/api/v1/docs")
    deadline = time.monotonic() + 20
    while not browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path") and time.monotonic() < deadline:
        time.sleep(0.2)
    found = browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
    paths = {e.text.replace("\u200b", "") for e in found}
    assert "/api/v1/repos/{owner}/{repo}/stats" in paths, paths
