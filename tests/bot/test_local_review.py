"""``kernelize review BASE..HEAD`` and ``kernelize run --show-code / --write-suggestions``, end to end.

Real git repositories (the example one built by examples/make_example_repo.sh, and small ones built
here), the real CLI as a subprocess, the real engine on CPU (Triton's interpreter, template
generator). Each engine run happens once, in a module-scoped fixture (~10-15 s each); the bad
inputs fail before the engine starts (~1 s each).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.publish import SUMMARY_MARKER, parse_suggestion_marker
from runners.apply import applied
from runners.discover import added_lines, find_modules

ROOT = Path(__file__).resolve().parents[2]
Cli = Callable[..., tuple[int, str, str]]
IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def one_line_error(rc: int, stdout: str, stderr: str, *fragments: str) -> str:
    assert rc == 2, (stdout, stderr)
    assert "Traceback" not in stderr + stdout
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kernelize: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def section(markdown: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    start = markdown.index(f"## {heading}")
    rest = markdown[start + len(heading) + 3 :]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


# ---------------------------------------------------------------------------
# The example repository, reviewed once


def readme_first_command() -> str:
    """The README's first command, after its install step (which the tests' own install did)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if "python3 -m venv" in ln and "kernelize review" in ln)
    return line.split("-e '.[dev]' && ", 1)[1]


