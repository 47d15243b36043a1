"""The kernel being built: what a graph node is inside the kernel (:class:`Value`), the tensors it
loads (:class:`Load`), its row reductions (:class:`Reduce`), and the kernel itself (:class:`Kernel`),
which the lowering (``lowering.py``) fills in and the emission (``emit.py``) renders. Also the small
helpers both sides share: a module attribute's forward expression, the guards for what the trace
read, runtime dtype promotion, and the nodes a node's arguments name.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from runners.generators.template.ops import DTYPE, PAIR, SCALAR, Unsupported


@dataclass
class Value:
    """What a graph node is inside the kernel."""

    name: str  # kernel variable, kernel argument, or literal text
    kind: str
    dtype: tuple[str, ...] = ()  # runtime dtypes promoted together (forward expressions); () for numbers
    is_bool: bool = False
    attr: str | None = None  # the module attribute it is read from at call time
    shape: list[int] | None = None
    items: tuple[Value, ...] = ()  # a PAIR's (values, indices)
    source: str | None = None  # the forward expression of an input tensor
    example: Any = None  # a SHAPE's or SIZE's value on the example inputs
    role: str = ""  # where a tensor comes from: input, parameter, buffer, ... ("view" for a slice of one)


@dataclass
class Load:
    var: str  # kernel variable (the pointer argument is ``{var}_ptr``)
    kind: str  # FULL, COL, CHANNEL, or ROW (one value per row, row kernels only)
    source: str  # forward expression of the tensor
    is_bool: bool
    placeholder: str | None = None  # the forward argument it comes from, if any
    half: int | None = None  # for a SPLIT input: which half of its last dimension (0 or 1)
    pointer: str = ""  # the pointer argument, when not ``{var}_ptr`` (both halves read one input)
    no_grad: bool = False  # a tensor no gradient is written for (batch norm's running statistics)
    integer: bool = False  # integers, loaded as they are (cross_entropy's class indices)
    strides: tuple[str, ...] = ()  # for a BCAST load: its stride argument per dimension of S
    # an input read at its partner column, half a row away in the other half (``partner_offsets``): the
    # halves of an input put back together at full width (rotary's ``rotate_half``)
    partner: bool = False

    @property
    def ptr(self) -> str:
        return self.pointer or f"{self.var}_ptr"


@dataclass
class Reduce:
    var: str
    op: str  # a key of ops.REDUCE
    operand: str  # a kernel expression
    template: str = "{r}"  # what to do with the reduced value ({r})


@dataclass
class Kernel:
    shape: list[int]  # the example's shape of the values computed (S)
    main: str  # the forward argument with shape S, or the one split into halves of shape S
    split: bool = False  # whether main's last dimension holds two halves, each of shape S
    loads: list[Load] = field(default_factory=list)
    scalars: list[tuple[str, str]] = field(default_factory=list)  # (kernel argument, forward expression)
    body: list[tuple[str, str] | Reduce] = field(default_factory=list)
    guards: list[tuple[str, str]] = field(default_factory=list)  # (condition to refuse, why)
    tags: list[str] = field(default_factory=list)  # what it does, for its name
    output: Value | None = None
    uses_tanh: bool = False
    # forward's expression of what it returns from the launch's result ``{r}``: its per-row sums added
    # up and scaled (``{r}.sum() / x.numel()``) for a loss over every element; "" to return it as it is
    epilogue: str = ""
    names: set[str] = field(default_factory=set)  # every kernel name taken (the backward's are fresh)
    # group norm's rows: the number of groups of dimension 1 (a kernel argument or a literal), each
    # (sample, group) one row of ``main.numel() // (main.shape[0] * groups)`` elements; "" for rows of
    # the last dimension
    groups: str = ""
    # whether the body reads the coordinates of each element (``coord_0`` ... over S's dimensions, from
    # ``size_0`` ...): ``torch.arange`` of an input's size, placed along one of them
    coordinates: bool = False

    @property
    def rows(self) -> bool:
        return any(isinstance(s, Reduce) for s in self.body)


def _is_name(part: Any) -> bool:
    return isinstance(part, str) and part.isidentifier() and part.isascii() and not keyword.iskeyword(part)


def module_path(path: Any) -> str:
    """``path`` if it names a submodule or parameter of the module (``norm``, ``net.1``,
    ``blocks.0.weight``): names and container indices, the first a name; else ``Unsupported``."""
    parts: list[str] = path.split(".") if isinstance(path, str) else [""]
    if not _is_name(parts[0]) or not all(_is_name(p) or (p.isascii() and p.isdigit()) for p in parts):
        raise Unsupported(f"the trace names {str(path)[:80]!r}, which is not an attribute path")
    return str(path)


def attribute_path(path: Any) -> str:
    """``path`` if it names an attribute of the module (``eps``, ``norm.eps``, ``blocks.0.eps``):
    :func:`module_path`, its last part a name; else ``Unsupported``."""
    if not _is_name(module_path(path).rpartition(".")[2]):
        raise Unsupported(f"the trace names {str(path)[:80]!r}, which is not an attribute path")
    return str(path)


def require_direct(class_name: str, trace: dict[str, Any]) -> None:
    """``Unsupported`` unless the traced class derives from ``nn.Module`` itself."""
    if not trace.get("direct_module", False):
        bases = ", ".join(trace.get("bases", [])) or "another class"
        raise Unsupported(f"{class_name} derives from {bases}; only direct nn.Module subclasses")


def check_names(trace: dict[str, Any]) -> None:
    """Refuse a trace any of whose names would not be a name in code. The trace comes from the
    sandbox that ran the module's code, which could have written any of it, and its names become
    code: nodes' names are variables, placeholders' names arguments, attribute paths ``self.…``
    expressions. So each is checked before anything is written from it (``Unsupported``)."""
    for node in trace.get("nodes", []):
        if not _is_name(node.get("name")):
            raise Unsupported(f"the trace names a node {str(node.get('name'))[:80]!r}")
        op, target = node.get("op"), node.get("target")
        if op == "placeholder" and not _is_name(target.lstrip("*") if isinstance(target, str) else None):
            raise Unsupported(f"the trace names an argument of forward {str(target)[:80]!r}")
        if op in ("get_attr", "call_module"):
            module_path(target)
        for param in (node.get("params") or {}).values():
            module_path(param.get("target") if isinstance(param, dict) else None)
        _check_refs([node.get("args"), node.get("kwargs")])
    for setting in trace.get("settings", []):
        attribute_path(setting.get("path") if isinstance(setting, dict) else None)


def _check_refs(value: Any) -> None:
    if isinstance(value, dict):
        if "node" in value and not _is_name(value["node"]):
            raise Unsupported(f"the trace names a node {str(value['node'])[:80]!r}")
        for key in ("attr", "derived"):
            if key in value:
                attribute_path(value[key])
        for item in value.values():
            _check_refs(item)
    elif isinstance(value, list):
        for item in value:
            _check_refs(item)


def on_self(path: str) -> str:
    """``self.norm.eps``; ``self.get_submodule("blocks.0").eps`` inside containers (``blocks.0.eps``).
    ``Unsupported`` for anything but an attribute path (:func:`attribute_path`)."""
    owner, _, attr = attribute_path(path).rpartition(".")
    return f"{module_expr(owner)}.{attr}" if owner else f"self.{attr}"


def module_expr(path: str) -> str:
    """``self.norm``; ``self.get_submodule("blocks.0")`` inside containers. ``Unsupported`` for
    anything but a module path (:func:`module_path`)."""
    if all(part.isidentifier() for part in module_path(path).split(".")):
        return f"self.{path}"
    return f'self.get_submodule("{path}")'


_READ_DTYPES = frozenset(
    "float64 float32 float16 bfloat16 int64 int32 int16 int8 uint8 bool complex64 complex128".split()
)
_PARAM_PATH = re.compile(r"[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_0-9]+)*")


def read_guards(trace: dict[str, Any]) -> list[tuple[str, str]]:
    """Refusals, in forward, of parameters whose dtype or shape differs from what forward's Python
    read while it was traced (``runners/trace.py``): the graph holds only for those.

    The reads come from the sandbox that ran the module's code, which could have written them: each
    becomes code only as a parameter path, a torch dtype's name or a tuple of sizes."""
    out = []
    for read in trace.get("param_reads", []):
        param, what, value = read.get("param"), read.get("what"), read.get("value")
        if not (isinstance(param, str) and _PARAM_PATH.fullmatch(param)):
            raise Unsupported(f"the trace read a parameter named {str(param)[:80]!r}")
        name = value.removeprefix("torch.") if what == "dtype" and isinstance(value, str) else None
        if name in _READ_DTYPES:
            check, value = f"{on_self(param)}.dtype != torch.{name}", f"torch.{name}"
        elif what == "shape" and isinstance(value, list) and all(type(v) is int and v >= 0 for v in value):
            value = tuple(value)
            check = f"tuple({on_self(param)}.shape) != {value!r}"
        else:
            raise Unsupported(f"the trace read {what!r} of {param} as {str(value)[:80]!r}")
        out.append((check, f"the kernel is specialised to {param}.{what} == {value}"))
    for read in trace.get("input_reads", []):  # torch.finfo(x.dtype): the input's dtype, read as a value
        arg, value = read.get("input"), read.get("value")
        name = value.removeprefix("torch.") if isinstance(value, str) else None
        if not (isinstance(arg, str) and arg.isidentifier()) or read.get("what") != "dtype":
            raise Unsupported(f"the trace read an input named {str(arg)[:80]!r}")
        if name not in _READ_DTYPES:
            raise Unsupported(f"the trace read the dtype of {arg} as {str(value)[:80]!r}")
        check = f"{arg}.dtype != torch.{name}"
        out.append((check, f"the kernel is specialised to {arg}.dtype == torch.{name}"))
    for setting in trace.get("settings", []):  # self.is_causal, self.approximate: traced as they were
        path, value = setting.get("path"), setting.get("value")
        if not (isinstance(path, str) and _PARAM_PATH.fullmatch(path)):
            raise Unsupported(f"the trace read a setting named {str(path)[:80]!r}")
        if not isinstance(value, bool | str):
            raise Unsupported(f"the trace read self.{path} as {str(value)[:80]!r}")
        out.append(
            (f"{on_self(path)} != {value!r}", f"the kernel is specialised to self.{path} == {value!r}")
        )
    return out


def dtype_expr(atoms: tuple[str, ...]) -> str:
    return atoms[0] if len(atoms) == 1 else f"_result_dtype({', '.join(atoms)})"


def node_refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "node" in value:
            return [value["node"]]
        return [n for v in value.values() for n in node_refs(v)]
    if isinstance(value, list):
        return [n for v in value for n in node_refs(v)]
    return []


def promote(values: list[Value]) -> tuple[str, ...]:
    """The runtime dtype of a result: its tensor operands' dtypes promoted (numbers do not count)."""
    tensors = [v for v in values if v.kind not in (SCALAR, DTYPE, PAIR)]
    floats = [v for v in tensors if not v.is_bool]
    atoms: list[str] = []
    for v in floats or tensors:
        atoms.extend(a for a in v.dtype if a not in atoms)
    if not floats and values:
        return ("torch.float32",)  # booleans with a Python float: torch's default dtype
    return tuple(atoms)
