"""``trace(req) -> dict``: a module's forward as a ``torch.fx`` graph, in JSON (runs in the sandbox).

Tracing runs the module's own code (its constructor, and its ``forward`` on
proxies and on the example inputs), so it happens in a sandbox like every
other evaluation; the parent only reads the description. The module is built
from the build spec the pipeline already resolved (``verify.BuiltModule``), on the
meta device where it can be (no memory for its weights and inputs), traced
with ``torch.fx``'s tracer and run once through ``ShapeProp``, so every node
carries the shape and dtype it had on the example inputs. The tracer (``_Tracer``)
steps through module instances that are not submodules (transformers' module-level
``gelu``), keeps transformers' ``Conv1D`` whole as a matrix product, and, when
forward branches on a parameter's dtype or shape, traces again with those as
values: ``"param_reads"`` lists each one read, which code built from the graph
must check (``[{"param": "weight", "what": "dtype", "value": "torch.float32"}]``).

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

import inspect
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
import torch.fx
from torch.fx.node import _get_qualified_name
from torch.fx.passes.shape_prop import ShapeProp
from torch.fx.proxy import ParameterProxy

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
    "GroupNorm": ("num_groups", "num_channels", "eps", "affine"),
    "Dropout": ("p", "inplace"),
    "Identity": (),
}
_LEAF_PARAMS = ("weight", "bias")

Path = tuple[Any, ...]
_T = TypeVar("_T")


def trace(req: dict[str, Any]) -> dict[str, Any]:
    """Build the module from ``req["build"]``, trace it and describe the graph.

    First on the meta device (shapes and dtypes only: a module and inputs of any size cost no
    memory and no arithmetic); where that fails (a constructor or forward that reads values,
    an op without a meta kernel), again on CPU tensors of the build's own sizes."""
    try:
        with torch.device("meta"):
            meta = verify.BuiltModule({**req, "device": "meta", "dtype": None}, req["build"])
            described = _trace(meta, meta.values(req["build"]["inputs"], 0))
        if described.get("ok"):
            return described
    except Exception:  # values read on the meta device: the CPU below says what fails, if anything
        pass
    try:
        problem = verify.BuiltModule({**req, "device": "cpu", "dtype": None}, req["build"])
    except BaseException as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "building the module")}
    return _trace(problem, problem.example_inputs(0))


def _trace(problem: verify.BuiltModule, args: list[Any]) -> dict[str, Any]:
    module = problem.module
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        names = []
    dtypes = {n: a.dtype for n, a in zip(names, args, strict=False) if isinstance(a, torch.Tensor)}
    try:
        gm, tracer, make = _symbolic_trace(module, dtypes)
    except Exception as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "torch.fx cannot trace forward")}
    reads = tracer.reads
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*args)
    except Exception as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "the traced graph does not run")}
    refs, structural = _attribute_refs(module, gm, make)
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
        "param_reads": [{"param": k, "what": what, "value": v} for (k, what), v in reads.items()],
        "input_reads": [{"input": k, "what": "dtype", "value": v} for k, v in tracer.input_reads.items()],
        "settings": _settings(module, gm, make),
    }


# ---------------------------------------------------------------------------
# The tracer

# Modules outside torch.nn kept whole (not stepped into) and described like torch.nn's leaves, by the
# class's qualified name: transformers' Conv1D (GPT-2's projections) is ``x @ weight + bias`` with its
# weight stored [in, out], which code generation lowers as a matrix product.
_FOREIGN_LEAVES: dict[str, tuple[str, ...]] = {"transformers.pytorch_utils.Conv1D": ("nf",)}


def _foreign_leaf(module: torch.nn.Module) -> str | None:
    """The qualified name of ``module``'s class when it is one of ``_FOREIGN_LEAVES`` exactly (a
    subclass may compute something else)."""
    name = _type_name(type(module))
    return name if name in _FOREIGN_LEAVES else None


class _ParameterReads(ParameterProxy):
    """A parameter whose dtype, shape and size pass through to forward's Python as values (so that a
    branch on them traces) and are recorded: the graph holds only for parameters like these."""

    tracer: _Tracer

    def _read(self, what: str, value: _T) -> _T:
        self.tracer.reads[(self.name, what)] = _plain(value) if what != "dtype" else str(value)
        return value

    @property
    def dtype(self) -> torch.dtype:
        return self._read("dtype", self.param.dtype)

    @property
    def shape(self) -> torch.Size:
        return self._read("shape", self.param.shape)

    def size(self, dim: int | None = None) -> Any:
        return self._read("shape", self.param.shape) if dim is None else self.size()[dim]

    def dim(self) -> int:
        return len(self._read("shape", self.param.shape))

    @property
    def ndim(self) -> int:
        return self.dim()

    def numel(self) -> int:
        return self._read("shape", self.param.shape).numel()


