"""Find ``nn.Module`` classes in Python source without importing it.

Importing a file from a pull request runs its code; reading its AST does not.
Everything here is pure: source text in, class descriptions out.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from runners import pyast
from runners.source import method

# torch.nn attributes that are classes but not modules.
_NOT_MODULES = {"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"}


@dataclass(frozen=True)
class ModuleClass:
    name: str
    lineno: int  # first line of the class, decorators included
    end_lineno: int
    bases: tuple[str, ...]
    init_params: tuple[str, ...]  # constructor parameters after self
    forward_params: tuple[str, ...]


class DiscoveryError(ValueError):
    """The source cannot be read as Python."""


def parse(source: str, filename: str = "<source>") -> ast.Module:
    try:
        return pyast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise DiscoveryError(f"{filename}:{exc.lineno}: syntax error: {exc.msg}") from None


def _torch_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """Local names bound to ``torch``, to ``torch.nn`` and to ``torch.nn.Module``-like classes."""
    torch_names: set[str] = set()
    nn_names: set[str] = set()
    class_names: set[str] = set()  # e.g. ``from torch.nn import Module as M``
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    torch_names.add(alias.asname or "torch")
                elif alias.name == "torch.nn" and alias.asname:
                    nn_names.add(alias.asname)
                elif alias.name.startswith("torch.") and not alias.asname:
                    torch_names.add("torch")  # `import torch.nn.functional` binds `torch`
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "torch" and alias.name == "nn":
                    nn_names.add(local)
                elif (
                    node.module in ("torch.nn", "torch.nn.modules", "torch.nn.modules.module")
                    and alias.name not in _NOT_MODULES
                    and alias.name[:1].isupper()
                ):
                    class_names.add(local)
    return torch_names, nn_names, class_names


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr}" if head else None
    if isinstance(expr, ast.Subscript):  # Generic[...]-style bases
        return _dotted(expr.value)
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> tuple[str, ...]:
    if fn is None:
        return ()
    args = fn.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return tuple(names[1:] if names and names[0] == "self" else names)


# ``(module, level) -> (its source, the resolver for its own imports)`` or None: how discovery reads
# the repository's other files (a base class imported from one), still without importing anything.
Resolver = Callable[[str, int], "tuple[str, Resolver] | None"]
_BASE_DEPTH = 4  # imported files followed for one base class, at most


def _imported_is_module(tree: ast.Module, name: str, resolve: Resolver | None, depth: int) -> bool:
    """Whether ``name``, bound in ``tree`` by ``from X import ...``, is an ``nn.Module`` class in X
    (read through ``resolve``; a name X itself imports is followed, up to ``depth`` files). Only
    the import that binds ``name`` is read: a file's other imports cost nothing."""
    if resolve is None or depth <= 0:
        return False
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            found = resolve(node.module or "", node.level)
            if found is None:
                return False
            text, inner = found
            try:
                sub = parse(text)
            except DiscoveryError:
                return False
            if any(isinstance(n, ast.ClassDef) and n.name == alias.name for n in sub.body):
                return alias.name in {m.name for m in find_modules(text, node.module or "", inner, depth - 1)}
            return _imported_is_module(sub, alias.name, inner, depth - 1)  # re-exported
    return False


def find_modules(
    source: str, filename: str = "<source>", resolve: Resolver | None = None, depth: int = _BASE_DEPTH
) -> list[ModuleClass]:
    """Every top-level class in ``source`` that is an ``nn.Module``, in file order. With
    ``resolve``, a class whose base is imported from another file of the repository counts when
    that base is an ``nn.Module`` there."""
    tree = parse(source, filename)
    torch_names, nn_names, class_names = _torch_names(tree)
    imported: dict[str, bool] = {}

    def is_torch_module_base(dotted: str) -> bool:
        head, _, attr = dotted.rpartition(".")
        if not head:
            if dotted in class_names:
                return True
            if dotted not in imported:
                imported[dotted] = _imported_is_module(tree, dotted, resolve, depth)
            return imported[dotted]
        if attr in _NOT_MODULES or not attr[:1].isupper():
            return False
        return head in nn_names or head in {f"{t}.nn" for t in torch_names}

    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    bases = {c.name: [d for d in map(_dotted, c.bases) if d] for c in classes}
    modules: set[str] = set()
    changed = True
    while changed:  # a fixpoint, so a subclass may come before its base in the file
        changed = False
        for cls in classes:
            if cls.name not in modules and any(
                is_torch_module_base(b) or b in modules for b in bases[cls.name]
            ):
                modules.add(cls.name)
                changed = True

    found = []
    for cls in classes:
        if cls.name not in modules:
            continue
        start = min([cls.lineno, *(d.lineno for d in cls.decorator_list)])
        found.append(
            ModuleClass(
                name=cls.name,
                lineno=start,
                end_lineno=cls.end_lineno or cls.lineno,
                bases=tuple(bases[cls.name]),
                init_params=_params(method(cls, "__init__")),
                forward_params=_params(method(cls, "forward")),
            )
        )
    return found


def module_level_functions(source: str, filename: str = "<source>") -> set[str]:
    """Names of the functions defined at the top level (``get_inputs`` and friends)."""
    tree = parse(source, filename)
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def classes_touching(modules: Iterable[ModuleClass], changed_lines: Iterable[int]) -> list[str]:
    """Names of the classes whose lines include any of ``changed_lines`` (head-side numbers)."""
    lines = sorted(set(changed_lines))
    hit = []
    for m in modules:
        if any(m.lineno <= ln <= m.end_lineno for ln in lines):
            hit.append(m.name)
    return hit


def added_lines(patch: str | None) -> list[int]:
    """Head-side line numbers a unified diff adds or changes (its ``+`` lines)."""
    lines: list[int] = []
    new = 0
    for raw in (patch or "").splitlines():
        if raw.startswith("@@"):
            # @@ -a,b +c,d @@ ...
            try:
                new = int(raw.split("+", 1)[1].split()[0].split(",")[0])
            except (IndexError, ValueError):
                new = 0
            continue
        if raw.startswith("+") and not raw.startswith("+++"):
            lines.append(new)
            new += 1
        elif raw.startswith(" "):
            new += 1
        # "-" lines and "\ No newline at end of file" do not move the head side
    return lines
