"""Candidates from a folder: ``DIR/<Class>/*.py`` when that folder exists, else ``DIR/*.py``."""

from __future__ import annotations

from pathlib import Path

from runners.generators.base import Candidate, GeneratorError, Problem


class FilesGenerator:
    name = "files"
    samples = False

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise GeneratorError(f"--candidates {directory}: no such directory")

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        per_class = self.directory / problem.class_name
        folder = per_class if per_class.is_dir() else self.directory
        out = []
        for path in sorted(folder.glob("*.py")):
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                out.append(Candidate(path.name, self.name, "", {"path": str(path)}, f"cannot read: {exc}"))
                continue
            out.append(Candidate(path.name, self.name, source, {"path": str(path)}))
        return out
