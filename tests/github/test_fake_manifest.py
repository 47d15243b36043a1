"""The fake GitHub's manifest flow: the new-app page and ``POST /app-manifests/{code}/conversions``.

A browser (httpx, redirects not followed) posts a manifest; the fake confirms at once and
redirects with a code, which the conversion trades for the new App. The ``fake_github`` fixture
fails a test at teardown if any API request or answer broke GitHub's OpenAPI description.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from tests.fake_github import FakeGitHub, fake_github_fixture  # noqa: F401  (the ``fake_github`` fixture)

MANIFEST: dict[str, Any] = {
    "name": "Kernelize Dev",
    "url": "https://kernelize.example.com",
    "hook_attributes": {"url": "https://kernelize.example.com/webhook", "active": True},
    "redirect_url": "http://127.0.0.1:9/done?keep=1",
    "callback_urls": ["https://kernelize.example.com/oauth/callback"],
    "default_permissions": {"contents": "read", "pull_requests": "write"},
    "default_events": ["pull_request"],
}


@pytest.fixture
def browser(fake_github: FakeGitHub) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake_github.web_url, follow_redirects=False) as client:
        yield client


def post(browser: httpx.Client, manifest: Any, path: str = "/settings/apps/new") -> httpx.Response:
    raw = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return browser.post(path, params={"state": "st8"}, data={"manifest": raw})


def convert(fake: FakeGitHub, code: str, *, base: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{base or fake.base_url}/app-manifests/{code}/conversions",
        headers={"User-Agent": "test", "Accept": "application/vnd.github+json"},
    )


def code_of(answer: httpx.Response) -> str:
    assert answer.status_code == 302, answer.text
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(answer.headers["location"]).query)
    assert query["state"] == ["st8"]
    return query["code"][0]


def test_manifest_to_app(fake_github: FakeGitHub, browser: httpx.Client) -> None:
    fake_github.sign_in_browser("alice")
    answer = post(browser, MANIFEST)
    code = code_of(answer)
    assert answer.headers["location"].startswith("http://127.0.0.1:9/done?keep=1&code=")
    converted = convert(fake_github, code)
    assert converted.status_code == 201
    body = converted.json()
    assert body["name"] == "Kernelize Dev" and body["slug"] == "kernelize-dev"
    assert body["owner"]["login"] == "alice" and body["owner"]["type"] == "User"
    assert body["permissions"] == {"contents": "read", "pull_requests": "write", "metadata": "read"}
    assert body["events"] == ["pull_request"] and body["external_url"] == MANIFEST["url"]
    assert body["html_url"] == "https://github.com/apps/kernelize-dev"
    assert len(body["webhook_secret"]) >= 16 and body["client_secret"]
    # the new App is the fake's app: its key signs JWTs the API takes
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 300, "iss": str(body["id"])}, body["pem"], "RS256")
    app = httpx.get(
        f"{fake_github.enterprise_url}/app", headers={"Authorization": f"Bearer {token}", "User-Agent": "t"}
    )
    assert app.status_code == 200 and app.json()["id"] == body["id"]
    # single use
    again = convert(fake_github, code)
    assert again.status_code == 404 and again.json()["message"] == "Not Found"


def test_organization_and_enterprise_paths(fake_github: FakeGitHub, browser: httpx.Client) -> None:
    fake_github.sign_in_browser("alice")
    code = code_of(post(browser, MANIFEST, "/organizations/acme/settings/apps/new"))
    body = convert(fake_github, code, base=fake_github.enterprise_url).json()
    assert body["owner"]["login"] == "acme" and body["owner"]["type"] == "Organization"
    assert fake_github.manifest_visits[-1].org == "acme"


def test_expired_and_unknown_codes(fake_github: FakeGitHub, browser: httpx.Client) -> None:
    fake_github.sign_in_browser("alice")
    code = code_of(post(browser, MANIFEST))
    fake_github.expire_manifest_codes()
    assert convert(fake_github, code).status_code == 404
    assert convert(fake_github, "nope").status_code == 404


def test_signed_out_gets_no_code(fake_github: FakeGitHub, browser: httpx.Client) -> None:
    answer = post(browser, MANIFEST)
    assert answer.status_code == 200 and "Sign in to GitHub" in answer.text
    assert fake_github.manifest_visits[-1].code is None and not fake_github.manifest_codes


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        ("{not json", "not JSON"),
        ("", "no manifest field"),
        ([1], "must be a JSON object"),
        ({**MANIFEST, "url": "kernelize.example.com"}, "url must be an http(s) URL"),
        ({k: v for k, v in MANIFEST.items() if k != "redirect_url"}, "redirect_url must be"),
        ({**MANIFEST, "default_permissions": {"contents": "all"}}, "levels must be read, write or admin"),
        (
            {k: v for k, v in MANIFEST.items() if k != "hook_attributes"},
            "default_events need hook_attributes",
        ),
    ],
)
def test_bad_manifests(fake_github: FakeGitHub, browser: httpx.Client, manifest: Any, says: str) -> None:
    fake_github.sign_in_browser("alice")
    answer = post(browser, manifest)
    assert answer.status_code == 422
    assert says in answer.text
    assert not fake_github.manifest_codes


def test_new_app_page_takes_posts_only(fake_github: FakeGitHub, browser: httpx.Client) -> None:
    assert browser.get("/settings/apps/new").status_code == 404
    assert browser.get("/api/v3/settings/apps/new").status_code == 404  # not an API path
    fake_github.take_violations()
