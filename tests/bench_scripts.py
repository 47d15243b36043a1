"""The scripts under bench/ loaded as modules, for their tests (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def script(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``name``."""
    return load(ROOT / "bench" / f"{name}.py", name)


def run(*args: str) -> list[str]:
    """``python bench/<args>`` from the repository root, in a bare environment: its output's lines."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
