"""The ``template`` generator: readable Triton for common patterns, no model.

The module is traced in a sandbox (``runners/trace.py``: ``torch.fx`` runs the
user's code); everything here works on the JSON description of the graph, in
plain Python, and is deterministic: the same module gives the same code, byte
for byte. One fused kernel is written per module:

- a **pointwise** chain (arithmetic with tensors, row vectors such as a bias,
  and scalars; activations; comparisons, ``where``, clamps, casts) becomes one
  elementwise kernel over the flattened tensor;
- anything with a **reduction over the last dimension** (sum, mean, amax,
  amin, var, softmax, log_softmax, layer_norm, rms_norm, written out or
  called) becomes a row kernel, one program per row holding the whole row
  (``BLOCK_SIZE = next_power_of_2(n_cols)``), with the pointwise work before
  and after it (a residual add, the affine weights) fused in;
- a **gated activation** (SwiGLU ``silu(a) * b``, GeGLU ``gelu(a) * b``) on an
  input whose last dimension holds both halves (``x.chunk(2, dim=-1)``,
  ``torch.chunk``, ``x.split(n, dim=-1)``, ``x[..., :n]`` and ``x[..., n:]``
  with ``n`` a literal, a module attribute or ``x.shape[-1] // 2``) reads both
  halves from that one input, each row's second half ``n_cols`` further on;
  the output has half the input's last dimension. Forward refuses widths the
  split does not halve. Gate and up as separate inputs are plain pointwise.

The kernels load in the input's dtype, compute in float32 and store in the
output's dtype; every size comes from the tensors at call time. Numbers that
``forward`` reads from the module (``self.eps``, ``self.norm.eps``) are read
at call time too; settings that shape the kernel (a reduction's ``dim``, the
GELU approximation, a ``pow`` exponent) are checked at the top of ``forward``
when they come from the module, so an instance built differently raises
instead of computing something else.

The emitted class keeps the original name, constructor (copied verbatim, with
what it needs from its file) and ``forward`` signature, so the original's
``state_dict`` loads. Every launch goes through ``_launch_config``, which
returns the kernel, its grid and its settings: on CUDA tensors with compiled
Triton, an ``@triton.autotune`` wrapper of the same kernel (pointwise: BLOCK_SIZE
512 to 4096 by 4 or 8 warps, keyed on ``n_elements``; rows: 4 to 32 warps,
keyed on ``n_cols``, BLOCK_SIZE holding the row); under the Triton interpreter
(``triton.jit`` then gives no ``JITFunction``), a plain launch with fixed
settings, since timing configs there means nothing. The generated module reads
no environment variables: the static screen forbids it. Reductions over other
dimensions, views and reshapes, and per-row tensors other than reductions are
future work. A graph with matrix products (``nn.Linear``, ``F.linear``, ``x @ W``)
goes to ``runners/generators/gemm.py``: one tiled GEMM kernel per product, the
pointwise ops after it fused into its epilogue. A graph whose outputs are larger
than every input it reads (RoPE's cos and sin tables, built from positions and
inverse frequencies) goes to ``runners/generators/outer.py``: one kernel over the
outputs' shape, each input read where it broadcasts.

The trace (``runners/trace.py``) may have read parameters' dtypes or shapes as
values to follow a branch in forward (T5's ``if self.weight.dtype in ...``); each
read becomes a guard in forward, which the suggestion turns into the original
computation for other parameters (``runners/fallback.py``).

Each kernel whose output has a gradient also gets a **backward** kernel: it recomputes the
forward's values (row by row for row kernels, one program walking every ``n_programs``-th row) and
applies the chain rule to the kernel's own statements (``runners/generators/autodiff.py``), writing
input gradients elementwise and summing parameter gradients over rows (in registers, one partial row
per program, added up by torch; per element for pointwise kernels). A
``torch.autograd.Function`` launches both kernels, saving only the tensors it was given; the
class's ``forward`` applies it when autograd records (grad enabled and a tensor requiring grad),
and otherwise calls the forward op alone, which saves the Function's cost per call. A kernel
with an op that has no derivative rule, or a boolean output, gets the forward alone. The
candidate also carries its code without the backward (``Candidate.without_backward``): what is
suggested if the judge finds its gradients wrong. The backward launch is not tuned yet.

Anything outside these patterns raises ``GeneratorError`` naming the first
unsupported op and its node, e.g. ``template: unsupported op torch.cumsum
(node 'cumsum')``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runners import pyast, sandbox
from runners.generators import autodiff
from runners.generators.base import Candidate, GeneratorDeclined, GeneratorError, Problem
from runners.source import NotStandalone, class_parts

TRACE_LIMITS = sandbox.Limits(timeout_s=120.0, memory_mb=8192)

# Kinds of value, by how they broadcast against the input's shape S.
FULL = "full"  # shape S
COL = "col"  # a row vector of S[-1] elements (a bias), broadcast along the last dimension
ROW = "row"  # one value per row, shape S[:-1] + [1] (a keepdim reduction)
ROW_FLAT = "row_flat"  # one value per row, shape S[:-1]
SCALAR = "scalar"  # a Python number, literal or read from the module at call time
OTHER = "other"  # a tensor of any other shape
DTYPE = "dtype"  # ``x.dtype``
PAIR = "pair"  # ``x.max(dim)``: (values, indices)
SPLIT = "split"  # an input whose last dimension holds two halves (``a, b = x.chunk(2, dim=-1)``)
HALVES = "halves"  # ``x.chunk(2, dim=-1)`` itself: its items are taken with ``[0]`` and ``[1]``
SHAPE = "shape"  # ``x.shape`` (a forward expression)
SIZE = "size"  # ``x.shape[-1]``, ``x.size(-1) // 2``: a number computed from a shape (a forward expression)

# ---------------------------------------------------------------------------
# Op tables

# How each spelling names its arguments: target -> (op, parameter names, in order).
_SPELLINGS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _spell(op: str, params: tuple[str, ...], *targets: str) -> None:
    for target in targets:
        _SPELLINGS[target] = (op, params)


def _torch_and_method(name: str) -> tuple[str, str]:
    return f"torch.{name}", f"Tensor.{name}"


_BINARY_PARAMS = ("input", "other")
for _op, _operator in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv")):
    _spell(_op, _BINARY_PARAMS, f"operator.{_operator}", *_torch_and_method(_op))
    _spell(_op + "_", _BINARY_PARAMS, f"operator.i{_operator}", f"Tensor.{_op}_")
_spell("sub", _BINARY_PARAMS, "torch.subtract")
_spell("mul", _BINARY_PARAMS, "torch.multiply")
_spell("div", _BINARY_PARAMS, "torch.true_divide", "torch.divide")
_spell("rsub", _BINARY_PARAMS, *_torch_and_method("rsub"))
for _op in ("gt", "lt", "ge", "le", "eq", "ne"):
    _spell(_op, _BINARY_PARAMS, f"operator.{_op}", *_torch_and_method(_op))
for _op in ("maximum", "minimum"):
    _spell(_op, _BINARY_PARAMS, *_torch_and_method(_op))
for _op in ("neg", "abs"):
    _spell(_op, ("input",), f"operator.{_op}", *_torch_and_method(_op), f"Tensor.{_op}_")
_spell("abs", ("input",), "builtins.abs")
for _op in ("exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu"):
    _spell(_op, ("input",), *_torch_and_method(_op))
    _spell(_op + "_", ("input",), f"Tensor.{_op}_")
_spell("sigmoid", ("input",), "torch.nn.functional.sigmoid", "nn.Sigmoid")
_spell("tanh", ("input",), "torch.nn.functional.tanh", "nn.Tanh")
_spell("relu", ("input", "inplace"), "torch.nn.functional.relu", "nn.ReLU")
_spell("silu", ("input", "inplace"), "torch.nn.functional.silu", "nn.SiLU")
_spell("gelu", ("input", "approximate"), "torch.nn.functional.gelu", "nn.GELU")
for _op in ("erf", "square", "cos", "sin"):
    _spell(_op, ("input",), *_torch_and_method(_op))
_spell("erf", ("input",), "torch.special.erf")
_spell("mish", ("input", "inplace"), "torch.nn.functional.mish", "nn.Mish")
_spell("softplus", ("input", "beta", "threshold"), "torch.nn.functional.softplus", "nn.Softplus")
_spell("pow", ("input", "exponent"), "operator.pow", *_torch_and_method("pow"))
_spell("clamp", ("input", "min", "max"), *_torch_and_method("clamp"), *_torch_and_method("clip"))
_spell("clamp_min", ("input", "min"), *_torch_and_method("clamp_min"))
_spell("clamp_max", ("input", "max"), *_torch_and_method("clamp_max"))
_spell("where", ("condition", "input", "other"), "torch.where")
_spell("where", ("input", "condition", "other"), "Tensor.where")
for _op in ("float", "half", "bfloat16"):
    _spell(_op, ("input",), f"Tensor.{_op}")
_spell("to", ("input", "dtype"), "Tensor.to", "Tensor.type")
_spell("type_as", ("input", "other"), "Tensor.type_as")
for _op in ("contiguous", "clone", "detach"):
    _spell("identity", ("input",), f"Tensor.{_op}")
_spell("identity", ("input",), "torch.clone", "torch.detach", "nn.Identity")
_spell("dropout", ("input", "p", "training", "inplace"), "torch.nn.functional.dropout", "nn.Dropout")
for _op in ("sum", "mean"):
    _spell(_op, ("input", "dim", "keepdim", "dtype"), *_torch_and_method(_op))
for _op in ("amax", "amin"):
    _spell(_op, ("input", "dim", "keepdim"), *_torch_and_method(_op))
for _op in ("max", "min"):
    _spell(_op, ("input", "dim", "keepdim"), *_torch_and_method(_op))
for _op in ("var", "std"):
    _spell(_op, ("input", "dim", "unbiased", "keepdim", "correction"), *_torch_and_method(_op))
for _op in ("softmax", "log_softmax"):
    _spell(_op, ("input", "dim", "dtype"), *_torch_and_method(_op))
    _spell(_op, ("input", "dim", "_stacklevel", "dtype"), f"torch.nn.functional.{_op}")
_spell("softmax", ("input", "dim"), "nn.Softmax")
_spell("log_softmax", ("input", "dim"), "nn.LogSoftmax")
_spell(
    "layer_norm",
    ("input", "normalized_shape", "weight", "bias", "eps"),
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "nn.LayerNorm",
)
_spell(
    "rms_norm",
    ("input", "normalized_shape", "weight", "eps"),
    "torch.nn.functional.rms_norm",
    "torch.rms_norm",
    "nn.RMSNorm",
)
_spell("getitem", ("input", "index"), "operator.getitem")
_spell("getattr", ("input", "name"), "getattr")
_spell("size", ("input", "dim"), "Tensor.size")
_spell("floordiv", ("input", "other"), "operator.floordiv")
_spell("chunk", ("input", "chunks", "dim"), *_torch_and_method("chunk"))
_spell("split", ("input", "split_size", "dim"), "Tensor.split", "torch.split", "torch.functional.split")

# Pointwise ops: op -> Triton expression over the operands {a}, {b}, {c} (names or literals).
_UNARY = {
    "neg": "-{a}",
    "abs": "tl.abs({a})",
    "exp": "tl.exp({a})",
    "log": "tl.log({a})",
    "sqrt": "tl.sqrt({a})",
    "rsqrt": "tl.rsqrt({a})",
    "sigmoid": "tl.sigmoid({a})",
    "tanh": "_tanh({a})",
    "relu": "tl.maximum({a}, 0.0)",
    "silu": "{a} * tl.sigmoid({a})",
    "gelu": "0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))",  # 1 / sqrt(2)
    "erf": "tl.erf({a})",
    "cos": "tl.cos({a})",
    "sin": "tl.sin({a})",
    "square": "{a} * {a}",
    # softplus with torch's defaults (beta 1, linear above 20), and mish = x * tanh(softplus(x));
    # exp of at most 20, so the branch where() leaves out never overflows (nor does its gradient)
    "softplus": "tl.where({a} > 20.0, {a}, tl.log(1.0 + tl.exp(tl.minimum({a}, 20.0))))",
    "mish": "{a} * _tanh(tl.where({a} > 20.0, {a}, tl.log(1.0 + tl.exp(tl.minimum({a}, 20.0)))))",
    # sqrt(2 / pi) and the cubic coefficient of the tanh approximation
    "gelu_tanh": "0.5 * {a} * (1.0 + _tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))",
}
_BINARY = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "rsub": "{b} - {a}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "maximum": "tl.maximum({a}, {b})",
    "minimum": "tl.minimum({a}, {b})",
    "clamp_min": "tl.maximum({a}, {b})",
    "clamp_max": "tl.minimum({a}, {b})",
}
_COMPARE = {
    "gt": "{a} > {b}",
    "lt": "{a} < {b}",
    "ge": "{a} >= {b}",
    "le": "{a} <= {b}",
    "eq": "{a} == {b}",
    "ne": "{a} != {b}",
}
# pow with these exponents is exact arithmetic; others go through exp and log.
_POW = {
    0.5: "tl.sqrt({a})",
    -0.5: "tl.rsqrt({a})",
    1: "{a}",
    2: "{a} * {a}",
    3: "{a} * {a} * {a}",
    4: "{a} * {a} * {a} * {a}",
    -1: "1.0 / {a}",
    -2: "1.0 / ({a} * {a})",
}
# Row reductions: op -> (Triton reduction, the value masked-off lanes must hold).
_REDUCE = {
    "sum": ("tl.sum", "0.0"),
    "max": ("tl.max", '-float("inf")'),
    "min": ("tl.min", 'float("inf")'),
}
_CASTS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16"}
_FLOAT_DTYPES = ("float32", "float16", "bfloat16")

_RESULT_DTYPE = '''
def _result_dtype(*dtypes):
    """torch's type promotion over dtypes (promote_types only when they differ: it is a dispatched op)."""
    result = dtypes[0]
    for dtype in dtypes[1:]:
        if dtype != result:
            result = torch.promote_types(result, dtype)
    return result
