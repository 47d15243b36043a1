"""Masked mean pooling for the ``template`` generator: token embeddings averaged over a mask, one kernel.

Sentence-transformers' pooling (and the many modules written like it) averages a ``[B, S, H]`` input
over its second dimension, counting only the positions an integer or boolean ``[B, S]`` mask keeps::

    mask = attention_mask.unsqueeze(-1).expand(x.size()).float()     # [B, S, H] (or [B, S, 1])
    return torch.sum(x * mask, 1) / torch.clamp(mask.sum(1), min=1e-9)   # [B, H]

The template's own kernels (``lowering.py``) reduce over the last dimension; a graph that sums a 3-D
tensor over dimension 1 comes here instead. The graph is read by what each node is (the input, the
mask and its broadcasts and casts, their product, the two sums, the clamp of the count, the
division); anything else in it is declined by name. Each program owns one sample ``b`` and
``BLOCK_H`` columns and walks down the sequence ``BLOCK_S`` positions at a time, accumulating
``x * mask`` and the mask's count in float32 (reads coalesced along the hidden dimension, no
atomics: the same inputs give the same bits); it stores ``sum / max(count, eps)`` once per column,
in the dtype torch's promotion gives (the mask's cast with the input's).

The backward is ``d_x[b, s, h] = d_out[b, h] * mask[b, s] / max(count_b, eps)``: one program per
sample and block of positions, which counts its sample's mask and writes its positions' gradients
over every column. The mask takes no gradient (it is integer or boolean: a floating mask, which
could, is declined). Both launches are custom ops in a ``torch.autograd.Function``, as the
template's row kernels are.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from runners import pyast
from runners.generators.base import Candidate, Problem
from runners.generators.template.emit import (
    custom_op_candidate,
    custom_op_module,
    guard_lines,
    op_source,
    wrap,
)
from runners.generators.template.ir import Kernel, on_self, read_guards, require_direct
from runners.generators.template.ops import FLOAT_DTYPES, INT_DTYPES, SPELLINGS, Unsupported
from runners.source import class_parts

_MASK_DTYPES = (*INT_DTYPES, "bool")
_CASTS = {
    "Tensor.float": "torch.float32",
    "Tensor.half": "torch.float16",
    "Tensor.bfloat16": "torch.bfloat16",
}
_CLAMPS = ("torch.clamp", "Tensor.clamp", "torch.clamp_min", "Tensor.clamp_min")


def _pooled_sum(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The first sum over dimension 1 of a 3-D tensor, if any."""
    nodes: list[dict[str, Any]] = trace.get("nodes", [])
    by_name = {n["name"]: n for n in nodes}
    for node in nodes:
        if node["op"] not in ("call_function", "call_method"):
            continue
        op, params = SPELLINGS.get(node.get("target", ""), ("", ()))
        if op != "sum":
            continue
        bound = dict(zip(params, node.get("args", []), strict=False)) | dict(node.get("kwargs", {}))
        source = bound.get("input")
        shape = by_name.get(source["node"], {}).get("shape") if isinstance(source, dict) else None
        dim = bound.get("dim")
        if isinstance(dim, list) and len(dim) == 1:
            dim = dim[0]
        if isinstance(shape, list) and len(shape) == 3 and type(dim) is int and dim in (1, -2):
            return node
    return None


def applies(trace: dict[str, Any]) -> bool:
    """Whether the graph sums a 3-D tensor over its second dimension."""
    return _pooled_sum(trace) is not None


