"""The fake GitHub's OAuth web flow ("Sign in with GitHub") and the user access token endpoints.

A browser (httpx, redirects not followed) visits the authorize page, the app's server trades the code
for a ``ghu_`` token, and that token calls ``GET /user``, ``/user/installations`` and
``/user/installations/{id}/repositories``. The ``fake_github`` fixture fails a test at teardown if
any API request or answer broke GitHub's OpenAPI description.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import github
import httpx
import jwt
import pytest

from tests.fake_github import (
    AppCredentials,
    FakeGitHub,
    fake_github_fixture,  # noqa: F401  (the ``fake_github`` fixture)
)

INSTALLATION = 7001
OTHER_INSTALLATION = 7002
CALLBACK = "https://kernelize.example.com/oauth/callback?next=%2Fdashboard"


@pytest.fixture
def app(fake_github: FakeGitHub) -> AppCredentials:
    """The app on octo (public ``models``, private ``secret``) and on acme (private ``tools``).

    alice may write to octo/secret; carol may read octo/models; bob has no role anywhere;
    alice is also a collaborator on octo/private-unlisted, which no installation covers.
    """
    creds = fake_github.configure_app(4242)
    fake_github.add_repo("octo", "models")
    fake_github.add_repo("octo", "secret", private=True)
    fake_github.add_repo("octo", "private-unlisted", private=True)
    fake_github.add_repo("acme", "tools", private=True, owner_type="Organization")
    fake_github.add_installation(INSTALLATION, "octo", ["models", "secret"])
    fake_github.add_installation(OTHER_INSTALLATION, "acme", None, account_type="Organization")
    fake_github.set_permission("octo", "secret", "alice", "write")
    fake_github.set_permission("octo", "models", "carol", "read")
    fake_github.set_permission("octo", "private-unlisted", "alice", "admin")
    fake_github.add_user("bob")
    return creds


@pytest.fixture
def browser(fake_github: FakeGitHub) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake_github.web_url, follow_redirects=False) as client:
        yield client


@pytest.fixture
def api(fake_github: FakeGitHub) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake_github.base_url, headers={"User-Agent": "kernelize-tests"}) as client:
        yield client


def authorize(
    browser: httpx.Client, client_id: str, state: str = "s1", redirect_uri: str = CALLBACK
) -> httpx.Response:
    return browser.get(
        "/login/oauth/authorize",
        params={"client_id": client_id, "redirect_uri": redirect_uri, "state": state},
    )


def code_from(answer: httpx.Response) -> str:
    assert answer.status_code == 302, answer.text
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(answer.headers["location"]).query)
    return query["code"][0]


def exchange(browser: httpx.Client, creds: AppCredentials, code: str, **overrides: str) -> dict[str, Any]:
    form = {
        "client_id": creds.client_id,
        "client_secret": creds.client_secret,
        "code": code,
        "redirect_uri": CALLBACK,
        **overrides,
    }
    answer = browser.post("/login/oauth/access_token", data=form, headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.text  # GitHub answers its errors with 200 too
    assert answer.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = answer.json()
    return body


def sign_in(fake: FakeGitHub, browser: httpx.Client, creds: AppCredentials, login: str) -> str:
    """The user access token the app gets when ``login`` signs in."""
    fake.sign_in_browser(login)
    token: str = exchange(browser, creds, code_from(authorize(browser, creds.client_id)))["access_token"]
    return token


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def repo_names(api: httpx.Client, token: str, installation_id: int) -> list[str]:
    answer = api.get(f"/user/installations/{installation_id}/repositories", headers=as_user(token))
    assert answer.status_code == 200, answer.text
    return [r["full_name"] for r in answer.json()["repositories"]]


# -- the app's credentials --------------------------------------------------------------------


def test_configure_app_gives_oauth_client_credentials(fake_github: FakeGitHub, app: AppCredentials) -> None:
    assert app.client_id.startswith("Iv23li") and len(app.client_id) == 20
    assert len(app.client_secret) == 40
    gi = github.GithubIntegration(
        auth=github.Auth.AppAuth(app.app_id, app.private_pem),
        base_url=fake_github.base_url,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )
    assert gi.get_app().client_id == app.client_id
    assert fake_github.web_url == fake_github.base_url


# -- the whole flow ---------------------------------------------------------------------------


def test_sign_in_gives_a_user_token_that_lists_what_the_user_may_read(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client, api: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    state = "a b&c=d/é"  # must come back exactly, url-encoded
    answer = authorize(browser, app.client_id, state=state)

    assert answer.status_code == 302
    location = urllib.parse.urlsplit(answer.headers["location"])
    assert (
        f"{location.scheme}://{location.netloc}{location.path}"
        == "https://kernelize.example.com/oauth/callback"
    )
    query = urllib.parse.parse_qs(location.query)
    assert query["next"] == ["/dashboard"]  # the redirect_uri's own query is kept
    assert query["state"] == [state]
    code = query["code"][0]
    assert fake_github.oauth_authorizations == [
        {"client_id": app.client_id, "redirect_uri": CALLBACK, "state": state, "login": "alice", "code": code}
    ]

    body = exchange(browser, app, code)
    assert set(body) == {"access_token", "token_type", "scope"}
    assert body["access_token"].startswith("ghu_")
    assert (body["token_type"], body["scope"]) == ("bearer", "")
    token = body["access_token"]

    me = api.get("/user", headers=as_user(token))
    assert me.status_code == 200
    assert me.json()["login"] == "alice"
    gh = github.Github(auth=github.Auth.Token(token), base_url=fake_github.base_url)
    assert gh.get_user().login == "alice"  # PyGithub reads the same answer

    installations = api.get("/user/installations", headers=as_user(token)).json()
    assert installations["total_count"] == 1
    assert [i["id"] for i in installations["installations"]] == [INSTALLATION]

    repos = api.get(f"/user/installations/{INSTALLATION}/repositories", headers=as_user(token)).json()
    assert repos["total_count"] == 1
    assert repos["repository_selection"] == "selected"
    (secret,) = repos["repositories"]
    assert secret["full_name"] == "octo/secret" and secret["private"]
    assert secret["permissions"] == {
        "admin": False,
        "maintain": False,
        "push": True,
        "triage": True,
        "pull": True,
    }

    assert fake_github.requests_to("POST", r"^/login/oauth/access_token$")[0].operation is None
    fake_github.assert_clean()


def test_only_explicit_permission_counts(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client, api: httpx.Client
) -> None:
    """GitHub lists repositories the user owns or collaborates on; a public one they merely can read
    does not make them see the installation."""
    carol = sign_in(fake_github, browser, app, "carol")
    assert repo_names(api, carol, INSTALLATION) == ["octo/models"]

    bob = sign_in(fake_github, browser, app, "bob")
    assert api.get("/user/installations", headers=as_user(bob)).json() == {
        "total_count": 0,
        "installations": [],
    }
    hidden = api.get(f"/user/installations/{INSTALLATION}/repositories", headers=as_user(bob))
    assert hidden.status_code == 404

    owner = sign_in(fake_github, browser, app, "octo")
    assert repo_names(api, owner, INSTALLATION) == ["octo/models", "octo/secret"]
    assert (
        api.get(f"/user/installations/{OTHER_INSTALLATION}/repositories", headers=as_user(owner)).status_code
        == 404
    )


def test_user_installation_repositories_are_paginated(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client, api: httpx.Client
) -> None:
    owner = sign_in(fake_github, browser, app, "octo")
    path = f"/user/installations/{INSTALLATION}/repositories"
    first = api.get(path, params={"per_page": 1}, headers=as_user(owner))
    assert first.json()["total_count"] == 2
    assert [r["name"] for r in first.json()["repositories"]] == ["models"]
    assert "page=2" in first.links["next"]["url"]
    second = api.get(first.links["next"]["url"], headers=as_user(owner))
    assert [r["name"] for r in second.json()["repositories"]] == ["secret"]
    assert "next" not in second.links


def test_a_user_token_reaches_only_what_the_app_is_installed_on(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client, api: httpx.Client
) -> None:
    token = sign_in(fake_github, browser, app, "alice")
    assert api.get("/repos/octo/secret", headers=as_user(token)).status_code == 200
    assert api.get("/repos/octo/private-unlisted", headers=as_user(token)).status_code == 404
    personal = fake_github.add_user_token("alice")  # a PAT: the user's own reach
    assert api.get("/repos/octo/private-unlisted", headers=as_user(personal)).status_code == 200


def test_token_answer_is_form_encoded_without_json_accept(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    form = {"client_id": app.client_id, "client_secret": app.client_secret, "code": code}
    answer = browser.post("/login/oauth/access_token", data=form)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/x-www-form-urlencoded")
    body = urllib.parse.parse_qs(answer.text, keep_blank_values=True)
    assert body["access_token"][0].startswith("ghu_")
    assert (body["token_type"], body["scope"]) == (["bearer"], [""])


def test_token_exchange_takes_a_json_body(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    sent = {"client_id": app.client_id, "client_secret": app.client_secret, "code": code}
    answer = browser.post("/login/oauth/access_token", json=sent, headers={"Accept": "application/json"})
    assert answer.json()["access_token"].startswith("ghu_")
    assert fake_github.requests[-1].json == sent


# -- errors -----------------------------------------------------------------------------------


# GitHub's error and error_description for each way a token exchange goes wrong
BAD_CODE = ("bad_verification_code", "The code passed is incorrect or expired.")
BAD_CLIENT = ("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.")
MISMATCH = (
    "redirect_uri_mismatch",
    "The redirect_uri MUST match the registered callback URL for this application.",
)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown code", BAD_CODE),
        ("reused code", BAD_CODE),
        ("expired code", BAD_CODE),
        ("wrong secret", BAD_CLIENT),
        ("wrong redirect_uri", MISMATCH),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_token_exchange_errors(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client, case: str, expected: tuple[str, str]
) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    overrides: dict[str, str] = {}
    if case == "unknown code":
        code = "0" * 20
    elif case == "reused code":
        assert "access_token" in exchange(browser, app, code)
    elif case == "expired code":
        fake_github.expire_oauth_codes()
    elif case == "wrong secret":
        overrides["client_secret"] = "f" * 40
    elif case == "wrong redirect_uri":
        overrides["redirect_uri"] = "https://evil.example.com/oauth/callback"

    body = exchange(browser, app, code, **overrides)

    assert "access_token" not in body
    assert (body["error"], body["error_description"]) == expected
    assert body["error_uri"].startswith("https://docs.github.com/")


def test_a_refused_exchange_leaves_the_code_usable(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    assert exchange(browser, app, code, client_secret="nope")["error"] == "incorrect_client_credentials"
    assert exchange(browser, app, code)["access_token"].startswith("ghu_")


def test_codes_live_ten_minutes(fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    assert 599 <= fake_github.oauth_codes[code].expires_at - time.time() <= 600


def test_signed_out_browser_gets_the_sign_in_page_and_no_code(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    fake_github.sign_out_browser()
    answer = authorize(browser, app.client_id)
    assert answer.status_code == 200
    assert "location" not in answer.headers
    assert answer.headers["content-type"].startswith("text/html")
    assert "Sign in to GitHub" in answer.text
    assert "code=" not in answer.text
    assert fake_github.oauth_codes == {}
    assert fake_github.oauth_authorizations[-1]["login"] is None
    assert fake_github.oauth_authorizations[-1]["code"] is None


def test_unknown_client_id_is_not_found(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    answer = authorize(browser, "Iv23liNotThisApp0000")
    assert answer.status_code == 404
    assert "location" not in answer.headers
    assert fake_github.oauth_codes == {}


def test_a_planned_failure_reaches_the_token_exchange(
    fake_github: FakeGitHub, app: AppCredentials, browser: httpx.Client
) -> None:
    fake_github.sign_in_browser("alice")
    code = code_from(authorize(browser, app.client_id))
    fake_github.fail_next("POST", r"^/login/oauth/access_token$", 503)
    form = {"client_id": app.client_id, "client_secret": app.client_secret, "code": code}
    assert browser.post("/login/oauth/access_token", data=form).status_code == 503
    assert exchange(browser, app, code)["access_token"].startswith("ghu_")


# -- who may call the /user endpoints ---------------------------------------------------------


def test_other_credentials_are_refused(
    fake_github: FakeGitHub, app: AppCredentials, api: httpx.Client
) -> None:
    wanted = (
        "You must authenticate with an access token authorized to a GitHub App in order to list installations"
    )
    installation = {"Authorization": f"token {fake_github.issue_token(INSTALLATION)}"}
    now = int(time.time())
    app_jwt = jwt.encode(
        {"iat": now - 60, "exp": now + 540, "iss": str(app.app_id)}, app.private_pem, "RS256"
    )
    personal = fake_github.add_user_token("alice")
    for headers in (installation, as_user(app_jwt), as_user(personal)):
        for path in ("/user/installations", f"/user/installations/{INSTALLATION}/repositories"):
            answer = api.get(path, headers=headers)
            assert answer.status_code == 403, (path, headers)
            assert answer.json()["message"] == wanted

    by_installation = api.get("/user", headers=installation)
    assert by_installation.status_code == 403
    assert by_installation.json()["message"] == "Resource not accessible by integration"
    assert api.get("/user", headers=as_user(personal)).json()["login"] == "alice"
    assert api.get("/user/installations").status_code == 401
    expired = fake_github.add_user_token("alice", for_app=True)
    fake_github.expire_token(expired)
    assert api.get("/user", headers=as_user(expired)).status_code == 401