'''
_TANH = '''
@triton.jit
def _tanh(x):
    """tanh(x) = 2 * sigmoid(2x) - 1: triton.language has no tanh, and libdevice's skips the interpreter."""
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0
'''

# Names the kernels and forward use for themselves.
_KERNEL_NAMES = frozenset(
    """pid row cols offsets split_offsets mask n_cols n_elements out_ptr BLOCK_SIZE tl triton torch float
    _tanh n_rows n_programs row_index d_out d_out_ptr N_BUCKET""".split()
)
_FORWARD_NAMES = ("n_cols", "n_rows", "n_elements", "out", "kernel", "grid", "config")


class Unsupported(Exception):
    """The graph is outside the templates; the message names the op and node."""


# ---------------------------------------------------------------------------
# The kernel being built


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


@dataclass
class Load:
    var: str  # kernel variable (the pointer argument is ``{var}_ptr``)
    kind: str  # FULL or COL
    source: str  # forward expression of the tensor
    is_bool: bool
    placeholder: str | None = None  # the forward argument it comes from, if any
    half: int | None = None  # for a SPLIT input: which half of its last dimension (0 or 1)
    pointer: str = ""  # the pointer argument, when not ``{var}_ptr`` (both halves read one input)

    @property
    def ptr(self) -> str:
        return self.pointer or f"{self.var}_ptr"


@dataclass
class Reduce:
    var: str
    op: str  # a key of _REDUCE
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
    names: set[str] = field(default_factory=set)  # every kernel name taken (the backward's are fresh)

    @property
    def rows(self) -> bool:
        return any(isinstance(s, Reduce) for s in self.body)


def _literal(value: float | int) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return 'float("nan")'
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


def _on_self(path: str) -> str:
    """``self.norm.eps``; ``self.get_submodule("blocks.0").eps`` inside containers (``blocks.0.eps``)."""
    owner, _, attr = path.rpartition(".")
    if not owner or all(part.isidentifier() for part in owner.split(".")):
        return f"self.{path}"
    return f'self.get_submodule("{owner}").{attr}'


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
            check, value = f"{_on_self(param)}.dtype != torch.{name}", f"torch.{name}"
        elif what == "shape" and isinstance(value, list) and all(type(v) is int and v >= 0 for v in value):
            value = tuple(value)
            check = f"tuple({_on_self(param)}.shape) != {value!r}"
        else:
            raise Unsupported(f"the trace read {what!r} of {param} as {str(value)[:80]!r}")
        out.append((check, f"the kernel is specialised to {param}.{what} == {value}"))
    return out


def _dtype_expr(atoms: tuple[str, ...]) -> str:
    return atoms[0] if len(atoms) == 1 else f"_result_dtype({', '.join(atoms)})"


class _Builder:
    """Walks the traced graph once, in order, turning each node into kernel statements."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.nodes: list[dict[str, Any]] = trace["nodes"]
        self.values: dict[str, Value] = {}
        self.taken: set[str] = set(_KERNEL_NAMES)
        self.node: dict[str, Any] = {}
        self.label = ""
        self.squares: set[str] = set()  # kernel variables holding v * v
        self.halves: dict[int, Value] = {}  # the halves of the SPLIT input read so far
        self.live = self._live()
        tensors = [
            n for n in self.nodes if n["op"] == "placeholder" and "shape" in n and n["name"] in self.live
        ]
        if not tensors:
            raise Unsupported("forward computes nothing from a tensor input")
        split_inputs = [n for n in tensors if n["shape"] and self._split_input(n)]
        main = (
            split_inputs[0]
            if split_inputs
            else max(tensors, key=lambda n: (len(n["shape"]), math.prod(n["shape"])))
        )
        if not main["shape"]:
            raise Unsupported("the input is a 0-dimensional tensor")
        shape = list(main["shape"])
        split = bool(split_inputs)
        if split:
            shape[-1] //= 2
        self.kernel = Kernel(shape, main["target"], split, guards=read_guards(trace))
        self.handlers: dict[str, Callable[[str, dict[str, Any]], Value]] = {
            **dict.fromkeys(_UNARY, self._unary),
            **dict.fromkeys(_BINARY, self._binary),
            **dict.fromkeys(_COMPARE, self._binary),
            **{op + "_": self._inplace for op in (*_UNARY, *_BINARY)},
            "gelu": self._gelu,
            "softplus": self._softplus,
            "pow": self._pow,
            "clamp": self._clamp,
            "clamp_min": self._clamp,
            "clamp_max": self._clamp,
            "where": self._where,
            **dict.fromkeys(_CASTS, self._cast),
            "to": self._cast,
            "type_as": self._cast,
            "identity": self._identity,
            "dropout": self._dropout,
            **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min"), self._reduce),
            "var": self._var,
            "std": self._var,
            "softmax": self._softmax,
            "log_softmax": self._softmax,
            "layer_norm": self._layer_norm,
            "rms_norm": self._rms_norm,
            "getitem": self._getitem,
            "getattr": self._getattr,
            "chunk": self._chunk,
            "split": self._split,
            "size": self._size,
            "floordiv": self._floordiv,
        }

    # -- naming ---------------------------------------------------------------

    def fresh(self, base: str, pointer: bool = False) -> str:
        """An unused kernel name (with ``pointer``, ``{name}_ptr`` is free too and reserved)."""
        base = base.replace(".", "_")
        name, i = base, 1
        while name in self.taken or (pointer and f"{name}_ptr" in self.taken):
            name, i = f"{base}_{i}", i + 1
        self.taken.update([name, f"{name}_ptr"] if pointer else [name])
        return name

    def fail(self, what: str) -> Unsupported:
        return Unsupported(f"{what} ({self.label})")

    # -- the walk -------------------------------------------------------------

    def build(self) -> Kernel:
        for node in self.nodes:
            if node["name"] not in self.live:
                continue
            self.node = node
            target = node.get("target", node["op"])
            self.label = f"node {node['name']!r}"
            if node["op"] == "placeholder":
                self.values[node["name"]] = self._placeholder(node)
            elif node["op"] == "get_attr":
                self.values[node["name"]] = self._tensor_source(
                    node["name"], node, _on_self(node["target"]), node.get("kind", "constant")
                )
            elif node["op"] == "output":
                self._output(node)
            else:
                self.values[node["name"]] = self._call(node, target)
        self.kernel.names = set(self.taken)
        return self.kernel

    def _live(self) -> set[str]:
        """Nodes the output depends on (an unused op need not be supported)."""
        by_name = {n["name"]: n for n in self.nodes}
        live: set[str] = set()
        todo = [n["name"] for n in self.nodes if n["op"] == "output"]
        while todo:
            name = todo.pop()
            if name in live:
                continue
            live.add(name)
            node = by_name[name]
            todo.extend(_node_refs([node.get("args", []), node.get("kwargs", {})]))
        return live

    def _split_input(self, main: dict[str, Any]) -> bool:
        """Whether forward takes ``main`` apart into the two halves of its last dimension (chunk, split
        or slicing), so that the kernel computes over one half's shape. Near misses (another dimension,
        three pieces) are left for the handlers to decline by name."""
        s = main["shape"]
        half = [*s[:-1], s[-1] // 2]
        for node in self.nodes:
            if node["name"] not in self.live or node.get("op") not in ("call_function", "call_method"):
                continue
            args = node.get("args", [])
            if not args or args[0] != {"node": main["name"]} or s[-1] % 2:
                continue
            op = _SPELLINGS.get(node.get("target", ""), ("",))[0]
            if op in ("chunk", "split") and node.get("shapes") == [half, half]:
                return True
            if op == "getitem" and node.get("shape") == half:
                return True
        return False

    def _call(self, node: dict[str, Any], target: str) -> Value:
        display = node.get("module") if node["op"] == "call_module" else target
        self.label = f"node {node['name']!r}"
        if node.get("unsupported") or display not in _SPELLINGS:
            raise Unsupported(f"unsupported op {display} (node {node['name']!r})")
        op, params = _SPELLINGS[display]
        self.label = f"{display}, node {node['name']!r}"
        args, kwargs = list(node.get("args", [])), dict(node.get("kwargs", {}))
        if node["op"] == "call_module":
            kwargs.update(_module_arguments(node, params))
        if len(args) > len(params):
            raise self.fail(f"unsupported call of {display} with {len(args)} arguments")
        bound = dict(zip(params, args, strict=False))
        for key, value in kwargs.items():
            if key not in params or key in bound:
                raise self.fail(f"unsupported argument {key}= of {display}")
            bound[key] = value
        return self.handlers[op](op, bound)

    # -- sources --------------------------------------------------------------

    def _placeholder(self, node: dict[str, Any]) -> Value:
        name = node["target"]
        if name.startswith("*"):
            raise Unsupported(f"forward takes {name}")
        if "shape" in node and self.kernel.split and name == self.kernel.main:
            dtype = node.get("dtype", "")
            if dtype not in _FLOAT_DTYPES:
                raise Unsupported(f"input {name} is a {dtype} value; only floating tensors")
            return Value(node["name"], SPLIT, (f"{name}.dtype",), shape=node["shape"], source=name)
        if "shape" in node:
            return self._tensor_source(node["name"], node, name, "input")
        default = node.get("example", node.get("default"))
        if isinstance(default, int | float) and not isinstance(default, bool):
            arg = self.fresh(node["name"])
            self.kernel.scalars.append((arg, name))
            return Value(arg, SCALAR, attr=name)
        raise Unsupported(f"forward argument {name!r} is not a tensor or a number")

    def _tensor_source(self, var: str, meta: dict[str, Any], source: str, role: str) -> Value:
        shape, dtype = list(meta.get("shape", [])), meta.get("dtype", "")
        is_bool = dtype == "bool"
        if not is_bool and dtype not in _FLOAT_DTYPES:
            raise Unsupported(f"{role} {source} is a {dtype or 'non-tensor'} value; only floating tensors")
        if role == "constant":
            raise Unsupported(f"{source} is a tensor created in forward")
        s = self.kernel.shape
        if shape == s:
            kind = FULL
        elif shape and shape[-1] == s[-1] and math.prod(shape) == s[-1] and len(shape) <= len(s):
            kind = COL
        else:
            return Value(var, OTHER, shape=shape, source=source)
        name = self.fresh(var, pointer=True)
        placeholder = source if role == "input" else None
        self.kernel.loads.append(Load(name, kind, source, is_bool, placeholder))
        atom = f"{source}.dtype"
        return Value(name, kind, (atom,), is_bool, shape=shape, source=source)

    def _param(self, spec: dict[str, Any]) -> Value:
        return self._tensor_source(spec["target"], spec, _on_self(spec["target"]), "parameter")

    # -- arguments ------------------------------------------------------------

    def operand(self, arg: Any, what: str = "operand") -> Value:
        """A value an op computes with: a node, a number, or a number read from the module."""
        if isinstance(arg, dict) and "node" in arg:
            value = self.values[arg["node"]]
            if value.kind == OTHER:
                raise self.fail(
                    f"unsupported broadcast: {arg['node']} has shape {value.shape}, "
                    f"the input {self.kernel.shape}"
                )
            if value.kind == SPLIT:
                raise self.fail(
                    f"unsupported use of {value.source} whole: the kernel reads it as the two halves "
                    "of its last dimension"
                )
            if value.kind in (DTYPE, PAIR, HALVES, SHAPE, SIZE):
                raise self.fail(f"unsupported {what} {arg['node']}")
            return value
        if isinstance(arg, dict) and "param" in arg:
            return self._param(arg["param"])
        if isinstance(arg, dict) and "attr" in arg:
            return self._attribute(arg["attr"], arg["value"])
        if isinstance(arg, dict) and "derived" in arg:
            raise self.fail(f"a number computed from {_on_self(arg['derived'])} in forward")
        if isinstance(arg, int | float) and not isinstance(arg, bool):
            return Value(_literal(arg), SCALAR)
        raise self.fail(f"unsupported {what} {arg!r}")

    def _attribute(self, path: str, value: Any) -> Value:
        for arg, expr in self.kernel.scalars:
            if expr == _on_self(path):
                return Value(arg, SCALAR, attr=path)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.fail(f"{_on_self(path)} is {value!r}, not a number")
        arg = self.fresh(path)
        self.kernel.scalars.append((arg, _on_self(path)))
        return Value(arg, SCALAR, attr=path)

    def constant(self, arg: Any, what: str) -> Any:
        """A setting that shapes the kernel: a literal, or a module attribute checked in forward."""
        if isinstance(arg, dict) and "attr" in arg:
            self._guard(arg["attr"], arg["value"])
            return arg["value"]
        if isinstance(arg, list):
            return [self.constant(a, what) for a in arg]
        if isinstance(arg, dict):
            raise self.fail(f"the {what} must be a constant")
        return arg

    def _guard(self, path: str, value: Any) -> None:
        """Refuse, in forward, an instance whose ``path`` attribute is not ``value``."""
        wanted = tuple(value) if isinstance(value, list) else value
        expr = f"tuple({_on_self(path)})" if isinstance(wanted, tuple) else _on_self(path)
        guard = (f"{expr} != {wanted!r}", f"the kernel is specialised to {path} == {wanted!r}")
        if guard not in self.kernel.guards:
            self.kernel.guards.append(guard)

    def dtype_of(self, arg: Any) -> tuple[str, ...]:
        if isinstance(arg, dict) and "dtype" in arg:
            name = arg["dtype"]
            if name not in _FLOAT_DTYPES:
                raise self.fail(f"unsupported cast to {name}")
            return (f"torch.{name}",)
        if isinstance(arg, dict) and "node" in arg:
            value = self.values[arg["node"]]
            if value.kind == DTYPE or (value.kind not in (SCALAR, PAIR) and not value.is_bool):
                return value.dtype
        raise self.fail(f"unsupported cast to {arg!r}")

    # -- emitting -------------------------------------------------------------

    def assign(self, base: str, expr: str) -> str:
        name = self.fresh(base)
        self.kernel.body.append((name, expr))
        return name

    def reduce(self, base: str, op: str, operand: str, template: str = "{r}") -> str:
        name = self.fresh(base)
        self.kernel.body.append(Reduce(name, op, operand, template))
        return name

    def broadcast(self, operands: list[Value]) -> str:
        kinds = {v.kind for v in operands if v.kind != SCALAR}
        if not kinds:
            return SCALAR
        if ROW_FLAT in kinds and len(kinds) > 1:
            raise self.fail("unsupported broadcast of a reduction without keepdim against a tensor")
        if len(kinds) == 1:
            return kinds.pop()
        return FULL  # FULL with anything, or a per-row value against a row vector

    def check_shape(self, value: Value) -> Value:
        """The node's traced shape must be what the broadcast rules above say it is."""
        shape = self.node.get("shape")
        s = self.kernel.shape
        expected = {FULL: s, ROW: [*s[:-1], 1], ROW_FLAT: s[:-1]}.get(value.kind)
        if shape is None or value.kind == SCALAR:
            return value
        if expected is None:  # a row vector
            ok = shape[-1:] == s[-1:] and math.prod(shape) == s[-1] and len(shape) <= len(s)
        else:
            ok = shape == expected
        if not ok:
            raise self.fail(f"unsupported broadcast: gives shape {shape}, the input is {s}")
        return value

    def result(self, expr: str, operands: list[Value], is_bool: bool = False) -> Value:
        kind = self.broadcast(operands)
        dtype = ("torch.bool",) if is_bool else _promote(operands)
        name = self.assign(self.node["name"], expr)
        return self.check_shape(Value(name, kind, dtype, is_bool))

    def floats(self, operands: list[Value]) -> list[str]:
        """Operand texts for arithmetic (a boolean tensor counts as 0.0 and 1.0)."""
        return [f"{v.name}.to(tl.float32)" if v.is_bool else v.name for v in operands]

    def tag(self, name: str) -> None:
        if name not in self.kernel.tags:
            self.kernel.tags.append(name)

    # -- pointwise ops ----------------------------------------------------------

    def _unary(self, op: str, bound: dict[str, Any]) -> Value:
        self.check_inplace(op, bound)
        a = self.operand(bound["input"])
        if a.kind == SCALAR:
            raise self.fail(f"unsupported op {op} of a number")
        self.kernel.uses_tanh |= "_tanh" in _UNARY[op]
        self.tag(op)
        return self.result(_UNARY[op].format(a=self.floats([a])[0]), [a])

    def _gelu(self, op: str, bound: dict[str, Any]) -> Value:
        approximate = self.constant(bound.get("approximate", "none"), "GELU approximation")
        if approximate not in ("none", "tanh"):
            raise self.fail(f"unsupported GELU approximation {approximate!r}")
        return self._unary("gelu" if approximate == "none" else "gelu_tanh", {"input": bound["input"]})

    def _softplus(self, op: str, bound: dict[str, Any]) -> Value:
        beta = self.constant(bound.get("beta", 1.0), "softplus beta")
        threshold = self.constant(bound.get("threshold", 20.0), "softplus threshold")
        if (beta, threshold) != (1.0, 20.0):
            raise self.fail(
                f"unsupported softplus beta={beta!r}, threshold={threshold!r}: only torch's defaults"
            )
        return self._unary("softplus", {"input": bound["input"]})

    def _binary(self, op: str, bound: dict[str, Any]) -> Value:
        a, b = self.operand(bound["input"]), self.operand(bound["other"])
        if a.kind == SCALAR and b.kind == SCALAR and not (a.attr or b.attr):
            raise self.fail(f"unsupported op {op} of two numbers")
        if op in _COMPARE:
            self.tag(op)
            return self.result(_COMPARE[op].format(a=a.name, b=b.name), [a, b], is_bool=True)
        self.tag(op)
        fa, fb = self.floats([a, b])
        value = self.result(_BINARY[op].format(a=fa, b=fb), [a, b])
        if op == "mul" and a.name == b.name:
            self.squares.add(value.name)
        return value

    def _inplace(self, op: str, bound: dict[str, Any]) -> Value:
        """``x.add_(y)``, ``x += y``: the same value, provided nothing else reads the operand."""
        self.check_inplace(op, {**bound, "inplace": True})
        return self.handlers[op[:-1]](op[:-1], bound)

    def check_inplace(self, op: str, bound: dict[str, Any]) -> None:
        first = bound["input"]
        if bound.get("inplace") is True and isinstance(first, dict) and "node" in first:
            readers = [n for n in self.nodes if first["node"] in _node_refs([n.get("args"), n.get("kwargs")])]
            if len(readers) > 1:
                raise self.fail(f"unsupported in-place {op} of a value that is read elsewhere")

    def _pow(self, op: str, bound: dict[str, Any]) -> Value:
        a = self.operand(bound["input"])
        exponent = bound["exponent"]
        if isinstance(exponent, dict) and "node" in exponent:
            raise self.fail("unsupported pow with a tensor exponent")
        if a.kind == SCALAR:
            raise self.fail("unsupported pow of a number")
        p = self.constant(exponent, "pow exponent")
        if isinstance(p, bool) or not isinstance(p, int | float) or p == 0:
            raise self.fail(f"unsupported pow exponent {p!r}")
        self.tag("pow")
        (x,) = self.floats([a])
        if p in _POW:
            value = self.result(_POW[p].format(a=x), [a])
            if p == 2:
                self.squares.add(value.name)
            return value
        if float(p).is_integer():
            magnitude = self.assign(
                f"{self.node['name']}_abs", f"tl.exp({_literal(p)} * tl.log(tl.abs({x})))"
            )
            expr = f"tl.where({x} < 0, -{magnitude}, {magnitude})" if int(p) % 2 else magnitude
            return self.result(expr, [a])
        return self.result(f"tl.exp({_literal(p)} * tl.log({x}))", [a])

    def _clamp(self, op: str, bound: dict[str, Any]) -> Value:
        low, high = bound.get("min"), bound.get("max")
        if low is None and high is None:
            raise self.fail("clamp without bounds")
        value = self.operand(bound["input"])
        operands = [value]
        (expr,) = self.floats([value])
        for bound_op, limit in (("clamp_min", low), ("clamp_max", high)):
            if limit is not None:
                operands.append(self.operand(limit))
                expr = _BINARY[bound_op].format(a=expr, b=self.floats(operands[-1:])[0])
        self.tag("clamp")
        return self.result(expr, operands)

    def _where(self, op: str, bound: dict[str, Any]) -> Value:
        cond = self.operand(bound["condition"], "condition")
        a, b = self.operand(bound["input"]), self.operand(bound["other"])
        if not cond.is_bool:
            raise self.fail("unsupported where with a non-boolean condition")
        self.tag("where")
        fa, fb = self.floats([a, b])
        value = self.result(f"tl.where({cond.name}, {fa}, {fb})", [cond, a, b])
        value.dtype = _promote([a, b]) if (a.kind != SCALAR or b.kind != SCALAR) else ("torch.float32",)
        return value

    def _cast(self, op: str, bound: dict[str, Any]) -> Value:
        a = self.operand(bound["input"])
        if op in _CASTS:
            dtype: tuple[str, ...] = (f"torch.{_CASTS[op]}",)
        elif op == "type_as":
            dtype = self.dtype_of(bound["other"])
        elif "dtype" in bound:
            dtype = self.dtype_of(bound["dtype"])
        else:
            raise self.fail("unsupported Tensor.to without a dtype")
        if a.is_bool:
            name = self.assign(self.node["name"], f"{a.name}.to(tl.float32)")
            return self.check_shape(Value(name, a.kind, dtype))
        return self.check_shape(Value(a.name, a.kind, dtype, shape=a.shape))  # float32 inside the kernel

    def _identity(self, op: str, bound: dict[str, Any]) -> Value:
        return self.operand(bound["input"])

    def _dropout(self, op: str, bound: dict[str, Any]) -> Value:
        """The identity in eval mode: nn.Dropout checks ``self.training`` in forward. The function's
        ``training=self.training`` was fixed when traced, so it passes only with p == 0."""
        if self.node["op"] == "call_module":
            check = f"self.training and {_on_self(self.node['target'] + '.p')} > 0"
            self.kernel.guards.append((check, "dropout is implemented for eval mode only"))
        elif bound.get("p", 0.5) != 0:
            raise self.fail("unsupported dropout with p > 0")
        return self.operand(bound["input"])

    # -- reductions over the last dimension -------------------------------------

    def last_dim(self, dim: Any, what: str) -> None:
        dim = self.constant(dim, "dim")
        if isinstance(dim, list) and len(dim) == 1:
            dim = dim[0]
        ndim = len(self.kernel.shape)
        if dim is None:
            raise self.fail(f"unsupported {what} over all dimensions")
        if not isinstance(dim, int) or dim not in (-1, ndim - 1):
            raise self.fail(f"unsupported {what} over dim {dim}: only the last dimension")
        if dim >= 0 and ndim > 1:
            check = f"{self.kernel.main}.dim() != {ndim}"
            reason = f"dim={dim} is the last dimension of {ndim}-dimensional inputs only"
            if (check, reason) not in self.kernel.guards:
                self.kernel.guards.append((check, reason))

    def row_operand(self, arg: Any, what: str) -> Value:
        value = self.operand(arg)
        if value.kind != FULL or value.is_bool:
            raise self.fail(f"unsupported {what} of a {'boolean' if value.is_bool else value.kind} value")
        return value

    def _reduce(self, op: str, bound: dict[str, Any]) -> Value:
        name = self.node["name"]
        if op in ("max", "min") and isinstance(bound.get("dim"), dict) and "node" in bound["dim"]:
            return self._binary("maximum" if op == "max" else "minimum", {**bound, "other": bound["dim"]})
        if bound.get("dtype") is not None:
            raise self.fail(f"unsupported {op} with dtype=")
        self.last_dim(bound.get("dim"), op)
        a = self.row_operand(bound["input"], op)
        keepdim = bool(self.constant(bound.get("keepdim", False), "keepdim"))
        kind = ROW if keepdim else ROW_FLAT
        reduce_op = {"amax": "max", "amin": "min"}.get(op, op)
        if op == "mean":
            value = Value(self.reduce(name, "sum", a.name, "{r} / n_cols"), kind, a.dtype)
        else:
            value = Value(self.reduce(name, reduce_op, a.name), kind, a.dtype)
        self.tag("mean_square" if op == "mean" and a.name in self.squares else op)
        if op in ("max", "min"):  # (values, indices)
            return Value(value.name, PAIR, items=(value,))
        return self.check_shape(value)

    def _getitem(self, op: str, bound: dict[str, Any]) -> Value:
        source, index = bound["input"], bound.get("index")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == PAIR:
            if index != 0:
                raise self.fail("unsupported use of the indices of max/min")
            return self.check_shape(value.items[0])
        if value is not None and value.kind == HALVES:
            if index not in (0, 1):
                raise self.fail(f"unsupported piece {index!r} of two halves")
            return self.check_shape(self._half(index))
        if value is not None and value.kind == SHAPE and isinstance(index, int):
            return Value(f"{value.name}[{index}]", SIZE, example=value.example[index])
        if value is not None and value.shape is not None and isinstance(index, list | dict):
            return self.check_shape(self._slice(value, index))
        raise self.fail("unsupported op operator.getitem (indexing)")

    def _getattr(self, op: str, bound: dict[str, Any]) -> Value:
        source, attr = bound["input"], bound.get("name")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == PAIR and attr == "values":
            return self.check_shape(value.items[0])
        if value is not None and attr == "dtype" and value.kind in (FULL, COL, ROW, ROW_FLAT, SPLIT):
            return Value(value.name, DTYPE, value.dtype)
        if value is not None and attr == "shape" and value.source is not None and value.shape is not None:
            return Value(f"{value.source}.shape", SHAPE, example=value.shape)
        raise self.fail(f"unsupported op getattr(.{attr})")

    # -- the two halves of the last dimension (gated activations) ---------------

    def _chunk(self, op: str, bound: dict[str, Any]) -> Value:
        """``a, b = x.chunk(2, dim=-1)``."""
        self.last_dim(bound.get("dim", 0), op)
        chunks = self.constant(bound.get("chunks"), "number of chunks")
        if chunks != 2:
            raise self.fail(
                f"unsupported {op} into {chunks!r} pieces: only the two halves of the last dimension"
            )
        self._split_source(bound["input"], op)
        self._halves_guard(None, None)
        return Value(self.node["name"], HALVES)

    def _split(self, op: str, bound: dict[str, Any]) -> Value:
        """``a, b = x.split(n, dim=-1)`` or ``torch.split(x, [n, n], -1)``, where x holds 2 * n."""
        self.last_dim(bound.get("dim", 0), op)
        pieces = self.node.get("shapes") or []
        if len(pieces) != 2 or pieces[0] != pieces[1]:
            raise self.fail(
                f"unsupported {op} into {len(pieces)} pieces: only the two halves of the last dimension"
            )
        self._split_source(bound["input"], op)
        sizes = bound["split_size"]
        for size in sizes if isinstance(sizes, list) else [sizes]:
            self._halves_guard(*self._index_number(size, "split size"))
        return Value(self.node["name"], HALVES)

    def _slice(self, value: Value, index: Any) -> Value:
        """``x[..., :n]`` and ``x[..., n:]`` (or ``x[:, :, :n]``), where x holds 2 * n."""
        assert value.shape is not None
        items = index if isinstance(index, list) else [index]
        ndim = len(value.shape)
        if not all(isinstance(i, dict) and ("slice" in i or "ellipsis" in i) for i in items):
            raise self.fail(f"unsupported indexing with {items!r}")
        ellipses = [n for n, item in enumerate(items) if "ellipsis" in item]
        if len(ellipses) > 1 or len(items) - len(ellipses) > ndim:
            raise self.fail("unsupported indexing")
        if ellipses:
            before, after = items[: ellipses[0]], items[ellipses[0] + 1 :]
            dims = [*range(len(before)), *range(ndim - len(after), ndim)]
            items = [*before, *after]
        else:
            dims = list(range(len(items)))
        last = None
        for dim, item in zip(dims, items, strict=True):
            if dim == ndim - 1:
                last = item["slice"]
            elif item["slice"] != [None, None, None]:
                raise self.fail(
                    f"unsupported slicing of dim {dim}: only the two halves of the last dimension"
                )
        if last is None:
            raise self.fail("unsupported indexing that keeps the last dimension whole")
        start, stop, step = last
        if step not in (None, 1):
            raise self.fail(f"unsupported slice step {step!r}")
        if value.kind != SPLIT:
            raise self.fail("unsupported slice of the last dimension: only an input's two halves")
        h = self.kernel.shape[-1]
        (start_expr, start_at), (stop_expr, stop_at) = (
            self._index_number(start, "slice start"),
            self._index_number(stop, "slice stop"),
        )
        if start_at in (None, 0) and stop_at == h:
            self._halves_guard(stop_expr, stop_at)
            return self._half(0)
        if start_at == h and stop is None:
            self._halves_guard(start_expr, start_at)
            return self._half(1)
        raise self.fail(
            f"unsupported slice [{start_expr or ''}:{stop_expr or ''}] of the last dimension: only its "
            "two halves"
        )

    def _split_source(self, arg: Any, op: str) -> Value:
        value = self.values[arg["node"]] if isinstance(arg, dict) and "node" in arg else None
        if value is None or value.kind != SPLIT:
            what = "another input" if value is not None and value.source else "a computed value"
            raise self.fail(f"unsupported {op} of {what}: only one forward input splits into halves")
        return value

    def _index_number(self, arg: Any, what: str) -> tuple[str | None, int | None]:
        """(forward expression, example value) of a split size or slice bound; (None, None) for None."""
        if arg is None:
            return None, None
        if isinstance(arg, int) and not isinstance(arg, bool):
            return repr(arg), arg
        if isinstance(arg, dict) and "attr" in arg and isinstance(arg["value"], int):
            return _on_self(arg["attr"]), arg["value"]
        if isinstance(arg, dict) and "node" in arg and self.values[arg["node"]].kind == SIZE:
            size = self.values[arg["node"]]
            return size.name, size.example
        raise self.fail(f"unsupported {what} {arg!r}")

    def _halves_guard(self, expr: str | None, value: int | None) -> None:
        """Refuse, in forward, an input whose last dimension is not two halves of ``expr`` (of equal size)."""
        x = self.kernel.main
        why = f"the kernel splits the last dimension of {x} into two halves"
        if expr is None or expr == f"{x}.shape[-1] // 2":
            guard = (f"{x}.shape[-1] % 2 != 0", f"{why} of equal size")
        elif isinstance(value, int) and expr == repr(value):
            guard = (f"{x}.shape[-1] != {2 * value}", f"{why} of {value}")
        else:
            guard = (f"{x}.shape[-1] != 2 * " + (f"({expr})" if " " in expr else expr), f"{why} of {expr}")
        if guard not in self.kernel.guards:
            self.kernel.guards.append(guard)

    def _half(self, index: int) -> Value:
        """Half ``index`` of the SPLIT input: a load from its pointer, once per half."""
        if index not in self.halves:
            x = self.kernel.main
            pointer = next((f"{load.ptr}" for load in self.kernel.loads if load.half is not None), "")
            if not pointer:
                pointer = f"{self.fresh(x, pointer=True)}_ptr"
            var = self.fresh(f"{x}_{('first', 'second')[index]}_half")
            self.kernel.loads.append(Load(var, FULL, x, False, x, half=index, pointer=pointer))
            self.halves[index] = Value(var, FULL, (f"{x}.dtype",), shape=self.kernel.shape, source=x)
        return self.halves[index]

    def _size(self, op: str, bound: dict[str, Any]) -> Value:
        """``x.size()`` and ``x.size(-1)`` of an input: numbers forward computes at call time."""
        value = self.values.get(bound["input"]["node"]) if isinstance(bound["input"], dict) else None
        if value is None or value.source is None or value.shape is None:
            raise self.fail("unsupported size of a computed value")
        dim = bound.get("dim")
        if dim is None:
            return Value(f"{value.source}.shape", SHAPE, example=value.shape)
        if not isinstance(dim, int):
            raise self.fail(f"unsupported size({dim!r})")
        return Value(f"{value.source}.shape[{dim}]", SIZE, example=value.shape[dim])

    def _floordiv(self, op: str, bound: dict[str, Any]) -> Value:
        """``x.shape[-1] // 2``."""
        a, b = bound["input"], bound["other"]
        size = self.values.get(a["node"]) if isinstance(a, dict) and "node" in a else None
        if size is None or size.kind != SIZE or isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise self.fail("unsupported op operator.floordiv: only a size divided by a positive number")
        name = f"({size.name})" if " " in size.name else size.name
        return Value(f"{name} // {b}", SIZE, example=size.example // b)

    def _centered(self, base: str, a: Value) -> tuple[str, str]:
        mean = self.reduce(f"{base}_mean", "sum", a.name, "{r} / n_cols")
        return mean, self.assign(f"{base}_centered", f"{a.name} - {mean}")

    def _var(self, op: str, bound: dict[str, Any]) -> Value:
        self.last_dim(bound.get("dim"), op)
        a = self.row_operand(bound["input"], op)
        correction = bound.get("correction")
        if correction is None:
            unbiased = self.constant(bound.get("unbiased", True), "unbiased")
            correction = 1 if unbiased else 0
        c = self.constant(correction, "correction")
        keepdim = bool(self.constant(bound.get("keepdim", False), "keepdim"))
        name = self.node["name"]
        _, centered = self._centered(name, a)
        divisor = "n_cols" if c == 0 else f"(n_cols - {_literal(c)})"
        template = f"{{r}} / {divisor}" if op == "var" else f"tl.sqrt({{r}} / {divisor})"
        var = self.reduce(name, "sum", f"{centered} * {centered}", template)
        self.tag(op)
        return self.check_shape(Value(var, ROW if keepdim else ROW_FLAT, a.dtype))

    def _softmax(self, op: str, bound: dict[str, Any]) -> Value:
        self.last_dim(bound.get("dim"), op)
        a = self.row_operand(bound["input"], op)
        dtype = self.dtype_of(bound["dtype"]) if bound.get("dtype") is not None else a.dtype
        name = self.node["name"]
        row_max = self.reduce(f"{name}_max", "max", a.name)
        if op == "softmax":
            exp = self.assign(f"{name}_exp", f"tl.exp({a.name} - {row_max})")
            total = self.reduce(f"{name}_sum", "sum", exp)
            out = self.assign(name, f"{exp} / {total}")
        else:
            shifted = self.assign(f"{name}_shifted", f"{a.name} - {row_max}")
            total = self.reduce(f"{name}_sum", "sum", f"tl.exp({shifted})")
            out = self.assign(name, f"{shifted} - tl.log({total})")
        self.tag(op)
        return self.check_shape(Value(out, FULL, dtype))

    def _normalized_shape(self, arg: Any) -> None:
        """Normalizing over the last dimension only: its size is the tensors' business, not the kernel's.
        ``self.weight.shape`` (nanoGPT's LayerNorm) is the last dimension where the weight is 1-D."""
        traced = self.values.get(arg["node"]) if isinstance(arg, dict) and "node" in arg else None
        if traced is not None and traced.kind == SHAPE and len(traced.example or ()) == 1:
            check = (f"len({traced.name}) != 1", "the kernel normalizes over the last dimension only")
            if check not in self.kernel.guards:
                self.kernel.guards.append(check)
            return
        shape = arg["value"] if isinstance(arg, dict) and "attr" in arg else arg
        if isinstance(shape, int | dict):
            shape = [shape]
        if (
            not isinstance(shape, list)
            or len(shape) != 1
            or (isinstance(shape[0], dict) and "node" in shape[0])
        ):
            raise self.fail(f"unsupported normalized_shape {shape!r}: only the last dimension")
        if isinstance(arg, dict) and "attr" in arg:
            check = (
                f"len({_on_self(arg['attr'])}) != 1",
                "the kernel normalizes over the last dimension only",
            )
            if check not in self.kernel.guards:
                self.kernel.guards.append(check)

    def _affine(self, value: str, bound: dict[str, Any], parts: list[Value]) -> str:
        name = self.node["name"]
        expr = value
        for key, template in (("weight", "{a} * {b}"), ("bias", "{a} + {b}")):
            if bound.get(key) is None:
                continue
            param = self.operand(bound[key], key)
            if param.kind not in (COL, SCALAR):
                raise self.fail(f"unsupported {key} of shape {param.shape}")
            parts.append(param)
            expr = template.format(a=expr, b=self.floats([param])[0])
        return self.assign(name, expr)

    def _eps(self, bound: dict[str, Any], a: Value, default: float | None) -> str:
        eps = bound.get("eps", default)
        if eps is None or (isinstance(eps, dict) and eps.get("value", 0) is None):
            # torch's default: the machine epsilon of the input's dtype, known at call time.
            arg = self.fresh(f"{self.node['name']}_eps")
            attr = eps["attr"] if isinstance(eps, dict) else None
            machine = f"torch.finfo({_dtype_expr(a.dtype)}).eps"
            expr = f"{_on_self(attr)} if {_on_self(attr)} is not None else {machine}" if attr else machine
            self.kernel.scalars.append((arg, expr))
            return arg
        return self.operand(eps, "eps").name

    def _layer_norm(self, op: str, bound: dict[str, Any]) -> Value:
        self._normalized_shape(bound["normalized_shape"])
        a = self.row_operand(bound["input"], op)
        eps = self._eps(bound, a, 1e-5)
        name = self.node["name"]
        _, centered = self._centered(name, a)
        var = self.reduce(f"{name}_var", "sum", f"{centered} * {centered}", "{r} / n_cols")
        rstd = self.assign(f"{name}_rstd", f"tl.rsqrt({var} + {eps})")
        parts = [a]
        out = self._affine(f"{centered} * {rstd}", bound, parts)
        self.tag(op)
        return self.check_shape(Value(out, FULL, a.dtype))

    def _rms_norm(self, op: str, bound: dict[str, Any]) -> Value:
        self._normalized_shape(bound["normalized_shape"])
        a = self.row_operand(bound["input"], op)
        eps = self._eps(bound, a, None)
        name = self.node["name"]
        mean_square = self.reduce(f"{name}_mean_square", "sum", f"{a.name} * {a.name}", "{r} / n_cols")
        rstd = self.assign(f"{name}_rstd", f"tl.rsqrt({mean_square} + {eps})")
        parts = [a]
        out = self._affine(f"{a.name} * {rstd}", bound, parts)
        self.tag(op)
        return self.check_shape(Value(out, FULL, _promote(parts)))

    # -- the output -------------------------------------------------------------

    def _output(self, node: dict[str, Any]) -> None:
        args = node.get("args", [])
        result = args[0] if args else None
        if not (isinstance(result, dict) and "node" in result):
            count = len(result) if isinstance(result, list) else "no"
            raise Unsupported(f"forward returns {count} values; only a single tensor is supported")
        value = self.values[result["node"]]
        if value.kind not in (FULL, ROW, ROW_FLAT):
            raise Unsupported(f"forward returns a {value.kind} value; only tensors of the input's shape")
        if any(value.name == load.var for load in self.kernel.loads):
            raise Unsupported("forward returns its input unchanged: nothing to compute")
        self.kernel.output = value


def _node_refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "node" in value:
            return [value["node"]]
        return [n for v in value.values() for n in _node_refs(v)]
    if isinstance(value, list):
        return [n for v in value for n in _node_refs(v)]
    return []


def _promote(values: list[Value]) -> tuple[str, ...]:
    """The runtime dtype of a result: its tensor operands' dtypes promoted (numbers do not count)."""
    tensors = [v for v in values if v.kind not in (SCALAR, DTYPE, PAIR)]
    floats = [v for v in tensors if not v.is_bool]
    atoms: list[str] = []
    for v in floats or tensors:
        atoms.extend(a for a in v.dtype if a not in atoms)
    if not floats and values:
        return ("torch.float32",)  # booleans with a Python float: torch's default dtype
    return tuple(atoms)


def _module_arguments(node: dict[str, Any], params: tuple[str, ...]) -> dict[str, Any]:
    """A torch.nn leaf module's configuration as call arguments; numbers read from the module."""
    path = node["target"]
    out: dict[str, Any] = {}
    for key, value in node.get("config", {}).items():
        if key == "inplace":
            out[key] = value  # whether it overwrites its input: not a number to read at call time
        elif key in params:
            out[key] = {"attr": f"{path}.{key}", "value": value}
    for key, spec in node.get("params", {}).items():
        out[key] = {"param": spec}
    for key in ("weight", "bias"):
        if key in params and key not in out:
            out[key] = None
    return out


# ---------------------------------------------------------------------------
# Rendering the kernel


# The launch helpers. On CUDA each launch is autotuned: the first call for a size times every config on
# the real arguments (the kernels only write their output, so re-running them is harmless) and keeps the
# fastest. The configs include every choice of the plain launch, so tuning can only match or beat it.
# The kernels have no loops, so num_stages (software pipelining) would change nothing and is left out.
# Under the Triton interpreter (TRITON_INTERPRET=1) triton.jit gives an interpreted function instead of
# a JITFunction; timing configs there means nothing, so the plain launch runs.
_POINTWISE_LAUNCH = '''
# On CUDA, BLOCK_SIZE and num_warps are tuned per size (the plain launch's 1024 and 4 among them), a
# size being n_elements rounded up to a power of two (N_BUCKET): a model called at many lengths tunes
# once per bucket, not once per length.
{kernel}_autotuned = triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (512, 1024, 2048, 4096) for w in (4, 8)],
    key=["N_BUCKET"],
)({kernel})


