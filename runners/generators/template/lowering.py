"""The lowering: the traced graph (``runners/trace.py``'s JSON description) becomes one
:class:`~runners.generators.template.ir.Kernel`.

:class:`Builder` walks the graph once, in order, and turns each node into kernel statements through a
handler per op (``ops.py`` names the ops and their Triton expressions): pointwise ops, reductions over
the last dimension, the two halves of an input's last dimension, index coordinates, and the numbers
forward reads from the module. Anything else raises ``Unsupported`` naming the op and its node. The
matrix products (``products.py``) and the tables (``tables.py``) subclass it for their own walks.

The halves (``x.chunk(2, dim=-1)``, ``x[..., :n]`` and ``x[..., n:]``): where forward computes at half
width (a gated activation, ``silu(a) * b``), the kernel runs over one half's shape and reads each half
from its own offset. Where it returns a value of the input's full shape (rotary's
``x * cos + rotate_half(x) * sin``, ``rotate_half`` being ``cat((-x2, x1), dim=-1)``), the kernel runs
over the whole width: a half is a value at every column (its half's value at that column mod half the
width), read from x itself or from x at each column's partner half a row away, and
``torch.cat((a, b), dim=-1)`` of two halves takes ``a`` on the first half's columns, ``b`` on the second's.

Index coordinates: ``torch.arange(n)`` of an input's size (``x.size(-1)``), with dimensions of 1 added
(``pos[None, :] - pos[:, None]``, ALiBi's distances, a causal mask's comparison), lines up with one
dimension of the input's shape S; the kernel computes that coordinate from each element's offset, in
float32, and forward refuses inputs where that dimension's size is not ``n``. Integer positions stay
integers (negation, ``abs``, sums and differences, comparisons) until cast with ``.to()``. ``x.device``
is taken only as a ``device=`` argument (the kernel runs on the input's device).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from runners.generators.template.ir import (
    Kernel,
    Load,
    Reduce,
    Value,
    dtype_expr,
    node_refs,
    on_self,
    promote,
    read_guards,
)
from runners.generators.template.ops import (
    BCAST,
    BINARY,
    CASTS,
    CHANNEL,
    COL,
    COMPARE,
    DEVICE,
    DTYPE,
    FLOAT_DTYPES,
    FULL,
    HALF,
    HALVES,
    INDEX,
    INT_DTYPES,
    OTHER,
    PAIR,
    POSITIONS,
    POW,
    READ_AT_CALL_TIME,
    ROW,
    ROW_FLAT,
    SCALAR,
    SHAPE,
    SIZE,
    SPELLINGS,
    SPLIT,
    TOTAL,
    UNARY,
    Unsupported,
)

# Names the kernels use for themselves: no value of the graph takes them.
_KERNEL_NAMES = frozenset(
    """pid row cols offsets split_offsets mask n_cols n_elements out_ptr BLOCK_SIZE tl triton torch float
    _tanh_of n_rows n_programs row_index d_out d_out_ptr N_BUCKET rest half_cols partner_offsets row_mask ROWS
    ROWS_BUCKET ROWS_NARROW index NARROW""".split()
) | {f"{name}_{d}" for name in ("coord", "size") for d in range(8)}
# A size of an input as forward reads it (``x.shape[-1]``): what ``torch.arange`` may count to.
_INPUT_SIZE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\.shape\[-?[0-9]+\]")
_INTEGER_ATOMS = frozenset(f"torch.{d}" for d in INT_DTYPES)
# Ops that keep integer positions integers, exactly as float32 holds them below 2**24.
_INTEGER_UNARY = ("neg", "abs", "relu", "square")


def _literal(value: float | int) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return 'float("nan")'
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


class Builder:
    """Walks the traced graph once, in order, turning each node into kernel statements."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.nodes: list[dict[str, Any]] = trace["nodes"]
        self.values: dict[str, Value] = {}
        self.taken: set[str] = set(_KERNEL_NAMES)
        self.node: dict[str, Any] = {}
        self.label = ""
        self.squares: set[str] = set()  # kernel variables holding v * v
        self.grouping = False  # while group_norm writes its reductions (over a group, not a row)
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
        # Halves of an input put back together at its full width (rotary's rotate_half): the kernel
        # runs over the whole width and reads each half where a column needs it (:meth:`half`);
        # otherwise (gated activations) over one half's shape.
        self.rotated = bool(split_inputs) and self._full_width(main)
        split = bool(split_inputs) and not self.rotated
        self.main_node = main["name"]
        if split:
            shape[-1] //= 2
        self.kernel = Kernel(shape, main["target"], split, guards=read_guards(trace))
        self.handlers: dict[str, Callable[[str, dict[str, Any]], Value]] = {
            **dict.fromkeys(UNARY, self._unary),
            **dict.fromkeys(BINARY, self._binary),
            **dict.fromkeys(COMPARE, self._binary),
            **{op + "_": self._inplace for op in (*UNARY, *BINARY)},
            "gelu": self._gelu,
            "softplus": self._softplus,
            "pow": self._pow,
            "clamp": self._clamp,
            "clamp_min": self._clamp,
            "clamp_max": self._clamp,
            "where": self._where,
            "masked_fill": self._masked_fill,
            "invert": self._invert,
            **dict.fromkeys(CASTS, self._cast),
            "to": self._cast,
            "type_as": self._cast,
            "identity": self._identity,
            "dropout": self._dropout,
            **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min"), self._reduce),
            "var": self._var,
            "std": self._var,
            "softmax": self._softmax,
            "log_softmax": self._softmax,
            "logsumexp": self._logsumexp,
            "layer_norm": self._layer_norm,
            "batch_norm": self._batch_norm,
            "rms_norm": self._rms_norm,
            "group_norm": self._group_norm,
            **dict.fromkeys(("mse_loss", "l1_loss", "kl_div"), self._loss),
            "cross_entropy": self._cross_entropy,
            "getitem": self.getitem,
            "getattr": self.getattr,
            "chunk": self._chunk,
            "split": self._split,
            "cat": self._cat,
            "arange": self._arange,
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
            elif node["op"] == "get_attr":  # torch.fx keeps a tensor made once, when traced, as a buffer
                made = node["target"].startswith("_tensor_constant")
                role = "constant" if made else node.get("kind", "constant")
                self.values[node["name"]] = self.tensor_source(
                    node["name"], node, on_self(node["target"]), role
                )
            elif node["op"] == "output":
                self.output(node)
            else:
                self.values[node["name"]] = self.call(node, target)
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
            todo.extend(node_refs([node.get("args", []), node.get("kwargs", {})]))
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
            op = SPELLINGS.get(node.get("target", ""), ("",))[0]
            if op in ("chunk", "split") and node.get("shapes") == [half, half]:
                return True
            if op == "getitem" and node.get("shape") == half:
                return True
        return False

    def _full_width(self, main: dict[str, Any]) -> bool:
        """Whether forward returns a value of ``main``'s full shape: its halves are put back together
        (rotary's ``x * cos + rotate_half(x) * sin``), not computed with at half width."""
        output = next((n for n in self.nodes if n["op"] == "output"), {})
        result = (output.get("args") or [None])[0]
        by_name = {n["name"]: n for n in self.nodes}
        returned = by_name[result["node"]] if isinstance(result, dict) and "node" in result else {}
        return bool(returned.get("shape") == main["shape"])

    def call(self, node: dict[str, Any], target: str) -> Value:
        display = node.get("module") if node["op"] == "call_module" else target
        self.label = f"node {node['name']!r}"
        if (node.get("unsupported") and display not in READ_AT_CALL_TIME) or display not in SPELLINGS:
            raise Unsupported(f"unsupported op {display} (node {node['name']!r})")
        op, params = SPELLINGS[display]
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
            if dtype not in FLOAT_DTYPES:
                raise Unsupported(f"input {name} is a {dtype} value; only floating tensors")
            return Value(node["name"], SPLIT, (f"{name}.dtype",), shape=node["shape"], source=name)
        if "shape" in node:
            return self.tensor_source(node["name"], node, name, "input")
        default = node.get("example", node.get("default"))
        if isinstance(default, int | float) and not isinstance(default, bool):
            arg = self.fresh(node["name"])
            self.kernel.scalars.append((arg, name))
            return Value(arg, SCALAR, attr=name)
        raise Unsupported(f"forward argument {name!r} is not a tensor or a number")

    def tensor_source(self, var: str, meta: dict[str, Any], source: str, role: str) -> Value:
        shape, dtype = list(meta.get("shape", [])), meta.get("dtype", "")
        is_bool = dtype == "bool"
        if dtype in INT_DTYPES and role == "input":  # loaded only by an op that takes integers
            return Value(var, INDEX, (f"{source}.dtype",), shape=shape, source=source, example=dtype)
        if role == "constant":  # torch.arange(8): made once, when traced
            raise Unsupported(f"{source} is a tensor created in forward")
        if not is_bool and dtype not in FLOAT_DTYPES:
            raise Unsupported(f"{role} {source} is a {dtype or 'non-tensor'} value; only floating tensors")
        s = self.kernel.shape
        if shape == s:
            kind = FULL
        elif shape and shape[-1] == s[-1] and math.prod(shape) == s[-1] and len(shape) <= len(s):
            kind = COL
        else:
            return Value(var, OTHER, (f"{source}.dtype",), is_bool, shape=shape, source=source, role=role)
        name = self.fresh(var, pointer=True)
        placeholder = source if role == "input" else None
        self.kernel.loads.append(Load(name, kind, source, is_bool, placeholder))
        atom = f"{source}.dtype"
        return Value(name, kind, (atom,), is_bool, shape=shape, source=source)

    def broadcast_load(self, value: Value) -> Value:
        """A tensor that broadcasts against the input's shape S (``[B, 1, 1, T]``, a buffer's slice
        ``[1, 1, T, T]``, ``[H, 1, 1]``) read element by element through its strides as
        ``expand(S)`` gives them (0 along the dimensions it broadcasts over); forward refuses inputs of
        another number of dimensions. Its gradient, where it has one, is summed back to its shape."""
        assert value.source is not None and value.shape is not None
        ndim = len(self.kernel.shape)
        if ndim > 8:
            raise self.fail(f"unsupported broadcast over {ndim} dimensions")
        check = (f"{self.kernel.main}.dim() != {ndim}", f"the kernel broadcasts over {ndim} dimensions only")
        if check not in self.kernel.guards:
            self.kernel.guards.append(check)
        name = self.fresh(value.name, pointer=True)
        strides = tuple(self.fresh(f"{name}_stride_{d}") for d in range(ndim))
        placeholder = value.source if value.role == "input" else None
        no_grad = value.role not in ("input", "parameter")
        load = Load(name, BCAST, value.source, value.is_bool, placeholder, no_grad=no_grad, strides=strides)
        self.kernel.loads.append(load)
        return Value(name, BCAST, value.dtype, value.is_bool, shape=value.shape, source=value.source)

    def _view(self, value: Value, index: Any) -> Value:
        """A slice of a tensor that is not the input (nanoGPT's ``self.bias[:, :, :T, :T]``): forward
        takes it as it is, bounds read from the input's sizes at call time."""
        assert value.source is not None
        items = index if isinstance(index, list) else [index]
        texts = []
        for item in items:
            if not (isinstance(item, dict) and "slice" in item):
                raise self.fail(f"unsupported indexing with {item!r}")
            start, stop, step = item["slice"]
            if start is not None or step is not None:
                raise self.fail(f"unsupported slice {item['slice']!r}: only [:stop]")
            stop_text = "" if stop is None else self._index_number(stop, "slice stop")[0]
            texts.append(f":{stop_text}")
        shape = self.node.get("shape")
        source = f"{value.source}[{', '.join(texts)}]"
        dtype = (f"{source}.dtype",)  # the view's own: the launch takes the view, not the tensor
        return Value(self.node["name"], OTHER, dtype, value.is_bool, shape=shape, source=source, role="view")

    def _param(self, spec: dict[str, Any]) -> Value:
        return self.tensor_source(spec["target"], spec, on_self(spec["target"]), "parameter")

    # -- arguments ------------------------------------------------------------

    def operand(self, arg: Any, what: str = "operand") -> Value:
        """A value an op computes with: a node, a number, or a number read from the module."""
        if isinstance(arg, dict) and "node" in arg:
            value = self.values[arg["node"]]
            if value.kind == POSITIONS:
                value = self.values[arg["node"]] = self.place(arg["node"], value)
            if (
                value.kind == OTHER
                and value.source is not None
                and _broadcasts(value.shape, self.kernel.shape)
            ):
                value = self.values[arg["node"]] = self.broadcast_load(value)
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
            if value.kind == INDEX:
                raise self.fail(
                    f"input {value.source} is a {value.example} integer tensor: "
                    "only class indices of cross_entropy"
                )
            if value.kind in (DTYPE, PAIR, HALVES, SHAPE, SIZE, DEVICE):
                raise self.fail(f"unsupported {what} {arg['node']}")
            return value
        if isinstance(arg, dict) and "param" in arg:
            return self._param(arg["param"])
        if isinstance(arg, dict) and "attr" in arg:
            return self._attribute(arg["attr"], arg["value"])
        if isinstance(arg, dict) and "derived" in arg:
            return self._derived(arg["derived"], arg["value"])
        if isinstance(arg, int | float) and not isinstance(arg, bool):
            return Value(_literal(arg), SCALAR)
        raise self.fail(f"unsupported {what} {arg!r}")

    def _attribute(self, path: str, value: Any) -> Value:
        for arg, expr in self.kernel.scalars:
            if expr == on_self(path):
                return Value(arg, SCALAR, attr=path)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.fail(f"{on_self(path)} is {value!r}, not a number")
        arg = self.fresh(path)
        self.kernel.scalars.append((arg, on_self(path)))
        return Value(arg, SCALAR, attr=path)

    def _derived(self, path: str, value: Any) -> Value:
        """A number forward computes from a module attribute (``-self.bound``, ``t * t``): the trace
        records its value, not how it was computed, so the kernel takes that value and forward
        refuses an instance whose attribute differs from the one traced (which the trace records
        where forward also reads the attribute itself)."""
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.fail(f"a value computed from {on_self(path)} in forward is {value!r}, not a number")
        traced = [
            ref["value"] for ref in _attr_refs([[n.get("args"), n.get("kwargs")] for n in self.nodes], path)
        ]
        if not traced or any(v != traced[0] for v in traced):
            raise self.fail(
                f"a number computed from {on_self(path)} in forward, whose own value the trace does not "
                "record"
            )
        self._guard(path, traced[0])
        return Value(_literal(value), SCALAR)

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
        expr = f"tuple({on_self(path)})" if isinstance(wanted, tuple) else on_self(path)
        guard = (f"{expr} != {wanted!r}", f"the kernel is specialised to {path} == {wanted!r}")
        if guard not in self.kernel.guards:
            self.kernel.guards.append(guard)

    def dtype_of(self, arg: Any) -> tuple[str, ...]:
        if isinstance(arg, dict) and "dtype" in arg:
            name = arg["dtype"]
            if name not in FLOAT_DTYPES:
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
        if self.kernel.groups and not self.grouping:
            raise self.fail("unsupported reduction in a kernel with group_norm: its rows are the groups")
        name = self.fresh(base)
        self.kernel.body.append(Reduce(name, op, operand, template))
        return name

    def broadcast(self, operands: list[Value]) -> str:
        kinds = {v.kind for v in operands if v.kind != SCALAR}
        if not kinds:
            return SCALAR
        if HALF in kinds and len(kinds) > 1:
            raise self.fail(
                f"unsupported broadcast of a half of {self.kernel.main}'s last dimension against another "
                "value: the halves meet only in torch.cat((a, b), dim=-1)"
            )
        if ROW_FLAT in kinds and len(kinds) > 1:
            raise self.fail("unsupported broadcast of a reduction without keepdim against a tensor")
        if BCAST in kinds:
            return FULL if self.node.get("shape") == self.kernel.shape else BCAST
        if len(kinds) == 1:
            return kinds.pop()
        return FULL  # FULL with anything, or a per-row value against a row vector

    def check_shape(self, value: Value) -> Value:
        """The node's traced shape must be what the broadcast rules above say it is."""
        shape = self.node.get("shape")
        s = self.kernel.shape
        expected = {FULL: s, ROW: [*s[:-1], 1], ROW_FLAT: s[:-1], HALF: [*s[:-1], s[-1] // 2]}.get(value.kind)
        if shape is None or value.kind == SCALAR:
            return value
        if value.kind == BCAST:
            ok = _broadcasts(shape, s)
        elif expected is None:  # a row vector
            ok = shape[-1:] == s[-1:] and math.prod(shape) == s[-1] and len(shape) <= len(s)
        else:
            ok = shape == expected
        if not ok:
            raise self.fail(f"unsupported broadcast: gives shape {shape}, the input is {s}")
        return value

    def result(self, expr: str, operands: list[Value], is_bool: bool = False) -> Value:
        tensors = [v for v in operands if v.kind != SCALAR and not v.is_bool]
        if not is_bool and tensors and all(_integer(v) for v in tensors):
            for v in operands:
                if v.kind == SCALAR and not re.fullmatch(r"-?[0-9]+", v.name):
                    raise self.fail(
                        f"unsupported arithmetic of integer positions with {self.number(v)}: "
                        "cast them with .to() first"
                    )
        kind = self.broadcast(operands)
        dtype = ("torch.bool",) if is_bool else promote(operands)
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
        if a.kind == TOTAL:
            return self._after_total(op, [a])
        if a.kind == SCALAR:
            raise self.fail(f"unsupported op {op} of a number")
        if _integer(a) and op not in _INTEGER_UNARY:
            raise self.fail(f"unsupported {op} of integer positions: cast them with .to() first")
        self.kernel.uses_tanh |= "_tanh_of" in UNARY[op]
        self.tag(op)
        return self.result(UNARY[op].format(a=self.floats([a])[0]), [a])

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
        if TOTAL in (a.kind, b.kind):
            return self._after_total(op, [a, b])
        if a.kind == SCALAR and b.kind == SCALAR and not (a.attr or b.attr):
            raise self.fail(f"unsupported op {op} of two numbers")
        if op in COMPARE:
            self.tag(op)
            return self.result(COMPARE[op].format(a=a.name, b=b.name), [a, b], is_bool=True)
        if op == "div" and all(_integer(v) for v in (a, b) if v.kind != SCALAR):
            raise self.fail("unsupported division of integer positions: cast them with .to() first")
        self.tag(op)
        fa, fb = self.floats([a, b])
        value = self.result(BINARY[op].format(a=fa, b=fb), [a, b])
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
            readers = [n for n in self.nodes if first["node"] in node_refs([n.get("args"), n.get("kwargs")])]
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
        if p in POW:
            value = self.result(POW[p].format(a=x), [a])
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
                expr = BINARY[bound_op].format(a=expr, b=self.floats(operands[-1:])[0])
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
        value.dtype = promote([a, b]) if (a.kind != SCALAR or b.kind != SCALAR) else ("torch.float32",)
        return value

    def _masked_fill(self, op: str, bound: dict[str, Any]) -> Value:
        """``x.masked_fill(mask, value)``: ``where(mask, value, x)``, in x's dtype."""
        a, cond, fill = self.operand(bound["input"]), self.operand(bound["mask"], "mask"), bound["value"]
        if not cond.is_bool:
            raise self.fail("unsupported masked_fill with a non-boolean mask")
        if isinstance(fill, dict) and "node" in fill:
            raise self.fail("unsupported masked_fill with a tensor value")
        b = self.operand(fill, "value")
        self.tag("masked_fill")
        (fa,) = self.floats([a])
        value = self.result(f"tl.where({cond.name}, {b.name}, {fa})", [cond, a, b])
        value.dtype = a.dtype
        return value

    def _invert(self, op: str, bound: dict[str, Any]) -> Value:
        """``~mask``, ``mask.logical_not()`` of a boolean tensor."""
        a = self.operand(bound["input"])
        if not a.is_bool:
            raise self.fail("unsupported ~ of a non-boolean tensor")
        self.tag("not")
        return self.result(f"{a.name} == 0", [a], is_bool=True)

    def _cast(self, op: str, bound: dict[str, Any]) -> Value:
        a = self.operand(bound["input"])
        if op in CASTS:
            dtype: tuple[str, ...] = (f"torch.{CASTS[op]}",)
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
            check = f"self.training and {on_self(self.node['target'] + '.p')} > 0"
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
        if bound.get("dim") is None and op in ("sum", "mean") and self.node.get("shape") == []:
            a = self.row_operand(bound["input"], op)  # over every element: x.mean(), torch.sum(x)
            self.tag(op)
            return self.total(a, f"{self.kernel.main}.numel()" if op == "mean" else None)
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

    def getitem(self, op: str, bound: dict[str, Any]) -> Value:
        source, index = bound["input"], bound.get("index")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == PAIR:
            if index != 0:
                raise self.fail("unsupported use of the indices of max/min")
            return self.check_shape(value.items[0])
        if value is not None and value.kind == HALVES:
            if index not in (0, 1):
                raise self.fail(f"unsupported piece {index!r} of two halves")
            return self.check_shape(self.half(index))
        if value is not None and value.kind == SHAPE and isinstance(index, int):
            return Value(f"{value.name}[{index}]", SIZE, example=value.example[index])
        if value is not None and value.kind == POSITIONS:
            return self._position_view(value, index)
        if value is not None and value.kind == OTHER and value.source and isinstance(index, list | dict):
            return self._view(value, index)
        if value is not None and value.shape is not None and isinstance(index, list | dict):
            return self.check_shape(self._slice(value, index))
        raise self.fail("unsupported op operator.getitem (indexing)")

    def getattr(self, op: str, bound: dict[str, Any]) -> Value:
        source, attr = bound["input"], bound.get("name")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == PAIR and attr == "values":
            return self.check_shape(value.items[0])
        if value is not None and attr == "dtype" and value.kind in (FULL, COL, ROW, ROW_FLAT, SPLIT):
            return Value(value.name, DTYPE, value.dtype)
        if value is not None and attr == "shape" and value.source is not None and value.shape is not None:
            return Value(f"{value.source}.shape", SHAPE, example=value.shape)
        if value is not None and attr == "device" and value.kind not in _NOT_TENSORS:
            self._device_argument_only(value.source or source["node"])
            return Value(self.node["name"], DEVICE)
        raise self.fail(f"unsupported op getattr(.{attr})")

    def _device_argument_only(self, what: str) -> None:
        """``x.device`` is harmless where it only says where a tensor is made (``device=``): the
        kernel runs on the input's device. Any other use of it is declined, naming its node."""
        name = self.node["name"]
        for node in self.nodes:
            if node["name"] not in self.live:
                continue
            kwargs = {k: v for k, v in (node.get("kwargs") or {}).items() if k != "device"}
            if name in node_refs([node.get("args", []), kwargs]):
                raise self.fail(
                    f"unsupported use of {what}.device by node {node['name']!r}: only as a device= argument"
                )

    # -- positions: torch.arange of an input's size ------------------------------

    def _arange(self, op: str, bound: dict[str, Any]) -> Value:
        """``torch.arange(n)`` (or ``(0, n)``), ``n`` a size of an input (``x.size(-1)``,
        ``x.shape[-1]``): the index along one dimension of S, a coordinate the kernel computes from
        each element's offset once the positions meet S (:meth:`place`)."""
        start, end = bound.get("start"), bound.get("end")
        if "end" not in bound:
            start, end = 0, start
        if start not in (0, None) or bound.get("step") not in (None, 1):
            raise self.fail("unsupported arange with a start or a step: only torch.arange(n)")
        for key in ("out", "layout", "requires_grad", "pin_memory"):
            if bound.get(key) not in (None, False):
                raise self.fail(f"unsupported arange with {key}=")
        device = bound.get("device")  # the input's, or a torch.device (the trace's own, on meta)
        known = isinstance(device, dict) and "node" in device and self.values[device["node"]].kind == DEVICE
        if device not in (None, {"other": "device"}) and not known:
            raise self.fail(f"unsupported arange on device {device!r}: only an input's .device")
        dtype = bound.get("dtype")
        name = "int64" if dtype is None else dtype.get("dtype", "") if isinstance(dtype, dict) else ""
        if name not in ("int64", "int32", "float32"):
            raise self.fail(f"unsupported arange of dtype {dtype!r}: only int64, int32 or float32")
        size = self.values.get(end["node"]) if isinstance(end, dict) and "node" in end else None
        if size is None or size.kind != SIZE or not _INPUT_SIZE.fullmatch(size.name):
            what = repr(end)
            if isinstance(end, dict):
                what = end["node"] if "node" in end else on_self(end["attr"]) if "attr" in end else what
            raise self.fail(f"unsupported arange of {what}: only torch.arange(n), n a size of an input")
        if self.kernel.split:
            raise self.fail("unsupported arange in a kernel over one half of an input")
        return Value(size.name, POSITIONS, (f"torch.{name}",), shape=[size.example], example=0)

    def _position_view(self, value: Value, index: Any) -> Value:
        """``pos[None, :]``, ``pos[:, None]``, ``pos[..., None]``: dimensions of 1 added around the
        positions' own (``example`` holds where it is)."""
        assert value.shape is not None
        items = index if isinstance(index, list) else [index]
        full = {"slice": [None, None, None]}
        if any(item is not None and item != full and item != {"ellipsis": True} for item in items):
            raise self.fail(f"unsupported indexing of torch.arange with {index!r}: only None and [:]")
        if sum(item == {"ellipsis": True} for item in items) > 1:
            raise self.fail("unsupported indexing with two ellipses")
        taken = sum(item == full for item in items)
        if taken > len(value.shape):
            raise self.fail("unsupported indexing of torch.arange: too many indices")
        shape: list[int] = []
        axis, dim = None, 0
        for item in [*items, *([] if {"ellipsis": True} in items else [{"ellipsis": True}])]:
            if item is None:
                shape.append(1)
                continue
            for _ in range(1 if item == full else len(value.shape) - taken):
                if dim == value.example:
                    axis = len(shape)
                shape.append(value.shape[dim])
                dim += 1
        if shape != self.node.get("shape", shape):
            raise self.fail(f"unsupported indexing of torch.arange: gives {self.node.get('shape')}")
        return Value(value.name, POSITIONS, value.dtype, shape=shape, example=axis)

    def place(self, node: str, value: Value) -> Value:
        """Positions meeting S: the coordinate of the dimension of S they line up with, in float32
        (exact below 2**24). Forward refuses inputs where that dimension is not their length."""
        assert value.shape is not None and isinstance(value.example, int)
        s, main = self.kernel.shape, self.kernel.main
        ndim = len(s)
        if not _broadcasts(value.shape, s):
            raise self.fail(f"unsupported broadcast: {node} has shape {value.shape}, the input {s}")
        d = ndim - len(value.shape) + value.example
        if value.shape[value.example] != s[d]:
            raise self.fail(f"unsupported arange of {value.shape[value.example]} along dimension {d} of {s}")
        guards = [(f"{main}.dim() != {ndim}", f"the kernel broadcasts over {ndim} dimensions only")]
        if value.name not in (f"{main}.shape[{d}]", f"{main}.shape[{d - ndim}]"):
            why = f"the kernel reads torch.arange({value.name}) as the index of dimension {d} of {main}"
            guards.append((f"{value.name} != {main}.shape[{d}]", why))
        self.kernel.guards += [g for g in guards if g not in self.kernel.guards]
        self.kernel.coordinates = True
        name = self.assign(node, f"coord_{d}.to(tl.float32)")
        return Value(name, BCAST, value.dtype, shape=value.shape)

    # -- losses over every element ----------------------------------------------

    def _loss(self, op: str, bound: dict[str, Any]) -> Value:
        """``F.mse_loss``, ``F.l1_loss``, ``F.kl_div`` (and their modules): the elementwise loss, then
        with a reduction its sum over every element (:meth:`total`), divided as the reduction says."""
        for legacy in ("size_average", "reduce", "weight"):
            if bound.get(legacy) is not None:
                raise self.fail(f"unsupported {op} with {legacy}=")
        a, b = self.operand(bound["input"]), self.operand(bound["target"])
        if a.is_bool or b.is_bool or a.kind == SCALAR or b.kind == SCALAR:
            raise self.fail(f"unsupported {op} of a boolean or a number")
        x, t = a.name, b.name
        if op == "mse_loss":
            diff = self.assign(f"{self.node['name']}_diff", f"{x} - {t}")
            expr = f"{diff} * {diff}"
        elif op == "l1_loss":
            expr = f"tl.abs({x} - {t})"
        elif self.constant(bound.get("log_target", False), "log_target"):
            expr = f"tl.exp({t}) * ({t} - {x})"
        else:  # xlogy(t, t) - t * x: 0 where t is 0 (and its gradient 0 there, not 0 * log 0)
            safe = f"tl.where({t} == 0.0, 1.0, {t})"
            expr = f"tl.where({t} == 0.0, 0.0, {t} * tl.log({safe})) - {t} * {x}"
        self.tag(op)
        if self.broadcast([a, b]) != FULL:
            raise self.fail(f"unsupported {op} of tensors smaller than the input")
        name = self.assign(f"{self.node['name']}_elementwise", expr)
        elementwise = Value(name, FULL, promote([a, b]))
        main = self.kernel.main
        divisors = {"mean": f"{main}.numel()", "sum": "1"}
        if op == "kl_div":
            divisors["batchmean"] = f"{main}.shape[0]"
        if self.node["op"] == "call_module":  # the module's settings, read at call time
            owner = self.node["target"]
            if self.node.get("shape") != []:
                raise self.fail(f"unsupported {op} without a reduction")
            reduction = on_self(f"{owner}.reduction")
            why = f"the kernel sums the loss over every element: {owner}.reduction in {tuple(divisors)}"
            self.kernel.guards.append((f"{reduction} not in {tuple(divisors)!r}", why))
            if op == "kl_div":
                why = f"the kernel is specialised to {owner}.log_target == False"
                self.kernel.guards.append((on_self(f"{owner}.log_target"), why))
            divisor = "1"
            for key, size in divisors.items():
                divisor = divisor if size == "1" else f"{size} if {reduction} == {key!r} else {divisor}"
            return self.total(elementwise, f"({divisor})")
        reduction = self.constant(bound.get("reduction", "mean"), "reduction")
        if reduction == "none":
            return self.check_shape(elementwise)
        if reduction not in divisors:
            raise self.fail(f"unsupported {op} reduction {reduction!r}")
        return self.total(elementwise, None if divisors[reduction] == "1" else divisors[reduction])

    def _cross_entropy(self, op: str, bound: dict[str, Any]) -> Value:
        """``F.cross_entropy(logits, targets)`` of ``[batch, classes]`` logits and int64 class indices:
        each row's ``logsumexp(x) - x[target]`` (0 where the target is ``ignore_index``, NaN where it
        is out of range, which torch refuses), its target read once per row and picked by comparing
        it with the column index; with a reduction, the rows' losses added up in forward (a mean
        divides by the targets not ignored, as torch's)."""
        for unsupported in ("weight", "size_average", "reduce"):
            if bound.get(unsupported) is not None:
                raise self.fail(f"unsupported {op} with {unsupported}=")
        smoothing = self.constant(bound.get("label_smoothing", 0.0), "label_smoothing")
        if smoothing != 0.0:
            raise self.fail(f"unsupported {op} with label_smoothing={smoothing!r}")
        x = self.row_operand(bound["input"], op)
        s, main = self.kernel.shape, self.kernel.main
        if len(s) != 2:
            raise self.fail(f"unsupported {op} of a {len(s)}-D input: only [batch, classes] logits")
        arg = bound["target"]
        target = self.values.get(arg["node"]) if isinstance(arg, dict) and "node" in arg else None
        if target is None or target.kind != INDEX:
            raise self.fail(f"unsupported {op} with class probabilities: only int64 class indices")
        if target.shape != s[:-1] or target.dtype != (f"{target.source}.dtype",) or target.source is None:
            raise self.fail(f"unsupported {op} target of shape {target.shape}")
        ignore = self.constant(bound.get("ignore_index", -100), "ignore_index")
        reduction = self.constant(bound.get("reduction", "mean"), "reduction")
        if type(ignore) is not int or reduction not in ("mean", "sum", "none"):
            raise self.fail(f"unsupported {op} with ignore_index={ignore!r}, reduction={reduction!r}")
        source = target.source
        guards = [
            (f"{main}.dim() != 2", f"the kernel takes {op} of [batch, classes] logits only"),
            (
                f"{source}.is_floating_point() or {source}.dim() != 1",
                f"the kernel takes {op} of class indices only",
            ),
        ]
        self.kernel.guards += [g for g in guards if g not in self.kernel.guards]
        var = self.fresh(target.name, pointer=True)
        self.kernel.loads.append(Load(var, ROW, source, False, source, no_grad=True, integer=True))
        name = self.node["name"]
        row_max = self.reduce(f"{name}_max", "max", x.name)
        shift = self.assign(f"{name}_shift", f'tl.where(tl.abs({row_max}) == float("inf"), 0.0, {row_max})')
        total = self.reduce(f"{name}_sum", "sum", f"tl.exp({x.name} - {shift})")
        lse = self.assign(f"{name}_logsumexp", f"{shift} + tl.log({total})")
        picked = self.reduce(f"{name}_picked", "sum", f"tl.where(cols == {var}, {x.name}, 0.0)")
        # A class index out of range (and not ignore_index) gives NaN, where torch raises: no element
        # is read at it (the target is only compared with the column index), and no number is made up.
        valid = f"({var} >= 0) & ({var} < n_cols)"
        inner = f'tl.where({valid}, {lse} - {picked}, float("nan"))'
        loss = self.assign(name, f"tl.where({var} != {_literal(ignore)}, {inner}, 0.0)")
        self.tag(op)
        if reduction == "none":
            return self.check_shape(Value(loss, ROW_FLAT, x.dtype))
        if self.node.get("shape") != []:
            raise self.fail(f"unsupported reduction to shape {self.node.get('shape')}")
        if any(v.kind == TOTAL for v in self.values.values()):
            raise self.fail("unsupported second sum over every element")
        divisor = f" / ({source} != {_literal(ignore)}).sum()" if reduction == "mean" else ""
        return Value(loss, TOTAL, x.dtype, source="{r}.sum()" + divisor)

    def total(self, value: Value, divisor: str | None) -> Value:
        """The sum of ``value`` over every element (divided by ``divisor``, a forward expression):
        each program sums its row, and forward adds up the rows' sums (in float32: no atomics, so the
        same inputs give the same bits)."""
        if self.node.get("shape") != []:
            raise self.fail(f"unsupported reduction to shape {self.node.get('shape')}")
        if any(v.kind == TOTAL for v in self.values.values()):
            raise self.fail("unsupported second sum over every element")
        rows = self.reduce(f"{self.node['name']}_row_sums", "sum", value.name)
        epilogue = "{r}.sum()" + (f" / {divisor}" if divisor else "")
        return Value(rows, TOTAL, value.dtype, source=epilogue)

    def _after_total(self, op: str, operands: list[Value]) -> Value:
        """Arithmetic with numbers on a sum over every element (``loss * (t * t)``), done in forward."""
        total = next(v for v in operands if v.kind == TOTAL)
        if op not in ("neg", "add", "sub", "rsub", "mul", "div") or any(
            v.kind not in (TOTAL, SCALAR) for v in operands
        ):
            raise self.fail(f"unsupported {op} of a sum over every element")
        texts = [f"({v.source})" if v.kind == TOTAL else f"({self.number(v)})" for v in operands]
        template = UNARY[op] if op == "neg" else BINARY[op]
        epilogue = template.format(a=texts[0], b=texts[-1])
        self.tag(op)
        return Value(total.name, TOTAL, total.dtype, source=epilogue)

    def number(self, value: Value) -> str:
        """A scalar's forward expression: a literal, or what forward passes the kernel for it."""
        return next((expr for arg, expr in self.kernel.scalars if arg == value.name), value.name)

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
        if not self._is_split(value):
            raise self.fail("unsupported slice of the last dimension: only an input's two halves")
        h = self.kernel.shape[-1] // (2 if self.rotated else 1)
        (start_expr, start_at), (stop_expr, stop_at) = (
            self._index_number(start, "slice start"),
            self._index_number(stop, "slice stop"),
        )
        if start_at in (None, 0) and stop_at == h:
            self._halves_guard(stop_expr, stop_at)
            return self.half(0)
        if start_at == h and stop is None:
            self._halves_guard(start_expr, start_at)
            return self.half(1)
        raise self.fail(
            f"unsupported slice [{start_expr or ''}:{stop_expr or ''}] of the last dimension: only its "
            "two halves"
        )

    def _split_source(self, arg: Any, op: str) -> Value:
        value = self.values[arg["node"]] if isinstance(arg, dict) and "node" in arg else None
        if value is None or not self._is_split(value):
            what = "another input" if value is not None and value.source else "a computed value"
            raise self.fail(f"unsupported {op} of {what}: only one forward input splits into halves")
        return value

    def _is_split(self, value: Value) -> bool:
        """Whether ``value`` is the input taken apart into halves (read whole too, when rotated)."""
        if self.rotated:
            return value.kind == FULL and value.source == self.kernel.main and value.name == self.whole().name
        return value.kind == SPLIT

    def whole(self) -> Value:
        return self.values[self.main_node]

    def _index_number(self, arg: Any, what: str) -> tuple[str | None, int | None]:
        """(forward expression, example value) of a split size or slice bound; (None, None) for None."""
        if arg is None:
            return None, None
        if isinstance(arg, int) and not isinstance(arg, bool):
            return repr(arg), arg
        if isinstance(arg, dict) and "attr" in arg and isinstance(arg["value"], int):
            return on_self(arg["attr"]), arg["value"]
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

    def half(self, index: int) -> Value:
        """Half ``index`` of the SPLIT input: a load from its pointer, once per half.

        In a kernel over the whole width (:attr:`rotated`), a HALF value instead: at each column, the
        half's value at that column mod ``half_cols``. Column ``c`` of the first half is the input
        itself there, and its partner ``c - half_cols`` in the second; the second half is the partner
        ``c + half_cols`` in the first and the input itself in the second. One more load, of the input
        at each column's partner (a load with its own pointer, so that the backward writes its
        gradient into a buffer of its own, added to the input's by torch), serves both halves."""
        if self.rotated:
            return self._rotated_half(index)
        if index not in self.halves:
            x = self.kernel.main
            pointer = next((f"{load.ptr}" for load in self.kernel.loads if load.half is not None), "")
            if not pointer:
                pointer = f"{self.fresh(x, pointer=True)}_ptr"
            var = self.fresh(f"{x}_{('first', 'second')[index]}_half")
            self.kernel.loads.append(Load(var, FULL, x, False, x, half=index, pointer=pointer))
            self.halves[index] = Value(var, FULL, (f"{x}.dtype",), shape=self.kernel.shape, source=x)
        return self.halves[index]

    def _rotated_half(self, index: int) -> Value:
        if index not in self.halves:
            x, whole = self.kernel.main, self.whole()
            partner = next((load.var for load in self.kernel.loads if load.partner), "")
            if not partner:
                partner = self.fresh(f"{x}_partner", pointer=True)
                self.kernel.loads.append(Load(partner, FULL, x, False, x, partner=True))
            first, second = (whole.name, partner) if index == 0 else (partner, whole.name)
            var = self.assign(
                f"{x}_{('first', 'second')[index]}_half", f"tl.where(cols < half_cols, {first}, {second})"
            )
            shape = [*self.kernel.shape[:-1], self.kernel.shape[-1] // 2]
            self.halves[index] = Value(var, HALF, whole.dtype, shape=shape, source=x)
        return self.halves[index]

    def _cat(self, op: str, bound: dict[str, Any]) -> Value:
        """``torch.cat((a, b), dim=-1)`` of two halves in a kernel over the whole width: ``a`` on the
        first half's columns, ``b`` on the second's (rotary's ``cat((-x2, x1), dim=-1)``)."""
        tensors = bound.get("tensors")
        dim = self.constant(bound.get("dim", 0), "dim")
        if dim not in (-1, len(self.kernel.shape) - 1):
            raise self.fail(f"unsupported cat over dim {dim!r}: only the last")
        parts = [self.operand(t) for t in tensors] if isinstance(tensors, list) else []
        if len(parts) != 2 or any(p.kind != HALF for p in parts):
            raise self.fail(
                "unsupported cat: only of two halves of an input's last dimension, in a kernel that "
                "computes over its whole width"
            )
        a, b = self.floats(parts)
        name = self.assign(self.node["name"], f"tl.where(cols < half_cols, {a}, {b})")
        self.tag("cat")
        return self.check_shape(Value(name, FULL, promote(parts)))

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

    def _logsumexp(self, op: str, bound: dict[str, Any]) -> Value:
        """``log(sum(exp(x)))`` over the row, shifted by its max as torch does (an infinite max
        shifts by 0, so a row of -inf gives -inf and one holding +inf gives +inf)."""
        self.last_dim(bound.get("dim"), op)
        a = self.row_operand(bound["input"], op)
        keepdim = bool(self.constant(bound.get("keepdim", False), "keepdim"))
        name = self.node["name"]
        row_max = self.reduce(f"{name}_max", "max", a.name)
        shift = self.assign(f"{name}_shift", f'tl.where(tl.abs({row_max}) == float("inf"), 0.0, {row_max})')
        total = self.reduce(f"{name}_sum", "sum", f"tl.exp({a.name} - {shift})")
        out = self.assign(name, f"{shift} + tl.log({total})")
        self.tag(op)
        return self.check_shape(Value(out, ROW if keepdim else ROW_FLAT, a.dtype))

    def _batch_norm(self, op: str, bound: dict[str, Any]) -> Value:
        """``nn.BatchNorm1d/2d/3d`` in eval mode: ``(x - running_mean) * rsqrt(running_var + eps) *
        weight + bias``, each a vector over dimension 1 (the channels), read from the module at call
        time. Training mode normalizes by the batch's own statistics (a reduction over every dimension
        but the channels), which the kernel does not compute: forward refuses it."""
        if self.node["op"] != "call_module":
            if self.constant(bound.get("training", False), "training"):
                raise self.fail(
                    "unsupported batch_norm in training mode: it normalizes by the batch's own statistics"
                )
            raise self.fail("unsupported functional batch_norm: only the nn.BatchNorm modules")
        x = self.row_operand(bound["input"], op)
        s, main = self.kernel.shape, self.kernel.main
        owner, module = self.node["target"], self.node["module"]
        dims = {"nn.BatchNorm1d": (2, 3), "nn.BatchNorm2d": (4,), "nn.BatchNorm3d": (5,)}[module]
        if len(s) < 2 or self.node.get("shape") != s:
            raise self.fail(f"unsupported batch_norm of shape {s}")
        why = (
            f"{owner} runs in eval mode with running statistics only: training mode normalizes by the "
            "batch's own statistics"
        )
        guards = [
            (f"{on_self(owner + '.training')} or {on_self(owner + '.running_mean')} is None", why),
            (f"{on_self(owner + '.weight')} is None", f"the kernel is specialised to an affine {owner}"),
            (
                f"{main}.dim() not in {dims!r}",
                f"{module} takes inputs of {' or '.join(map(str, dims))} dimensions",
            ),
        ]
        self.kernel.guards += [g for g in guards if g not in self.kernel.guards]
        stats = {}
        for key in ("running_mean", "running_var", "weight", "bias"):
            source = on_self(f"{owner}.{key}")
            var = self.fresh(f"{owner}.{key}", pointer=True)
            self.kernel.loads.append(Load(var, CHANNEL, source, False, no_grad=key.startswith("running")))
            stats[key] = var
        eps = self.fresh(f"{owner}.eps")
        self.kernel.scalars.append((eps, on_self(f"{owner}.eps")))
        name = self.node["name"]
        rstd = self.assign(f"{name}_rstd", f"tl.rsqrt({stats['running_var']} + {eps})")
        expr = f"({x.name} - {stats['running_mean']}) * {rstd} * {stats['weight']} + {stats['bias']}"
        self.tag(op)
        return self.check_shape(Value(self.assign(name, expr), FULL, x.dtype))

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
                f"len({on_self(arg['attr'])}) != 1",
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
            machine = f"torch.finfo({dtype_expr(a.dtype)}).eps"
            expr = f"{on_self(attr)} if {on_self(attr)} is not None else {machine}" if attr else machine
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
        return self.check_shape(Value(out, FULL, promote(parts)))

    def _group_norm(self, op: str, bound: dict[str, Any]) -> Value:
        """``nn.GroupNorm`` and ``F.group_norm``: each (sample, group) of an ``[N, C, *]`` input is one
        row, ``C / G`` channels of contiguous elements, normalized by its own mean and biased
        variance; then the per-channel affine weights, vectors over dimension 1. The number of groups
        and eps are read at call time; forward refuses a channel count the groups do not divide."""
        if self.kernel.rows:
            raise self.fail("unsupported group_norm after a reduction over the last dimension")
        if self.kernel.split:
            raise self.fail("unsupported group_norm of one half of an input")
        x = self.row_operand(bound["input"], op)
        s, main = self.kernel.shape, self.kernel.main
        if len(s) < 2:
            raise self.fail(f"unsupported group_norm of shape {s}")
        groups_arg = bound["num_groups"]
        if isinstance(groups_arg, dict) and "attr" in groups_arg:
            groups = self._attribute(groups_arg["attr"], groups_arg["value"]).name
        elif type(groups_arg) is int and groups_arg > 0:
            groups = repr(groups_arg)
        else:
            raise self.fail(f"unsupported num_groups {groups_arg!r}")
        self.kernel.groups = groups
        number = self.number(Value(groups, SCALAR))
        guards = [
            (f"{main}.dim() < 2", "group_norm takes inputs of at least 2 dimensions"),
            (
                f"{main}.shape[1] % ({number}) != 0",
                "group_norm needs the number of channels divisible by the number of groups",
            ),
        ]
        affine = {key: self._channel_vector(bound.get(key), key) for key in ("weight", "bias")}
        if self.node["op"] == "call_module":
            owner = self.node["target"]
            if affine["weight"] is None:
                check = f"{on_self(owner + '.weight')} is not None"
                guards.append((check, f"the kernel is specialised to {owner} without affine weights"))
            else:
                check = f"{on_self(owner + '.weight')} is None"
                guards.append((check, f"the kernel is specialised to an affine {owner}"))
        self.kernel.guards += [g for g in guards if g not in self.kernel.guards]
        eps = self.operand(bound.get("eps", 1e-5), "eps").name
        name = self.node["name"]
        self.grouping = True
        _, centered = self._centered(name, x)
        var = self.reduce(f"{name}_var", "sum", f"{centered} * {centered}", "{r} / n_cols")
        self.grouping = False
        rstd = self.assign(f"{name}_rstd", f"tl.rsqrt({var} + {eps})")
        expr = f"{centered} * {rstd}"
        if affine["weight"] is not None:
            expr = f"{expr} * {affine['weight']}"
        if affine["bias"] is not None:
            expr = f"{expr} + {affine['bias']}"
        self.tag(op)
        return self.check_shape(Value(self.assign(name, expr), FULL, x.dtype))

    def _channel_vector(self, arg: Any, key: str) -> str | None:
        """A vector over dimension 1 (group norm's weight or bias) loaded per element's channel: the
        kernel variable, or None where there is none."""
        if arg is None:
            return None
        channels = self.kernel.shape[1]
        if isinstance(arg, dict) and "param" in arg:
            spec = arg["param"]
            if spec.get("shape") != [channels] or spec.get("dtype") not in FLOAT_DTYPES:
                raise self.fail(f"unsupported {key} of shape {spec.get('shape')}")
            var = self.fresh(spec["target"], pointer=True)
            self.kernel.loads.append(Load(var, CHANNEL, on_self(spec["target"]), False))
            return var
        value = self.values.get(arg["node"]) if isinstance(arg, dict) and "node" in arg else None
        if value is None or value.shape != [channels] or value.source is None or value.is_bool:
            raise self.fail(f"unsupported {key} {arg!r}: only a vector over the channels")
        load = next((x for x in self.kernel.loads if x.var == value.name), None)
        readers = [n for n in self.nodes if arg["node"] in node_refs([n.get("args"), n.get("kwargs")])]
        if load is not None and len(readers) == 1:  # read as a row vector so far: the channels instead
            load.kind = CHANNEL
            return load.var
        if load is not None or value.kind != OTHER:
            raise self.fail(f"unsupported {key} {arg['node']} read elsewhere as well")
        placeholder = next(
            (n["target"] for n in self.nodes if n["name"] == arg["node"] and n["op"] == "placeholder"), None
        )
        var = self.fresh(arg["node"], pointer=True)
        self.kernel.loads.append(Load(var, CHANNEL, value.source, False, placeholder))
        return var

    # -- the output -------------------------------------------------------------

    def output(self, node: dict[str, Any]) -> None:
        args = node.get("args", [])
        result = args[0] if args else None
        if not (isinstance(result, dict) and "node" in result):
            count = len(result) if isinstance(result, list) else "no"
            raise Unsupported(f"forward returns {count} values; only a single tensor is supported")
        value = self.values[result["node"]]
        if value.kind == TOTAL:  # the kernel returns its per-row sums in float32; forward adds them up
            assert value.source is not None
            self.kernel.epilogue = f"({value.source}).to({dtype_expr(value.dtype)})"
            value = Value(value.name, ROW_FLAT, ("torch.float32",))
        if self.kernel.groups and any(load.kind == COL for load in self.kernel.loads):
            raise Unsupported("unsupported row vector in a kernel with group_norm: its rows are the groups")
        if (
            self.kernel.rows
            and not self.kernel.groups
            and any(load.kind == CHANNEL for load in self.kernel.loads)
        ):
            raise Unsupported("unsupported batch_norm in a kernel with row reductions")
        if value.kind not in (FULL, ROW, ROW_FLAT):
            raise Unsupported(f"forward returns a {value.kind} value; only tensors of the input's shape")
        if any(value.name == load.var for load in self.kernel.loads):
            raise Unsupported("forward returns its input unchanged: nothing to compute")
        self.kernel.output = value


_NOT_TENSORS = (SCALAR, DTYPE, PAIR, HALVES, SHAPE, SIZE, DEVICE, TOTAL, POSITIONS)


def _integer(value: Value) -> bool:
    """Whether a tensor holds integers (positions): its dtype is an integer one."""
    return bool(value.dtype) and not value.is_bool and all(a in _INTEGER_ATOMS for a in value.dtype)


def _broadcasts(shape: list[int] | None, to: list[int]) -> bool:
    """Whether a tensor of ``shape`` broadcasts against ``to`` without changing it."""
    if shape is None or len(shape) > len(to):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(to), strict=False))


def _attr_refs(value: Any, path: str) -> list[dict[str, Any]]:
    """Every ``{"attr": path, "value": ...}`` inside a node's arguments."""
    if isinstance(value, dict):
        if value.get("attr") == path:
            return [value]
        return [r for v in value.values() for r in _attr_refs(v, path)]
    if isinstance(value, list):
        return [r for v in value for r in _attr_refs(v, path)]
    return []


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
