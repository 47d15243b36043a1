"""``ast.parse`` that several threads can call at once.

CPython 3.11 keeps the AST converter's recursion counter per interpreter, not per thread, so two
threads building trees at the same time can fail with a spurious ``SystemError: AST constructor
recursion depth mismatch`` (a GPU worker checks a file's modules in parallel threads). Every parse
in the runners goes through one lock; a collision with a parse outside it (a library's own) is
retried, and only a repeated failure is raised.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()
_ATTEMPTS = 3


def _parse(source: str, filename: str, mode: str) -> ast.AST:
    for attempt in range(_ATTEMPTS):
        try:
            with _LOCK:
                return ast.parse(source, filename=filename, mode=mode)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """Parse a module, like ``ast.parse(source)``."""
    tree = _parse(source, filename, "exec")
    assert isinstance(tree, ast.Module)
    return tree


def parse_expr(source: str) -> ast.Expression:
    """Parse one expression, like ``ast.parse(source, mode="eval")``."""
    tree = _parse(source, "<unknown>", "eval")
    assert isinstance(tree, ast.Expression)
    return tree
