"""The problem a model is given: a self-contained KernelBench file.

KernelLLM was trained on files with ``class Model(nn.Module)``,
``get_inputs()`` and ``get_init_inputs()`` and nothing else. From any
discovered module we build exactly that: the class renamed to ``Model``, what
it needs from its own file inlined (imports, constants, helper functions and
classes, transitively), and the two functions written from the resolved
inputs. Pure text in, text out: nothing is imported or run here.
"""

from __future__ import annotations

import ast
from typing import Any

from runners.discover import parse
from runners.source import Rename, bound_names, used_names

_ALWAYS = "import torch\nimport torch.nn as nn\n"


def _closure(tree: ast.Module, class_name: str, also: tuple[str, ...] = ()) -> list[ast.stmt]:
    """The top-level statements ``class_name`` (and the names in ``also``: the classes its
    constructor arguments are built from) needs, in file order (imports always kept)."""
    defs: dict[str, list[int]] = {}
    for i, node in enumerate(tree.body):
        for name in bound_names(node):
            defs.setdefault(name, []).append(i)
    start = next(
        (i for i, n in enumerate(tree.body) if isinstance(n, ast.ClassDef) and n.name == class_name), None
    )
    if start is None:
        raise ValueError(f"no top-level class {class_name}")
    keep = {start, *(i for name in also for i in defs.get(name, []))}
    todo = list(keep)
    while todo:
        node = tree.body[todo.pop()]
        for name in used_names(node):
            for i in defs.get(name, []):
                if i not in keep:
                    keep.add(i)
                    todo.append(i)
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Import | ast.ImportFrom) and not (
            isinstance(node, ast.ImportFrom) and node.module == "__future__"
        ):
            keep.add(i)
    skip = {"get_inputs", "get_init_inputs"}
    return [
        tree.body[i]
        for i in sorted(keep)
        if not (isinstance(tree.body[i], ast.FunctionDef) and tree.body[i].name in skip)  # type: ignore[attr-defined]
    ]


def tensor_expr(spec: dict[str, Any]) -> str:
    """The ``torch`` expression that draws a tensor like ``spec`` (see runners.inputs)."""
    shape = ", ".join(str(int(s)) for s in spec["shape"])
    dtype = f"torch.{spec['dtype']}"
    dist = spec.get("dist", "normal")
    if dist == "randint":
        return f"torch.randint({int(spec['low'])}, {int(spec['high'])}, ({shape},), dtype={dtype})"
    if dist == "bool":
        return f"torch.rand({shape}) < 0.5"
    if dist == "uniform":
        low, high = float(spec.get("low", 0.0)), float(spec.get("high", 1.0))
        base = f"torch.rand({shape}, dtype={dtype})"
        if (low, high) == (0.0, 1.0):
            return base
        return f"{base} * {high - low!r} + {low!r}"
    cast = "" if spec["dtype"] == "float32" else f", dtype={dtype}"
    return f"torch.randn({shape}{cast})"


def value_expr(spec: dict[str, Any]) -> str:
    if "object" in spec:
        obj = spec["object"]
        kwargs = ", ".join(f"{k}={value_expr(v)}" for k, v in obj.get("kwargs", {}).items())
        return f"{obj['class']}({kwargs})"
    return tensor_expr(spec["tensor"]) if "tensor" in spec else repr(spec["value"])


def object_classes(specs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The classes the object specs (config objects) among ``specs`` are built from."""
    out: list[str] = []
    for spec in specs:
        if "object" in spec:
            out.append(spec["object"]["class"])
            out += object_classes(list(spec["object"].get("kwargs", {}).values()))
    return tuple(dict.fromkeys(out))


def init_positional(build: dict[str, Any], init_params: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """Constructor arguments in positional order, or None when keywords cannot be placed."""
    args = list(build.get("init_args", []))
    kwargs = dict(build.get("init_kwargs", {}))
    names = [p for p in init_params if not p.startswith("*")][len(args) :]
    for name in names:
        if not kwargs:
            break
        if name not in kwargs:
            return None  # a gap: the parameter between would need its default
        args.append(kwargs.pop(name))
    return None if kwargs else args


def problem_source(source: str, class_name: str, build: dict[str, Any], init_params: tuple[str, ...]) -> str:
    """The KernelBench file for ``class_name`` in ``source``, with inputs from ``build``."""
    tree = parse(source)
    specs = [*build.get("init_args", []), *build.get("init_kwargs", {}).values()]
    body = _closure(tree, class_name, object_classes(specs))
    mapping = {class_name: "Model"}
    if class_name != "Model" and any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in body):
        mapping["Model"] = "Model_"  # a helper already called Model steps aside
    module = Rename(mapping, classes=True).visit(ast.Module(body=body, type_ignores=[]))
    code = ast.unparse(ast.fix_missing_locations(module))
    positional = init_positional(build, init_params)
    if positional is None:
        raise ValueError(f"cannot express the constructor arguments of {class_name} positionally")
    inputs = ", ".join(value_expr(s) for s in build["inputs"])
    init = ", ".join(value_expr(s) for s in positional)
    present = set(code.splitlines())
    header = "".join(line + "\n" for line in _ALWAYS.splitlines() if line not in present)
    return (
        f"{header}{code}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\n"
        f"def get_init_inputs():\n    return [{init}]\n"
    )
