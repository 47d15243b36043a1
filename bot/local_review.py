"""``kernelize review BASE..HEAD``: what the App would post on a pull request, from a local repository.

The change between two commits of a local git repository goes through the App's own steps: its
targets are planned as a pull request's are (``bot/planning.py``: the changed files, the
repository config's paths, the classes the hunks touch), the engine runs each file's classes as the
GPU task does (``runners.tasks.kernelize_classes``, on the head commit's Python), and the reports
are rendered by ``bot/publish.py`` into the review, the summary comment and the check run.

Git is run as a subprocess, reading commits only: the working tree is never touched and may be
dirty (or absent, in a bare repository). The diff is the pull request's: from the merge base of
BASE and HEAD to HEAD. The config is ``.github/kernelize.yml`` at HEAD (the App reads it from the
default branch, which a local change need not have).
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bot import planning, publish
from bot.github import PullFile
from bot.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, load_repo_config
from runners.apply import ClassEdit, applied_all
from runners.results import ModuleReport, RunReport

REVIEW_FILE, SUMMARY_FILE, CHECK_FILE, DIFF_FILE, FILES_DIR = (
    "review.md",
    "summary.md",
    "check-run.md",
    "applied.diff",
    "files",
)
# The first line of every review.md written here: a later review into the same folder knows that
# folder's files/ is its own to replace.
REVIEW_STAMP = "<!-- kernelize review: what the App would post on a pull request -->"
_STATUS = {"A": "added", "M": "modified", "D": "removed", "R": "renamed", "C": "copied", "T": "changed"}


class ReviewError(Exception):
    """Bad input (not a repository, an unknown revision, nothing to review); the message says what."""


@dataclass(frozen=True)
class Change:
    """The pull request a local range stands for: HEAD into BASE, diffed from their merge base."""

    git_dir: Path
    rev_range: str
    base: str  # full commit hashes
    head: str
    merge_base: str
    files: list[PullFile]

    def read(self, path: str) -> str | None:
        """``path`` at HEAD as text (bad UTF-8 replaced, as the App reads it); None if not a file."""
        data = _blob(self.git_dir, self.head, path)
        return None if data is None else data.decode("utf-8", errors="replace")


@dataclass
class Plan:
    """What to run: the targets (``bot/planning.py``'s records), those over ``max_modules``, and
    the changed sources and patches by path."""

    targets: list[dict[str, Any]]
    over: list[str]
    sources: dict[str, str]
    patches: dict[str, str]


@dataclass
class Rendered:
    """Everything written: the review, the summary comment, the check run, the applied files."""

    review: str
    summary: str
    check_run: str
    diff: str
    files: dict[str, str] = field(default_factory=dict)  # path -> the file with its suggestions applied
    comments: int = 0
    summary_only: int = 0


# ---------------------------------------------------------------------------
# Git


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` on the repository, output as bytes. Paths are literal, never patterns."""
    command = ["git", "--git-dir", str(git_dir), "--literal-pathspecs", "-c", "core.quotePath=false", *args]
    try:
        return subprocess.run(command, capture_output=True, check=False)
    except FileNotFoundError:
        raise ReviewError("git is not installed (kernelize review reads the repository with it)") from None


def _first_line(data: bytes) -> str:
    lines = data.decode("utf-8", errors="replace").strip().splitlines()
    return lines[0] if lines else "no message"


def _git_dir(repo: Path) -> Path:
    if not repo.is_dir():
        raise ReviewError(f"{repo}: no such folder (--repo names a git repository)")
    try:
        found = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--absolute-git-dir"], capture_output=True, check=False
        )
    except FileNotFoundError:
        raise ReviewError("git is not installed (kernelize review reads the repository with it)") from None
    if found.returncode != 0:
        why = _first_line(found.stderr)
        if "not a git repository" in why:
            why = "not a git repository"
        raise ReviewError(f"{repo}: {why} (run it in a repository's folder, or give --repo PATH)")
    return Path(found.stdout.decode().strip())