class _Pooling:
    """What each node of a masked mean pooling is: the roles below, else Unsupported naming it."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.nodes: list[dict[str, Any]] = trace["nodes"]
        self.role: dict[str, str] = {}  # node -> x, mask, size, num, den, out
        self.x = self.mask = ""  # the forward arguments
        self.cast = ""  # the dtype the mask is cast to (a forward expression)
        self.eps: str | None = None  # the clamp of the count (a forward expression), if any
        self.shape: list[int] = []

    def fail(self, node: dict[str, Any], why: str) -> Unsupported:
        return Unsupported(f"{why} in a masked mean pooling ({node.get('target')}, node {node['name']!r})")

    def arg(self, node: dict[str, Any], value: Any) -> str:
        if isinstance(value, dict) and "node" in value and value["node"] in self.role:
            return self.role[value["node"]]
        raise self.fail(node, f"unsupported operand {value!r}")

    def read(self) -> None:
        for node in self.nodes:
            op = node["op"]
            if op == "placeholder":
                self.placeholder(node)
            elif op == "output":
                args = node.get("args", [])
                if len(args) != 1 or self.arg(node, args[0]) != "out":
                    raise self.fail(node, "unsupported output: forward must return the pooled mean")
            elif op in ("call_function", "call_method"):
                self.role[node["name"]] = self.call(node)
            else:
                raise self.fail(node, f"unsupported {op}")
        if not (self.x and self.mask and self.cast):
            raise Unsupported("unsupported sum over dim 1: only a masked mean pooling of a [B, S, H] input")

    def placeholder(self, node: dict[str, Any]) -> None:
        shape, dtype = node.get("shape"), node.get("dtype")
        if shape is None:
            raise self.fail(node, "unsupported forward argument that is not a tensor")
        if len(shape) == 3 and dtype in FLOAT_DTYPES and not self.x:
            self.x, self.shape = node["target"], shape
            self.role[node["name"]] = "x"
        elif dtype in _MASK_DTYPES and len(shape) == 2 and not self.mask:
            self.mask = node["target"]
            self.role[node["name"]] = "mask"
        elif dtype in FLOAT_DTYPES and len(shape) == 2:
            raise self.fail(node, "unsupported floating mask: only integer or boolean masks (no gradient)")
        else:
            raise self.fail(node, f"unsupported input of shape {shape} and dtype {dtype}")

    def call(self, node: dict[str, Any]) -> str:
        target = node.get("target", "")
        args, kwargs = node.get("args", []), node.get("kwargs", {})
        first = self.arg(node, args[0]) if args else ""
        shape = node.get("shape")
        if target in ("Tensor.size", "getattr") and first == "x":
            if target == "getattr" and args[1:] != ["shape"]:
                raise self.fail(node, f"unsupported getattr(.{args[1:]})")
            return "size"
        if target == "Tensor.unsqueeze" and first == "mask" and args[1:] in ([-1], [2]) and not kwargs:
            return "mask"
        if target == "Tensor.expand" and first == "mask" and shape == self.shape:
            return "mask"
        if first == "mask" and (target in _CASTS or target in ("Tensor.to", "Tensor.type_as")):
            self.cast = self.cast_to(node, target, args[1:], kwargs)
            return "maskf"
        op = SPELLINGS.get(target, ("",))[0]
        if (
            op == "mul"
            and len(args) == 2
            and not kwargs
            and sorted(self.arg(node, a) for a in args) == ["maskf", "x"]
        ):
            return "xm"
        if SPELLINGS.get(target, ("",))[0] == "sum" and first in ("xm", "maskf"):
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            rest = {k: v for k, v in kwargs.items() if k != "dim"}
            if dim not in (1, -2, [1], [-2]) or len(args) > 2 or rest:
                raise self.fail(node, f"unsupported sum over dim {dim!r} with {rest or 'no'} options")
            return "num" if first == "xm" else "den"
        if SPELLINGS.get(target, ("",))[0] == "sum":
            names = {"x": f"{self.x} itself", "mask": "the mask before its cast"}
            what = names.get(first, "a computed value")
            raise self.fail(node, f"unsupported sum of {what}: only of x * mask and of the mask")
        if target in _CLAMPS and first == "den":
            low = args[1] if len(args) > 1 else kwargs.get("min")
            if kwargs.get("max") is not None or len(args) > 2 or self.eps is not None:
                raise self.fail(node, "unsupported clamp of the count: only a lower bound")
            self.eps = self.number(node, low)
            return "den"
        if SPELLINGS.get(target, ("",))[0] == "div" and [self.arg(node, a) for a in args] == ["num", "den"]:
            return "out"
        raise self.fail(node, f"unsupported {target}")

    def cast_to(self, node: dict[str, Any], target: str, rest: list[Any], kwargs: dict[str, Any]) -> str:
        if target in _CASTS and not rest and not kwargs:
            return _CASTS[target]
        other = rest[0] if rest else kwargs.get("dtype", kwargs.get("other"))
        if isinstance(other, dict) and other.get("dtype") in FLOAT_DTYPES:
            return f"torch.{other['dtype']}"
        if isinstance(other, dict) and "node" in other and self.role.get(other["node"]) == "x":
            return f"{self.x}.dtype"  # type_as(x)
        raise self.fail(node, f"unsupported cast of the mask to {other!r}")

    def number(self, node: dict[str, Any], value: Any) -> str:
        if isinstance(value, dict) and "attr" in value and isinstance(value["value"], int | float):
            return on_self(value["attr"])
        if isinstance(value, int | float) and not isinstance(value, bool):
            return repr(float(value))
        raise self.fail(node, f"unsupported lower bound {value!r}")


_KERNEL = """
@triton.jit
def {name}(
    x_ptr, mask_ptr, out_ptr, seq, hidden, eps, S_BUCKET, H_BUCKET,
    BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr,
):
    # Program (b, j) owns sample b's columns j * BLOCK_H, ... and walks down its sequence BLOCK_S
    # positions at a time: each load reads BLOCK_H neighbouring elements of BLOCK_S positions.
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    col_mask = cols < hidden
    acc = tl.zeros((BLOCK_S, BLOCK_H), dtype=tl.float32)
    count = tl.zeros((BLOCK_S,), dtype=tl.float32)
    for start in range(0, seq, BLOCK_S):
        positions = start + tl.arange(0, BLOCK_S)
        keep = positions < seq
        m = tl.load(mask_ptr + b * seq + positions, mask=keep, other=0).to(tl.float32)
        offsets = (b * seq + positions[:, None]) * hidden + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=keep[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        acc += x * m[:, None]
        count += m
    total = tl.sum(acc, axis=0)
    denominator = {denominator}
    tl.store(out_ptr + b * hidden + cols, (total / denominator).to(out_ptr.dtype.element_ty), mask=col_mask)
"""
_BACKWARD_KERNEL = """
@triton.jit
def {name}(d_out_ptr, mask_ptr, d_x_ptr, seq, hidden, eps, BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr):
    # d_x[b, s, h] = d_out[b, h] * mask[b, s] / denominator[b]: program (b, i) counts sample b's mask,
    # then writes positions i * BLOCK_S, ... over every column.
    b = tl.program_id(0).to(tl.int64)
    count = tl.zeros((BLOCK_S,), dtype=tl.float32)
    for start in range(0, seq, BLOCK_S):
        positions = start + tl.arange(0, BLOCK_S)
        count += tl.load(mask_ptr + b * seq + positions, mask=positions < seq, other=0).to(tl.float32)
    total = tl.sum(count, axis=0)
    denominator = {denominator}
    positions = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    keep = positions < seq
    m = tl.load(mask_ptr + b * seq + positions, mask=keep, other=0).to(tl.float32) / denominator
    for start in range(0, hidden, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        col_mask = cols < hidden
        d = tl.load(d_out_ptr + b * hidden + cols, mask=col_mask, other=0.0).to(tl.float32)
        offsets = (b * seq + positions[:, None]) * hidden + cols[None, :]
        d_x = m[:, None] * d[None, :]
        tl.store(d_x_ptr + offsets, d_x.to(d_x_ptr.dtype.element_ty), mask=keep[:, None] & col_mask[None, :])
"""

# On CUDA the forward is tuned per size over the block of columns a program owns, the block of
# positions a step reads, and num_warps, keyed on the sizes rounded up to powers of two. Under the
# Triton interpreter, where timing settings means nothing, a plain launch. The backward has a plain
# launch (it is not tuned yet).
_LAUNCH = '''
{name}_autotuned = triton.autotune(
    configs=[
        triton.Config({{"BLOCK_S": s, "BLOCK_H": h}}, num_warps=w)
        for s, h in ((16, 64), (32, 64), (16, 128), (32, 128), (8, 256), (16, 256))
        for w in (4, 8)
    ],
    key=["S_BUCKET", "H_BUCKET"],
)({name})


def _pooling_launch_config(batch, seq, hidden, on_cuda):
    """(kernel, grid, settings) for one program per sample and block of BLOCK_H columns."""
    buckets = {{"S_BUCKET": triton.next_power_of_2(seq), "H_BUCKET": triton.next_power_of_2(hidden)}}
    if on_cuda and isinstance({name}, triton.JITFunction):
        grid = lambda meta: (batch, triton.cdiv(hidden, meta["BLOCK_H"]))
        return {name}_autotuned, grid, buckets
    config = {{"BLOCK_S": 16, "BLOCK_H": 64, "num_warps": 4, **buckets}}
    return {name}, (batch, triton.cdiv(hidden, 64)), config
'''


def _ops(name: str, backward: str, out_dtype: str) -> tuple[str, str, str, str]:
    """(the forward op's source, the backward op's, their names)."""
    fwd, bwd = name.removesuffix("_kernel"), backward.removesuffix("_kernel")
    prep = [
        "    x = x.contiguous()",
        "    mask = mask.contiguous()",
        "    batch, seq, hidden = x.shape",
        f"    out = torch.empty((batch, hidden), dtype={out_dtype}, device=x.device)",
    ]
    forward_body = [
        *prep,
        "    kernel, grid, config = _pooling_launch_config(batch, seq, hidden, x.is_cuda)",
        "    kernel[grid](x, mask, out, seq, hidden, eps, **config)",
        "    return out",
    ]
    params = [("x", "torch.Tensor"), ("mask", "torch.Tensor"), ("eps", "float")]
    forward = op_source(fwd, params, "torch.Tensor", forward_body, [*prep, "    return out"])
    backward_body = [
        "    d_out = d_out.contiguous()",
        "    mask = mask.contiguous()",
        "    batch, seq = mask.shape",
        "    hidden = d_out.shape[-1]",
        "    d_x = torch.empty((batch, seq, hidden), dtype=dtype, device=d_out.device)",
        "    grid = (batch, triton.cdiv(seq, 16))",
        f"    {backward}[grid](d_out, mask, d_x, seq, hidden, eps, BLOCK_S=16, BLOCK_H=64, num_warps=4)",
        "    return d_x",
    ]
    backward_fake = [
        "    batch, seq = mask.shape",
        "    return torch.empty((batch, seq, d_out.shape[-1]), dtype=dtype, device=d_out.device)",
    ]
    params = [("d_out", "torch.Tensor"), ("mask", "torch.Tensor"), ("eps", "float"), ("dtype", "torch.dtype")]
    back = op_source(bwd, params, "torch.Tensor", backward_body, backward_fake)
    return forward, back, fwd, bwd


def _function(fn: str, fwd: str, bwd: str, forward_name: str, backward: str) -> str:
    return textwrap.dedent(f'''
        class {fn}(torch.autograd.Function):
            """Forward: {forward_name}. Backward: {backward}, the upstream gradient spread over the kept
            positions."""

            @staticmethod
            def forward(ctx, x, mask, eps):
                ctx.save_for_backward(mask)
                ctx.eps, ctx.dtype = eps, x.dtype
                return {fwd}(x, mask, eps)

            @staticmethod
            def backward(ctx, d_out):
                (mask,) = ctx.saved_tensors
                return {bwd}(d_out, mask, ctx.eps, ctx.dtype), None, None
        ''').strip("\n")


def render_module(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, str | None]:
    """(source, forward kernel name, backward kernel name or None) for a traced masked mean pooling."""
    require_direct(problem.class_name, trace)
    pooling = _Pooling(trace)
    pooling.read()
    parts = class_parts(problem.source, problem.class_name)
    taken = {
        n.arg for n in ast.walk(pyast.parse(f"def f({parts.signature}): pass")) if isinstance(n, ast.arg)
    }
    x, mask = pooling.x, pooling.mask
    for arg in (x, mask):
        if arg not in taken:
            raise Unsupported(f"the pooled input {arg!r} is not an argument of forward")
    name, bwd_name, fn = (
        "_masked_mean_pool_fwd_kernel",
        "_masked_mean_pool_bwd_kernel",
        "_MaskedMeanPoolFunction",
    )
    denominator = "tl.sum(count, axis=0)" if pooling.eps is None else "tl.maximum(tl.sum(count, axis=0), eps)"
    kernels = [_KERNEL.format(name=name, denominator=denominator)]
    out_dtype = "torch.promote_types(x.dtype, {})".format(pooling.cast.replace(f"{x}.dtype", "x.dtype"))
    forward_op, backward_op, fwd, bwd = _ops(name, bwd_name, out_dtype)
    ops = [forward_op]
    if backward:
        back_denominator = "total" if pooling.eps is None else "tl.maximum(total, eps)"
        kernels.append(_BACKWARD_KERNEL.format(name=bwd_name, denominator=back_denominator))
        ops += [backward_op, _function(fn, fwd, bwd, name, bwd_name)]
    guards = Kernel([], x, guards=read_guards(trace))
    guards.guards += [
        (
            f"{x}.dim() != 3 or not {x}.is_floating_point()",
            "the kernel pools floating [B, S, H] inputs only",
        ),
        (
            f"{mask}.is_floating_point() or tuple({mask}.shape) != tuple({x}.shape[:2])",
            "the kernel takes an integer or boolean [B, S] mask only",
        ),
    ]
    eps = pooling.eps or "0.0"
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(guards)]
    if backward:
        forward.append(f"    if torch.is_grad_enabled() and {x}.requires_grad:")
        forward += wrap(f"return {fn}.apply", [x, mask, eps], "        ")
    forward += wrap(f"return {fwd}", [x, mask, eps], "    ")
    also = f", and its backward, {bwd_name}" if backward else ""
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} (one program per sample and block of '
        f"columns){also}.\n"
        'Each launch is a custom op, so torch.compile(fullgraph=True) takes the module as it is."""'
    )
    launch = _LAUNCH.format(name=name)
    source = custom_op_module(problem.class_name, parts, doc, [*kernels, launch, *ops], forward)
    return source, name, bwd_name if backward else None


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    return custom_op_candidate(render_module, problem, trace, generator, "masked mean pooling")
