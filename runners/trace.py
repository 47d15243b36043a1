"""``trace(req) -> dict``: a module's forward as a ``torch.fx`` graph, in JSON (runs in the sandbox).

Tracing runs the module's own code (its constructor, and its ``forward`` on
proxies and on the example inputs), so it happens in a sandbox like every
other evaluation; the parent only reads the description. The module is built
from the build spec the pipeline already resolved (``verify.Problem``), traced
with ``torch.fx.symbolic_trace`` and run once through ``ShapeProp``, so every
node carries the shape and dtype it had on the example inputs.

What comes back, for a traceable module::

    {"ok": true, "direct_module": true, "bases": ["nn.Module"],
     "nodes": [{"name": "x", "op": "placeholder", "target": "x", "shape": [8, 64], "dtype": "float32"},
               {"name": "weight", "op": "get_attr", "target": "weight", "kind": "parameter", ...},
               {"name": "add", "op": "call_function", "target": "operator.add",
                "args": [{"node": "x"}, {"attr": "eps", "value": 1e-06}], "kwargs": {}, ...},
               {"name": "norm", "op": "call_module", "target": "norm", "module": "nn.LayerNorm",
                "config": {"normalized_shape": [64], "eps": 1e-05, "elementwise_affine": true},
                "params": {"weight": {"target": "norm.weight", "shape": [64], "dtype": "float32"}, ...},
                "training": false, "args": [{"node": "add"}], "kwargs": {}, ...},
               {"name": "output", "op": "output", "args": [{"node": "norm"}], ...}]}

Arguments are ``{"node": name}`` for earlier nodes, plain JSON for numbers,
strings, booleans and None, ``{"dtype": "float16"}`` for dtypes, lists for
tuples, ``{"slice": [start, stop, step]}`` and ``{"ellipsis": true}`` for indexing
(``x[..., :n]``), and ``{"other": type}`` for anything else. A number that ``forward``
read from one of the module's own float or int attributes is
``{"attr": "eps", "value": ...}`` (found by tracing again with that attribute
changed), so code built from the graph can read ``self.eps`` at call time
instead of baking in the example's value; a number computed from one is
``{"derived": "eps", "value": ...}``. A placeholder given a number on the
example inputs carries it as ``"example"``. Submodules that ``torch.fx`` keeps as
leaves appear as ``call_module`` with their configuration when they are in
``LEAF_CONFIG``, and with ``"unsupported": true`` otherwise.

Anything that fails (the import, the build, the trace) is ``{"ok": false,
"reason": ...}``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.fx.node import _get_qualified_name
from torch.fx.passes.shape_prop import ShapeProp

from runners import verify

# torch.nn leaf modules whose configuration code generation understands: type name -> attributes.
LEAF_CONFIG: dict[str, tuple[str, ...]] = {
    "ReLU": ("inplace",),
    "GELU": ("approximate",),
    "SiLU": ("inplace",),
    "Sigmoid": (),
    "Tanh": (),
    "Softmax": ("dim",),
    "LogSoftmax": ("dim",),
    "LayerNorm": ("normalized_shape", "eps", "elementwise_affine"),
    "RMSNorm": ("normalized_shape", "eps", "elementwise_affine"),
    "Dropout": ("p", "inplace"),
    "Identity": (),
}
_LEAF_PARAMS = ("weight", "bias")

Path = tuple[Any, ...]


def trace(req: dict[str, Any]) -> dict[str, Any]:
    """Build the module from ``req["build"]``, trace it and describe the graph."""
    try:
        problem = verify.Problem({**req, "device": "cpu", "dtype": None}, req["build"])
    except BaseException as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "building the module")}
    module = problem.module
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "torch.fx cannot trace forward")}
    args = problem.example_inputs(0)
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*args)
    except Exception as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "the traced graph does not run")}
    refs, structural = _attribute_refs(module, gm)
    if structural:
        why = f"forward's structure depends on self.{structural} (another value traces another graph)"
        return {"ok": False, "reason": why}
    cls = type(module)
    nodes = [_describe(gm, i, node, refs) for i, node in enumerate(gm.graph.nodes)]
    placeholders = [n for n in nodes if n["op"] == "placeholder"]
    for node, value in zip(placeholders, args, strict=False):
        if isinstance(value, int | float) and not isinstance(value, bool):
            node["example"] = value  # a number passed to forward: the kernel takes it at call time
    return {
        "ok": True,
        "direct_module": cls.__bases__ == (torch.nn.Module,),
        "bases": [_type_name(b) for b in cls.__bases__],
        "nodes": nodes,
    }


# ---------------------------------------------------------------------------
# Which numbers in the graph are the module's attributes


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, slice):
        value = (value.start, value.stop, value.step)
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk(v, (*path, i))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, (*path, k))
    else:
        yield path, value


def _numbers(gm: torch.fx.GraphModule) -> tuple[list[tuple[str, str]], dict[tuple[int, Path], Any]]:
    """The graph's shape (op and target per node) and every number in its arguments, by position."""
    shape = []
    numbers = {}
    for i, node in enumerate(gm.graph.nodes):
        shape.append((node.op, str(node.target)))
        found = [*_walk(node.args, ("args",)), *_walk(node.kwargs, ("kwargs",))]
        for path, value in found:
            if isinstance(value, int | float) and not isinstance(value, bool):
                numbers[(i, path)] = value
    return shape, numbers