def _launch_config(n_elements, on_cuda):
    """(kernel, grid, settings) for one elementwise pass over n_elements.

    On CUDA the autotuned kernel picks its own settings. Under the Triton interpreter, where triton.jit
    gives no JITFunction and timing settings means nothing, a plain launch: 1024 elements over 4 warps,
    8 per thread, a common default for memory-bound kernels.
    """
    bucket = triton.next_power_of_2(n_elements)
    if on_cuda and isinstance({kernel}, triton.JITFunction):
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        return {kernel}_autotuned, grid, {"N_BUCKET": bucket}
    block_size, num_warps = 1024, 4
    config = {"BLOCK_SIZE": block_size, "num_warps": num_warps, "N_BUCKET": bucket}
    return {kernel}, (triton.cdiv(n_elements, block_size),), config
'''
_ROW_LAUNCH = '''
# On CUDA, num_warps is tuned per row length (every choice of the plain launch among them); BLOCK_SIZE
# is not tuned: it holds the whole row.
{kernel}_autotuned = triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16, 32)],
    key=["n_cols"],
)({kernel})


def _launch_config(n_rows, n_cols, on_cuda):
    """(kernel, grid, settings) for one program per row of n_cols elements (the whole row in registers).

    On CUDA the autotuned kernel picks num_warps. Under the Triton interpreter, where triton.jit gives
    no JITFunction and timing settings means nothing, a plain launch with more warps for longer rows.
    """
    block_size = triton.next_power_of_2(n_cols)
    if on_cuda and isinstance({kernel}, triton.JITFunction):
        return {kernel}_autotuned, (n_rows,), {"BLOCK_SIZE": block_size}
    num_warps = 4
    if block_size >= 32768:
        num_warps = 32
    elif block_size >= 8192:
        num_warps = 16
    elif block_size >= 2048:
        num_warps = 8
    return {kernel}, (n_rows,), {"BLOCK_SIZE": block_size, "num_warps": num_warps}
