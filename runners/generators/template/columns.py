"""Column reductions for the ``template`` generator: ``x.sum(dim=0)`` of a 2-D input.

The template's own kernels (``lowering.py``) reduce over the last dimension: one program per row. A
sum over the first dimension of a 2-D input (a batch's feature totals: ``x.sum(dim=0)``,
``x.sum(-2)``, ``torch.sum(x, 0, keepdim=True)``, and ``x.mean(dim=0)``) comes here instead.

One kernel, launched once or twice. Its programs form a 2-D grid: blocks of ``BLOCK_N`` columns by
splits of the rows. Each program walks down its split's rows ``BLOCK_M`` at a time, adding each
block into a float32 accumulator of ``BLOCK_M x BLOCK_N``: every load reads ``BLOCK_N``
neighbouring elements of a row, so the reads are coalesced along it. The accumulator's rows are
added up at the end, giving one value per column.

How many splits is chosen on the host from the shape (``_column_splits``, whose source the
generated module holds): enough that the blocks of columns times the splits make about four
programs per multiprocessor (the device's count on CUDA, 132 otherwise), each split at least 256
rows and a multiple of 64 of them (the last one may hold fewer). With one split (a short input, or
one whose columns alone make enough programs) the kernel's programs take all the rows and store
the result directly, in the input's dtype (torch's for a float sum or mean); a mean divides by the
number of rows. With more, each program stores its float32 sums into row ``j`` of a
``[splits, n_cols]`` workspace, and a second launch of the same kernel reduces the workspace's
columns (its rows added in a fixed order), divides for a mean and stores in the input's dtype.
Nothing is atomic: the same inputs give the same bits.

The backward broadcasts the upstream gradient over the rows (divided by the number of rows for a
mean), elementwise over the input's shape; both launches are custom ops in a
``torch.autograd.Function``, as the template's row kernels are.

Only the input itself is reduced: a pointwise op before the column sum, or one after it, another
reduction over the first dimension (``amax``, ``var``), inputs of another number of dimensions and
integer inputs are declined by name. Forward refuses, at call time, an input that is not 2-D or not
floating point.
"""

from __future__ import annotations

import ast
import inspect
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
from runners.generators.template.ir import Kernel, read_guards, require_direct
from runners.generators.template.ops import SPELLINGS, Unsupported
from runners.source import class_parts

