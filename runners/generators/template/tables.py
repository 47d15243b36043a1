"""Tables built from positions for the ``template`` generator: RoPE's cos and sin, one kernel.

A rotary embedding (``LlamaRotaryEmbedding`` and the many modules written like it) computes no
function of its input's values: it builds tables from token positions and its inverse frequencies::

    freqs = position_ids[..., None].float() * self.inv_freq      # [B, S, 1] * [D/2] -> [B, S, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)                       # [B, S, D]
    return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling   # in x's dtype

Its outputs have a shape no input has, so the template's own kernel (``lowering.py``: one over
its largest input) declines it; a traced graph whose outputs are larger than every input whose
values it reads comes here instead. The kernel runs once over the outputs' shape ``S = [..., N]``,
one element per lane, and each input is read where it broadcasts:

- a tensor of shape ``S[:-1]`` (``position_ids``), or ``S[:-1] + [1]``, once per row (``offsets // N``);
- a vector of ``N`` (a bias-like buffer) per column, and one of ``N / 2`` (``inv_freq``) per column of
  a half (``cols % half``): a value computed from it is the first half's value at every column, which
  is what ``torch.cat((a, b), dim=-1)`` needs, taken as ``tl.where(cols < half, a, b)`` (``a`` alone
  when both halves are the same value);
- a tensor of shape ``S`` element by element.

Integer inputs (positions) are read as float32, exact below 2**24. The outputs (a tuple of tensors
of shape ``S``, or one) are stored by the same kernel, each in its own dtype: a cast to ``x.dtype``
makes ``x`` an argument of the op for its dtype alone. The launch is a custom op with a fake, like
the template's; there is no backward (positions and buffers take no gradient).
"""

from __future__ import annotations

import ast
import math
import textwrap
from typing import Any

from runners import pyast
from runners.generators.base import Candidate, GeneratorDeclined, Problem
from runners.generators.template.emit import (
    CUSTOM_OP,
    HEADER,
    RESULT_DTYPE,
    TANH,
    fresh_local,
    guard_lines,
    narrow_pointwise_launch,
    op_source,
    wrap,
)
from runners.generators.template.ir import (
    Kernel,
    Load,
    Value,
    dtype_expr,
    node_refs,
    promote,
    read_guards,
    require_direct,
)
from runners.generators.template.lowering import Builder
from runners.generators.template.ops import COL, DTYPE, FULL, HALF, OTHER, ROW, ROW_FLAT, SCALAR, Unsupported
from runners.generators.template.products import forward_args
from runners.source import NotStandalone, class_parts

HALF_COL = "half_col"  # a vector of N / 2, read at cols % half
_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
_NAMES = ("rows", "cols", "half")  # the kernel's own index names


def _data_refs(nodes: list[dict[str, Any]]) -> set[str]:
    """Nodes whose values are read by an op (not only their ``.dtype`` or ``.device``)."""
    read: set[str] = set()
    for node in nodes:
        if node["op"] in ("placeholder", "get_attr", "output"):
            continue
        args = node.get("args", [])
        if node.get("target") == "getattr" and len(args) > 1 and args[1] in ("dtype", "device"):
            continue
        read.update(node_refs([args, node.get("kwargs", {})]))
    return read


def _outputs(nodes: list[dict[str, Any]]) -> list[str]:
    output = next(n for n in nodes if n["op"] == "output")
    result = (output.get("args") or [None])[0]
    items = result if isinstance(result, list) else [result]
    if not items or not all(isinstance(r, dict) and "node" in r for r in items):
        raise Unsupported("forward returns something other than tensors")
    return [r["node"] for r in items]


def applies(trace: dict[str, Any]) -> bool:
    """Whether the outputs share one shape, larger than every input whose values are read."""
    nodes = trace.get("nodes", [])
    by_name = {n["name"]: n for n in nodes}
    try:
        shapes = [by_name[o].get("shape") for o in _outputs(nodes)]
    except (Unsupported, KeyError, StopIteration):
        return False
    if not shapes or shapes[0] is None or any(s != shapes[0] for s in shapes):
        return False
    read = _data_refs(nodes)
    inputs = [n for n in nodes if n["op"] in ("placeholder", "get_attr") and n["name"] in read]
    size = math.prod(shapes[0])
    return bool(inputs) and all(math.prod(n.get("shape") or [size]) < size for n in inputs)