'''


_NAMED = ("layer_norm", "rms_norm", "softmax", "log_softmax")
_REDUCTIONS = ("sum", "mean", "mean_square", "amax", "amin", "max", "min", "var", "std")


def kernel_name(kernel: Kernel) -> str:
    """Named for what it does: ``_rms_norm_fwd_kernel``, ``_add_layer_norm_fwd_kernel``, ..."""
    tags = kernel.tags
    if kernel.rows:
        named = [t for t in tags if t in _NAMED]
        if not named and "mean_square" in tags and "rsqrt" in tags:  # x * rsqrt(mean(x * x) + eps)
            named = ["rms_norm"]
        reductions = [t.replace("mean_square", "mean") for t in tags if t in _REDUCTIONS]
        parts = named or reductions
        first = min(i for i, t in enumerate(tags) if t in _NAMED or t in _REDUCTIONS)
        if named and "add" in tags[:first]:
            parts = ["add", *parts]  # a residual add fused in front
        return "_" + "_".join(parts[:3]) + "_fwd_kernel"
    parts = [t for t in tags if t not in ("identity",)][:4] or ["copy"]
    return "_" + "_".join(parts) + "_kernel"


def _masked(kernel: Kernel) -> tuple[dict[str, str], set[int]]:
    """The ``other=`` of each load (neutral for the reduction that reads it directly), and the
    reductions that can then skip masking their operand."""
    wanted: dict[str, set[str]] = {}
    for stmt in kernel.body:
        if isinstance(stmt, Reduce):
            wanted.setdefault(stmt.operand, set()).add(_REDUCE[stmt.op][1])
    others: dict[str, str] = {}
    for load in kernel.loads:
        neutrals = wanted.get(load.var, set())
        others[load.var] = "0" if load.is_bool else neutrals.pop() if len(neutrals) == 1 else "0.0"
    plain = {
        i
        for i, stmt in enumerate(kernel.body)
        if isinstance(stmt, Reduce) and others.get(stmt.operand) == _REDUCE[stmt.op][1]
    }
    return others, plain


def _split_lines(kernel: Kernel, row: str) -> list[str]:
    """Where the second half of a split input starts (unindented); none without one."""
    if not kernel.split:
        return []
    return [
        "# A row of the split input holds both halves (2 * n_cols); the second starts at n_cols.",
        f"split_offsets = offsets + {row} * n_cols",
    ]


def _load_and_compute(kernel: Kernel) -> list[str]:
    """The kernel's loads and statements, unindented: the forward kernel and its backward share them."""
    lines = []
    others, plain = _masked(kernel)
    for load in kernel.loads:
        where = "offsets" if load.kind == FULL else "cols"
        if load.half is not None:
            where = "split_offsets + n_cols" if load.half else "split_offsets"
        text = f"tl.load({load.ptr} + {where}, mask=mask, other={others[load.var]})"
        lines.append(f"{load.var} = {text}" + ("" if load.is_bool else ".to(tl.float32)"))
    for i, stmt in enumerate(kernel.body):
        if isinstance(stmt, Reduce):
            fn, neutral = _REDUCE[stmt.op]
            operand = stmt.operand if i in plain else f"tl.where(mask, {stmt.operand}, {neutral})"
            lines.append(f"{stmt.var} = " + stmt.template.format(r=f"{fn}({operand}, axis=0)"))
        else:
            lines.append(f"{stmt[0]} = {stmt[1]}")
    return lines


def render_kernel(kernel: Kernel, name: str) -> str:
    rows = kernel.rows
    assert kernel.output is not None
    pointers = list(dict.fromkeys(load.ptr for load in kernel.loads))
    size = "n_cols" if rows else "n_elements"
    has_cols = any(load.kind == COL for load in kernel.loads)
    sizes = [size, *(["n_cols"] if not rows and (has_cols or kernel.split) else [])]
    bucket = [] if rows else ["N_BUCKET"]  # the autotuning key (n_elements' power of two), by name
    params = [
        *pointers,
        "out_ptr",
        *sizes,
        *(arg for arg, _ in kernel.scalars),
        *bucket,
        "BLOCK_SIZE: tl.constexpr",
    ]
    lines = ["@triton.jit", *_wrap(f"def {name}", params, tail=":")]
    if rows:
        lines += [
            "    row = tl.program_id(0).to(tl.int64)",
            "    cols = tl.arange(0, BLOCK_SIZE)",
            "    mask = cols < n_cols",
            "    offsets = row * n_cols + cols",
        ]
    else:
        lines += [
            "    pid = tl.program_id(0).to(tl.int64)",
            "    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "    mask = offsets < n_elements",
        ]
        if has_cols:
            lines.append("    cols = offsets % n_cols")
    body = [*_split_lines(kernel, "row" if rows else "(offsets // n_cols)"), *_load_and_compute(kernel)]
    lines += [f"    {line}" for line in body]
    out = kernel.output
    store = f"{out.name}.to(out_ptr.dtype.element_ty)"
    if out.kind == FULL:
        lines.append(f"    tl.store(out_ptr + offsets, {store}, mask=mask)")
    else:
        lines.append(f"    tl.store(out_ptr + row, {store})")
    return "\n".join(lines) + "\n"


def render_launch(kernel: Kernel, name: str, launcher: str = "_launch_config") -> str:
    """The autotuned kernel and ``_launch_config`` (``launcher`` where a file holds several kinds of
    launch), the one place launch settings come from."""
    template = _ROW_LAUNCH if kernel.rows else _POINTWISE_LAUNCH
    text = template.strip("\n").replace("{kernel}", name)
    return text.replace("def _launch_config(", f"def {launcher}(") + "\n"


# ---------------------------------------------------------------------------
# The backward: one fused kernel that recomputes the forward's values and applies the chain rule to
# them (runners/generators/autodiff.py), and the autograd.Function that launches both kernels.

_ROW_BACKWARD_LAUNCH = '''
def _bwd_launch_config(n_rows, n_cols, device):
    """(programs, settings) for the backward kernel: program p takes rows p, p + programs, ..., so each
    parameter's gradient is summed over its rows in registers and written once, one partial row each.

    One program per SM on CUDA, 4 under the Triton interpreter; num_warps as in the forward's plain
    launch (the backward is not tuned yet).
    """
    block_size = triton.next_power_of_2(n_cols)
    num_warps = 4
    if block_size >= 32768:
        num_warps = 32
    elif block_size >= 8192:
        num_warps = 16
    elif block_size >= 2048:
        num_warps = 8
    programs = 4
    if device.type == "cuda":
        programs = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(programs, n_rows)), {"BLOCK_SIZE": block_size, "num_warps": num_warps}