def parse_range(rev_range: str) -> tuple[str, str]:
    """``BASE..HEAD`` (or ``BASE...HEAD``: the same here, diffed from the merge base as a pull request
    is) as (base, head); a side left out is ``HEAD``, as in git."""
    sep = "..." if "..." in rev_range else ".."
    base, found, head = rev_range.partition(sep)
    if not found or (not base and not head):
        raise ReviewError(f"{rev_range!r} is not a range: give BASE..HEAD, e.g. main..HEAD or HEAD~1..HEAD")
    for rev in (base, head):
        if rev.startswith("-") or any(c.isspace() for c in rev):
            raise ReviewError(f"{rev!r} in {rev_range!r} is not a revision")
    return base or "HEAD", head or "HEAD"


def _commit(git_dir: Path, rev: str, rev_range: str) -> str:
    found = _git(git_dir, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise ReviewError(f"{rev!r} (in {rev_range}) is not a commit of this repository")
    return found.stdout.decode().strip()


def _blob(git_dir: Path, commit: str, path: str) -> bytes | None:
    shown = _git(git_dir, "cat-file", "blob", f"{commit}:{path}")
    return shown.stdout if shown.returncode == 0 else None


def _hunks(diff: bytes) -> str | None:
    """A file's ``git diff`` as GitHub's ``patch`` field gives it: its hunks alone, or None (no hunk:
    a binary file, a pure rename or a mode change)."""
    lines = diff.decode("utf-8", errors="replace").splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
    return None if first is None else "\n".join(lines[first:])


def _changed_files(git_dir: Path, merge_base: str, head: str) -> list[PullFile]:
    diff = ("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames", "--unified=3")
    listed = _git(git_dir, *diff, "--name-status", "-z", merge_base, head)
    if listed.returncode != 0:
        raise ReviewError(f"git diff failed: {_first_line(listed.stderr)}")
    fields = listed.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    files: list[PullFile] = []
    i = 0
    while i < len(fields) and fields[i]:
        letter = fields[i][0]
        paths = fields[i + 1 : i + 3] if letter in "RC" else fields[i + 1 : i + 2]
        i += 1 + len(paths)
        status = _STATUS.get(letter, "changed")
        patch = None
        if paths[-1].endswith(".py"):  # only Python files are ever read for modules
            one = _git(git_dir, *diff, merge_base, head, "--", *paths)
            patch = _hunks(one.stdout) if one.returncode == 0 else None
        previous = paths[0] if len(paths) == 2 else None
        files.append(PullFile(paths[-1], status, patch, previous))
    return files


def read_change(repo: str | Path, rev_range: str) -> Change:
    """The change ``rev_range`` names in the repository at ``repo``; ReviewError when it cannot be
    read."""
    git_dir = _git_dir(Path(repo))
    base_rev, head_rev = parse_range(rev_range)
    base, head = _commit(git_dir, base_rev, rev_range), _commit(git_dir, head_rev, rev_range)
    found = _git(git_dir, "merge-base", base, head)
    if found.returncode != 0:
        raise ReviewError(f"{base_rev} and {head_rev} share no history (no merge base): nothing to diff")
    merge_base = found.stdout.decode().split()[0]
    return Change(git_dir, rev_range, base, head, merge_base, _changed_files(git_dir, merge_base, head))


def python_tree(change: Change, dest: Path, sources: dict[str, str], limit: int) -> None:
    """Write HEAD's Python files under ``dest`` (as the App packs them: at most ``limit`` characters of
    text, the changed ``sources`` always), so the module's imports of unchanged files resolve."""
    listed = _git(change.git_dir, "ls-tree", "-r", "-z", "--full-tree", "-l", change.head)
    if listed.returncode != 0:
        raise ReviewError(f"git ls-tree failed: {_first_line(listed.stderr)}")
    files: dict[str, str] = {}
    total = 0
    for entry in sorted(listed.stdout.decode("utf-8", errors="surrogateescape").split("\0")):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) != 4 or parts[0] not in ("100644", "100755") or not path.endswith(".py"):
            continue
        if path in sources or total + int(parts[3]) > limit:
            continue
        text = change.read(path)
        if text is not None:
            total += len(text)
            files[path] = text
    for path, text in {**files, **sources}.items():
        target = dest / _safe(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _safe(path: str) -> str:
    """A repository path that stays inside the folder it is written under."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ReviewError(f"unsafe path in the repository: {path!r}")
    return pure.as_posix()


# ---------------------------------------------------------------------------
# The App's decisions, on the local change


def load_config(change: Change) -> RepoConfig:
    """The repository config at HEAD, validated as the App validates it; a config that turns
    Kernelize off is an error here (nothing would run)."""
    try:
        config = load_repo_config(change.read(CONFIG_PATH))
    except RepoConfigError as exc:
        raise ReviewError(f"{exc} (the file at {change.head[:7]}; see docs/config.md)") from None
    if not config.enabled:
        raise ReviewError(f"Kernelize is disabled for this repository (`enabled: false` in {CONFIG_PATH})")
    return config


def plan(change: Change, config: RepoConfig) -> Plan:
    """The classes to run, as the App plans a pull request; ReviewError when there are none."""
    found, sources, patches = planning.changed_targets(change.files, change.read, config)
    if not found:
        python = [f.filename for f in change.files if f.filename.endswith(".py") and f.status != "removed"]
        if not change.files:
            why = "changes no file"
        elif not python:
            why = "changes no Python file"
        elif not any(config.selects(p) for p in python):
            shown = ", ".join(python[:3]) + (", ..." if len(python) > 3 else "")
            why = f"changes no Python file that {CONFIG_PATH}'s paths select ({shown})"
        else:
            why = "adds or changes no line of an nn.Module class"
        raise ReviewError(f"{change.rev_range} {why}: nothing to review")
    over = [f"{t['path']}::{t['class_name']}" for t in found[config.max_modules :]]
    return Plan(found[: config.max_modules], over, sources, patches)


def kernelize(
    change: Change,
    planned: Plan,
    config: RepoConfig,
    run_file: Callable[[Path, str, list[str]], list[ModuleReport]],
    report: RunReport,
) -> RunReport:
    """Run the planned classes, a file at a time (``run_file(root, path, class_names)``, on the head's
    Python under ``root``), into ``report``; the classes over the limit are listed as skipped."""
    by_file: dict[str, list[str]] = {}
    for t in planned.targets:
        by_file.setdefault(t["path"], []).append(t["class_name"])
    with tempfile.TemporaryDirectory(prefix="kernelize-review-") as tmp:
        root = Path(tmp)
        python_tree(change, root, planned.sources, planning.BUNDLE_TEXT_BYTES)
        for path, names in by_file.items():
            report.modules += run_file(root, path, names)
    report.modules += planning.over_limit(planned.over, config.max_modules)
    return report


# ---------------------------------------------------------------------------
# What would be posted


def render(change: Change, planned: Plan, config: RepoConfig, run: RunReport) -> Rendered:
    """The review, summary comment and check run the App would post for ``run``, and the files as
    they are once every suggestion of the review is applied."""
    reports = run.modules
    review_plan, winners = planning.review(
        reports,
        planned.targets,
        planned.patches,
        change.head,
        device=run.device,
        min_speedup=run.min_speedup,
        summary_only=config.comment.mode == "summary-only",
        min_speedup_vs_compile=run.min_speedup_vs_compile,
    )
    summary = publish.summary_comment(run, reports, change.head, review_plan)
    check = publish.check_run_output(run, reports, review_plan)
    by_path: dict[str, list[ClassEdit]] = {}
    for s in review_plan.suggestions:
        code = winners[(s.target, s.candidate_id)]
        name = s.target.rpartition("::")[2]
        by_path.setdefault(s.path, []).append(ClassEdit(name, s.start_line, s.end_line, code))
    files = {path: applied_all(planned.sources[path], found) for path, found in by_path.items()}
    return Rendered(
        review=_review_markdown(change, review_plan),
        summary=summary,
        check_run=_check_markdown(check),
        diff="".join(unified_diff(path, planned.sources[path], text) for path, text in files.items()),
        files=files,
        comments=len(review_plan.comments),
        summary_only=len(review_plan.summary_only),
    )


def _review_markdown(change: Change, review_plan: publish.ReviewPlan) -> str:
    head = (
        f"{REVIEW_STAMP}\n"
        f"# Kernelize review of {change.rev_range}\n\n"
        f"The review a pull request from `{change.head[:12]}` into `{change.base[:12]}` would get "
        f"(diffed from their merge base `{change.merge_base[:12]}`): one review on commit "
        f"`{change.head}` (event COMMENT), its body, then each line comment with its anchor on the "
        "new (RIGHT) side of the diff. Bodies are exactly as posted.\n"
    )
    if not review_plan.comments:
        return (
            f"{head}\nNo review would be posted: no suggestion can be anchored on this diff "
            f"({len(review_plan.summary_only)} shown in the summary comment instead; see summary.md).\n"
        )
    parts = [head, "## Review body\n", review_plan.body]
    n = len(review_plan.comments)
    for i, c in enumerate(review_plan.comments, 1):
        start = c.start_line if c.start_line is not None else c.line
        anchor = f"path `{c.path}`, start_line {start}, line {c.line}, side RIGHT"
        parts += [
            f"## Comment {i} of {n}: `{c.path}` lines {start}–{c.line}\n",
            f"Anchor: {anchor}\n",
            c.body,
        ]
    return "\n".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _check_markdown(check: publish.CheckOutput) -> str:
    return (
        f"# Check run `Kernelize`: {check.conclusion}\n\n"
        f"## Title\n\n{check.title}\n\n## Summary\n\n{check.summary.rstrip()}\n\n"
        f"## Text\n\n{check.text.rstrip()}\n"
    )


def unified_diff(path: str, before: str, after: str) -> str:
    """``git apply``'s unified diff of one file, ``\\ No newline at end of file`` included."""
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in difflib.unified_diff(
        _lines(before),
        _lines(after),
        f"a/{path}",
        f"b/{path}",
        n=3,
    ):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out) if len(out) > 1 else ""