class _OuterBuilder(Builder):
    """The template's walk over a kernel shaped like the outputs, its inputs read where they broadcast."""

    def __init__(self, trace: dict[str, Any]) -> None:
        super().__init__(trace)
        by_name = {n["name"]: n for n in self.nodes}
        self.outputs = _outputs(self.nodes)
        shape = list(by_name[self.outputs[0]]["shape"])
        if len(shape) < 2 or shape[-1] % 2:
            raise Unsupported(f"outputs of shape {shape}: a table needs rows and an even last dimension")
        self.kernel = Kernel(shape, "", guards=read_guards(trace))
        self.taken.update(_NAMES)
        self.results: list[Value] = []
        self.handlers["cat"] = self._cat
        self.devices: set[str] = set()

    def call(self, node: dict[str, Any], target: str) -> Value:
        if target == "torch.cat":
            self.label = f"torch.cat, node {node['name']!r}"
            args, kwargs = list(node.get("args", [])), dict(node.get("kwargs", {}))
            bound = dict(zip(("tensors", "dim"), args, strict=False)) | kwargs
            return self._cat("cat", bound)
        if target == "getattr" and node.get("args", [None, None])[1:2] == ["device"]:
            self.devices.add(node["name"])  # where the tables live: the op's tensors decide
            return Value(node["name"], "device")
        if target == "Tensor.to":  # .to(device=x.device, dtype=...): the device is the op's
            args = [
                a for a in node.get("args", []) if not (isinstance(a, dict) and a.get("node") in self.devices)
            ]
            kwargs = {k: v for k, v in node.get("kwargs", {}).items() if k != "device"}
            node = {**node, "args": args, "kwargs": kwargs}
            if len(args) == 1 and "dtype" not in kwargs:
                return self.operand(args[0])
        return super().call(node, target)

    def tensor_source(self, var: str, meta: dict[str, Any], source: str, role: str) -> Value:
        shape, dtype = list(meta.get("shape", [])), meta.get("dtype", "")
        if dtype not in ("float32", "float16", "bfloat16", *_INT_DTYPES):
            raise Unsupported(f"{role} {source} is a {dtype or 'non-tensor'} value")
        if role == "constant":
            raise Unsupported(f"{source} is a tensor created in forward")
        s = self.kernel.shape
        n = s[-1]
        if shape == s:
            kind = FULL
        elif shape == s[:-1]:
            kind = ROW_FLAT
        elif shape == [*s[:-1], 1]:
            kind = ROW
        elif shape and math.prod(shape) == shape[-1] == n:
            kind = COL
        elif shape and math.prod(shape) == shape[-1] == n // 2:
            kind = HALF_COL
        else:
            return Value(var, OTHER, shape=shape, source=source)
        name = self.fresh(var, pointer=True)
        placeholder = source if role == "input" else None
        self.kernel.loads.append(Load(name, kind, source, False, placeholder))
        return Value(name, kind, (f"{source}.dtype",), shape=shape, source=source)

    def getitem(self, op: str, bound: dict[str, Any]) -> Value:
        source, index = bound["input"], bound.get("index")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == ROW_FLAT and index == [{"ellipsis": True}, None]:
            return self.check_shape(Value(value.name, ROW, value.dtype, shape=[*(value.shape or []), 1]))
        return super().getitem(op, bound)

    def getattr(self, op: str, bound: dict[str, Any]) -> Value:
        source, attr = bound["input"], bound.get("name")
        value = self.values.get(source["node"]) if isinstance(source, dict) and "node" in source else None
        if value is not None and value.kind == OTHER and attr == "dtype" and value.source:
            return Value(value.name, DTYPE, (f"{value.source}.dtype",))  # x's dtype, not its values
        return super().getattr(op, bound)

    def broadcast(self, operands: list[Value]) -> str:
        kinds = {v.kind for v in operands if v.kind != SCALAR}
        halves = kinds & {HALF, HALF_COL}
        if not halves:
            return super().broadcast([v for v in operands if v.kind != ROW_FLAT] or operands)
        if kinds & {FULL, COL}:
            raise self.fail("unsupported broadcast of a half-width value against a full-width one")
        if kinds & {ROW_FLAT}:
            raise self.fail("unsupported broadcast of a value per row without its last dimension")
        return HALF_COL if kinds == {HALF_COL} else HALF

    def check_shape(self, value: Value) -> Value:
        shape = self.node.get("shape")
        s = self.kernel.shape
        expected = {
            FULL: s,
            ROW: [*s[:-1], 1],
            ROW_FLAT: s[:-1],
            HALF: [*s[:-1], s[-1] // 2],
        }.get(value.kind)
        if shape is None or value.kind == SCALAR:
            return value
        if value.kind in (COL, HALF_COL):
            width = s[-1] if value.kind == COL else s[-1] // 2
            ok = shape[-1:] == [width] and math.prod(shape) == width
        else:
            ok = shape == expected
        if not ok:
            raise self.fail(f"unsupported broadcast: gives shape {shape}, the outputs are {s}")
        return value

    def _cat(self, op: str, bound: dict[str, Any]) -> Value:
        tensors, dim = bound.get("tensors"), bound.get("dim", 0)
        if dim not in (-1, len(self.kernel.shape) - 1):
            raise self.fail(f"unsupported cat over dim {dim!r}: only the last")
        if not (isinstance(tensors, list) and len(tensors) == 2):
            raise self.fail("unsupported cat: only of two halves")
        a, b = (self.operand(t) for t in tensors)
        if {a.kind, b.kind} - {HALF, HALF_COL} or (a.kind == HALF_COL) != (b.kind == HALF_COL):
            raise self.fail("unsupported cat: only of two half-width values")
        kind = COL if a.kind == HALF_COL else FULL
        if a.name == b.name:
            value = Value(a.name, kind, a.dtype)
        else:
            name = self.assign(self.node["name"], f"tl.where(cols < half, {a.name}, {b.name})")
            value = Value(name, kind, promote([a, b]))
        self.tag("cat")
        return self.check_shape(value)

    def output(self, node: dict[str, Any]) -> None:
        for name in self.outputs:
            value = self.values[name]
            if value.kind != FULL or value.is_bool:
                raise Unsupported(f"forward returns a {value.kind} value; only tables of the outputs' shape")
            self.results.append(value)


def _kernel_name(kernel: Kernel) -> str:
    parts = [t for t in kernel.tags if t not in ("identity", "mul", "cat", "to")][:3] or ["table"]
    return "_" + "_".join(parts) + "_kernel"


_WHERE = {
    FULL: "offsets",
    ROW: "rows",
    ROW_FLAT: "rows",
    COL: "cols",
    HALF_COL: "cols % half",
}


def render_kernel(kernel: Kernel, results: list[Value], name: str) -> str:
    pointers = list(dict.fromkeys(load.ptr for load in kernel.loads))
    outs = [f"out{i}_ptr" for i in range(len(results))]
    scalars = [a for a, _ in kernel.scalars]
    params = [*pointers, *outs, "n_elements", "n_cols", *scalars, "N_BUCKET", "NARROW: tl.constexpr"]
    params.append("BLOCK_SIZE: tl.constexpr")
    lines = ["@triton.jit", *wrap(f"def {name}", params, tail=":")]
    body = [
        "pid = tl.program_id(0).to(tl.int64)",
        "offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
        "mask = offsets < n_elements",
        "# Each element's row and column in 32 bits where every offset fits them (NARROW, set by the",
        "# launch): a 64-bit division is a subroutine call for every element.",
        "index = offsets.to(tl.int32) if NARROW else offsets",
        "rows = index // n_cols",
        "cols = index - rows * n_cols",
        "half = n_cols // 2",
    ]
    for load in kernel.loads:
        body.append(
            f"{load.var} = tl.load({load.ptr} + {_WHERE[load.kind]}, mask=mask, other=0).to(tl.float32)"
        )
    for stmt in kernel.body:
        assert isinstance(stmt, tuple)
        body.append(f"{stmt[0]} = {stmt[1]}")
    for out, value in zip(outs, results, strict=True):
        body.append(f"tl.store({out} + offsets, {value.name}.to({out}.dtype.element_ty), mask=mask)")
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


def _shape_expr(kernel: Kernel, arg: dict[str, str]) -> tuple[str, str, str]:
    """(the outputs' shape, their last dimension, the tensor giving the device) as forward expressions
    over the op's arguments: rows from a per-row or full input, the width from any that has one."""
    by_kind: dict[str, str] = {}
    for load in kernel.loads:
        by_kind.setdefault(load.kind, arg[load.source])
    if FULL in by_kind:
        t = by_kind[FULL]
        return f"{t}.shape", f"{t}.shape[-1]", t
    if COL in by_kind:
        width = f"{by_kind[COL]}.shape[-1]"
    elif HALF_COL in by_kind:
        width = f"2 * {by_kind[HALF_COL]}.shape[-1]"
    else:
        raise Unsupported("no input gives the outputs' last dimension")
    if ROW_FLAT in by_kind:
        rows = f"{by_kind[ROW_FLAT]}.shape"
    elif ROW in by_kind:
        rows = f"{by_kind[ROW]}.shape[:-1]"
    else:
        raise Unsupported("no input gives the outputs' rows")
    return f"(*{rows}, n_cols)", width, by_kind.get(ROW_FLAT) or by_kind[ROW]


def render_op(kernel: Kernel, results: list[Value], name: str) -> tuple[str, str, list[str]]:
    """(the op's source, its name, the forward expressions it takes, in order)."""
    taken = set(_NAMES) | {"n_cols", "shape", "n_elements", "kernel", "grid", "config"}
    arg: dict[str, str] = {}
    for load in kernel.loads:
        if load.source not in arg:
            arg[load.source] = fresh_local(load.placeholder or load.var, taken)
    for value in results:  # x in cos.to(x.dtype): taken for its dtype
        for atom in value.dtype:
            source = atom.removesuffix(".dtype")
            if atom.endswith(".dtype") and source not in arg:
                arg[source] = fresh_local(source.removeprefix("self.").replace(".", "_"), taken)
    numbers = {a: fresh_local(a, taken) for a, _ in kernel.scalars}
    shape, width, device = _shape_expr(kernel, arg)
    outs = [fresh_local("out" if i == 0 else f"out{i}", taken) for i in range(len(results))]
    prep = [f"    n_cols = {width}", f"    shape = {shape}"]
    for out, value in zip(outs, results, strict=True):
        atoms = (f"{arg[a[:-6]]}.dtype" if a.endswith(".dtype") and a[:-6] in arg else a for a in value.dtype)
        dtype = dtype_expr(tuple(atoms))
        prep.append(f"    {out} = torch.empty(shape, dtype={dtype}, device={device}.device)")
    loaded = list(dict.fromkeys(arg[load.source] for load in kernel.loads))
    prep += [f"    {t} = {t}.contiguous()" for t in loaded]
    launch = [
        f"    n_elements = {outs[0]}.numel()",
        f"    kernel, grid, config = _launch_config(n_elements, {device}.is_cuda)",
        *wrap(
            "kernel[grid]", [*loaded, *outs, "n_elements", "n_cols", *numbers.values(), "**config"], " " * 4
        ),
    ]
    returned = ", ".join(outs)
    returns = "torch.Tensor" if len(outs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outs))}]"
    params = [(a, "torch.Tensor") for a in arg.values()]
    params += [(a, "torch.types.Number") for a in numbers.values()]
    op_name = name.removesuffix("_kernel")
    body = [*prep, *launch, f"    return {returned}"]
    source = op_source(op_name, params, returns, body, [*prep[: 2 + len(outs)], f"    return {returned}"])
    return source, op_name, [*arg, *(expr for _, expr in kernel.scalars)]


