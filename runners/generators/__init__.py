"""Generators behind one protocol: ``generate(problem, n) -> list[Candidate]``."""

from __future__ import annotations

from typing import Any

from runners.generators.base import Candidate, Generator, GeneratorError, Problem

AVAILABLE = ("files",)


def make_generator(name: str, options: dict[str, Any]) -> Generator:
    """A generator by name; raises GeneratorError with what is missing."""
    if name == "files":
        from runners.generators.files import FilesGenerator

        directory = options.get("candidates")
        if not directory:
            raise GeneratorError("the files generator needs --candidates DIR")
        return FilesGenerator(directory)
    raise GeneratorError(f"unknown generator {name!r} (available: {', '.join(AVAILABLE)})")


__all__ = ["AVAILABLE", "Candidate", "Generator", "GeneratorError", "Problem", "make_generator"]