def _numeric_attributes(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str, Any]]:
    """(dotted path, owner, name, value) for the float and int attributes forward may read:
    on the module and on the submodules the tracer steps into (class attributes included)."""
    tracer = torch.fx.Tracer()
    out = []
    for prefix, sub in module.named_modules():
        if prefix and tracer.is_leaf_module(sub, prefix):
            continue
        names: dict[str, Any] = {}
        for klass in reversed(type(sub).__mro__):
            if klass is object or klass.__module__.startswith("torch."):
                continue
            names.update(vars(klass))
        names.update(vars(sub))
        for name, value in names.items():
            if name.startswith("_") or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out.append((f"{prefix}.{name}" if prefix else name, sub, name, value))
    return out


def _other_values(value: int | float) -> tuple[int | float, int | float]:
    """One value above and one below: a threshold that forward tests in Python sees at least one."""
    if isinstance(value, int):
        return value + abs(value) + 7, value - abs(value) - 3
    if not math.isfinite(value):
        return 0.375, -1.25
    return value + abs(value) + 0.375, value - abs(value) - 1.25


def _trace_with(module: torch.nn.Module, owner: torch.nn.Module, name: str, value: Any) -> Any:
    """The graph traced with ``owner.name`` set to ``value`` (then restored); None if it fails."""
    own = name in vars(owner)
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        return torch.fx.symbolic_trace(module)
    except Exception:
        return None  # the attribute is structural in a way tracing cannot follow; its value stays baked
    finally:
        if own:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


def _attribute_refs(
    module: torch.nn.Module, gm: torch.fx.GraphModule
) -> tuple[dict[tuple[int, Path], tuple[str, str]], str | None]:
    """Numbers that come from attributes (``"attr"``) or are computed from them (``"derived"``),
    and the first attribute that changes the graph itself, if any."""
    shape, numbers = _numbers(gm)
    refs: dict[tuple[int, Path], tuple[str, str]] = {}
    for path, owner, name, value in _numeric_attributes(module):
        for changed in _other_values(value):
            other = _trace_with(module, owner, name, changed)
            if other is None:
                continue
            other_shape, other_numbers = _numbers(other)
            if other_shape != shape or other_numbers.keys() != numbers.keys():
                return refs, path
            for key, before in numbers.items():
                after = other_numbers[key]
                if after != before and refs.get(key, ("attr", path)) == ("attr", path):
                    refs[key] = ("attr" if after == changed else "derived", path)
    return refs, None


# ---------------------------------------------------------------------------
# Describing nodes


def _type_name(cls: type) -> str:
    if cls.__module__.startswith("torch.nn"):
        return f"nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _target_name(target: Any) -> str:
    if target is getattr:
        return "getattr"
    try:
        name = _get_qualified_name(target)
    except Exception:
        name = getattr(target, "__name__", repr(target))
    if name.startswith("_operator."):
        name = "operator." + name.removeprefix("_operator.")
    if name.startswith("torch._C._nn."):
        name = "torch.nn.functional." + name.removeprefix("torch._C._nn.")
    return name


def _encode(value: Any, key: tuple[int, Path], refs: dict[tuple[int, Path], tuple[str, str]]) -> Any:
    if key in refs:
        kind, path = refs[key]
        return {kind: path, "value": value}
    if isinstance(value, torch.fx.Node):
        return {"node": value.name}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, list | tuple):
        i, where = key
        return [_encode(v, (i, (*where, j)), refs) for j, v in enumerate(value)]
    if isinstance(value, slice):
        i, where = key
        bounds = (value.start, value.stop, value.step)
        return {"slice": [_encode(v, (i, (*where, j)), refs) for j, v in enumerate(bounds)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    return {"other": type(value).__name__}


def _meta(node: torch.fx.Node) -> dict[str, Any]:
    meta = node.meta.get("tensor_meta")
    if meta is None:
        return {}
    if not hasattr(meta, "shape"):
        return {"shapes": [list(m.shape) for m in meta if hasattr(m, "shape")]}
    return {"shape": list(meta.shape), "dtype": str(meta.dtype).removeprefix("torch.")}


def _describe(
    gm: torch.fx.GraphModule, i: int, node: torch.fx.Node, refs: dict[tuple[int, Path], tuple[str, str]]
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "op": node.op, **_meta(node)}
    args = [_encode(a, (i, ("args", j)), refs) for j, a in enumerate(node.args)]
    kwargs = {k: _encode(v, (i, ("kwargs", k)), refs) for k, v in node.kwargs.items()}
    if node.op == "placeholder":
        out["target"] = str(node.target)
        if "shape" not in out and node.args:  # a default value
            out["default"] = args[0]
        return out
    if node.op == "get_attr":
        target = str(node.target)
        value = operator.attrgetter(target)(gm)
        params = dict(gm.named_parameters())
        buffers = dict(gm.named_buffers())
        kind = "parameter" if target in params else "buffer" if target in buffers else "constant"
        out.update(target=target, kind=kind)
        if isinstance(value, torch.Tensor):
            out.update(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."))
        return out
    out.update(args=args, kwargs=kwargs)
    if node.op == "call_module":
        target = str(node.target)
        sub = gm.get_submodule(target)
        cls = type(sub)
        out.update(target=target, module=_type_name(cls))
        if cls.__module__.startswith("torch.nn") and cls.__name__ in LEAF_CONFIG:
            out["config"] = {k: _plain(getattr(sub, k)) for k in LEAF_CONFIG[cls.__name__]}
            out["params"] = {
                p: {
                    "target": f"{target}.{p}",
                    "shape": list(t.shape),
                    "dtype": str(t.dtype).removeprefix("torch."),
                }
                for p in _LEAF_PARAMS
                if isinstance(t := getattr(sub, p, None), torch.Tensor)
            }
            out["training"] = sub.training
        else:
            out["unsupported"] = True
        return out
    if node.op == "call_method":
        out["target"] = f"Tensor.{node.target}"
    elif node.op == "call_function":
        out["target"] = _target_name(node.target)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