'''
_POINTWISE_BACKWARD_LAUNCH = '''
def _bwd_launch_config(n_elements):
    """(grid, settings) for the backward kernel's elementwise pass: the forward's plain launch, 1024
    elements over 4 warps (the backward is not tuned yet)."""
    return (triton.cdiv(n_elements, 1024),), {"BLOCK_SIZE": 1024, "num_warps": 4}
'''


@dataclass
class Grad:
    """The gradient the backward kernel writes for one pointer argument of the forward kernel."""

    pointer: str  # the forward kernel's pointer argument
    d_pointer: str  # the backward kernel's
    kind: str  # FULL (one value per element) or COL (one per column, summed over rows)
    halves: tuple[int, ...] = ()  # for a split input: the halves written


@dataclass
class Backward:
    name: str
    source: str  # the kernel and its launch helper
    grads: list[Grad]


def _backward_name(forward_name: str) -> str:
    if forward_name.endswith("_fwd_kernel"):
        return forward_name.removesuffix("_fwd_kernel") + "_bwd_kernel"
    return forward_name.removesuffix("_kernel") + "_bwd_kernel"


def render_backward(kernel: Kernel, forward_name: str) -> Backward:
    """The backward kernel: Unsupported when the output has no gradient or an op has no rule."""
    out = kernel.output
    assert out is not None
    if out.is_bool:
        raise Unsupported("a boolean output has no gradient")
    rows = kernel.rows
    taken = set(kernel.names) | {load.ptr for load in kernel.loads}

    def fresh(base: str) -> str:
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        return name

    body = [
        autodiff.Stmt(s.var, s.operand, s.op, s.template) if isinstance(s, Reduce) else autodiff.Stmt(*s)
        for s in kernel.body
    ]
    leaves = {load.var for load in kernel.loads}
    constant = {load.var for load in kernel.loads if load.is_bool}
    seed = "d_out"  # reserved: no value of the graph takes it
    vectors = leaves | {"offsets", "cols", "mask"} | ({seed} if out.kind == FULL else set())
    try:
        adjoint_lines, adjoint = autodiff.adjoints(body, out.name, seed, leaves, vectors, constant, fresh)
    except autodiff.NoDerivative as exc:
        raise Unsupported(str(exc)) from None
    grads: dict[str, Grad] = {}
    stores: list[str] = []
    sums: list[tuple[str, str]] = []  # (accumulator, pointer) of the gradients summed over rows
    for load in kernel.loads:
        if load.var not in adjoint:
            continue
        if load.ptr not in grads:
            grads[load.ptr] = Grad(load.ptr, fresh("d_" + load.ptr), load.kind)
        grad, d = grads[load.ptr], adjoint[load.var]
        where = "offsets"
        if load.half is not None:
            grad.halves += (load.half,)
            where = "split_offsets + n_cols" if load.half else "split_offsets"
        if load.kind == COL and rows:
            total = fresh(f"{d}_sum")
            sums.append((total, grad.d_pointer))
            stores.append(f"{total} += tl.where(mask, {d}, 0.0)")
        else:
            stores.append(
                f"tl.store({grad.d_pointer} + {where}, {d}.to({grad.d_pointer}.dtype.element_ty), mask=mask)"
            )
    if not grads:
        raise Unsupported("the output depends on no input or parameter differentiably")
    name = _backward_name(forward_name)
    pointers = list(dict.fromkeys(load.ptr for load in kernel.loads))
    has_cols = any(load.kind == COL for load in kernel.loads)
    sizes = (
        ["n_rows", "n_cols"] if rows else ["n_elements", *(["n_cols"] if has_cols or kernel.split else [])]
    )
    params = [
        *pointers,
        "d_out_ptr",
        *(g.d_pointer for g in grads.values()),
        *sizes,
        *(arg for arg, _ in kernel.scalars),
        "BLOCK_SIZE: tl.constexpr",
    ]
    lines = ["@triton.jit", *_wrap(f"def {name}", params, tail=":")]
    if out.kind == FULL:
        seed_line = f"{seed} = tl.load(d_out_ptr + offsets, mask=mask, other=0.0).to(tl.float32)"
    else:
        seed_line = f"{seed} = tl.load(d_out_ptr + row).to(tl.float32)"
    inner = [
        *_load_and_compute(kernel),
        seed_line,
        *(f"{var} = {expr}" for var, expr in adjoint_lines),
        *stores,
    ]
    if rows:
        lines += [
            "    # The forward's values are recomputed row by row, then the chain rule runs backwards.",
            "    pid = tl.program_id(0)",
            "    n_programs = tl.num_programs(0)",
            "    cols = tl.arange(0, BLOCK_SIZE)",
            "    mask = cols < n_cols",
            *(f"    {total} = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)" for total, _ in sums),
            "    for row_index in range(pid, n_rows, n_programs):",
            "        row = tl.cast(row_index, tl.int64)",
            "        offsets = row * n_cols + cols",
            *(f"        {line}" for line in [*_split_lines(kernel, "row"), *inner]),
            *(f"    tl.store({ptr} + pid * n_cols + cols, {total}, mask=mask)" for total, ptr in sums),
        ]
        launch = _ROW_BACKWARD_LAUNCH
    else:
        lines += [
            "    # The forward's values are recomputed, then the chain rule runs backwards.",
            "    pid = tl.program_id(0).to(tl.int64)",
            "    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "    mask = offsets < n_elements",
            *(["    cols = offsets % n_cols"] if has_cols else []),
            *(f"    {line}" for line in [*_split_lines(kernel, "(offsets // n_cols)"), *inner]),
        ]
        launch = _POINTWISE_BACKWARD_LAUNCH
    source = "\n".join(lines) + "\n\n\n" + launch.strip("\n") + "\n"
    return Backward(name, source, list(grads.values()))


def _function_name(forward_name: str) -> str:
    core = forward_name.strip("_").removesuffix("_fwd_kernel").removesuffix("_kernel")
    return "_" + "".join(part.capitalize() for part in core.split("_")) + "Function"


_CUSTOM_OP = '''
def _custom_op(fn):
    """``fn`` registered as a custom op, named after it in a namespace of this module's own (made
    unique when the module is loaded again): torch.compile calls the launch as one op instead of
    tracing into Triton, and the op's fake tells it the shapes, dtypes and devices of what it
    returns. Eager calls take ``fn`` itself: the dispatcher would add tens of microseconds a call."""
    namespace = "kernelize_" + __name__.replace(".", "_")
    name = fn.__name__.strip("_")
    while hasattr(getattr(torch.ops, namespace), name):
        name += "_"
    op = library.custom_op(f"{namespace}::{name}", fn, mutates_args=())

    def launch(*args):
        return op(*args) if torch.compiler.is_compiling() else fn(*args)

    launch.register_fake = op.register_fake
    return launch
