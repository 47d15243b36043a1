"""The GitHub App manifest and the CI workflow: valid against GitHub's own descriptions, and in step with
what the app needs and with ``.ci/run``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OPENAPI = ROOT / "tests/fixtures/github-openapi/api.github.com.json.gz"
WEBHOOKS = ROOT / "tests/fixtures/github-webhooks/payload-examples"


def test_the_manifest_asks_for_exactly_what_the_app_uses() -> None:
    manifest = json.loads((ROOT / "deploy/app-manifest.json").read_text())
    with gzip.open(OPENAPI) as fh:
        schema = json.load(fh)["components"]["schemas"]["app-permissions"]["properties"]
    for name, level in manifest["default_permissions"].items():
        assert name in schema, name
        assert level in schema[name]["enum"], (name, level)
    assert manifest["default_permissions"] == {
        "contents": "read",  # the repository's Python and its config
        "pull_requests": "write",  # reviews with suggestions
        "checks": "write",  # the Kernelize check run
        "issues": "write",  # the summary comment, replies and reactions
        "metadata": "read",
    }
    events = set(manifest["default_events"])
    assert events <= {p.name for p in WEBHOOKS.iterdir() if p.is_dir()}  # real webhook event names
    assert events == {"pull_request", "issue_comment", "check_run", "pull_request_review_thread"}
    assert manifest["hook_attributes"]["url"].endswith("/webhook")
    assert manifest["redirect_url"].endswith("/oauth/callback")
    assert manifest["public"] is False


def test_the_workflow_runs_the_readme_test_command() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    readme = (ROOT / "README.md").read_text()
    command = next(
        line for line in readme.splitlines() if line.startswith("python3 -m venv") and "pytest" in line
    )
    runs = [step.get("run", "") for step in workflow["jobs"]["test"]["steps"]]
    assert command in runs
    assert command in (ROOT / ".ci/run").read_text()
    services = workflow["jobs"]["test"]["services"]
    assert {"postgres", "redis", "rabbitmq"} <= set(services)
