"""Source surgery: reading a user's file as text and lifting pieces out of it, without running it.

Every generator and rewrite that copies code from a user's file goes through these: the names a
top-level statement binds and the free names a piece of code reads, a statement's exact text, a
class and its methods, renaming identifiers in a tree, and :func:`class_parts`, what a generated
class copies from the original (its constructor, the helpers it calls, and the file's statements
those need). Plain ``ast`` on text: nothing here imports or runs the user's code.
"""

from __future__ import annotations

import ast
import builtins
import io
import textwrap
import tokenize
from dataclasses import dataclass

from runners import pyast
from runners.screen import ALLOWED_IMPORTS

_BUILTINS = frozenset(dir(builtins))


class NotStandalone(Exception):
    """The class's code cannot be copied out of its file: the message says what it needs."""


def bound_names(node: ast.stmt) -> list[str]:
    """The top-level names a statement binds, in source order (``from m import *`` binds none)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return list(dict.fromkeys((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"))
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return list(dict.fromkeys(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)))


def used_names(node: ast.AST) -> set[str]:
    """Every plain name ``node`` mentions, read or written."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def loaded_names(node: ast.AST) -> list[str]:
    """The plain names ``node`` reads, once per read."""
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def free_names(nodes: list[ast.AST]) -> set[str]:
    """The names ``nodes`` read without binding them (arguments and assignments bind), builtins aside."""
    loaded: set[str] = set()
    stored: set[str] = set()
    for root in nodes:
        for n in ast.walk(root):
            if isinstance(n, ast.Name):
                (loaded if isinstance(n.ctx, ast.Load) else stored).add(n.id)
            elif isinstance(n, ast.arg):
                stored.add(n.arg)
    return loaded - stored - _BUILTINS


def segment(lines: list[str], node: ast.stmt, decorators: bool = True) -> str:
    """The exact text of ``node`` (with its decorators unless told otherwise), dedented."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []) if decorators)])
    return textwrap.dedent("\n".join(lines[start - 1 : node.end_lineno or node.lineno]))


def top_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    """The module's top-level class ``name``, or None."""
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The method ``name`` the class body defines itself, or None."""
    defs = (n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return next((n for n in defs if n.name == name), None)


class Rename(ast.NodeTransformer):
    """Renames plain names (``names``: old -> new) in a tree, in place; with ``classes``, also the
    names of the classes it defines."""

    def __init__(self, names: dict[str, str], classes: bool = False) -> None:
        self.names, self.classes = names, classes

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if self.classes:
            node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        return node


def rename_identifiers(source: str, names: dict[str, str]) -> str:
    """Rename identifiers (not attributes after a dot, not keyword arguments' names), in place in
    the text: everything else stays byte for byte."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.NL]
    edits: list[tuple[int, int, str, str]] = []
    depth = 0  # inside brackets: where `name=` is a keyword argument, not an assignment
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if tok.type != tokenize.NAME or tok.string not in names:
            continue
        prev = next((t for t in reversed(tokens[:i]) if t.type != tokenize.COMMENT), None)
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after_dot = prev is not None and prev.string == "."
        keyword_arg = (
            depth > 0
            and nxt is not None
            and nxt.string == "="
            and prev is not None
            and prev.string in ("(", ",")
        )
        if not after_dot and not keyword_arg:
            edits.append((tok.start[0], tok.start[1], tok.string, names[tok.string]))
    lines = source.splitlines(keepends=True)
    for row, col, old, new in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


# ---------------------------------------------------------------------------
# The original class's constructor and what it needs from its file


@dataclass
class ClassParts:
    context: list[str]  # top-level statements of the file the copied code needs, in file order
    members: list[str]  # the constructor, class attributes and helpers it calls, verbatim
    signature: str  # forward's parameters, as written
    returns: str  # `` -> T`` or ""


def class_parts(source: str, class_name: str) -> ClassParts:
    """What a generated class copies from the original: raises :class:`NotStandalone` when the
    copy cannot stand alone."""
    tree = pyast.parse(source)
    lines = source.splitlines()
    cls = top_class(tree, class_name)
    if cls is None:
        raise NotStandalone(f"no top-level class {class_name}")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    forward = methods.get("forward")
    if forward is None:
        raise NotStandalone(f"{class_name} defines no forward of its own")
    chosen: list[ast.stmt] = [n for n in cls.body if isinstance(n, ast.Assign | ast.AnnAssign)]
    todo = ["__init__"] if "__init__" in methods else []
    while todo:
        fn = methods[todo.pop()]
        if fn in chosen:
            continue
        chosen.append(fn)
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)):
                continue
            if n.value.id == "self" and n.attr in methods and n.attr != "forward":
                todo.append(n.attr)
    chosen.sort(key=lambda n: n.lineno)
    signature = ast.unparse(forward.args)
    returns = f" -> {ast.unparse(forward.returns)}" if forward.returns else ""
    needed = free_names([*chosen, forward.args, *([forward.returns] if forward.returns else [])])
    context = _context(tree, lines, needed, class_name)
    return ClassParts(context, [segment(lines, n, decorators=True) for n in chosen], signature, returns)


def _context(tree: ast.Module, lines: list[str], needed: set[str], class_name: str) -> list[str]:
    """The file's top-level statements that bind ``needed`` names, and what those need in turn."""
    binders: dict[str, ast.stmt] = {}
    for node in tree.body:
        for name in bound_names(node):
            binders[name] = node
    keep: list[ast.stmt] = []
    todo = sorted(needed - {class_name}, reverse=True)
    while todo:
        name = todo.pop()
        if name not in binders:
            raise NotStandalone(f"the constructor uses {name!r}, which its file does not define at the top")
        node = binders[name]
        if any(node is k for k in keep):
            continue
        if isinstance(node, ast.ClassDef):
            # A class of the file (a config dataclass, say): the suggestion lives in that file and is
            # checked in its namespace, so it uses the file's own class rather than a copy.
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] not in ALLOWED_IMPORTS:
                # The file's own import (``from ..activations import ACT2FN``): bound in the
                # namespace the suggestion is checked in and lives in; never imported again here.
                continue
        elif isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] not in ALLOWED_IMPORTS for alias in node.names):
                continue
        else:
            todo.extend(sorted(free_names([node]) - set(bound_names(node)), reverse=True))
        keep.append(node)
    keep.sort(key=lambda n: n.lineno)
    return [segment(lines, n) for n in keep]