def render_module(problem: Problem, trace: dict[str, Any]) -> tuple[str, str]:
    """(source, kernel name) for a traced module that builds tables."""
    require_direct(problem.class_name, trace)
    parts = class_parts(problem.source, problem.class_name)
    builder = _OuterBuilder(trace)
    builder.build()
    kernel, results = builder.kernel, builder.results
    name = _kernel_name(kernel)
    launch = narrow_pointwise_launch(name)
    op, op_name, args = render_op(kernel, results, name)
    signature_args = {
        n.arg for n in ast.walk(pyast.parse(f"def f({parts.signature}): pass")) if isinstance(n, ast.arg)
    }
    taken = {"self", *signature_args}
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(kernel)]
    named, passed = forward_args(args, taken)
    forward += [*named, *wrap(f"return {op_name}", passed, "    ")]
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name}: its {len(results)} output(s) in one '
        "elementwise pass over their shape.\nThe launch is a custom op, so torch.compile(fullgraph=True) "
        'takes the module as it is."""'
    )
    context = [c for c in parts.context if c not in HEADER]
    blocks = [doc + "\n\n" + "\n".join([*HEADER, *context]) + "\n"]
    if "_result_dtype(" in op:
        blocks.append(RESULT_DTYPE.strip("\n") + "\n")
    if kernel.uses_tanh:
        blocks.append(TANH.strip("\n") + "\n")
    blocks += [CUSTOM_OP.strip("\n") + "\n", render_kernel(kernel, results, name), launch, op]
    members = [*parts.members, "\n".join(forward) + "\n"]
    body = "\n\n".join(textwrap.indent(m.rstrip("\n"), "    ") for m in members)
    blocks.append(f"class {problem.class_name}(torch.nn.Module):\n{body}\n")
    return "\n\n".join(blocks), name


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    try:
        source, name = render_module(problem, trace)
    except (Unsupported, NotStandalone) as exc:
        raise GeneratorDeclined(f"{generator}: {exc}") from None
    return Candidate(name.strip("_"), generator, source, {"kernel": name, "pattern": "table"})
