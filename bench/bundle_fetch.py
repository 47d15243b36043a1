"""The planner's bundle read: the REST API (one request per file) against one shallow git fetch.

    .venv/bin/python bench/bundle_fetch.py [--large-files 3000] [--runs 3]

Builds two repositories in a temporary directory and commits them: "small" (5 files, 4 of them
Python) and "large" (--large-files ``.py`` files of 0.3-12 KB, plus a tenth as many Markdown
pages and 20 binary files, like a big model library). Each is served twice from this machine: by
the fake GitHub of tests/fake_github (the REST API, every request checked against GitHub's
OpenAPI description) and by git's smart HTTP (``git http-backend`` behind an HTTP server that
demands the installation token, from tests/bot/test_repo_fetch.py) out of a packed repository
(``git repack -ad``, as a server keeps its objects). Both paths are read through
``InstallationClient.python_files`` with the planner's budget (``BUNDLE_TEXT_BYTES``), the old one
with ``git_url=""``, the new one with ``git_url`` pointing at the git server; the installation
token is fetched before timing. The two answers must be equal. Prints a markdown table: requests
(REST and git HTTP) and seconds, the median of --runs, and the old path's time with PyGithub's
production pacing added (0.25 s between requests: ``seconds_between_writes=1.0`` / 4), which the
local measurement leaves out.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.github import GitHubApp  # noqa: E402
from bot.planning import BUNDLE_TEXT_BYTES  # noqa: E402
from tests.bot.test_repo_fetch import GitHTTPServer, commit, new_repo  # noqa: E402
from tests.fake_github import FakeGitHub  # noqa: E402

OWNER = "octo"
INSTALLATION = 5
PRODUCTION_PACING_S = 0.25  # PyGithub's seconds_between_requests with the bot's default settings


_VOCABULARY = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=3 + i % 7)) for i in range(2000)
]


def python_text(rng: random.Random, size: int) -> bytes:
    """Plausible Python of about ``size`` bytes that compresses a little worse than real model code
    (zlib: ~3.7x here, ~5.7x for torch/nn/modules), so git's compressed transfer is not flattered."""
    parts = ["import torch\nfrom torch import nn\n\n"]
    n = 0
    while sum(map(len, parts)) < size:
        n += 1
        name = "_".join(rng.choices(_VOCABULARY, k=2))
        doc = " ".join(rng.choices(_VOCABULARY, k=rng.randint(8, 30)))
        attr, factor = rng.choice(_VOCABULARY), rng.randint(1, 8)
        parts.append(
            f"class {name.title().replace('_', '')}{n}(nn.Module):\n"
            f'    """{doc}."""\n\n'
            f"    def __init__(self, {name}_dim: int = {rng.randint(16, 4096)}) -> None:\n"
            f"        super().__init__()\n"
            f"        self.{attr} = nn.Linear({name}_dim, {name}_dim * {factor})\n\n"
            f"    def forward(self, {rng.choice(_VOCABULARY)}: torch.Tensor) -> torch.Tensor:\n"
            f"        return self.{attr}({rng.choice(_VOCABULARY)}) * {rng.random():.6f}\n\n\n"
        )
    return "".join(parts)[:size].encode()


def small_repo() -> dict[str, bytes]:
    rng = random.Random(1)
    return {
        "setup.py": b"from setuptools import setup\nsetup()\n",
        "pkg/__init__.py": b"",
        "pkg/model.py": python_text(rng, 3000),
        "pkg/layers.py": python_text(rng, 1500),
        "README.md": b"# pkg\n",
    }


def large_repo(n: int) -> dict[str, bytes]:
    rng = random.Random(2)
    files: dict[str, bytes] = {}
    for i in range(n):
        files[f"src/lib/models/m{i // 10:03d}/part_{i:05d}.py"] = python_text(rng, rng.randint(300, 12_000))
    for i in range(n // 10):
        words = " ".join(rng.choice(["model", "layer", "tensor", "the", "of", "kernel"]) for _ in range(800))
        files[f"docs/source/page_{i:04d}.md"] = words.encode()
    for i in range(20):
        files[f"docs/images/figure_{i:02d}.png"] = rng.randbytes(50_000)
    return files


@dataclass
class Measure:
    api_requests: int
    git_requests: int
    git_bytes: int
    seconds: float
    files: int
    text_bytes: int


def measure(
    app: GitHubApp, fake: FakeGitHub, server: GitHTTPServer, repo: str, sha: str
) -> tuple[Measure, dict]:
    api_before, git_before = len(fake.requests), len(server.requests)
    with app.installation(INSTALLATION) as client:
        start = time.perf_counter()
        got = client.python_files(OWNER, repo, sha, BUNDLE_TEXT_BYTES, pull_number=1)
        seconds = time.perf_counter() - start
    served = server.requests[git_before:]
    result = Measure(
        api_requests=len(fake.requests) - api_before,
        git_requests=len(served),
        git_bytes=sum(r.response_bytes for r in served),
        seconds=seconds,
        files=len(got),
        text_bytes=sum(len(t) for t in got.values()),
    )
    return result, got


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--large-files", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    repos = {"small": small_repo(), "large": large_repo(args.large_files)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp, FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.set_rate_limit(10**7)
        served_root = Path(tmp) / "srv"
        shas = {}
        for name, files in repos.items():
            served = new_repo(served_root / OWNER / f"{name}.git")
            sha = commit(served, files, "bench")
            # A server keeps its objects packed (GitHub: packs with bitmaps); loose objects would make
            # this server compress every blob for every fetch and time that instead.
            subprocess.run(["git", "-C", str(served), "repack", "-adq"], check=True)
            shas[name] = sha
            fake.add_repo(OWNER, name)
            for path, data in files.items():
                fake.set_file(OWNER, name, sha, path, data)
        fake.add_installation(INSTALLATION, OWNER, list(repos))
        with GitHTTPServer(served_root, "unset") as server:
            for name in repos:
                results: dict[str, list[Measure]] = {"REST API (old)": [], "git fetch (new)": []}
                answers = []
                for _ in range(args.runs):
                    for label, git_url in (("REST API (old)", ""), ("git fetch (new)", server.url)):
                        app = GitHubApp(
                            creds.app_id,
                            creds.private_pem,
                            base_url=fake.base_url,
                            seconds_between_writes=0,
                            git_url=git_url,
                        )
                        server.token = app._token(INSTALLATION)  # fetched before timing, on both paths
                        m, got = measure(app, fake, server, name, shas[name])
                        results[label].append(m)
                        answers.append(got)
                if any(a != answers[0] for a in answers):
                    raise SystemExit(f"{name}: the two paths read different files")
                py = [d for p, d in repos[name].items() if p.endswith(".py")]
                for label, ms in results.items():
                    rows.append((name, len(py), sum(map(len, py)), label, ms))

    version = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    print(f"Python {platform.python_version()}, {version}, {args.runs} runs each (median)\n")
    print(
        "| repository | .py files (bytes) | path | REST requests | git HTTP requests (bytes received) "
        "| seconds | seconds at production pacing | files read |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, n, size, label, ms in rows:
        seconds = statistics.median(m.seconds for m in ms)
        m = ms[0]
        paced = seconds + m.api_requests * PRODUCTION_PACING_S
        git = f"{m.git_requests} ({m.git_bytes / 2**20:.2f} MiB)" if m.git_requests else "0"
        print(
            f"| {name} | {n} ({size / 2**20:.2f} MiB) | {label} | {m.api_requests} | {git} "
            f"| {seconds:.2f} | {paced:.1f} | {m.files} |"
        )


if __name__ == "__main__":
    main()
