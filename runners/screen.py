"""The static screen: what a kernel module may import, call and touch, checked on its source.

One home for the kernel import policy: the candidate's runner screens every candidate with
:func:`screen_source` before importing it (``runners/verify.py``), the normalizer keeps a
candidate's imports within :data:`ALLOWED_IMPORTS` (``runners/normalize.py``), and the template
generator copies only such imports from the user's file. Plain ``ast``: importing this module
imports no torch.
"""

from __future__ import annotations

import ast

from runners import pyast

# Imports a kernel module needs. Anything else (os, subprocess, socket, ctypes,
# threading, ...) has no business in a drop-in replacement for a layer.
ALLOWED_IMPORTS = frozenset(
    """
    torch triton math typing typing_extensions functools itertools operator numbers
    dataclasses collections enum abc __future__ numpy einops
    """.split()
)
FORBIDDEN_CALLS = frozenset(
    """
    eval exec compile open __import__ globals breakpoint input setattr delattr vars
    """.split()
)
FORBIDDEN_ATTRS = frozenset(
    """
    Stream stream set_stream ExternalStream CUDAGraph graph graphs _set_stream
    __globals__ __builtins__ __subclasses__ __code__ __dict__ environ system popen
    modules _getframe multiprocessing Process Pool start_new_thread _start_new_thread fork setsid
    """.split()
)


def screen_source(source: str) -> str | None:
    """The first honesty problem visible in the candidate's source, or None."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    module_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level:
                return f"line {node.lineno}: relative import (a kernel must be standalone)"
            for name in names:
                if name.split(".")[0] not in ALLOWED_IMPORTS:
                    return f"line {node.lineno}: imports {name!r}, which a kernel does not need"
            for alias in node.names:
                module_aliases.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_CALLS:
                first = node.args[0] if node.args else None
                if (
                    node.func.id in ("setattr", "delattr")
                    and isinstance(first, ast.Name)
                    and first.id == "self"
                ):
                    continue
                return f"line {node.lineno}: calls {node.func.id}()"
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
            return f"line {node.lineno}: uses .{node.attr}"
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            root = t
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            if t is not root and not isinstance(root, ast.Name):
                line = getattr(node, "lineno", "?")
                return f"line {line}: assigns an attribute of a computed object (monkey-patching)"
            if t is not root and isinstance(root, ast.Name) and root.id in module_aliases:
                line = getattr(node, "lineno", "?")
                return f"line {line}: assigns into module {root.id!r} (monkey-patching)"
    return None