_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _bound(node: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(op, arguments by name) for a call node the template spells, else None."""
    if node["op"] not in ("call_function", "call_method"):
        return None
    spelled = SPELLINGS.get(node.get("target", ""))
    if spelled is None:
        return None
    op, params = spelled
    return op, dict(zip(params, node.get("args", []), strict=False)) | dict(node.get("kwargs", {}))


def _first_dim(bound: dict[str, Any], ndim: int) -> bool:
    """Whether ``dim`` is a literal naming the first of ``ndim`` (at least 2) dimensions."""
    dim = bound.get("dim")
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    return ndim >= 2 and type(dim) is int and dim in (0, -ndim)


def _column_node(trace: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any], list[int]] | None:
    """(node, op, arguments, input shape) of the first sum or mean over the first dimension."""
    by_name = {n["name"]: n for n in trace.get("nodes", [])}
    for node in trace.get("nodes", []):
        spelled = _bound(node)
        if spelled is None or spelled[0] not in ("sum", "mean"):
            continue
        op, bound = spelled
        source = bound.get("input")
        shape = by_name.get(source["node"], {}).get("shape") if isinstance(source, dict) else None
        if isinstance(shape, list) and _first_dim(bound, len(shape)):
            return node, op, bound, shape
    return None


def applies(trace: dict[str, Any]) -> bool:
    """Whether the graph sums or averages a tensor of two or more dimensions over its first."""
    return _column_node(trace) is not None


def _settings(trace: dict[str, Any]) -> tuple[str, str, bool]:
    """(the forward argument reduced, ``sum`` or ``mean``, keepdim) for a graph that is one column
    reduction of an input, or Unsupported naming what it holds beyond that."""
    found = _column_node(trace)
    assert found is not None
    node, op, bound, shape = found
    what = f"{op} over dim {bound.get('dim')}"
    label = f"({node.get('target')}, node {node['name']!r})"

    def fail(why: str) -> Unsupported:
        return Unsupported(f"unsupported {what} {why} {label}")

    if len(shape) != 2:
        raise fail(f"of a {len(shape)}-D input: columns of 2-D inputs only")
    nodes = trace.get("nodes", [])
    by_name = {n["name"]: n for n in nodes}
    source = by_name[bound["input"]["node"]]
    if source["op"] != "placeholder":
        raise fail("of a computed value: a column reduction of an input only")
    if source.get("dtype") not in _FLOATS:
        raise fail(f"of a {source.get('dtype')} input: floating point only")
    if bound.get("dtype") is not None:
        raise fail("with dtype=")
    keepdim = bound.get("keepdim", False)
    if type(keepdim) is not bool:
        raise fail(f"with keepdim={keepdim!r}: a literal only")
    output = next(n for n in nodes if n["op"] == "output")
    if output.get("args") != [{"node": node["name"]}]:
        raise fail("followed by other ops: forward must return the reduction")
    others = [n["name"] for n in nodes if n["op"] not in ("placeholder", "output") and n is not node]
    if others:
        raise fail(f"alongside other ops ({', '.join(others)})")
    return str(source.get("target", source["name"])), op, keepdim


_KERNEL = """
@triton.jit
def {name}(
    x_ptr, out_ptr, n_rows, n_cols, rows_per_split, count, M_BUCKET, N_BUCKET,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PARTIAL: tl.constexpr,
):
    # Program (i, j) owns the BLOCK_N columns of block i and the rows of split j (rows_per_split of
    # them, fewer in the last split; all the rows with one split) and walks down them BLOCK_M at a
    # time: each load reads BLOCK_N neighbouring elements of BLOCK_M rows, coalesced along the rows.
    pid = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1).to(tl.int64)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    first = split * rows_per_split
    last = tl.minimum(first + rows_per_split, n_rows)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(first, last, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M).to(tl.int64)
        mask = (rows[:, None] < last) & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
        acc += x.to(tl.float32)
    total = tl.sum(acc, axis=0)
    if PARTIAL:
        # The split's float32 sums: row j of the [splits, n_cols] workspace.
        tl.store(out_ptr + split * n_cols + cols, total, mask=col_mask)
    else:
        # The result (count: the rows of the input, which a mean divides by).
        total = total{scale}
        tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=col_mask)
"""
_BACKWARD_KERNEL = """
@triton.jit
def {backward}(
    d_out_ptr, d_x_ptr, n_elements, n_rows, n_cols, NARROW: tl.constexpr, BLOCK_SIZE: tl.constexpr,
):
    # The gradient of a column {op} is the upstream gradient of each column, on every row{per_row}.
    # Each element's column in 32 bits where every offset fits them (NARROW, set by the launch): a
    # 64-bit modulo is a subroutine call for every element.
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    index = offsets.to(tl.int32) if NARROW else offsets
    d = tl.load(d_out_ptr + index % n_cols, mask=mask, other=0.0).to(tl.float32){scale}
    tl.store(d_x_ptr + offsets, d.to(d_x_ptr.dtype.element_ty), mask=mask)
