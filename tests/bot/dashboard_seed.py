"""Suggestions for the dashboard tests: a public and a private repository, with known outcomes."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from bot import tracking
from bot.models import Installation

PUBLIC, PRIVATE = "octo/public-models", "octo/secret-models"


def _row(
    repository: str, private: bool, number: int, target: str, generator: str, speedup: float
) -> dict[str, Any]:
    path, _, cls = target.partition("::")
    return {
        "installation_id": 4242,
        "repository": repository,
        "private": private,
        "pull_number": number,
        "head_sha": f"{number:040x}",
        "path": path,
        "start_line": 1,
        "end_line": 9,
        "class_name": cls,
        "target": target,
        "generator": generator,
        "candidate_id": "c1",
        "code": f"class {cls}: pass\n",
        "code_sha256": "0" * 64,
        "original_sha256": "1" * 64,
        "max_abs_error": 1e-6,
        "eager_ms": 1.0,
        "compile_ms": 0.5,
        "kernel_ms": 1.0 / speedup,
        "speedup_eager": speedup,
        "speedup_compile": speedup / 2,
        "gpu": "NVIDIA H200",
        "review_id": 1,
        "comment_id": number * 10,
        "comment_url": f"https://github.com/{repository}/pull/{number}#discussion_r{number * 10}",
    }


def seed(session: Session) -> None:
    """Public: 3 posted, 2 merged (4x and 2.25x: geomean 3x), 1 dismissed. Private: 1 merged (3x)."""
    session.add(Installation(id=4242, account="octo", repositories=[PUBLIC, PRIVATE]))
    a, b, c = tracking.record_posted(
        session,
        [
            _row(PUBLIC, False, 1, "m/a.py::Norm", "kernelllm", 4.0),
            _row(PUBLIC, False, 2, "m/b.py::Act", "template", 2.25),
            _row(PUBLIC, False, 3, "m/c.py::Mlp", "kernelllm", 1.5),
        ],
    )
    for s in (a, b):
        tracking.move(s, "applied", sha="f" * 40, actor="maint")
        tracking.move(s, "merged", actor="maint")
    tracking.move(c, "dismissed", actor="maint")
    [p] = tracking.record_posted(session, [_row(PRIVATE, True, 7, "secret/x.py::Hidden", "kernelllm", 3.0)])
    tracking.move(p, "applied", sha="e" * 40, actor="maint")
    tracking.move(p, "merged", actor="maint")
