"""The app around a fake GitHub, driven through the webhook endpoint (fixture ``world`` in conftest).

Real octokit payloads are adopted by the fake GitHub, signed and POSTed to the FastAPI app; jobs run
through a real Celery app in eager mode (the engine in its sandboxes, on CPU, with the ``files``
generator) once the delivery's transaction is over, so replies, reactions, check runs and reviews
are in the fake GitHub when ``post`` returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bot import db, events, tasks
from bot.models import Suggestion
from bot.settings import load_settings
from bot.web import create_app
from runners import tasks as runner_tasks
from runners.celery_app import make_celery
from runners.messages import PublishContext
from tests.fake_github import FakeGitHub, added_file_patch, fake_sha

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests/fixtures/github-webhooks/payload-examples"
SECRET = "command-flow-secret-5b7e21c9d4"
SOURCE = (ROOT / "tests/problems/layers.py").read_text()
OWNER, REPO, NUMBER, INSTALLATION = "octo", "models", 5, 4242
HEAD, BASE = fake_sha("head", 5), fake_sha("base", 5)


class World:
    def __init__(self, fake: FakeGitHub, client: TestClient, sessions: Any, drain: Any) -> None:
        self.fake, self.client, self.sessions, self.drain = fake, client, sessions, drain
        self.deliveries = 0

    def post(self, event: str, payload: dict[str, Any]) -> Any:
        self.deliveries += 1
        body = json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": f"delivery-{self.deliveries}",
            "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
            "Content-Type": "application/json",
        }
        response = self.client.post("/webhook", content=body, headers=headers)
        self.drain()
        return response

    def comment(self, body: str, login: str = "maintainer", *, action: str = "created") -> Any:
        """The octokit comment payload, as ``login`` commenting ``body`` on the pull request."""
        payload = json.loads((EXAMPLES / f"issue_comment/{action}.payload.json").read_text())
        made = self.fake.add_issue_comment(OWNER, REPO, NUMBER, login, body)
        payload["repository"]["full_name"] = f"{OWNER}/{REPO}"
        payload["repository"]["name"], payload["repository"]["owner"]["login"] = REPO, OWNER
        payload["installation"] = {"id": INSTALLATION, "node_id": "x"}
        payload["issue"]["number"] = NUMBER
        payload["issue"]["pull_request"] = {
            "url": f"https://api.github.com/repos/{OWNER}/{REPO}/pulls/{NUMBER}"
        }
        payload["comment"].update(id=made.id, body=body)
        payload["sender"].update(login=login, type="User")
        response = self.post("issue_comment", payload)
        assert response.status_code == 202, response.text
        return made

    def replies(self) -> list[str]:
        me = "kernelize[bot]"
        return [c.body for c in self.fake.issue_comments[(OWNER, REPO, NUMBER)] if c.user.login == me]

    def reactions(self, comment_id: int) -> list[str]:
        return [r.content for r in self.fake.reactions[("issue_comment", comment_id)]]

    def checks(self) -> list[Any]:
        return list(self.fake.check_runs[(OWNER, REPO)])

    def reviews(self) -> list[Any]:
        return list(self.fake.reviews.get((OWNER, REPO, NUMBER), []))

    def suggestions(self) -> list[Suggestion]:
        """Every suggestion stored, oldest first, with its history loaded."""
        with self.sessions() as session:
            rows = session.query(Suggestion).order_by(Suggestion.id).all()
            for s in rows:
                _ = s.events  # loaded before the session closes
            return rows


def pr_event(action: str, head: str, sender: str = "maintainer", **pr: Any) -> dict[str, Any]:
    """The octokit ``pull_request`` payload for this world's pull request at ``head``, sent by
    ``sender`` (a bot when the login ends in ``[bot]``)."""
    payload = json.loads((EXAMPLES / f"pull_request/{action}.payload.json").read_text())
    payload["repository"]["full_name"] = f"{OWNER}/{REPO}"
    payload["installation"] = {"id": INSTALLATION, "node_id": "x"}
    payload["pull_request"].update(number=NUMBER, state="open", draft=False, **pr)
    payload["pull_request"]["head"]["sha"] = head
    payload["sender"].update(login=sender, type="Bot" if sender.endswith("[bot]") else "User")
    return payload


def publish_context(job: dict[str, Any], **fields: Any) -> PublishContext:
    """The publish context of a job ``running_job`` made (``job``: what it returned), for this
    world's pull request with nothing planned; ``fields`` set on it."""
    planned: dict[str, Any] = {
        "head_sha": HEAD,
        "key": "k",
        "targets": [],
        "patches": {},
        "mode": "suggestions",
        "when_nothing_found": "silent",
        "max_modules": 10,
    }
    return PublishContext(**{**job, **planned, **fields})


@contextlib.contextmanager
def make_world(monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[World]:
    """The fake GitHub with pull request #5 and the app around it (see the module docstring)."""
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo(OWNER, REPO)
        fake.add_installation(INSTALLATION, OWNER, [REPO])
        files = [
            {
                "filename": "models/layers.py",
                "status": "added",
                "patch": added_file_patch(SOURCE.splitlines()),
            }
        ]
        fake.add_pull(OWNER, REPO, NUMBER, HEAD, BASE, "author", files, author_association="CONTRIBUTOR")
        fake.set_file(OWNER, REPO, HEAD, "models/layers.py", SOURCE)
        fake.set_permission(OWNER, REPO, "maintainer", "write")
        fake.set_permission(OWNER, REPO, "reader", "read")
        env = {
            "KERNELIZE_WEBHOOK_SECRET": SECRET,
            "KERNELIZE_GITHUB_APP_ID": str(creds.app_id),
            "KERNELIZE_GITHUB_PRIVATE_KEY": creds.private_pem,
            "KERNELIZE_GITHUB_API_URL": fake.base_url,
            "KERNELIZE_DATABASE_URL": database_url,
            "KERNELIZE_GENERATORS": "files",
            "KERNELIZE_SECONDS_BETWEEN_WRITES": "0",
            "KERNELIZE_CANDIDATE_TIMEOUT_S": "120",
            "KERNELIZE_CANDIDATES_DIR": str(ROOT / "tests/candidates/layers"),
            "TRITON_INTERPRET": "1",
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for cached in (tasks._settings, tasks._app, tasks._sessions):
            cached.cache_clear()
        settings = load_settings()
        celery = make_celery("memory://", "cache+memory://")
        celery.conf.task_always_eager = True
        celery.conf.task_eager_propagates = True
        tasks.register(celery)
        runner_tasks.register(celery)

        pending: list[tuple[str, dict[str, Any], str]] = []

        def enqueue(job: dict[str, Any], delivery_id: str) -> str:
            # Queued now, run when the delivery's transaction is over (as a worker would).
            pending.append((job["task"], {k: v for k, v in job.items() if k != "task"}, delivery_id))
            return delivery_id

        def drain() -> None:
            while pending:
                name, kwargs, task_id = pending.pop(0)
                celery.tasks[name].apply(kwargs=kwargs, task_id=task_id, throw=True)

        engine = db.make_engine(settings.database_url)
        db.create_schema(engine)
        sessions = db.session_factory(engine)
        app = create_app(
            settings,
            decide=lambda e, p: events.decide(e, p, app_id=creds.app_id),
            enqueue=enqueue,
            session_factory=sessions,
            broker_ok=lambda: True,
        )
        with TestClient(app) as client:
            yield World(fake, client, sessions, drain)
        for cached in (tasks._settings, tasks._app, tasks._sessions):
            cached.cache_clear()
        fake.assert_clean()