class _Tracer(torch.fx.Tracer):
    """``torch.fx``'s tracer, stepping into modules that are not the root's submodules (a module-level
    ``gelu = GELUActivation()`` called in forward) and keeping ``_FOREIGN_LEAVES`` whole.

    With ``constant_params``, forward reading a parameter's dtype or shape gets the value rather than
    a proxy (T5LayerNorm's ``if self.weight.dtype in [torch.float16, torch.bfloat16]``); every such
    read lands in ``reads``, so code built from the graph can refuse parameters unlike these."""

    def __init__(
        self,
        constant_params: bool = False,
        proxy_buffers: bool = False,
        input_dtypes: dict[str, torch.dtype] | None = None,
    ) -> None:
        super().__init__(param_shapes_constant=constant_params)
        self.proxy_buffer_attributes = proxy_buffers
        self.input_dtypes = input_dtypes
        self.reads: dict[tuple[str, str], Any] = {}
        self.input_reads: dict[str, str] = {}  # forward argument -> the dtype forward read as a value

    def graph_module(self, module: torch.nn.Module) -> torch.fx.GraphModule:
        graph = self.trace(module)
        return torch.fx.GraphModule(module, graph, type(module).__name__)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return _foreign_leaf(m) is not None or super().is_leaf_module(m, module_qualified_name)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            self.path_of_module(m)
        except NameError:  # not a submodule of the root: traced through, as a function would be
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def create_proxy(  # the full signature: torch.fx passes proxy_factory_fn only where it sees one
        self,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str | None = None,
        type_expr: Any | None = None,
        proxy_factory_fn: Callable[[torch.fx.Node], torch.fx.Proxy] | None = None,
    ) -> torch.fx.Proxy:
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if isinstance(proxy, ParameterProxy):
            proxy.__class__ = _ParameterReads
        elif kind == "placeholder" and self.input_dtypes is not None and target in self.input_dtypes:
            proxy.__class__ = _InputReads
        return proxy


class _InputReads(torch.fx.Proxy):
    """A forward argument whose dtype passes through to forward's Python as a value
    (``torch.finfo(scores.dtype).min``), recorded: the graph holds only for inputs of that dtype."""

    tracer: _Tracer

    @property
    def dtype(self) -> torch.dtype:
        name = str(self.node.target)
        assert self.tracer.input_dtypes is not None
        value = self.tracer.input_dtypes[name]
        self.tracer.input_reads[name] = str(value)
        return value


def _symbolic_trace(
    module: torch.nn.Module, dtypes: dict[str, torch.dtype]
) -> tuple[torch.fx.GraphModule, _Tracer, Callable[[], _Tracer]]:
    """(the graph, the tracer that traced it, a maker of tracers like it): traced as torch.fx does
    first; when forward's Python branches on a traced value, again with parameters' dtypes and shapes
    as values; when that fails too (a buffer sliced by an input's size, ``torch.finfo(x.dtype)``),
    again with buffers as graph nodes and the inputs' dtypes (``dtypes``, by forward argument) as
    values, and last with parameters' and inputs' dtypes as values."""
    makers: list[Callable[[], _Tracer]] = [
        _Tracer,
        lambda: _Tracer(constant_params=True),
        lambda: _Tracer(proxy_buffers=True, input_dtypes=dtypes),
        lambda: _Tracer(constant_params=True, input_dtypes=dtypes),  # buffers proxied need it off
    ]
    first: Exception | None = None
    for make in makers:
        tracer = make()
        try:
            return tracer.graph_module(module), tracer, make
        except Exception as exc:
            first = first or exc
    assert first is not None
    raise first


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


def _attributes(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str, Any]]:
    """(dotted path, owner, name, value) for the attributes forward may read: on the module and on
    the submodules the tracer steps into (class attributes included), but not torch's own."""
    tracer = _Tracer()
    out = []
    for prefix, sub in module.named_modules():
        if prefix and tracer.is_leaf_module(sub, prefix):
            continue
        for name, value in held(sub).items():
            if not name.startswith("_"):
                out.append((f"{prefix}.{name}" if prefix else name, sub, name, value))
    return out


def held(sub: torch.nn.Module) -> dict[str, Any]:
    """What ``sub`` holds by name: its own attributes over its classes' (class attributes included,
    a subclass's over its base's), torch's own classes left out."""
    names: dict[str, Any] = {}
    for klass in reversed(type(sub).__mro__):
        if klass is not object and not klass.__module__.startswith("torch."):
            names.update(vars(klass))
    names.update(vars(sub))
    return names


def _numeric_attributes(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str, Any]]:
    """The float and int attributes forward may read (:func:`_attributes`)."""
    return [a for a in _attributes(module) if isinstance(a[3], int | float) and not isinstance(a[3], bool)]


