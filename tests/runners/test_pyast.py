"""Parsing from several threads at once, as a GPU worker checking a file's modules in parallel does."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import pytest

from runners import pyast

SOURCE = (Path(__file__).parents[2] / "runners" / "normalize.py").read_text(encoding="utf-8")


class _Yields:
    """Cyclic garbage whose finalizer lets another thread run and leaves new garbage behind, so the
    collector, which the parser's own allocations trigger, switches threads in the middle of parses."""

    running = True

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)
        if _Yields.running:
            _Yields()


def _parse_in_threads(threads: int = 4, rounds: int = 8) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(rounds):
            try:
                pyast.parse(SOURCE)
                pyast.parse_expr("a * b + c")
            except BaseException as exc:
                errors.append(exc)

    old = gc.get_threshold()
    gc.set_threshold(50)
    _Yields.running = True
    for _ in range(threads):
        _Yields()
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        _Yields.running = False
        gc.set_threshold(*old)
        gc.collect()
    return errors


def test_parses_concurrently_without_spurious_errors() -> None:
    assert _parse_in_threads() == []


def test_parse_matches_the_standard_library() -> None:
    import ast

    assert ast.dump(pyast.parse(SOURCE)) == ast.dump(ast.parse(SOURCE))
    assert ast.dump(pyast.parse_expr("x[0] ** 2")) == ast.dump(ast.parse("x[0] ** 2", mode="eval"))
    with pytest.raises(SyntaxError):
        pyast.parse("def (")
