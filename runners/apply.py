"""The file as it will be once a suggestion is applied, and the checks that it stays the same file.

A suggestion replaces one class's lines with the suggested code: its imports, kernels, helpers and
the class. Two rules keep that a drop-in:

- :func:`unique_helpers` gives every top-level name the suggested code defines (other than the
  class) a suffix naming the class (``_launch_config`` → ``_launch_config_RMSNorm``), so two
  suggestions for one file never define the same helper (applying both would make the first
  class call the second one's launcher) and no helper shadows a name the file defines;
- :func:`check_applied` applies it to the file's text and checks that every other top-level
  definition is still there, unchanged, and bound only once: nothing the suggestion adds rebinds
  a name the rest of the file uses;
- :func:`check_applied_together` does the same for every suggestion of one file at once: the file
  as it will be once all of them are applied (runners/together.py verifies it again).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from runners import pyast
from runners.source import bound_names, rename_identifiers


class ApplyError(ValueError):
    """Applying the suggestion would change the file beyond the class; the message says how.
    ``classes``: the classes whose suggestions are at fault, in file order (empty for one)."""

    def __init__(self, message: str, classes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.classes = classes


@dataclass(frozen=True)
class ClassEdit:
    """An edit of one class in a file: its suggested code and the lines it replaces (1-based,
    inclusive), applied to the file's text here (the App's record of a posted suggestion is
    ``bot.models.Suggestion``)."""

    class_name: str
    lineno: int
    end_lineno: int
    code: str


def _import_targets(node: ast.stmt) -> dict[str, str]:
    """For an import, each bound name and the dotted thing it names (``from a import b`` → a.b)."""
    if isinstance(node, ast.Import):
        return {a.asname: a.name for a in node.names if a.asname} | {
            a.name.split(".")[0]: a.name.split(".")[0] for a in node.names if not a.asname
        }
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return {(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
    return {}


def unique_helpers(code: str, class_name: str, file_source: str) -> str:
    """``code`` with each top-level name it defines, other than ``class_name`` and its imports,
    suffixed with ``_<class_name>``."""
    tree = pyast.parse(code)
    taken = {n for node in pyast.parse(file_source).body for n in bound_names(node)}
    renames: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for name in bound_names(node):
            if name == class_name or name in renames or name.endswith(f"_{class_name}"):
                continue
            new = f"{name}_{class_name}"
            if new in taken:
                raise ApplyError(
                    f"the file already defines {new}, the name the suggestion's {name} would take"
                )
            renames[name] = new
    if not renames:
        return code
    renamed = rename_identifiers(code, renames)
    pyast.parse(renamed)
    return renamed


def applied(file_source: str, lineno: int, end_lineno: int, code: str) -> str:
    """The file with lines ``lineno``..``end_lineno`` (1-based, inclusive) replaced by ``code``."""
    lines = file_source.splitlines(keepends=True)
    body = code if code.endswith("\n") else code + "\n"
    return "".join([*lines[: lineno - 1], body, *lines[end_lineno:]])


def applied_all(file_source: str, suggestions: Sequence[ClassEdit]) -> str:
    """The file with every suggestion applied (unchecked: :func:`check_applied_together` checks)."""
    after = file_source
    for s in sorted(suggestions, key=lambda s: s.lineno, reverse=True):
        after = applied(after, s.lineno, s.end_lineno, s.code)  # bottom-up: the lines above stay put
    return after


def check_applied(file_source: str, lineno: int, end_lineno: int, code: str, class_name: str) -> str:
    """The file after applying ``code`` over the class's lines, checked; ApplyError when it would
    change, drop or rebind anything but the class."""
    after = applied(file_source, lineno, end_lineno, code)
    old = _unchanged(file_source, after, {class_name}, "applying")
    added = pyast.parse(code).body
    kept = {ast.dump(n) for n in old}
    old_names = {n for node in old for n in bound_names(node)}
    old_imports = {k: v for node in old for k, v in _import_targets(node).items()}
    for node in added:
        if ast.dump(node) in kept:
            continue  # the same import or definition again binds the same thing
        same_module = _import_targets(node)
        for name in bound_names(node):
            if name in same_module and old_imports.get(name) == same_module[name]:
                continue  # `import torch.nn as nn` where the file says `from torch import nn`
            if name in old_names:
                raise ApplyError(
                    f"the suggestion's line {node.lineno} rebinds {name}, which the rest of the file defines"
                )
    return after


def _unchanged(file_source: str, after: str, class_names: Collection[str], doing: str) -> list[ast.stmt]:
    """The file's top-level statements other than ``class_names``, each checked to be in ``after``
    as it was; ApplyError (``doing`` says what would break it) when ``after`` does not parse or one
    is changed or gone."""
    try:
        new_tree = pyast.parse(after)
    except SyntaxError as exc:
        raise ApplyError(f"the file would not parse after {doing} (line {exc.lineno}: {exc.msg})") from None
    old = [n for n in pyast.parse(file_source).body if not set(bound_names(n)) & set(class_names)]
    new = {ast.dump(n) for n in new_tree.body}
    for node in old:
        if ast.dump(node) not in new:
            name = ", ".join(bound_names(node)) or type(node).__name__
            raise ApplyError(f"{doing} would change or drop the file's {name} (line {node.lineno})")
    return old


def _bindings(code: str) -> dict[str, tuple[int, str | None]]:
    """Each top-level name ``code`` binds: the line that first binds it, and the dotted thing every
    binding of it imports (None when anything but such an import binds it)."""
    out: dict[str, tuple[int, str | None]] = {}
    for node in pyast.parse(code).body:
        imported = _import_targets(node)
        for name in bound_names(node):
            line, target = out.get(name, (node.lineno, imported.get(name)))
            out[name] = (line, target if target == imported.get(name) else None)
    return out


def check_applied_together(file_source: str, suggestions: Sequence[ClassEdit]) -> str:
    """The file with every suggestion applied at once, checked: no two replace the same lines, each
    passes :func:`check_applied` on its own, no two bind the same top-level name (but for imports
    of the same thing: the file ends up importing it twice, harmlessly), and the rest of the file
    stays as it was. ApplyError says why not; its ``classes`` name the suggestions at fault, the
    later one in the file last (the one to leave out)."""
    ordered = sorted(suggestions, key=lambda s: s.lineno)
    for a, b in itertools.pairwise(ordered):
        if b.lineno <= a.end_lineno:
            raise ApplyError(
                f"the suggestions for {a.class_name} (lines {a.lineno}-{a.end_lineno}) and "
                f"{b.class_name} (lines {b.lineno}-{b.end_lineno}) replace overlapping lines",
                (a.class_name, b.class_name),
            )
    for s in ordered:
        try:
            check_applied(file_source, s.lineno, s.end_lineno, s.code, s.class_name)
        except ApplyError as exc:
            raise ApplyError(f"the suggestion for {s.class_name}: {exc}", (s.class_name,)) from None
    first: dict[str, tuple[ClassEdit, int, str | None]] = {}
    for s in ordered:
        for name, (line, target) in _bindings(s.code).items():
            other, other_line, other_target = first.setdefault(name, (s, line, target))
            if other is s or (target is not None and target == other_target):
                continue
            raise ApplyError(
                f"the suggestion for {s.class_name} binds {name} (its line {line}), and so does the "
                f"suggestion for {other.class_name} (its line {other_line}): applied together, "
                f"{s.class_name}'s would replace {other.class_name}'s",
                (other.class_name, s.class_name),
            )
    after = applied_all(file_source, ordered)
    classes = tuple(s.class_name for s in ordered)
    try:
        _unchanged(file_source, after, classes, f"applying the suggestions for {' and '.join(classes)}")
    except ApplyError as exc:
        raise ApplyError(str(exc), classes) from None
    return after