def _settings(
    module: torch.nn.Module, gm: torch.fx.GraphModule, make: Callable[[], _Tracer]
) -> list[dict[str, Any]]:
    """The flag and string attributes forward reads (``self.is_causal``, ``self.approximate``), with
    their values: each one forward read while it was traced, and each one whose other value traces
    another graph (a branch taken, an argument passed), or no graph. Code built from the graph holds
    only while they keep these values (``training`` aside: the original path takes training). The
    others (a layer's name nothing reads) are left free.

    Flipping one at a time alone would miss flags that matter only together (``if self.a and
    self.b:`` traced with both False: either flipped alone traces the same graph); the reads catch
    them, since forward reads ``self.a`` at least."""
    flags = [a for a in _attributes(module) if isinstance(a[3], bool | str) and a[2] != "training"]
    read = _reads(module, flags, make)
    traced = _described(gm)
    out = []
    for path, owner, name, value in flags:
        if (id(owner), name) not in read:
            other = _trace_with(
                module, owner, name, (not value) if isinstance(value, bool) else value + "~", make
            )
            if other is not None and _described(other) == traced:
                continue
        out.append({"path": path, "value": value})
    return out


def _reads(
    module: torch.nn.Module, flags: list[tuple[str, torch.nn.Module, str, Any]], make: Callable[[], _Tracer]
) -> set[tuple[int, str]]:
    """(id of the owner, name) of each of ``flags`` that forward reads while it is traced once more:
    each owner's class is swapped for a subclass that notes reads of those names. An owner whose class
    cannot be swapped counts as reading them all, as does a trace that fails."""
    names: dict[int, set[str]] = {}
    owners: dict[int, torch.nn.Module] = {}
    for _, owner, name, _ in flags:
        names.setdefault(id(owner), set()).add(name)
        owners[id(owner)] = owner
    read: set[tuple[int, str]] = set()
    swapped: list[tuple[torch.nn.Module, type]] = []
    try:
        for key, owner in owners.items():
            cls = type(owner)
            watched = frozenset(names[key])

            def noted(self: Any, attr: str, _cls: Any = cls, _watched: frozenset[str] = watched) -> Any:
                if attr in _watched:
                    read.add((id(self), attr))
                return _cls.__getattribute__(self, attr)

            spec = {"__getattribute__": noted, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
            try:
                owner.__class__ = type(cls.__name__, (cls,), spec)
            except Exception:  # a layout the swap cannot take, a class refusing subclasses: all read
                read.update((key, n) for n in watched)
                continue
            swapped.append((owner, cls))
        try:
            make().graph_module(module)
        except Exception:
            read.update((key, n) for key, ns in names.items() for n in ns)
    finally:
        for owner, cls in swapped:
            owner.__class__ = cls
    return read


def _described(gm: torch.fx.GraphModule) -> list[tuple[str, str, str, str]]:
    """Each node's op, target and arguments, as text: two graphs alike are the same computation."""
    return [(n.op, str(n.target), repr(n.args), repr(n.kwargs)) for n in gm.graph.nodes]


def _other_values(value: int | float) -> tuple[int | float, int | float]:
    """One value above and one below: a threshold that forward tests in Python sees at least one."""
    if isinstance(value, int):
        return value + abs(value) + 7, value - abs(value) - 3
    if not math.isfinite(value):
        return 0.375, -1.25
    return value + abs(value) + 0.375, value - abs(value) - 1.25


def _trace_with(
    module: torch.nn.Module, owner: torch.nn.Module, name: str, value: Any, make: Callable[[], _Tracer]
) -> Any:
    """The graph traced with ``owner.name`` set to ``value`` (then restored); None if it fails."""
    own = name in vars(owner)
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        return make().graph_module(module)
    except Exception:
        return None  # the attribute is structural in a way tracing cannot follow; its value stays baked
    finally:
        if own:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


def _attribute_refs(
    module: torch.nn.Module, gm: torch.fx.GraphModule, make: Callable[[], _Tracer]
) -> tuple[dict[tuple[int, Path], tuple[str, str]], str | None]:
    """Numbers that come from attributes (``"attr"``) or are computed from them (``"derived"``),
    and the first attribute that changes the graph itself, if any (traced as ``gm`` was)."""
    shape, numbers = _numbers(gm)
    refs: dict[tuple[int, Path], tuple[str, str]] = {}
    for path, owner, name, value in _numeric_attributes(module):
        for changed in _other_values(value):
            other = _trace_with(module, owner, name, changed, make)
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
        foreign = _foreign_leaf(sub)
        if foreign or (cls.__module__.startswith("torch.nn") and cls.__name__ in LEAF_CONFIG):
            keys = _FOREIGN_LEAVES[foreign] if foreign else LEAF_CONFIG[cls.__name__]
            out["config"] = {k: _plain(getattr(sub, k)) for k in keys}
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
