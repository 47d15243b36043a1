"""The fast tier's lists in tests/conftest.py name fixtures and tests that exist.

A renamed fixture or test would otherwise drop out of ``slow`` without a word, and the fast tier
(``pytest -m "not slow"``) would quietly grow the slow work it leaves out.
"""

from __future__ import annotations

import ast
import fnmatch

import pytest

from tests.conftest import ROOT, SLOW_FIXTURES, SLOW_TESTS


def _fixtures(tree: ast.Module) -> set[str]:
    """The fixture names a file defines: ``@pytest.fixture`` functions (``name=`` if given) and
    module-level assignments of one (``start_edge = test_web.start_edge``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                target = call.func if call else decorator
                if ast.unparse(target).endswith("fixture"):
                    renamed = [k.value for k in call.keywords if k.arg == "name"] if call else []
                    names.add(ast.literal_eval(renamed[0]) if renamed else node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _tests(tree: ast.Module) -> set[str]:
    """``test`` and ``Class`` and ``Class::test`` for what the file defines at its top level."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}::{n.name}" for n in node.body if isinstance(n, ast.FunctionDef))
    return names


def _parse(path: str) -> ast.Module:
    file = ROOT / path
    assert file.is_file(), f"{path} does not exist"
    return ast.parse(file.read_text(encoding="utf-8"))


@pytest.mark.parametrize("key", sorted(SLOW_FIXTURES))
def test_each_slow_fixture_is_defined_where_it_is_said_to_be(key: str) -> None:
    path, name = key.split("::")
    assert name in _fixtures(_parse(path)), f"{path} defines no fixture {name!r}"


@pytest.mark.parametrize("pattern", SLOW_TESTS)
def test_each_slow_test_pattern_names_a_test_that_exists(pattern: str) -> None:
    path, _, rest = pattern.partition("::")
    tree = _parse(path)
    if rest:
        assert fnmatch.filter(sorted(_tests(tree)), rest), f"{path} has no test or class {rest!r}"
