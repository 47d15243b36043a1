"""GitHub as a signed-in user sees it, apart from the App and its installations (``bot/github.py``):
the dashboard's sign-in (the App's OAuth web flow: the code traded for a user token, then who the
user is and which repositories of the App's installations they can read), and whether a token a
client of the stats API holds can read a repository. A user's token is used for the call and
dropped; it never appears in an error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import github
import requests

from bot.github import GitHubError, translate_errors


@dataclass(frozen=True)
class UserAccess:
    login: str
    repositories: list[str]  # owner/name of every repository, in the app's installations, they can read


def authorize_url(web_url: str, client_id: str, redirect_uri: str, state: str) -> str:
    """Where the dashboard sends a user to sign in with GitHub (the OAuth web flow's first step)."""
    query = urlencode({"client_id": client_id, "redirect_uri": redirect_uri, "state": state})
    return f"{web_url.rstrip('/')}/login/oauth/authorize?{query}"


def user_access(
    *, api_url: str, web_url: str, client_id: str, client_secret: str, code: str, redirect_uri: str
) -> UserAccess:
    """Trade the sign-in ``code`` for a user token, then ask GitHub who this is and which repositories
    of the app's installations they can read. The token is used here and dropped."""
    path = "/login/oauth/access_token"
    try:
        answer = requests.post(
            web_url.rstrip("/") + path,
            data={
                "client_id": client_id,
                "client_secret": client_secret,
                "code": code,
                "redirect_uri": redirect_uri,
            },
            headers={"Accept": "application/json"},
            timeout=15,
        )
    except requests.exceptions.RequestException as exc:
        raise GitHubError("POST", path, None, f"{type(exc).__name__}: could not reach GitHub") from None
    data = answer.json() if answer.ok else {}
    token = data.get("access_token")
    if not token:
        why = data.get("error_description") or data.get("error") or f"HTTP {answer.status_code}"
        raise GitHubError("POST", path, answer.status_code, f"sign-in refused: {why}")
    gh = github.Github(auth=github.Auth.Token(token), base_url=api_url.rstrip("/"), retry=None)
    try:
        with translate_errors("GET", "/user", lambda text: text.replace(token, "***")):
            login = gh.get_user().login
            repos: set[str] = set()
            for inst in _pages(gh, "/user/installations", "installations"):
                for repo in _pages(gh, f"/user/installations/{inst['id']}/repositories", "repositories"):
                    repos.add(str(repo["full_name"]))
        return UserAccess(login, sorted(repos))
    finally:
        gh.close()


def token_reads(api_url: str, token: str, repository: str) -> bool:
    """Whether ``token`` (any GitHub token: a personal one, an app's user token, a workflow's
    ``GITHUB_TOKEN``) can read ``repository``, as GitHub answers ``GET /repos/{owner}/{repo}``
    for it: 404 and 403 are no. A token GitHub refuses (401) raises GitHubError with status 401;
    so does GitHub being unreachable (status None or 5xx)."""
    gh = github.Github(auth=github.Auth.Token(token), base_url=api_url.rstrip("/"), retry=None)
    path = f"/repos/{repository}"
    try:
        with translate_errors("GET", path, lambda text: text.replace(token, "***")):
            try:
                gh.get_repo(repository, lazy=False)
            except github.GithubException as exc:
                if exc.status in (403, 404):
                    return False
                raise
        return True
    finally:
        gh.close()


def _pages(gh: github.Github, path: str, key: str) -> Iterator[dict[str, Any]]:
    page = 1
    while True:
        _, data = gh.requester.requestJsonAndCheck("GET", path, parameters={"per_page": 100, "page": page})
        items = data.get(key) or []
        yield from items
        if len(items) < 100:
            return
        page += 1
