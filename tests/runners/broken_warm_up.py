"""A sandbox target whose module's warm-up fails (tests/runners/test_sandbox.py)."""

from __future__ import annotations

from typing import Any


def warm_up(device: str) -> None:
    raise RuntimeError(f"warm-up failed on {device}")


def echo(req: dict[str, Any]) -> dict[str, Any]:  # never reached
    return req