def _lines(text: str) -> list[str]:
    """``text``'s lines as git counts them: split at ``\n`` only (``str.splitlines`` also splits at
    form feeds and other separators that Python files may hold inside a line)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def write(out: Path, rendered: Rendered) -> list[tuple[Path, str]]:
    """Write ``rendered`` under ``out``; each path written, with what it holds."""
    out.mkdir(parents=True, exist_ok=True)
    files_dir = out / FILES_DIR
    earlier = out / REVIEW_FILE
    if (
        files_dir.is_dir()
        and earlier.is_file()
        and earlier.read_text(errors="replace").startswith(REVIEW_STAMP)
    ):
        shutil.rmtree(files_dir)  # an earlier review's files: stale now
    s = "" if rendered.comments == 1 else "s"
    written = [
        (out / REVIEW_FILE, rendered.review, f"the review, {rendered.comments} suggestion comment{s}"),
        (out / SUMMARY_FILE, rendered.summary, "the summary comment"),
        (out / CHECK_FILE, rendered.check_run, "the check run"),
        (out / DIFF_FILE, rendered.diff, "every suggestion applied, as a diff to the head"),
    ]
    for rel, text in rendered.files.items():
        written.append((files_dir / _safe(rel), text, "the file with its suggestions applied"))
    for path, text, _ in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return [(path, what) for path, _, what in written]
