"""One fake GitHub for every test: a real HTTP server checked against GitHub's OpenAPI description.

Use the ``fake_github`` fixture (it yields a started :class:`FakeGitHub` and, at teardown, fails
the test if any request broke GitHub's OpenAPI description or any answer broke its schemas)::

    from tests.fake_github import fake_github_fixture  # noqa: F401  (registers ``fake_github``)

    def test_bot_reviews(fake_github):
        creds = fake_github.configure_app()            # app id + test key pair
        fake_github.add_repo("octo", "models")
        fake_github.add_installation(7, "octo", ["models"])
        fake_github.add_pull("octo", "models", 1, head_sha, base_sha, "alice", files=[...])
        gi = github.GithubIntegration(auth=github.Auth.AppAuth(creds.app_id, creds.private_pem),
                                      base_url=fake_github.base_url,
                                      seconds_between_requests=0, seconds_between_writes=0)
        gh = gi.get_github_for_installation(7)       # PyGithub fetches its token from the fake
        ...
        assert fake_github.reviews[("octo", "models", 1)][0].comments[0].line == 12

(``from tests.fake_github import fake_github  # noqa: F401`` registers the same fixture, but ruff
then reports F811 on every test parameter named ``fake_github``.)

PyGithub waits 0.25 s between requests and 1 s between writes unless told
``seconds_between_requests=0, seconds_between_writes=0``; the fake needs no such pauses.

Signing a user in ("Sign in with GitHub", the app's OAuth web flow): ``fake.sign_in_browser("alice")``,
then the app's pages at ``fake.web_url`` (``/login/oauth/authorize``, ``/login/oauth/access_token``
with ``creds.client_id``/``creds.client_secret``) hand out a ``ghu_`` token for ``GET /user`` and
``GET /user/installations[/{id}/repositories]``; see ``oauth.py``.

A test that sends invalid requests on purpose takes them back with ``fake.take_violations()``.
See ``server.py`` for everything the fake enforces, ``diff.py`` for patch helpers
(``make_patch``, ``added_file_patch``, ``file_patch``) and ``openapi.py`` for the schema checking.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .base import AppCredentials
from .diff import added_file_patch, file_patch, make_patch, parse_patch
from .keys import make_app_key, shared_app_key
from .openapi import load_spec, to_json_schema
from .server import FakeGitHub
from .state import RecordedRequest, Violation, fake_sha

__all__ = [
    "AppCredentials",
    "FakeGitHub",
    "RecordedRequest",
    "Violation",
    "added_file_patch",
    "fake_github",
    "fake_github_fixture",
    "fake_sha",
    "file_patch",
    "load_spec",
    "make_app_key",
    "make_patch",
    "parse_patch",
    "shared_app_key",
    "to_json_schema",
]


@pytest.fixture(name="fake_github")
def fake_github_fixture() -> Iterator[FakeGitHub]:
    """A started FakeGitHub; at teardown, no request may have broken GitHub's description."""
    with FakeGitHub() as fake:
        yield fake
        fake.assert_clean()


# The same fixture under its own name, for ``from tests.fake_github import fake_github``.
fake_github = fake_github_fixture