class Review:
    def __init__(self, rc: int, stdout: str, stderr: str, out: Path) -> None:
        self.rc, self.stdout, self.stderr, self.out = rc, stdout, stderr, out

    def text(self, name: str) -> str:
        return (self.out / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The README's first command as a new user runs it, from a folder holding the project's
    ``examples/`` and ``.venv/bin/kernelize`` (this environment's); no options added: the example's
    .github/kernelize.yml asks for the template generator, and without a GPU it runs on CPU."""
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "examples").symlink_to(ROOT / "examples")
    (cwd / ".venv" / "bin").mkdir(parents=True)
    (cwd / ".venv" / "bin" / "kernelize").symlink_to(Path(sys.executable).parent / "kernelize")
    done = subprocess.run(
        ["bash", "-c", readme_first_command()],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return cwd, done


@pytest.fixture(scope="module")
def example(readme_run: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    cwd, done = readme_run
    assert "kernelize-example: main..add-rmsnorm adds" in done.stdout, done.stderr
    return cwd / "kernelize-example"


@pytest.fixture(scope="module")
def review(readme_run: tuple[Path, subprocess.CompletedProcess[str]]) -> Review:
    cwd, done = readme_run
    lines = done.stdout.splitlines()
    # The example script's one line, then the review's.
    return Review(done.returncode, "\n".join(lines[1:]) + "\n", done.stderr, cwd / "kernelize-review")


def test_review_writes_one_line_per_file(review: Review) -> None:
    assert review.rc == 0, review.stderr
    assert "Traceback" not in review.stderr
    lines = review.stdout.splitlines()
    found = [re.fullmatch(r"kernelize: wrote (.+?): [a-z ,0-9]+", line) for line in lines]
    assert all(found), lines
    # Paths as printed: relative to where the command ran (the README's folder).
    written = [review.out.parent / m.group(1) for m in found if m]
    names = [p.relative_to(review.out).as_posix() for p in written]
    assert names == ["review.md", "summary.md", "check-run.md", "applied.diff", "files/model.py"]
    assert all(p.is_file() for p in written)
    assert sorted(
        p.relative_to(review.out).as_posix() for p in review.out.rglob("*") if p.is_file()
    ) == sorted(names)


def _rmsnorm_lines(repo: Path) -> tuple[int, int]:
    head = git(repo, "show", "add-rmsnorm:model.py")
    (module,) = [m for m in find_modules(head, "model.py") if m.name == "RMSNorm"]
    return module.lineno, module.end_lineno


def test_review_has_a_suggestion_anchored_on_the_added_class(review: Review, example: Path) -> None:
    text = review.text("review.md")
    first, last = _rmsnorm_lines(example)
    added = set(added_lines(git(example, "diff", "main...add-rmsnorm", "--", "model.py")))
    assert set(range(first, last + 1)) <= added  # the class is new: every line it spans is added
    head_sha = git(example, "rev-parse", "add-rmsnorm").strip()
    assert f"review on commit `{head_sha}`" in text
    body = section(text, "Review body")
    assert "found 1 verified Triton replacement" in body
    comment = section(text, "Comment 1 of 1")
    assert f"Anchor: path `model.py`, start_line {first}, line {last}, side RIGHT" in comment
    marker = parse_suggestion_marker(comment)
    assert marker is not None and marker[:2] == ("model.py::RMSNorm", head_sha)
    assert comment.count("```suggestion\n") == 1
    assert "FeedForward" not in comment  # the unchanged class is not a target


def test_applying_the_suggestion_block_gives_the_written_file(review: Review, example: Path) -> None:
    comment = section(review.text("review.md"), "Comment 1 of 1")
    fence = re.search(r"^(`{3,})suggestion\n(.*?)\n\1$", comment, re.S | re.M)
    assert fence is not None
    first, last = _rmsnorm_lines(example)
    head = git(example, "show", "add-rmsnorm:model.py")
    written = review.text("files/model.py")
    assert written == applied(head, first, last, fence.group(2))
    tree = ast.parse(written)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert "FeedForward" in classes and "RMSNorm" in classes


def test_applied_diff_applies_cleanly_to_the_head(review: Review, example: Path, tmp_path: Path) -> None:
    diff = review.out / "applied.diff"
    assert diff.read_text(encoding="utf-8").startswith("diff --git a/model.py b/model.py\n")
    copy = tmp_path / "copy"
    shutil.copytree(example, copy)
    git(copy, "checkout", "-q", "add-rmsnorm")
    git(copy, "apply", "--check", str(diff))
    git(copy, "apply", str(diff))
    assert (copy / "model.py").read_text(encoding="utf-8") == review.text("files/model.py")


def test_summary_comment_is_the_apps(review: Review) -> None:
    summary = review.text("summary.md")
    assert summary.startswith(SUMMARY_MARKER)
    assert "`model.py::RMSNorm`" in summary
    assert "1 suggestion posted as review comments" in summary
    # On CPU nothing is timed: the renderer says so instead of naming the baselines.
    assert "not measured (no GPU)" in summary
    assert "FeedForward" not in summary


def test_check_run_succeeds_with_one_suggestion(review: Review) -> None:
    check = review.text("check-run.md")
    assert check.startswith("# Check run `Kernelize`: success\n")
    assert "1 verified Triton suggestion" in section(check, "Title")
    assert "`model.py::RMSNorm`" in section(check, "Summary")
    assert "template" in section(check, "Text")
    # The example's config at HEAD names the generators: the default portfolio's others (listed as
    # unavailable on a CPU when nothing names them) are not asked.
    assert "kernelllm" not in check and "inductor" not in check


def test_bad_input_leaves_an_earlier_review_as_it_was(
    cli: Cli, example: Path, review: Review, tmp_path: Path
) -> None:
    # No engine run: an unchanged range fails before it, and the folder is left as it was.
    rc, stdout, stderr = cli(["review", "main..main", "--repo", str(example), "--out", str(review.out)])
    one_line_error(rc, stdout, stderr, "main..main changes no file")
    assert (review.out / "files" / "model.py").is_file()


# ---------------------------------------------------------------------------
# Bad input: exit 2, one line, nothing run


@pytest.fixture
def small_repo(tmp_path: Path) -> Path:
    """main: a model file with one module; the test adds what it needs on top."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_files(
        repo,
        {
            "pkg/model.py": (
                "import torch\nfrom torch import nn\n\n\ndef scale(x):\n    return x * 2\n\n\n"
                "class Double(nn.Module):\n    def forward(self, x):\n        return scale(x)\n"
            )
        },
        "base",
    )
    return repo


def _review(cli: Cli, repo: Path, rev_range: str, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    out = tmp_path / "out"
    rc, stdout, stderr = cli(
        ["review", rev_range, "--repo", str(repo), "--out", str(out), *extra],
        env={"GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )
    assert not out.exists()  # nothing is written for bad input
    return rc, stdout, stderr


def test_not_a_repository(cli: Cli, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    one_line_error(*_review(cli, plain, "main..HEAD", tmp_path), "not a git repository")
    one_line_error(*_review(cli, tmp_path / "missing", "main..HEAD", tmp_path), "no such folder")


@pytest.mark.parametrize(
    ("rev_range", "fragment"),
    [
        ("main", "is not a range: give BASE..HEAD"),
        ("main..no-such-branch", "'no-such-branch' (in main..no-such-branch) is not a commit"),
        ("v9..main", "'v9' (in v9..main) is not a commit"),
        ("main..--output=x", "is not a revision"),
    ],
)
def test_bad_range(cli: Cli, small_repo: Path, tmp_path: Path, rev_range: str, fragment: str) -> None:
    one_line_error(*_review(cli, small_repo, rev_range, tmp_path), fragment)


def test_a_range_that_changes_no_module(cli: Cli, small_repo: Path, tmp_path: Path) -> None:
    git(small_repo, "checkout", "-q", "-b", "topic")
    model = (small_repo / "pkg/model.py").read_text().replace("x * 2", "x * 2.0")  # a function, not a class
    commit_files(small_repo, {"pkg/model.py": model, "README.md": "# notes\n"}, "not a module")
    one_line_error(
        *_review(cli, small_repo, "main..topic", tmp_path),
        "main..topic adds or changes no line of an nn.Module class: nothing to review",
    )
    commit_files(small_repo, {"docs/notes.txt": "more\n"}, "no python")
    one_line_error(*_review(cli, small_repo, "topic~1..topic", tmp_path), "changes no Python file")
    one_line_error(*_review(cli, small_repo, "topic..topic", tmp_path), "changes no file")


def _change_the_module(repo: Path, config: str) -> None:
    git(repo, "checkout", "-q", "-b", "topic")
    model = (repo / "pkg/model.py").read_text().replace("return scale(x)", "return scale(x) + 1")
    commit_files(repo, {"pkg/model.py": model, ".github/kernelize.yml": config}, "change Double")


def test_the_config_at_head_selects_the_paths(cli: Cli, small_repo: Path, tmp_path: Path) -> None:
    _change_the_module(small_repo, "paths:\n  exclude: ['pkg/**']\n")
    one_line_error(
        *_review(cli, small_repo, "main..topic", tmp_path),
        "changes no Python file that .github/kernelize.yml's paths select (pkg/model.py)",
    )


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        ("samples: [1\n", (".github/kernelize.yml:2: not valid YAML", "(the file at ")),
        ("samples: 99\n", ("samples", "16")),
        ("enabled: false\n", ("Kernelize is disabled for this repository",)),
    ],
)
def test_a_config_that_cannot_be_used(
    cli: Cli, small_repo: Path, tmp_path: Path, config: str, fragments: tuple[str, ...]
) -> None:
    _change_the_module(small_repo, config)
    one_line_error(*_review(cli, small_repo, "main..topic", tmp_path), *fragments)


# ---------------------------------------------------------------------------
# kernelize run --show-code --write-suggestions


@pytest.fixture(scope="module")
def shown(
    cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, str, str, Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("shown")
    rc, stdout, stderr = cli(
        [
            "run",
            "tests/problems/layers.py::RMSNorm",
            "--generator",
            "template",
            "--device",
            "cpu",
            "--quiet",
            "--show-code",
            "--write-suggestions",
            str(out / "suggested"),
            "--json",
            str(out / "report.json"),
        ]
    )
    report = json.loads((out / "report.json").read_text(encoding="utf-8")) if rc == 0 else {}
    return rc, stdout, stderr, out / "suggested", report


def test_show_code_prints_the_verified_code_after_the_table(shown) -> None:
    rc, stdout, stderr, _, report = shown
    assert rc == 0, stderr
    (module,) = report["modules"]
    source = (ROOT / "tests/problems/layers.py").read_text(encoding="utf-8")
    (rms,) = [m for m in find_modules(source) if m.name == "RMSNorm"]
    header = (
        f"# tests/problems/layers.py::RMSNorm: the suggested code (template:{module['best']}), "
        f"replacing lines {rms.lineno}-{rms.end_lineno} of tests/problems/layers.py\n\n"
    )
    assert stdout.index("tests/problems/layers.py::RMSNorm  ") < stdout.index(header)  # the table first
    code = stdout[stdout.index(header) + len(header) :].split("\nkernelize: wrote ")[0]
    assert code.rstrip("\n") == module["best_source"].rstrip("\n")


def test_write_suggestions_writes_the_file_as_applied(shown) -> None:
    rc, stdout, stderr, folder, report = shown
    assert rc == 0, stderr
    written = folder / "tests/problems/layers.py"
    assert f"kernelize: wrote {written} (RMSNorm suggested)" in stdout.splitlines()
    source = (ROOT / "tests/problems/layers.py").read_text(encoding="utf-8")
    (rms,) = [m for m in find_modules(source) if m.name == "RMSNorm"]
    (module,) = report["modules"]
    assert written.read_text(encoding="utf-8") == applied(
        source, rms.lineno, rms.end_lineno, module["best_source"]
    )
    assert [p for p in folder.rglob("*") if p.is_file()] == [written]


# ---------------------------------------------------------------------------
# The output folder and the diff, without the engine


def test_a_later_review_replaces_an_earlier_reviews_files_only(tmp_path: Path) -> None:
    from bot.local_review import REVIEW_STAMP, Rendered, write

    out = tmp_path / "out"
    write(out, Rendered(f"{REVIEW_STAMP}\n1", "s", "c", "", files={"pkg/model.py": "new\n"}, comments=1))
    assert (out / "files/pkg/model.py").read_text() == "new\n"
    (out / "review.md").write_text("someone else's notes\n")  # not a review written here
    write(out, Rendered(f"{REVIEW_STAMP}\n2", "s", "c", ""))
    assert (out / "files/pkg/model.py").is_file()  # the folder was not provably ours: left alone
    write(out, Rendered(f"{REVIEW_STAMP}\n3", "s", "c", ""))
    assert not (out / "files").exists()  # an earlier review's files, stale now
    assert (out / "review.md").read_text() == f"{REVIEW_STAMP}\n3"


def test_the_diff_applies_to_a_file_without_a_final_newline(tmp_path: Path) -> None:
    from bot.local_review import unified_diff

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    before = "a = 1\n\n\nclass M:\n    pass"
    commit_files(repo, {"m.py": before}, "base")
    after = applied(before, 4, 5, "class M:\n    x = 2\n")
    (tmp_path / "d.diff").write_text(unified_diff("m.py", before, after))
    git(repo, "apply", "--check", str(tmp_path / "d.diff"))
    git(repo, "apply", str(tmp_path / "d.diff"))
    assert (repo / "m.py").read_text() == after
    assert unified_diff("m.py", before, before) == ""


def test_the_diff_counts_lines_as_git_does() -> None:
    from bot.local_review import unified_diff

    before = "x = 1  # a form feed \x0c inside a line\ny = 2\n"
    diff = unified_diff("m.py", before, before.replace("y = 2", "y = 3"))
    assert "@@ -1,2 +1,2 @@" in diff