"""


def _column_splits(n_rows: int, n_cols: int, multiprocessors: int) -> tuple[int, int]:
    """(splits, rows per split) for the column reduction of an n_rows x n_cols input.

    Enough splits of the rows that the blocks of 64 columns (a typical BLOCK_N) times the splits
    make about 4 programs per multiprocessor, each split holding at least 256 rows (fewer would
    spend more on the workspace and the second launch than they gain) and a multiple of 64 of them
    (the largest BLOCK_M, so a split starts on a block of rows whatever the tuning picks); the last
    split holds what is left. One split, of all the rows, when the columns alone make enough
    programs or the input is short.
    """
    column_blocks = max(1, -(-n_cols // 64))
    splits = min(-(-4 * multiprocessors // column_blocks), n_rows // 256)
    if splits <= 1:
        return 1, n_rows
    rows_per_split = -(-n_rows // splits)
    rows_per_split = -(-rows_per_split // 64) * 64
    return -(-n_rows // rows_per_split), rows_per_split


# On CUDA the kernel is tuned per size over the block of columns a program owns (fewer columns:
# more programs), the block of rows a step reads, and num_warps, keyed on the sizes rounded up to
# powers of two and on whether it writes partial sums. Under the Triton interpreter, where timing
# settings means nothing, a plain launch. The second launch, which adds the splits' partial sums
# (a few rows of float32 per column), always takes the plain launch. The backward is elementwise,
# with the template's plain launch (it is not tuned yet).
_LAUNCH = '''
{name}_autotuned = triton.autotune(
    configs=[
        triton.Config({{"BLOCK_M": m, "BLOCK_N": n}}, num_warps=w)
        for m, n in ((32, 32), (64, 32), (32, 64), (64, 64), (16, 128), (32, 128), (8, 256))
        for w in (4, 8)
    ],
    key=["M_BUCKET", "N_BUCKET", "PARTIAL"],
)({name})


def _column_launch(x, out, n_rows, n_cols):
    """The column {op} of x (n_rows x n_cols, contiguous) into out (n_cols values).

    With one split (_column_splits), one launch writes out. With more, the first launch writes each
    split's float32 sums into a [splits, n_cols] workspace and a second launch of the same kernel
    adds the workspace's rows, column by column, in a fixed order, into out.
    """
    multiprocessors = 132
    if x.is_cuda:
        multiprocessors = torch.cuda.get_device_properties(x.device).multi_processor_count
    splits, rows_per_split = _column_splits(n_rows, n_cols, multiprocessors)
    partial = splits > 1
    sums = torch.empty((splits, n_cols), dtype=torch.float32, device=x.device) if partial else out
    settings = {{
        "M_BUCKET": triton.next_power_of_2(n_rows),
        "N_BUCKET": triton.next_power_of_2(n_cols),
        "PARTIAL": partial,
    }}
    plain = {{"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4}}
    if x.is_cuda and isinstance({name}, triton.JITFunction):
        grid = lambda meta: (triton.cdiv(n_cols, meta["BLOCK_N"]), splits)
        {name}_autotuned[grid](x, sums, n_rows, n_cols, rows_per_split, n_rows, **settings)
    else:
        grid = (triton.cdiv(n_cols, plain["BLOCK_N"]), splits)
        {name}[grid](x, sums, n_rows, n_cols, rows_per_split, n_rows, **settings, **plain)
    if partial:
        grid = (triton.cdiv(n_cols, plain["BLOCK_N"]), 1)
        {name}[grid](sums, out, splits, n_cols, splits, n_rows, 0, 0, PARTIAL=False, **plain)
'''


def _ops(op: str, keepdim: bool, name: str, backward: str) -> tuple[str, str, str, str]:
    """(the forward op's source, the backward op's, their names)."""
    fwd, bwd = name.removesuffix("_kernel"), backward.removesuffix("_kernel")
    shape = "(1, n_cols)" if keepdim else "(n_cols,)"
    forward_body = [
        "    x = x.contiguous()",
        "    n_rows, n_cols = x.shape",
        f"    out = torch.empty({shape}, dtype=x.dtype, device=x.device)",
        "    _column_launch(x, out, n_rows, n_cols)",
        "    return out",
    ]
    forward_fake = [
        "    n_rows, n_cols = x.shape",
        f"    return torch.empty({shape}, dtype=x.dtype, device=x.device)",
    ]
    forward = op_source(fwd, [("x", "torch.Tensor")], "torch.Tensor", forward_body, forward_fake)
    backward_body = [
        "    d_out = d_out.contiguous()",
        "    n_cols = d_out.numel()",
        "    d_x = torch.empty((n_rows, n_cols), dtype=d_out.dtype, device=d_out.device)",
        "    n_elements = d_x.numel()",
        "    block_size = 1024",
        "    grid = (triton.cdiv(n_elements, block_size),)",
        "    narrow = n_elements + block_size < 2**31  # every offset (and a block past them) in 32 bits",
        f"    {backward}[grid](",
        "        d_out, d_x, n_elements, n_rows, n_cols, NARROW=narrow, BLOCK_SIZE=block_size, num_warps=4",
        "    )",
        "    return d_x",
    ]
    backward_fake = [
        "    return torch.empty((n_rows, d_out.numel()), dtype=d_out.dtype, device=d_out.device)"
    ]
    params = [("d_out", "torch.Tensor"), ("n_rows", "int")]
    back = op_source(bwd, params, "torch.Tensor", backward_body, backward_fake)
    return forward, back, fwd, bwd


def _function(fn: str, fwd: str, bwd: str, forward_name: str, backward: str) -> str:
    return textwrap.dedent(f'''
        class {fn}(torch.autograd.Function):
            """Forward: {forward_name}. Backward: {backward}, the upstream gradient on every row."""

            @staticmethod
            def forward(ctx, x):
                ctx.n_rows = x.shape[0]
                return {fwd}(x)

            @staticmethod
            def backward(ctx, d_out):
                return {bwd}(d_out, ctx.n_rows)
        ''').strip("\n")


def render_module(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, str | None]:
    """(source, forward kernel name, backward kernel name or None) for a traced column reduction."""
    require_direct(problem.class_name, trace)
    arg, op, keepdim = _settings(trace)
    parts = class_parts(problem.source, problem.class_name)
    taken = {
        n.arg for n in ast.walk(pyast.parse(f"def f({parts.signature}): pass")) if isinstance(n, ast.arg)
    }
    if arg not in taken:
        raise Unsupported(f"the reduced input {arg!r} is not an argument of forward")
    name, bwd_name = f"_column_{op}_fwd_kernel", f"_column_{op}_bwd_kernel"
    fn = f"_Column{op.capitalize()}Function"
    per_row = ", divided by the number of rows" if op == "mean" else ""
    kernels = [_KERNEL.format(name=name, scale=" / count" if op == "mean" else "")]
    forward_op, backward_op, fwd, bwd = _ops(op, keepdim, name, bwd_name)
    ops = [forward_op]
    if backward:
        scale = " / n_rows" if op == "mean" else ""
        kernels.append(_BACKWARD_KERNEL.format(backward=bwd_name, op=op, scale=scale, per_row=per_row))
        ops += [backward_op, _function(fn, fwd, bwd, name, bwd_name)]
    guards = Kernel([], arg, guards=read_guards(trace))
    guards.guards += [
        (f"{arg}.dim() != 2", f"the kernel takes the column {op} of 2-D inputs only"),
        (f"not {arg}.is_floating_point()", f"the kernel takes the column {op} of floating-point inputs only"),
    ]
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(guards)]
    if backward:
        forward.append(f"    if torch.is_grad_enabled() and {arg}.requires_grad:")
        forward += wrap(f"return {fn}.apply", [arg], "        ")
    forward += wrap(f"return {fwd}", [arg], "    ")
    also = f", and its backward, {bwd_name}" if backward else ""
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} (programs over blocks of columns and splits\n'
        f"of the rows; a second launch of it adds the splits' partial sums){also}.\n"
        'Each launch is a custom op, so torch.compile(fullgraph=True) takes the module as it is."""'
    )
    launch = [inspect.getsource(_column_splits), _LAUNCH.format(name=name, op=op)]
    source = custom_op_module(problem.class_name, parts, doc, [*kernels, *launch, *ops], forward)
    return source, name, bwd_name if backward else None


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    return custom_op_candidate(render_module, problem, trace, generator, "column reduction")
