"""What every generator takes and returns."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from runners.discover import ModuleClass
from runners.inputs import ModuleEntry


@dataclass
class Problem:
    """One module to kernelize: where it lives and how to build it."""

    file: str  # absolute path of the module's file
    root: str  # the repository (or bundle) root: imports resolve from here
    rel_path: str  # ``file`` relative to ``root``, as config keys and reports name it
    class_name: str
    source: str  # the file's text
    module: ModuleClass
    config_entry: ModuleEntry | None = None
    build: dict[str, Any] | None = None  # how to build it, once the pipeline has resolved that

    @property
    def target(self) -> str:
        return f"{self.rel_path}::{self.class_name}"


@dataclass
class Candidate:
    """A proposed replacement: a Python file defining ``ModelNew`` or the original class."""

    id: str
    generator: str
    source: str
    provenance: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set when the generator already knows the candidate is unusable
    generated: str | None = None  # the generated code alone, once ``source`` wraps it for suggesting
    # The same candidate without its backward (a generator that writes both): what is suggested
    # instead when the backward's gradients are wrong.
    without_backward: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()


class GeneratorError(Exception):
    """A generator cannot produce candidates (a missing model, a bad option): say why."""


class GeneratorDeclined(GeneratorError):
    """The module is outside what the generator writes (an op it has no template for, a graph it
    cannot capture): a verdict on the module, not a failure of the run."""


class Generator(Protocol):
    name: str
    samples: bool  # whether ``n`` means anything to it

    def generate(self, problem: Problem, n: int) -> list[Candidate]: ...
