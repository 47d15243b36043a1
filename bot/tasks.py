"""The GitHub-side Celery tasks: plan a pull request, then publish what the GPU workers found.

``plan_pull_request`` (queue ``github``) reads the pull request, maps its diff
to the ``nn.Module`` classes it touches, packs the changed Python sources into
a bundle and fans out one ``kernelize_module`` task per class to the ``gpu``
queue; a chord calls ``publish_pull_request`` (queue ``github``) with their
reports. Tasks take primitives and load the rest; GitHub credentials never
leave this side.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

import yaml
from celery import chord

from bot import publish
from bot.github import GitHubApp, InstallationClient
from bot.settings import Settings, load_settings
from runners.bundle import BundleError, pack
from runners.celery_app import GPU_QUEUE, KERNELIZE_TASK, PLAN_TASK, PUBLISH_TASK
from runners.discover import DiscoveryError, added_lines, classes_touching, find_modules
from runners.results import DeviceInfo, RunReport, module_from_dict

log = logging.getLogger(__name__)
CHECK_NAME = "Kernelize"
CONFIG_PATH = ".github/kernelize.yml"
BUNDLE_TEXT_BYTES = 16 * 2**20  # Python source text per pull request; it compresses ~4x under the bundle cap


@functools.lru_cache(maxsize=1)
def _settings() -> Settings:
    return load_settings()


@functools.lru_cache(maxsize=1)
def _app() -> GitHubApp:
    s = _settings()
    key = s.private_key()
    if s.github_app_id is None or key is None:
        raise RuntimeError("KERNELIZE_GITHUB_APP_ID and a private key are needed on the github queue")
    return GitHubApp(
        s.github_app_id, key, base_url=s.github_api_url, seconds_between_writes=s.seconds_between_writes
    )


def _client(installation_id: int) -> InstallationClient:
    return _app().installation(installation_id)


def _repo_modules_config(client: InstallationClient, owner: str, repo: str, ref: str) -> dict[str, Any]:
    """The ``modules:`` section of the repository config at ``ref`` (empty when there is none)."""
    text = client.file_text(owner, repo, CONFIG_PATH, ref)
    if not text:
        return {}
    data = yaml.safe_load(text) or {}
    modules = data.get("modules", {}) if isinstance(data, dict) else {}
    return modules if isinstance(modules, dict) else {}


def settings_hash(request: dict[str, Any]) -> str:
    """The part of the idempotency key that says how the engine was asked to run."""
    keys = ("generators", "samples", "min_speedup")
    return hashlib.sha256(json.dumps({k: request.get(k) for k in keys}, sort_keys=True).encode()).hexdigest()[
        :12
    ]


# Automatic runs spend a repository's GPUs on the pull request's code: only for authors the repository
# trusts. Anyone else's pull request waits for a maintainer (check-run button or re-run).
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
RUN_ACTION = {
    "label": "Run Kernelize",
    "description": "Kernelize this pull request's modules",
    "identifier": "run",
}


def _may_run(client: InstallationClient, owner: str, repo: str, pull: Any, reason: str, sender: str) -> bool:
    if reason.startswith("check_run."):  # a button or a re-run: whoever pressed it must have write access
        return bool(sender) and client.permission(owner, repo, sender) in WRITE_PERMISSIONS
    if pull.author_association in TRUSTED_ASSOCIATIONS:
        return True
    return client.permission(owner, repo, pull.author_login) in WRITE_PERMISSIONS


def _ask_for_approval(
    client: InstallationClient, owner: str, repo: str, head_sha: str, author: str
) -> dict[str, Any]:
    waiting = [
        r for r in client.check_runs(owner, repo, head_sha, CHECK_NAME) if r.conclusion == "action_required"
    ]
    if not waiting:
        summary = (
            f"This pull request is from @{author}, who does not have write access to this repository, so "
            "Kernelize did not run its code automatically. A maintainer can start it with the "
            "**Run Kernelize** button above (or by re-running this check)."
        )
        client.create_check_run(
            owner,
            repo,
            head_sha,
            CHECK_NAME,
            "completed",
            conclusion="action_required",
            output={"title": "Waiting for a maintainer", "summary": summary},
            actions=[RUN_ACTION],
        )
    return {"skipped": f"waiting for a maintainer: @{author} may not run code here"}


def plan_pull_request(
    app: Any,
    installation_id: int,
    owner: str,
    repo: str,
    number: int,
    head_sha: str,
    reason: str = "",
    sender: str = "",
    **_: Any,
) -> dict[str, Any]:
    client = _client(installation_id)
    pull = client.pull(owner, repo, number)
    if pull.head_sha != head_sha:
        return {"skipped": f"head moved from {head_sha[:7]} to {pull.head_sha[:7]}; a newer event covers it"}
    if not _may_run(client, owner, repo, pull, reason, sender):
        return _ask_for_approval(client, owner, repo, head_sha, pull.author_login)
    files = [
        f
        for f in client.pull_files(owner, repo, number)
        if f.filename.endswith(".py") and f.status != "removed"
    ]
    sources: dict[str, str] = {}
    targets: list[dict[str, Any]] = []
    for f in files:
        text = client.file_text(owner, repo, f.filename, head_sha)
        if text is None:
            continue
        sources[f.filename] = text
        try:
            modules = find_modules(text, f.filename)
        except DiscoveryError:
            continue  # a syntax error in the pull request is not ours to report
        by_name = {m.name: m for m in modules}
        for name in classes_touching(modules, added_lines(f.patch)):
            m = by_name[name]
            targets.append({"path": f.filename, "class_name": name, "start": m.lineno, "end": m.end_lineno})
    if not targets:
        return {"skipped": "no nn.Module class changed"}

    s = _settings()
    engine = {
        "generators": s.generators,
        "samples": s.samples,
        "min_speedup": s.min_speedup,
        "timeout_s": s.candidate_timeout_s,
    }
    # Idempotency: one key per (repository, PR, head sha, engine settings), kept as the check run's
    # external id. A completed run for the key is not redone unless someone asked for a re-run; a
    # redelivered plan (its worker died) carries on with the run it opened.
    key = f"{owner}/{repo}#{number}@{head_sha}:{settings_hash(engine)}"
    existing = [r for r in client.check_runs(owner, repo, head_sha, CHECK_NAME) if r.external_id == key]
    rerun = reason.startswith("check_run.")
    if any(r.status == "completed" for r in existing) and not rerun:
        return {"skipped": f"{key} is done already"}
    if existing and not rerun:
        check_run_id = existing[0].id
    else:
        title = f"Checking {len(targets)} module(s)"
        output = {"title": title, "summary": "Generating, verifying and timing kernels."}
        check_run_id = client.create_check_run(
            owner, repo, head_sha, CHECK_NAME, "in_progress", output=output, external_id=key
        )
    try:
        # The whole repository's Python at the head, so the module's imports of unchanged files resolve.
        repo_files = client.python_files(owner, repo, head_sha, BUNDLE_TEXT_BYTES)
        bundle = pack({**repo_files, **sources})
        modules_config = _repo_modules_config(client, owner, repo, pull.base_sha)
    except (BundleError, yaml.YAMLError) as exc:
        client.update_check_run(
            owner,
            repo,
            check_run_id,
            conclusion="failure",
            output={"title": "Kernelize could not start", "summary": str(exc)[:60000]},
        )
        return {"failed": str(exc)}
    header = [
        app.signature(
            KERNELIZE_TASK,
            kwargs={
                "request": {
                    **engine,
                    "bundle": bundle,
                    "rel_path": t["path"],
                    "class_name": t["class_name"],
                    "modules": modules_config,
                }
            },
            queue=GPU_QUEUE,
        )
        for t in targets
    ]
    context = {
        "installation_id": installation_id,
        "owner": owner,
        "repo": repo,
        "number": number,
        "head_sha": head_sha,
        "check_run_id": check_run_id,
        "targets": targets,
        "patches": {f.filename: f.patch or "" for f in files},
        "key": key,
    }
    chord(header)(app.signature(PUBLISH_TASK, kwargs={"context": context}))
    log.info("planned %d module(s) for %s/%s#%d at %s", len(targets), owner, repo, number, head_sha[:7])
    return {"modules": len(targets), "check_run_id": check_run_id}


def publish_pull_request(results: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
    owner, repo, number, head_sha = context["owner"], context["repo"], context["number"], context["head_sha"]
    client = _client(context["installation_id"])
    reports = [module_from_dict(r["module"]) for r in results]
    device = DeviceInfo(**results[0]["device"]) if results else DeviceInfo("cpu", "unknown", "", "")
    run = RunReport(device=device, modules=reports, min_speedup=_settings().min_speedup)
    spans: dict[str, dict[str, tuple[int, int]]] = {}
    for t in context["targets"]:
        spans.setdefault(t["path"], {})[t["class_name"]] = (t["start"], t["end"])
    winners = {(m.target, m.best): m.best_source for m in reports if m.best and m.best_source}
    plan = publish.plan_review(
        reports, spans, context["patches"], winners, head_sha, device=device, min_speedup=run.min_speedup
    )
    review_id = None
    marker = f"<!-- kernelize:review key={context['key']} -->"
    posted = any(marker in body for body in client.review_bodies(owner, repo, number))
    if plan.comments and not posted:  # a redelivered publish never posts the same review twice
        body = f"{plan.body}\n{marker}"
        review_id = client.create_review(owner, repo, number, head_sha, body, plan.comments)
    summary = publish.summary_comment(run, reports, head_sha, plan)
    comment_id = client.upsert_comment(owner, repo, number, publish.SUMMARY_MARKER, summary)
    out = publish.check_run_output(run, reports, plan)
    client.update_check_run(
        owner, repo, context["check_run_id"], conclusion=out.conclusion, output=out.as_output()
    )
    return {"review_id": review_id, "summary_comment_id": comment_id, "conclusion": out.conclusion}


def register(app: Any) -> None:
    """Register the GitHub-side tasks on a Celery app."""

    @app.task(name=PLAN_TASK, bind=True, acks_late=True)  # type: ignore[untyped-decorator]
    def _plan(self: Any, **kwargs: Any) -> dict[str, Any]:
        return plan_pull_request(self.app, **kwargs)

    @app.task(name=PUBLISH_TASK, acks_late=True)  # type: ignore[untyped-decorator]
    def _publish(results: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
        return publish_pull_request(results, context)
