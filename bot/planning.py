"""Which classes a change touches, and the review its reports make: pure decisions, no I/O.

The App (``bot/flows/plan.py``: files and texts from GitHub) and ``kernelize review``
(``bot/local_review.py``: files and texts from a local git repository) both hand
in the changed files and a way to read a file at the head, and get the same
targets; both turn the engine's reports into the same review.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from bot import commands, publish, tracking
from bot.repo_config import RepoConfig
from runners.discover import DiscoveryError, added_lines, classes_touching, find_modules
from runners.results import DeviceInfo, ModuleReport

# The head's Python that the engine gets, per change: the App's bundle compresses it ~4x under its cap.
BUNDLE_TEXT_BYTES = 16 * 2**20


class ChangedFile(Protocol):
    """One file of a change, as GitHub's pull-request files list describes it."""

    @property
    def filename(self) -> str: ...

    @property
    def status(self) -> str: ...  # added, modified, removed, renamed, ...

    @property
    def patch(self) -> str | None: ...  # the file's hunks; None when there is no text diff


def changed_targets(
    files: Sequence[ChangedFile],
    read: Callable[[str], str | None],
    config: RepoConfig,
    wanted: Sequence[dict[str, Any]] = (),
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    """The changed modules to run, the changed sources, and the patches by path.

    A module is a target when the change adds or changes one of its lines, its file is a Python
    file the config selects (``paths``), and, when ``wanted`` names targets (a command's), it is
    one of them. ``read(path)`` is the file's text at the head, None when it cannot be read.
    """
    chosen = [commands.Target(t["path"], t.get("class_name")) for t in wanted]
    selected = [
        f
        for f in files
        if f.filename.endswith(".py") and f.status != "removed" and config.selects(f.filename)
    ]
    sources: dict[str, str] = {}
    targets: list[dict[str, Any]] = []
    for f in selected:
        text = read(f.filename)
        if text is None:
            continue
        sources[f.filename] = text
        try:
            modules = find_modules(text, f.filename)
        except DiscoveryError:
            continue  # a syntax error in the change is not ours to report
        by_name = {m.name: m for m in modules}
        for name in classes_touching(modules, added_lines(f.patch)):
            if chosen and not any(t.matches(f.filename, name) for t in chosen):
                continue
            m = by_name[name]
            original = "\n".join(text.splitlines()[m.lineno - 1 : m.end_lineno])
            targets.append(
                {
                    "path": f.filename,
                    "class_name": name,
                    "start": m.lineno,
                    "end": m.end_lineno,
                    "original_sha256": tracking.fingerprint(original),
                }
            )
    return targets, sources, {f.filename: f.patch or "" for f in selected}


def over_limit(targets: Sequence[str], limit: int) -> list[ModuleReport]:
    """Reports for the targets past the repository's ``max_modules``: listed, not run."""
    out = []
    for target in targets:
        path, _, cls = target.rpartition("::")
        report = ModuleReport(target=target, file=path, class_name=cls)
        report.status = "skipped"
        report.reason = f"over the repository's limit of {limit} module(s) per pull request (`max_modules`)"
        out.append(report)
    return out


def review(
    reports: Sequence[ModuleReport],
    targets: Sequence[Mapping[str, Any]],
    patches: Mapping[str, str | None],
    head_sha: str,
    *,
    device: DeviceInfo,
    min_speedup: float,
    summary_only: bool,
    min_speedup_vs_compile: float | None = None,
) -> tuple[publish.ReviewPlan, dict[tuple[str, str], str]]:
    """The review of ``reports`` (one suggestion per winner that fits the diff), and the winners'
    code by (target, candidate id)."""
    spans: dict[str, dict[str, tuple[int, int]]] = {}
    for t in targets:
        spans.setdefault(t["path"], {})[t["class_name"]] = (t["start"], t["end"])
    winners = {(m.target, m.best): m.best_source for m in reports if m.best and m.best_source}
    plan = publish.plan_review(
        reports,
        spans,
        patches,
        winners,
        head_sha,
        device=device,
        min_speedup=min_speedup,
        summary_only=summary_only,
        min_speedup_vs_compile=min_speedup_vs_compile,
    )
    return plan, winners