'''


@dataclass
class _Op:
    """A kernel launch as a custom op: its source (the op and its fake), and what it takes."""

    name: str
    source: str
    tensors: dict[str, str]  # forward expression -> the op's tensor argument
    numbers: dict[str, str]  # the kernel's scalar argument -> the op's argument
    kernel: Kernel  # the kernel as the op sees it: its tensors and numbers are the op's arguments


def _return(values: list[str]) -> list[str]:
    """``return a, b`` in a function body, one value a line when it is too long."""
    one = f"    return {', '.join(values)}"
    if len(one) <= _WIDTH:
        return [one]
    return ["    return (", *(f"        {v}," for v in values), "    )"]


def _op_name(kernel_name: str) -> str:
    return kernel_name.removesuffix("_kernel")


def _op_source(
    name: str, params: list[tuple[str, str]], returns: str, body: list[str], fake: list[str]
) -> str:
    """``@_custom_op def name(params) -> returns: body`` and its fake (``fake``: no launch)."""
    typed = [f"{arg}: {kind}" for arg, kind in params]
    op = ["@_custom_op", *_wrap(f"def {name}", typed, tail=f" -> {returns}:"), *body]
    doc = '    """What it returns, for torch.compile\'s tracing: shapes, dtypes and devices, no launch."""'
    fake_def = _wrap(f"def {name}_fake", [a for a, _ in params], tail=":")
    fake_lines = [f"@{name}.register_fake", *fake_def, doc, *fake]
    return "\n".join(op) + "\n\n\n" + "\n".join(fake_lines) + "\n"


def _forward_op(kernel: Kernel, forward_name: str, launcher: str = "_launch_config") -> _Op:
    """The forward kernel's launch as a custom op taking every tensor the kernel reads (inputs and
    parameters) and the numbers it is given (launch settings from ``launcher``)."""
    out = kernel.output
    assert out is not None
    taken = {"ctx", "d_out"}  # the names an autograd.Function's backward(ctx, d_out) takes
    tensors: dict[str, str] = {}
    for load in kernel.loads:
        if load.source not in tensors:
            tensors[load.source] = _fresh_local(load.placeholder or load.var, taken)
    numbers = {arg: _fresh_local(arg, taken) for arg, _ in kernel.scalars}
    if kernel.main not in tensors:
        raise Unsupported(f"the kernel does not read {kernel.main}")
    dtypes = {f"{source}.dtype": f"{arg}.dtype" for source, arg in tensors.items()}
    for atom in out.dtype:
        if atom not in dtypes and not atom.startswith("torch."):
            raise Unsupported(f"the output's dtype comes from {atom}")
    inner = dataclasses.replace(
        kernel,
        main=tensors[kernel.main],
        loads=[
            dataclasses.replace(x, source=tensors[x.source], placeholder=tensors[x.source])
            for x in kernel.loads
        ],
        scalars=[(arg, numbers[arg]) for arg, _ in kernel.scalars],
        output=dataclasses.replace(out, dtype=tuple(dtypes.get(a, a) for a in out.dtype)),
        guards=[],
    )
    prep, launch, result = _launch_body(inner, forward_name, set(taken), launcher)
    params = [(a, "torch.Tensor") for a in tensors.values()]
    params += [(a, "torch.types.Number") for a in numbers.values()]
    name = _op_name(forward_name)
    body = [*prep, *launch, f"    return {result}"]
    source = _op_source(name, params, "torch.Tensor", body, [*prep, f"    return {result}"])
    return _Op(name, source, tensors, numbers, inner)


def render_function(
    kernel: Kernel, forward_name: str, backward: Backward, signature: str, returns: str
) -> tuple[str, str]:
    """(the ops and the autograd.Function calling them, the module's forward applying it).

    The Function saves the tensors the forward op takes, and its backward op recomputes the rest
    from them."""
    op = _forward_op(kernel, forward_name)
    tensors, numbers = op.tensors, op.numbers
    fn = _function_name(forward_name)
    args = [*tensors.values(), *numbers.values()]
    back, grads = _backward_op(op.kernel, backward, tensors, numbers)
    forward = [
        "@staticmethod",
        *_wrap("def forward", ["ctx", *args], tail=":"),
        f"    ctx.save_for_backward({', '.join(tensors.values())})",
        *(f"    ctx.{arg} = {arg}" for arg in numbers.values()),
        *_wrap(f"return {op.name}", args, "    "),
    ]
    saved = list(tensors.values())
    taken = {"ctx", "d_out", *saved, *numbers.values()}
    d = {arg: _fresh_local(f"d_{arg}", taken) for arg in grads}
    got = ", ".join(d.values())  # the op returns one tensor, or a tuple of them
    returned = [
        f"{d[arg]} if ctx.needs_input_grad[{i}] else None" if arg in d else "None"
        for i, arg in enumerate(saved)
    ] + ["None"] * len(numbers)
    call = ["d_out", *saved, *(f"ctx.{a}" for a in numbers.values())]
    backward_lines = [
        "@staticmethod",
        "def backward(ctx, d_out):",
        f"    {', '.join(saved)}{',' if len(saved) == 1 else ''} = ctx.saved_tensors",
        *_wrap(f"{got} = {_op_name(backward.name)}", call, "    "),
        "    return (",
        *(f"        {r}," for r in returned),
        "    )",
    ]
    body = "\n\n".join(textwrap.indent("\n".join(part), "    ") for part in (forward, backward_lines))
    doc = (
        f'    """Forward: {forward_name}. Backward: {backward.name}, which recomputes what the\n'
        '    forward computed from the saved tensors instead of keeping it."""'
    )
    function = f"{op.source}\n\n{back}\n\nclass {fn}(torch.autograd.Function):\n{doc}\n\n{body}\n"
    sig_taken = {n.arg for n in ast.walk(pyast.parse(f"def f({signature}): pass")) if isinstance(n, ast.arg)}
    named, scalars = _scalar_args(kernel, sig_taken)
    module_forward = [f"def forward({signature}){returns}:", *_guard_lines(kernel), *named]
    pool = ", ".join(tensors) + ("," if len(tensors) == 1 else "")
    module_forward.append(f"    if torch.is_grad_enabled() and any(t.requires_grad for t in ({pool})):")
    module_forward += _wrap(f"return {fn}.apply", [*tensors, *scalars], "        ")
    # Nothing to differentiate (inference, no_grad): the forward op alone, without the ~20 us that
    # autograd.Function.apply costs a call.
    module_forward += _wrap(f"return {op.name}", [*tensors, *scalars], "    ")
    return function, "\n".join(module_forward) + "\n"


def _backward_op(
    kernel: Kernel, backward: Backward, tensors: dict[str, str], numbers: dict[str, str]
) -> tuple[str, list[str]]:
    """(the backward kernel's launch as a custom op, the op's tensor arguments whose gradients it
    returns, in order); ``kernel`` as the forward op sees it."""
    out = kernel.output
    assert out is not None
    taken = {"ctx", "d_out", *tensors.values(), *numbers.values()}
    local = {
        n: _fresh_local(n, taken) for n in ("n_cols", "n_rows", "n_elements", "programs", "grid", "config")
    }
    n_cols, n_rows, programs, config = local["n_cols"], local["n_rows"], local["programs"], local["config"]
    lines: list[str] = []
    main = kernel.main
    by_pointer: dict[str, Load] = {}  # the first load of each pointer, in the kernel's order
    for load in kernel.loads:
        by_pointer.setdefault(load.ptr, load)
    passed: dict[str, str] = {}  # pointer -> the tensor passed
    grads = {g.pointer: g for g in backward.grads}
    buffers: dict[str, str] = {}  # pointer -> its gradient buffer
    has_cols = any(load.kind == COL for load in kernel.loads)
    if kernel.rows:
        lines.append(f"    {n_cols} = {main}.shape[-1]" + (" // 2" if kernel.split else ""))
        for ptr, load in by_pointer.items():
            arg = load.source
            if load.kind == COL:
                lines.append(f"    {arg} = {arg}.contiguous()")
                passed[ptr] = arg
            else:
                passed[ptr] = _fresh_local(f"{arg}_2d", taken)
                width = f"2 * {n_cols}" if load.half is not None else n_cols
                lines.append(f"    {passed[ptr]} = {arg}.reshape(-1, {width}).contiguous()")
        main_2d = next(passed[p] for p, load in by_pointer.items() if load.source == main)
        upstream = _fresh_local("d_out_2d", taken)
        shape = f"{n_rows}, {n_cols}" if out.kind == FULL else n_rows
        lines += [
            f"    {n_rows} = {main_2d}.shape[0]",
            f"    {upstream} = d_out.reshape({shape}).contiguous()",
            f"    {programs}, {config} = _bwd_launch_config({n_rows}, {n_cols}, {main}.device)",
        ]
        grid = f"({programs},)"
        sizes = [n_rows, n_cols]
    else:
        for ptr, load in by_pointer.items():
            if load.source not in passed.values():
                lines.append(f"    {load.source} = {load.source}.contiguous()")
            passed[ptr] = load.source
        upstream = _fresh_local("d_out_c", taken)
        lines += [f"    {upstream} = d_out.contiguous()", f"    {local['n_elements']} = {upstream}.numel()"]
        sizes = [local["n_elements"]]
        if kernel.split or has_cols:
            lines.append(f"    {n_cols} = {main}.shape[-1]" + (" // 2" if kernel.split else ""))
            sizes.append(n_cols)
        lines.append(f"    {local['grid']}, {local['config']} = _bwd_launch_config({local['n_elements']})")
        grid = local["grid"]
    results: dict[str, list[str]] = {}
    for ptr, grad in grads.items():
        load = by_pointer[ptr]
        arg, name = load.source, _fresh_local(f"d_{load.source}", taken)
        buffers[ptr] = name
        if grad.kind == COL:
            rows_of = local["programs"] if kernel.rows else f"{upstream}.numel() // {n_cols}"
            lines.append(
                f"    {name} = torch.empty(({rows_of}, {n_cols}), dtype=torch.float32, device={main}.device)"
            )
            results.setdefault(arg, []).append(f"{name}.sum(0).to({arg}.dtype).reshape({arg}.shape)")
        else:
            whole = load.half is None or set(grad.halves) == {0, 1}
            lines.append(f"    {name} = torch.{'empty' if whole else 'zeros'}_like({passed[ptr]})")
            results.setdefault(arg, []).append(f"{name}.reshape({arg}.shape)" if kernel.rows else name)
    launch_args = [
        *(passed[p] for p in by_pointer),
        upstream,
        *(buffers[g.pointer] for g in backward.grads),
        *sizes,
        *numbers.values(),
        f"**{local['config']}",
    ]
    lines += _wrap(f"{backward.name}[{grid}]", launch_args, "    ")
    order = [arg for arg in tensors.values() if arg in results]
    lines += _return([" + ".join(results[arg]) for arg in order])
    empty = [f"torch.empty({a}.shape, dtype={a}.dtype, device={a}.device)" for a in order]
    params = [("d_out", "torch.Tensor"), *((a, "torch.Tensor") for a in tensors.values())]
    params += [(a, "torch.types.Number") for a in numbers.values()]
    returns = "torch.Tensor" if len(order) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(order))}]"
    source = _op_source(_op_name(backward.name), params, returns, lines, _return(empty))
    return source, order


# ---------------------------------------------------------------------------
# Rendering the module

_WIDTH = 110


def _wrap(head: str, args: list[str], indent: str = "", tail: str = "") -> list[str]:
    """``head(args)tail`` on one line, or with the arguments on their own lines when it is too long."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= _WIDTH:
        return [one]
    lines = [f"{indent}{head}("]
    line = ""
    for arg in args:
        piece = f"{arg},"
        if line and len(indent) + 4 + len(line) + 1 + len(piece) > _WIDTH:
            lines.append(f"{indent}    {line}")
            line = ""
        line = f"{line} {piece}" if line else piece
    lines += [f"{indent}    {line}", f"{indent}){tail}"]
    return lines


@dataclass
class _Launch:
    """How forward prepares and launches the kernel: statements, then the call."""

    lines: list[str]
    tensors: list[str]  # the kernel's tensor arguments, in order
    sizes: list[str]
    config: str  # the arguments of _launch_config
    result: str


def render_forward(kernel: Kernel, name: str, signature: str, returns: str) -> tuple[str, str]:
    """(the forward op, the module's forward calling it): the kernel without a backward."""
    op = _forward_op(kernel, name)
    taken = {n.arg for n in ast.walk(pyast.parse(f"def f({signature}): pass")) if isinstance(n, ast.arg)}
    named, scalars = _scalar_args(kernel, taken)
    body = [f"def forward({signature}){returns}:", *_guard_lines(kernel), *named]
    body += _wrap(f"return {op.name}", [*op.tensors, *scalars], "    ")
    return op.source, "\n".join(body) + "\n"


def _guard_lines(kernel: Kernel) -> list[str]:
    out = []
    for check, why in kernel.guards:
        out += [f"    if {check}:", f"        raise NotImplementedError({json.dumps(why)})"]
    return out


def _scalar_args(kernel: Kernel, taken: set[str]) -> tuple[list[str], list[str]]:
    """(statements naming the computed ones, the expression passed) for each scalar argument."""
    lines, exprs = [], []
    for arg, expr in kernel.scalars:
        if not all(part.isidentifier() for part in expr.split(".")):  # a computed value: named first
            named = _fresh_local(arg, taken)
            lines.append(f"    {named} = {expr}")
            expr = named
        exprs.append(expr)
    return lines, exprs


def _launch_body(
    kernel: Kernel, name: str, taken: set[str], launcher: str = "_launch_config"
) -> tuple[list[str], list[str], str]:
    """(statements preparing the forward kernel's arguments and output, statements launching it, the
    expression returned); ``kernel``'s numbers are names already (the op's arguments)."""
    local = {n: _fresh_local(n, taken) for n in _FORWARD_NAMES}
    launch = (_row_launch if kernel.rows else _pointwise_launch)(kernel, local, taken)
    scalars = [expr for _, expr in kernel.scalars]
    kernel_, grid, config = local["kernel"], local["grid"], local["config"]
    body = [f"    {kernel_}, {grid}, {config} = {launcher}({launch.config}, {kernel.main}.is_cuda)"]
    body += _wrap(f"{kernel_}[{grid}]", [*launch.tensors, *launch.sizes, *scalars, f"**{config}"], "    ")
    return list(launch.lines), body, launch.result


def _unique_tensors(kernel: Kernel, tensor: Callable[[Load], str]) -> list[str]:
    """The forward expression passed for each pointer argument (both halves share one)."""
    by_pointer: dict[str, str] = {}
    for load in kernel.loads:
        by_pointer.setdefault(load.ptr, tensor(load))
    return list(by_pointer.values())


def _row_launch(kernel: Kernel, local: dict[str, str], taken: set[str]) -> _Launch:
    """Inputs as (rows, n_cols), one program per row; the output shaped back."""
    main, out = kernel.main, kernel.output
    assert out is not None
    n_cols, n_rows, o = local["n_cols"], local["n_rows"], local["out"]
    lines = [f"    {n_cols} = {main}.shape[-1]" + (" // 2" if kernel.split else "")]
    flat: dict[str, str] = {}

    def tensor(load: Load) -> str:
        if load.placeholder is None:
            return load.source
        if load.kind == COL:
            lines.append(f"    {load.placeholder} = {load.placeholder}.contiguous()")
            return load.placeholder
        if load.placeholder not in flat:
            flat[load.placeholder] = _fresh_local(f"{load.placeholder}_2d", taken)
            width = f"2 * {n_cols}" if load.half is not None else n_cols
            lines.append(
                f"    {flat[load.placeholder]} = {load.placeholder}.reshape(-1, {width}).contiguous()"
            )
        return flat[load.placeholder]

    tensors = _unique_tensors(kernel, tensor)
    rows_of = f"{flat[main]}.shape[0]" if main in flat else f"{main}.numel() // {n_cols}"
    lines.append(f"    {n_rows} = {rows_of}")
    shape = f"({n_rows}, {n_cols})" if out.kind == FULL else f"({n_rows},)"
    lines += _wrap(
        f"{o} = torch.empty", [shape, f"dtype={_dtype_expr(out.dtype)}", f"device={main}.device"], "    "
    )
    full = f"(*{main}.shape[:-1], {n_cols})" if kernel.split else f"{main}.shape"
    back = {FULL: full, ROW: f"(*{main}.shape[:-1], 1)", ROW_FLAT: f"{main}.shape[:-1]"}
    return _Launch(lines, [*tensors, o], [n_cols], f"{n_rows}, {n_cols}", f"{o}.reshape({back[out.kind]})")


def _pointwise_launch(kernel: Kernel, local: dict[str, str], taken: set[str]) -> _Launch:
    """Contiguous inputs, one flat pass over the output's elements."""
    main, out = kernel.main, kernel.output
    assert out is not None
    o, n_elements, n_cols = local["out"], local["n_elements"], local["n_cols"]
    lines: list[str] = []
    seen: set[str] = set()
    for load in kernel.loads:
        if load.placeholder is not None and load.placeholder not in seen:
            seen.add(load.placeholder)
            lines.append(f"    {load.placeholder} = {load.placeholder}.contiguous()")
    if kernel.split:  # the output is one half of main's shape
        lines.append(f"    {n_cols} = {main}.shape[-1] // 2")
        args = [f"(*{main}.shape[:-1], {n_cols})", f"dtype={_dtype_expr(out.dtype)}", f"device={main}.device"]
        lines += _wrap(f"{o} = torch.empty", args, "    ")
    elif out.dtype == (f"{main}.dtype",) and main in seen:
        lines.append(f"    {o} = torch.empty_like({main})")
    else:
        args = [f"{main}.shape", f"dtype={_dtype_expr(out.dtype)}", f"device={main}.device"]
        lines += _wrap(f"{o} = torch.empty", args, "    ")
    lines.append(f"    {n_elements} = {o}.numel()")
    sizes = [n_elements]
    if kernel.split:
        sizes.append(n_cols)
    elif any(x.kind == COL for x in kernel.loads):
        sizes.append(f"{main}.shape[-1]")
    tensors = _unique_tensors(kernel, lambda load: load.placeholder or load.source)
    return _Launch(lines, [*tensors, o], sizes, n_elements, o)


def _fresh_local(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


_HEADER = ("import torch", "import triton", "import triton.language as tl", "from torch import library")


def render_module(problem: Problem, trace: dict[str, Any]) -> tuple[str, str, Kernel]:
    """(source, kernel name, kernel) for the traced module."""
    source, name, kernel, _ = render_module_with_backward(problem, trace)
    return source, name, kernel


def render_module_with_backward(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, Kernel, str | None]:
    """(source, kernel name, kernel, backward kernel name or None) for the traced module.

    With ``backward``, a kernel whose every op has a derivative rule gets a backward kernel and an
    autograd.Function launching both; the others (and ``backward=False``) get the forward alone."""
    if not trace.get("direct_module", False):
        bases = ", ".join(trace.get("bases", [])) or "another class"
        raise Unsupported(f"{problem.class_name} derives from {bases}; only direct nn.Module subclasses")
    parts = class_parts(problem.source, problem.class_name)
    kernel = _Builder(trace).build()
    if kernel.output is None:
        raise Unsupported("forward returns nothing")
    name = kernel_name(kernel)
    grad: Backward | None = None
    ops, forward = render_forward(kernel, name, parts.signature, parts.returns)
    if backward:
        try:
            grad = render_backward(kernel, name)
            ops, forward = render_function(kernel, name, grad, parts.signature, parts.returns)
        except Unsupported:
            grad = None
    context = [c for c in parts.context if c not in _HEADER]
    what = "one program per row" if kernel.rows else "one elementwise pass"
    also = f", and its backward, {grad.name}" if grad else ""
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} ({what}){also}. Each launch is a\n'
        'custom op, so torch.compile(fullgraph=True) takes the module as it is."""'
    )
    blocks = [doc + "\n\n" + "\n".join([*_HEADER, *context]) + "\n"]
    if "_result_dtype(" in forward + ops:
        blocks.append(_RESULT_DTYPE.strip("\n") + "\n")
    if kernel.uses_tanh:
        blocks.append(_TANH.strip("\n") + "\n")
    blocks.append(_CUSTOM_OP.strip("\n") + "\n")
    blocks.append(render_kernel(kernel, name))
    blocks.append(render_launch(kernel, name))
    if grad is not None:
        blocks.append(grad.source)
    blocks.append(ops)
    members = [*parts.members, forward]
    body = "\n\n".join(textwrap.indent(m.rstrip("\n"), "    ") for m in members)
    blocks.append(f"class {problem.class_name}(torch.nn.Module):\n{body}\n")
    return "\n\n".join(blocks), name, kernel, grad.name if grad else None


# ---------------------------------------------------------------------------
# The generator


class TemplateGenerator:
    name = "template"
    samples = False

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        if problem.build is None:
            raise GeneratorError("template: the module's build is not resolved yet")
        req = {
            "device": "cpu",
            "file": problem.file,
            "root": problem.root,
            "class_name": problem.class_name,
            "build": problem.build,
        }
        readable = sandbox.problem_paths(problem.file, problem.root)
        res = sandbox.run("runners.trace:trace", req, TRACE_LIMITS, env=None, readable=readable)
        if res.outcome != "ok" or res.payload is None:
            raise GeneratorError(f"template: tracing failed: {res.reason}")
        if not res.payload.get("ok"):
            raise GeneratorDeclined(f"template: {res.payload.get('reason', 'tracing failed')}")
        from runners.generators import gemm, outer  # import this module

        if gemm.has_matmul(res.payload):  # matrix products: several kernels in sequence
            return [gemm.candidate(problem, res.payload, self.name)]
        if outer.applies(res.payload):  # tables larger than their inputs (RoPE's cos and sin)
            return [outer.candidate(problem, res.payload, self.name)]
        try:
            source, kernel, built, backward = render_module_with_backward(problem, res.payload)
        except (Unsupported, NotStandalone) as exc:
            raise GeneratorDeclined(f"template: {exc}") from None
        pattern = "row reduction" if built.rows else "pointwise"
        provenance = {"kernel": kernel, "pattern": pattern, **({"backward": backward} if backward else {})}
        cand = Candidate(kernel.strip("_"), self.name, source, provenance)
        if backward:
            cand.without_backward = render_module_with_backward(problem, res.payload, backward=False)[0]
        return [cand]
