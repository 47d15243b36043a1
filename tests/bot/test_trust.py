"""Who may spend a repository's GPUs: automatic runs for trusted authors, a button for the rest.

Real PyGithub against the fake GitHub; the plan task is called directly (nothing is queued when
it decides to wait).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import tasks
from bot.flows import plan
from bot.flows.common import has_write
from bot.github import RepoClient
from bot.repo_config import RepoConfig, load_repo_config
from tests.fake_github import FakeGitHub, added_file_patch, fake_sha

SOURCE = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x * 2\n"


@pytest.fixture
def gh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo("octo", "models")
        fake.add_installation(77, "octo", ["models"])
        monkeypatch.setenv("KERNELIZE_WEBHOOK_SECRET", "trust-tests-secret-7d1c2b")
        monkeypatch.setenv("KERNELIZE_GITHUB_APP_ID", str(creds.app_id))
        monkeypatch.setenv("KERNELIZE_GITHUB_PRIVATE_KEY", creds.private_pem)
        monkeypatch.setenv("KERNELIZE_GITHUB_API_URL", fake.base_url)
        monkeypatch.setenv("KERNELIZE_SECONDS_BETWEEN_WRITES", "0")
        # The test's own database, not the default ./kernelize.db of the checkout it runs in.
        monkeypatch.setenv("KERNELIZE_DATABASE_URL", f"sqlite:///{tmp_path / 'kernelize.db'}")
        tasks._settings.cache_clear()
        tasks._app.cache_clear()
        yield fake
        tasks._settings.cache_clear()
        tasks._app.cache_clear()
        fake.assert_clean()


def _pull(fake: FakeGitHub, number: int, author: str, association: str) -> str:
    head = fake_sha("head", number)
    files = [{"filename": "net.py", "status": "added", "patch": added_file_patch(SOURCE.splitlines())}]
    fake.add_pull(
        "octo",
        "models",
        number,
        head,
        fake_sha("base", number),
        author,
        files,
        author_association=association,
    )
    fake.set_file("octo", "models", head, "net.py", SOURCE)
    return head


def _plan(number: int, head: str, reason: str, sender: str) -> dict:
    return tasks.plan_pull_request(None, 77, "octo", "models", number, head, reason=reason, sender=sender)


def test_a_strangers_pull_request_waits_for_a_maintainer(gh: FakeGitHub) -> None:
    head = _pull(gh, 1, "stranger", "FIRST_TIME_CONTRIBUTOR")
    result = _plan(1, head, "pull_request.opened", "stranger")
    assert result["skipped"].startswith("waiting for a maintainer")
    [run] = gh.check_runs[("octo", "models")]
    assert (run.status, run.conclusion, run.head_sha) == ("completed", "action_required", head)
    assert "@stranger" in run.output["summary"] and "Run Kernelize" in run.output["summary"]
    # A push to the same commit (redelivery, reopen) does not pile up check runs.
    _plan(1, head, "pull_request.reopened", "stranger")
    assert len(gh.check_runs[("octo", "models")]) == 1
    assert gh.reviews[("octo", "models", 1)] == []


def test_the_button_pressed_by_someone_without_write_access_does_nothing(gh: FakeGitHub) -> None:
    head = _pull(gh, 2, "stranger", "NONE")
    gh.set_permission("octo", "models", "passerby", "read")
    result = _plan(2, head, "check_run.requested_action", "passerby")
    assert result["skipped"].startswith("waiting for a maintainer")


def _may_run(
    client: RepoClient, author: tuple[str, str], reason: str, sender: str, config: RepoConfig
) -> bool:
    """What the plan decides for a pull request by ``author`` (association, login), asking GitHub
    for the permission of whoever it names."""
    login = plan.who_decides(reason, sender, *author, config.trust.associations)
    return login is None or has_write(client, login)


def test_who_may_run(gh: FakeGitHub) -> None:
    client = tasks._client(77).repository("octo", "models")
    gh.set_permission("octo", "models", "maint", "maintain")
    gh.set_permission("octo", "models", "writer", "write")
    cases = [
        ("OWNER", "someone", "pull_request.opened", "", True),
        ("CONTRIBUTOR", "writer", "pull_request.synchronize", "", True),  # write access, not a member
        ("CONTRIBUTOR", "someone", "pull_request.opened", "", False),
        ("NONE", "someone", "check_run.requested_action", "maint", True),
        ("MEMBER", "someone", "check_run.rerequested", "", False),  # a re-run needs a known sender
    ]
    config = load_repo_config(None)
    for association, author, reason, sender, expected in cases:
        assert _may_run(client, (association, author), reason, sender, config) is expected, (
            association,
            reason,
        )
    # The repository may trust more associations, or fewer.
    pull = ("CONTRIBUTOR", "someone")
    wider = load_repo_config("trust:\n  associations: [OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR]\n")
    assert _may_run(client, pull, "pull_request.opened", "", wider) is True
    owner_only = load_repo_config("trust:\n  associations: [OWNER]\n")
    pull = ("MEMBER", "someone")
    assert _may_run(client, pull, "pull_request.opened", "", owner_only) is False
    # A command or a label counts who gave it, not who wrote the pull request.
    assert _may_run(client, pull, "command", "writer", owner_only) is True
    assert _may_run(client, pull, "pull_request.labeled", "someone", wider) is False
