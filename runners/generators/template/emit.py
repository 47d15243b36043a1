"""The emission: a :class:`~runners.generators.template.ir.Kernel` becomes Triton source.

The forward kernel (elementwise, or one program per row), its launch settings (``_launch_config``:
autotuned on CUDA, a plain launch under the Triton interpreter), its launch as a custom op with a
fake for torch.compile, and the module's ``forward`` calling it. Also the text every generated module
may hold (its imports, ``_result_dtype``, ``_tanh_of``, ``_custom_op``) and the small helpers for
writing Python (``wrap``, ``fresh_local``), which the backward (``backward.py``), the matrix products
(``products.py``) and the tables (``tables.py``) write with too.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runners import pyast
from runners.generators.base import Candidate, GeneratorDeclined, Problem
from runners.generators.template.ir import Kernel, Load, Reduce, dtype_expr
from runners.generators.template.ops import BCAST, CHANNEL, COL, FULL, REDUCE, ROW, ROW_FLAT, Unsupported
from runners.source import ClassParts, NotStandalone

# The imports every generated module starts with, and the helpers it holds when its code calls them.
HEADER = ("import torch", "import triton", "import triton.language as tl", "from torch import library")
RESULT_DTYPE = '''
def _result_dtype(*dtypes):
    """torch's type promotion over dtypes (promote_types only when they differ: it is a dispatched op)."""
    result = dtypes[0]
    for dtype in dtypes[1:]:
        if dtype != result:
            result = torch.promote_types(result, dtype)
    return result
'''
TANH = '''
@triton.jit
def _tanh_of(x):
    """tanh(x) = 2 * sigmoid(2x) - 1: triton.language has no tanh, and libdevice's skips the interpreter."""
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0
'''

# Names forward uses for itself.
_FORWARD_NAMES = ("n_cols", "n_rows", "n_elements", "out", "kernel", "grid", "config")


# ---------------------------------------------------------------------------
# Rendering the kernel


# The launch helpers. On CUDA each launch is autotuned: the first call for a size times every config on
# the real arguments (the kernels only write their output, so re-running them is harmless) and keeps the
# fastest. The configs include every choice of the plain launch, so tuning can only match or beat it.
# The kernels have no loops, so num_stages (software pipelining) would change nothing and is left out.
# Under the Triton interpreter (TRITON_INTERPRET=1) triton.jit gives an interpreted function instead of
# a JITFunction; timing configs there means nothing, so the plain launch runs.
POINTWISE_LAUNCH = '''
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
{narrow_line}    if on_cuda and isinstance({kernel}, triton.JITFunction):
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        return {kernel}_autotuned, grid, {"N_BUCKET": bucket{narrow}}
    block_size, num_warps = 1024, 4
    config = {"BLOCK_SIZE": block_size, "num_warps": num_warps, "N_BUCKET": bucket{narrow}}
    return {kernel}, (triton.cdiv(n_elements, block_size),), config
'''
_ROW_LAUNCH = '''
# On CUDA, num_warps is tuned per row length (every choice of the plain launch among them); BLOCK_SIZE
# is not tuned: it holds the whole row. Fewer warps than give each thread at most 64 of the row's
# elements are not tried: their registers spill, which takes the compiler seconds to minutes and
# runs slower.
def {kernel}_warps(configs, named_args, **kwargs):
    """The configs worth timing for a row of BLOCK_SIZE elements; the most warps when none is."""
    block_size = kwargs.get("BLOCK_SIZE", 0)
    kept = [c for c in configs if block_size <= 64 * 32 * c.num_warps]
    return kept or [max(configs, key=lambda c: c.num_warps)]


{kernel}_autotuned = triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16, 32)],
    key=["n_cols"],
    prune_configs_by={"early_config_prune": {kernel}_warps},
)({kernel})


# Short rows (SHORT_ROWS elements or fewer) go to {kernel}_rows, ROWS rows a program. On CUDA, ROWS and
# num_warps are tuned per row length and count (a power of two): the configs timed give each thread 8
# to 16 elements (two to four 16-byte loads of float32) of a tile of 1024 to 8192 (one row of 1024 is
# among them: the whole-row kernel's launch), so the search stays at seven configs a row length.
def {kernel}_rows_tiles(configs, named_args, **kwargs):
    """The configs worth timing for tiles of ROWS rows of BLOCK_SIZE elements; the most rows when
    none is (rows of a few elements)."""
    block_size = kwargs.get("BLOCK_SIZE", 0)
    kept = []
    for c in configs:
        tile = c.kwargs["ROWS"] * block_size
        if min(1024, 64 * block_size) <= tile <= 8192 and 8 <= tile // (32 * c.num_warps) <= 16:
            kept.append(c)
    return kept or [max(configs, key=lambda c: (c.kwargs["ROWS"], -c.num_warps))]


{kernel}_rows_autotuned = triton.autotune(
    configs=[
        triton.Config({"ROWS": r}, num_warps=w) for r in (1, 2, 4, 8, 16, 32, 64) for w in (1, 2, 4, 8, 16)
    ],
    key=["n_cols", "ROWS_BUCKET"],
    prune_configs_by={"early_config_prune": {kernel}_rows_tiles},
)({kernel}_rows)


def _launch_config(n_rows, n_cols, on_cuda):
    """(kernel, grid, settings) for the rows of n_cols elements: SHORT_ROWS elements or fewer, ROWS
    rows a program ({kernel}_rows); longer, one program per row (the whole row in registers).

    On CUDA the autotuned kernels pick their settings. Under the Triton interpreter, where triton.jit
    gives no JITFunction and timing settings means nothing, a plain launch: 4 rows a program for short
    rows, more warps for longer rows. Rows longer than 65536 elements, which registers cannot hold, go
    to {kernel}_looped.
    """
    block_size = triton.next_power_of_2(n_cols)
    if block_size <= SHORT_ROWS:
        rows = {"BLOCK_SIZE": block_size, "n_rows": n_rows, "ROWS_BUCKET": triton.next_power_of_2(n_rows)}
        rows["ROWS_NARROW"] = n_rows * n_cols + 8192 < 2**31  # every offset (and a tile past them) in 32 bits
        if on_cuda and isinstance({kernel}_rows, triton.JITFunction):
            grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
            return {kernel}_rows_autotuned, grid, rows
        return {kernel}_rows, (triton.cdiv(n_rows, 4),), {**rows, "ROWS": 4, "num_warps": 4}
{looped}    if on_cuda and isinstance({kernel}, triton.JITFunction):
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


_NAMED = (
    "mse_loss",
    "l1_loss",
    "kl_div",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "cross_entropy",
    "softmax",
    "log_softmax",
    "logsumexp",
)
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
            wanted.setdefault(stmt.operand, set()).add(REDUCE[stmt.op][1])
    others: dict[str, str] = {}
    for load in kernel.loads:
        neutrals = wanted.get(load.var, set())
        others[load.var] = "0" if load.is_bool else neutrals.pop() if len(neutrals) == 1 else "0.0"
    plain = {
        i
        for i, stmt in enumerate(kernel.body)
        if isinstance(stmt, Reduce) and others.get(stmt.operand) == REDUCE[stmt.op][1]
    }
    return others, plain


def split_lines(kernel: Kernel, row: str) -> list[str]:
    """Where the halves of an input are (unindented): for a split input, where its second half starts;
    for one read at each column's partner, the partner's offset. None without either."""
    lines = []
    if kernel.split:
        lines += [
            "# A row of the split input holds both halves (2 * n_cols); the second starts at n_cols.",
            f"split_offsets = offsets + {row} * n_cols",
        ]
    if any(load.partner for load in kernel.loads):
        lines += [
            "# Each column's partner is half a row away, in the other half of the row.",
            "half_cols = n_cols // 2",
            "partner_offsets = offsets + tl.where(cols < half_cols, half_cols, -half_cols)",
        ]
    return lines


def uses_cols(kernel: Kernel) -> bool:
    """Whether an elementwise kernel needs each element's column (``cols``, from ``n_cols``)."""
    return any(load.kind == COL or load.partner for load in kernel.loads)


def _load_line(load: Load, others: dict[str, str], tiled: bool = False) -> str:
    """``x = tl.load(...)`` for one of the kernel's loads (unindented), ``others`` its masked value;
    ``tiled``: in a kernel over several rows (``render_rows``), where a row may be past the last."""
    if load.kind == ROW:  # one value per row (a class index), unmasked when the row is the program's
        cast = "" if load.integer else ".to(tl.float32)"
        masked = ", mask=row_mask, other=0" if tiled else ""
        return f"{load.var} = tl.load({load.ptr} + row{masked}){cast}"
    if load.kind == BCAST:
        where = "(" + " + ".join(f"coord_{d} * {stride}" for d, stride in enumerate(load.strides)) + ")"
    else:
        where = {FULL: "offsets", COL: "cols", CHANNEL: "channels"}[load.kind]
    if load.half is not None:
        where = "split_offsets + n_cols" if load.half else "split_offsets"
    if load.partner:
        where = "partner_offsets"
    text = f"tl.load({load.ptr} + {where}, mask=mask, other={others[load.var]})"
    return f"{load.var} = {text}" + ("" if load.is_bool else ".to(tl.float32)")


def load_and_compute(kernel: Kernel, tiled: bool = False) -> list[str]:
    """The kernel's loads and statements, unindented: the forward kernel and its backward share them.
    ``tiled``: over a [ROWS, BLOCK_SIZE] tile, each reduction a [ROWS, 1] column (``render_rows``)."""
    others, plain = _masked(kernel)
    lines = [_load_line(load, others, tiled) for load in kernel.loads]
    axis = "axis=1, keep_dims=True" if tiled else "axis=0"
    for i, stmt in enumerate(kernel.body):
        if isinstance(stmt, Reduce):
            fn, neutral = REDUCE[stmt.op]
            operand = stmt.operand if i in plain else f"tl.where(mask, {stmt.operand}, {neutral})"
            lines.append(f"{stmt.var} = " + stmt.template.format(r=f"{fn}({operand}, {axis})"))
        else:
            lines.append(f"{stmt[0]} = {stmt[1]}")
    return lines


def _kernel_head(kernel: Kernel, name: str, tiled: bool = False) -> list[str]:
    """``@triton.jit def name(...):``: the forward kernel's parameters (its looped twin's too; with
    ``tiled``, those of its twin over several rows: their count, its bucket, ROWS)."""
    rows = kernel.rows
    pointers = list(dict.fromkeys(load.ptr for load in kernel.loads))
    size = "n_cols" if rows else "n_elements"
    has_cols = uses_cols(kernel)
    sizes = [size, *(["n_cols"] if not rows and (has_cols or kernel.split) else []), *channel_sizes(kernel)]
    sizes += broadcast_sizes(kernel)
    bucket = [] if rows else ["N_BUCKET"]  # the autotuning key (n_elements' power of two), by name
    params = [
        *pointers,
        "out_ptr",
        *sizes,
        *(arg for arg, _ in kernel.scalars),
        *bucket,
        *(["n_rows", "ROWS_BUCKET"] if tiled else []),
        "BLOCK_SIZE: tl.constexpr",
        *(["ROWS: tl.constexpr", "ROWS_NARROW: tl.constexpr"] if tiled else []),
        *(["NARROW: tl.constexpr"] if narrow(kernel) else []),
    ]
    return ["@triton.jit", *wrap(f"def {name}", params, tail=":")]


def render_kernel(kernel: Kernel, name: str) -> str:
    """The kernel's source; for a row kernel also its looped twin for long rows (``render_looped``)
    where it has one."""
    rows = kernel.rows
    assert kernel.output is not None
    lines = _kernel_head(kernel, name)
    if rows:
        lines += [
            "    row = tl.program_id(0).to(tl.int64)",
            "    cols = tl.arange(0, BLOCK_SIZE)",
            "    mask = cols < n_cols",
            "    offsets = row * n_cols + cols",
            *(f"    {line}" for line in channel_lines(kernel)),
        ]
    else:
        lines += [
            "    pid = tl.program_id(0).to(tl.int64)",
            "    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "    mask = offsets < n_elements",
        ]
        lines += [f"    {line}" for line in [*index_lines(kernel), *channel_lines(kernel)]]
    body = [*split_lines(kernel, "row" if rows else "(index // n_cols)"), *load_and_compute(kernel)]
    lines += [f"    {line}" for line in body]
    out = kernel.output
    store = f"{out.name}.to(out_ptr.dtype.element_ty)"
    if out.kind == FULL:
        lines.append(f"    tl.store(out_ptr + offsets, {store}, mask=mask)")
    else:
        lines.append(f"    tl.store(out_ptr + row, {store})")
    source = "\n".join(lines) + "\n"
    if not rows:
        return source
    twins = [render_rows(kernel, name), render_looped(kernel, name)]
    return "\n\n".join([source, *(twin for twin in twins if twin is not None)])


def render_rows(kernel: Kernel, name: str) -> str:
    """The row kernel for short rows, ``{name}_rows``: a program takes ROWS rows at once, a
    [ROWS, BLOCK_SIZE] tile whose reductions are [ROWS, 1] columns, so a row of a few hundred elements
    is not a whole program (a block of threads with a few elements each, and a launch of as many
    programs as rows). The last program's rows past n_rows are masked."""
    out = kernel.output
    assert out is not None
    lines = [
        *_kernel_head(kernel, f"{name}_rows", tiled=True),
        "    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]",
        "    row_mask = row < n_rows",
        "    cols = tl.arange(0, BLOCK_SIZE)[None, :]",
        "    mask = row_mask & (cols < n_cols)",
        "    offsets = row * n_cols + cols",
        *(f"    {line}" for line in channel_lines(kernel, tiled=True)),
        *(f"    {line}" for line in [*split_lines(kernel, "row"), *load_and_compute(kernel, tiled=True)]),
    ]
    store = f"{out.name}.to(out_ptr.dtype.element_ty)"
    if out.kind == FULL:
        lines.append(f"    tl.store(out_ptr + offsets, {store}, mask=mask)")
    else:
        lines.append(f"    tl.store(out_ptr + row, {store}, mask=row_mask)")
    return "\n".join(lines) + "\n"


def channel_sizes(kernel: Kernel) -> list[str]:
    """The sizes a kernel with per-channel vectors takes: dimension 1, and what each channel holds of
    one batch element."""
    return ["n_channels", "n_inner"] if any(load.kind == CHANNEL for load in kernel.loads) else []


def channel_lines(kernel: Kernel, tiled: bool = False) -> list[str]:
    """Each element's channel, and its coordinates where tensors broadcast against it (unindented);
    none without either. ``tiled``: in the twin over several rows (``render_rows``), where each thread
    holds a [ROWS, 1] column of rows and divides each of its rows' coordinates: in 32 bits where every
    row fits (ROWS_NARROW, a constexpr the launch sets)."""
    lines = []
    if channel_sizes(kernel) and kernel.rows and kernel.groups:
        # A group's row holds n_cols // n_inner whole channels, from the row's group's first: the
        # channel of an element is that one's plus its column's (64-bit division once a row, 32-bit
        # division of the column once an element, instead of 64-bit division of its offset).
        lines.append("channels = (row * (n_cols // n_inner)) % n_channels + cols // n_inner")
    elif channel_sizes(kernel):
        index = "offsets" if kernel.rows else "index"
        lines.append(f"channels = ({index} // n_inner) % n_channels")
    if broadcast_sizes(kernel):
        ndim = len(kernel.shape)
        dims = list(reversed(range(ndim)))
        if kernel.rows and not kernel.groups and not kernel.split:
            # A row is the last dimension: an element's last coordinate is its column, the others
            # its row's (divided once a row, not once an element: 64-bit division is slow on a GPU).
            lines.append(f"coord_{ndim - 1} = cols")
            row = "(row.to(tl.int32) if ROWS_NARROW else row)" if tiled else "row"
            lines += [f"rest = {row}"] if ndim > 1 else []
            dims = dims[1:]
        else:
            lines.append("rest = offsets" if kernel.rows else "rest = index")
        for d in dims:
            lines.append(f"coord_{d} = rest % size_{d}")
            if d:
                lines.append(f"rest = rest // size_{d}")
    return lines


# An elementwise kernel's column, row, channel and coordinates are divided out of each element's
# offset: in 64 bits (a subroutine call a division on a GPU) only where the tensor has too many
# elements for 32 (NARROW, a constexpr: the launch says which, and each is compiled once).
def index_lines(kernel: Kernel) -> list[str]:
    """An elementwise kernel's offsets to divide (``index``: 32 bits where NARROW) and each element's
    column where it needs one (unindented); none where it divides nothing."""
    if not narrow(kernel):
        return []
    lines = ["index = offsets.to(tl.int32) if NARROW else offsets"]
    return lines + (["cols = index % n_cols"] if uses_cols(kernel) else [])


def with_narrow(text: str, narrow: bool) -> str:
    """A launch helper's text with its NARROW line and setting where the kernel takes NARROW (the
    helper has ``n_elements``), without them where it does not."""
    line = "    narrow = n_elements + 8192 < 2**31  # every offset (and a block past them) in 32 bits\n"
    text = text.replace("{narrow_line}", line if narrow else "")
    return text.replace("{narrow}", ', "NARROW": narrow' if narrow else "")


def narrow_pointwise_launch(name: str) -> str:
    """The elementwise launch helper for a kernel that divides its offsets by its own code and takes
    NARROW for it (as the rotary tables' kernel does)."""
    return with_narrow(POINTWISE_LAUNCH.strip("\n").replace("{kernel}", name), True) + "\n"


def narrow(kernel: Kernel) -> bool:
    """Whether the elementwise kernel divides offsets (columns, halves, channels, coordinates): it
    then takes NARROW."""
    divides = uses_cols(kernel) or kernel.split or channel_sizes(kernel) or broadcast_sizes(kernel)
    return not kernel.rows and bool(divides)


def broadcast_sizes(kernel: Kernel) -> list[str]:
    """The sizes and strides a kernel with broadcast tensors or coordinates takes: each dimension of S,
    and each such tensor's strides over them."""
    loads = [load for load in kernel.loads if load.kind == BCAST]
    if not loads and not kernel.coordinates:
        return []
    return [*(f"size_{d}" for d in range(len(kernel.shape))), *(s for load in loads for s in load.strides)]


def broadcast_values(kernel: Kernel, main: str, passed: dict[str, str]) -> list[str]:
    """forward's values of ``broadcast_sizes``: ``passed`` holds each broadcast load's expanded view."""
    loads = [load for load in kernel.loads if load.kind == BCAST]
    if not loads and not kernel.coordinates:
        return []
    ndim = len(kernel.shape)
    sizes = [f"{main}.shape[{d}]" for d in range(ndim)]
    return [*sizes, *(f"{passed[load.ptr]}.stride({d})" for load in loads for d in range(ndim))]


def channel_values(main: str) -> list[str]:
    """forward's values of ``channel_sizes`` for the input ``main`` (contiguous by then)."""
    return [f"{main}.shape[1]", f"{main}.numel() // max(1, {main}.shape[0] * {main}.shape[1])"]


def row_width(kernel: Kernel, main: str) -> str:
    """forward's expression of ``n_cols`` for a row kernel: the last dimension (half of it for a split
    input), or for group norm what one (sample, group) holds."""
    if kernel.groups:
        return f"{main}.numel() // max(1, {main}.shape[0] * {kernel.groups})"
    return f"{main}.shape[-1]" + (" // 2" if kernel.split else "")


def render_launch(kernel: Kernel, name: str, launcher: str = "_launch_config") -> str:
    """The autotuned kernel and ``_launch_config`` (``launcher`` where a file holds several kinds of
    launch), the one place launch settings come from."""
    template = _ROW_LAUNCH if kernel.rows else POINTWISE_LAUNCH
    looped = ""  # whole rows at every length, unless the kernel has a looped twin
    if kernel.rows and render_looped(kernel, name) is not None:
        looped = _LONG_ROWS
    text = template.strip("\n").replace("{looped}", looped).replace("{kernel}", name)
    text = with_narrow(text, narrow(kernel))
    text = text.replace("SHORT_ROWS", str(SHORT_ROWS))
    return text.replace("def _launch_config(", f"def {launcher}(") + "\n"


# Rows of this many elements or fewer (rounded up to a power of two) go to the row kernel's twin over
# several rows a program (render_rows).
SHORT_ROWS = 1024
# Rows longer than this many elements (rounded up to a power of two) are too long for the whole-row
# kernel: at 32 warps each thread would hold more than 64 of them, and past 2^20 Triton has no block
# that holds them at all. The looped kernel walks them in blocks of LOOPED_BLOCK.
LOOPED_ABOVE = 65536
LOOPED_BLOCK = 4096
_COMBINE = {"sum": "{acc} + {v}", "max": "tl.maximum({acc}, {v})", "min": "tl.minimum({acc}, {v})"}
# The branch of a row kernel's _launch_config that takes long rows to its looped twin.
_LONG_ROWS = f"""    if block_size > {LOOPED_ABOVE}:
        return {{kernel}}_looped, (n_rows,), {{"BLOCK_SIZE": {LOOPED_BLOCK}, "num_warps": 8}}
"""


def render_looped(kernel: Kernel, name: str) -> str | None:
    """The row kernel for rows longer than registers hold, ``{name}_looped``: one pass over the row
    per reduction, each accumulating a block of partial results that is reduced after the pass, then a
    pass that writes the output (for one value per row, the output after the last pass). Each pass
    loads and computes again only what its reduction (or the output) needs; the reductions of earlier
    passes are numbers by then. None where a value is assigned twice (each pass must be able to
    compute any value from the loads alone)."""
    out = kernel.output
    assert out is not None
    loads = {load.var: load for load in kernel.loads}
    index: dict[str, int] = {}
    for i, stmt in enumerate(kernel.body):
        var = stmt.var if isinstance(stmt, Reduce) else stmt[0]
        if var in index or var in loads:
            return None
        index[var] = i
    known = set(index) | set(loads)

    def needs(expr: str, reduced: set[str]) -> tuple[list[Load], list[tuple[str, str]]]:
        """The loads and statements, in the kernel's order, that ``expr`` needs, given ``reduced``."""
        wanted: set[str] = set()
        stack = [n for n in _names(expr) if n in known]
        while stack:
            var = stack.pop()
            if var in wanted or var in reduced:
                continue
            wanted.add(var)
            if var in index:
                stmt = kernel.body[index[var]]
                assert not isinstance(stmt, Reduce)  # a later pass's reduction: never an earlier's input
                stack += [n for n in _names(stmt[1]) if n in known]
        body = [stmt for stmt in kernel.body if not isinstance(stmt, Reduce) and stmt[0] in wanted]
        return [load for load in kernel.loads if load.var in wanted], body

    others, _ = _masked(kernel)
    per_row = [load for load in kernel.loads if load.kind == ROW]
    lines = [
        "    row = tl.program_id(0).to(tl.int64)",
        *(f"    {_load_line(load, others)}" for load in per_row),
    ]

    def walk(lines_in: list[str], want: list[Load], body: list[tuple[str, str]]) -> list[str]:
        """A pass over the row: its loads and statements, then ``lines_in``."""
        reads = " ".join(expr for _, expr in body)
        where = any(load.kind in (CHANNEL, BCAST) for load in want) or "coord_" in reads
        halves = any(load.half is not None or load.partner for load in want)
        head = [
            "for start in range(0, n_cols, BLOCK_SIZE):",
            "    cols = start + tl.arange(0, BLOCK_SIZE)",
            "    mask = cols < n_cols",
            "    offsets = row * n_cols + cols",
            *(f"    {line}" for line in (channel_lines(kernel) if where else [])),
            *(f"    {line}" for line in (split_lines(kernel, "row") if halves else [])),
            *(f"    {_load_line(load, others)}" for load in want if load.kind != ROW),
            *(f"    {var} = {expr}" for var, expr in body),
        ]
        return [f"    {line}" for line in [*head, *(f"    {line}" for line in lines_in)]]

    reduced: set[str] = set()
    for stmt in kernel.body:
        if not isinstance(stmt, Reduce):
            continue
        fn, neutral = REDUCE[stmt.op]
        want, body = needs(stmt.operand, reduced)
        acc = f"{stmt.var}_acc"
        if acc in known:
            return None
        lines.append(f"    {acc} = tl.full((BLOCK_SIZE,), {neutral}, tl.float32)")
        value = f"tl.where(mask, {stmt.operand}, {neutral})"
        lines += walk([f"{acc} = " + _COMBINE[stmt.op].format(acc=acc, v=value)], want, body)
        lines.append(f"    {stmt.var} = " + stmt.template.format(r=f"{fn}({acc}, axis=0)"))
        reduced.add(stmt.var)
    want, body = needs(out.name, reduced)
    store = f"{out.name}.to(out_ptr.dtype.element_ty)"
    if out.kind == FULL:
        lines += walk([f"tl.store(out_ptr + offsets, {store}, mask=mask)"], want, body)
    else:  # one value per row: the reductions' numbers
        if any(load.kind != ROW for load in want):
            return None
        lines += [f"    {var} = {expr}" for var, expr in body]
        lines.append(f"    tl.store(out_ptr + row, {store})")
    return "\n".join([*_kernel_head(kernel, f"{name}_looped"), *lines]) + "\n"


def long_row_guard(kernel: Kernel) -> list[tuple[str, str]]:
    """For a row kernel with a backward: autograd recording on rows longer than the whole-row kernel
    takes goes to the original computation (the backward kernel holds the whole row: past
    LOOPED_ABOVE its registers spill, past 2^20 elements it does not compile). Without autograd the
    looped kernel takes them."""
    if not kernel.rows:
        return []
    groups = dict(kernel.scalars).get(kernel.groups, kernel.groups)  # forward's expression of it
    width = row_width(dataclasses.replace(kernel, groups=groups), kernel.main)
    why = f"the backward kernel holds the whole row: rows longer than {LOOPED_ABOVE} elements train eagerly"
    return [(f"torch.is_grad_enabled() and triton.next_power_of_2({width}) > {LOOPED_ABOVE}", why)]


def _names(expr: str) -> list[str]:
    """The names an expression reads (attributes after a dot excluded)."""
    return [m.group(1) for m in _NAME.finditer(expr) if m.group(0)[0] != "."]


_NAME = re.compile(r"\.?\b([A-Za-z_][A-Za-z_0-9]*)")


# ---------------------------------------------------------------------------
# Launches as custom ops

CUSTOM_OP = '''
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


def op_name(kernel_name: str) -> str:
    return kernel_name.removesuffix("_kernel")


def op_source(
    name: str, params: list[tuple[str, str]], returns: str, body: list[str], fake: list[str]
) -> str:
    """``@_custom_op def name(params) -> returns: body`` and its fake (``fake``: no launch)."""
    typed = [f"{arg}: {kind}" for arg, kind in params]
    op = ["@_custom_op", *wrap(f"def {name}", typed, tail=f" -> {returns}:"), *body]
    doc = '    """What it returns, for torch.compile\'s tracing: shapes, dtypes and devices, no launch."""'
    fake_def = wrap(f"def {name}_fake", [a for a, _ in params], tail=":")
    fake_lines = [f"@{name}.register_fake", *fake_def, doc, *fake]
    return "\n".join(op) + "\n\n\n" + "\n".join(fake_lines) + "\n"


def forward_op(kernel: Kernel, forward_name: str, launcher: str = "_launch_config") -> _Op:
    """The forward kernel's launch as a custom op taking every tensor the kernel reads (inputs and
    parameters) and the numbers it is given (launch settings from ``launcher``)."""
    out = kernel.output
    assert out is not None
    taken = {"ctx", "d_out"}  # the names an autograd.Function's backward(ctx, d_out) takes
    tensors: dict[str, str] = {}
    for load in kernel.loads:
        if load.source not in tensors:
            tensors[load.source] = fresh_local(load.placeholder or load.var, taken)
    numbers = {arg: fresh_local(arg, taken) for arg, _ in kernel.scalars}
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
        groups=numbers.get(kernel.groups, kernel.groups),
    )
    prep, launch, result = _launch_body(inner, forward_name, set(taken), launcher)
    params = [(a, "torch.Tensor") for a in tensors.values()]
    params += [(a, "torch.types.Number") for a in numbers.values()]
    name = op_name(forward_name)
    body = [*prep, *launch, f"    return {result}"]
    source = op_source(name, params, "torch.Tensor", body, [*prep, f"    return {result}"])
    return _Op(name, source, tensors, numbers, inner)


# ---------------------------------------------------------------------------
# The module's forward, and writing Python

WIDTH = 110


def wrap(head: str, args: list[str], indent: str = "", tail: str = "") -> list[str]:
    """``head(args)tail`` on one line, or with the arguments on their own lines when it is too long."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= WIDTH:
        return [one]
    lines = [f"{indent}{head}("]
    line = ""
    for arg in args:
        piece = f"{arg},"
        if line and len(indent) + 4 + len(line) + 1 + len(piece) > WIDTH:
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
    op = forward_op(kernel, name)
    taken = {n.arg for n in ast.walk(pyast.parse(f"def f({signature}): pass")) if isinstance(n, ast.arg)}
    named, scalars = scalar_args(kernel, taken)
    body = [f"def forward({signature}){returns}:", *guard_lines(kernel), *named]
    body += return_lines(kernel, op.name, [*op.tensors, *scalars], "    ", taken)
    return op.source, "\n".join(body) + "\n"


def return_lines(kernel: Kernel, head: str, args: list[str], indent: str, taken: set[str]) -> list[str]:
    """``return head(args)``, through the kernel's epilogue (a loss's per-row sums added up) if any."""
    if not kernel.epilogue:
        return wrap(f"return {head}", args, indent)
    rows = fresh_local("row_sums", taken)
    return [*wrap(f"{rows} = {head}", args, indent), f"{indent}return {kernel.epilogue.format(r=rows)}"]


def guard_lines(kernel: Kernel) -> list[str]:
    out = []
    for check, why in kernel.guards:
        out += [f"    if {check}:", f"        raise NotImplementedError({json.dumps(why)})"]
    return out


def scalar_args(kernel: Kernel, taken: set[str]) -> tuple[list[str], list[str]]:
    """(statements naming the computed ones, the expression passed) for each scalar argument."""
    lines, exprs = [], []
    for arg, expr in kernel.scalars:
        if not all(part.isidentifier() for part in expr.split(".")):  # a computed value: named first
            named = fresh_local(arg, taken)
            lines.append(f"    {named} = {expr}")
            expr = named
        exprs.append(expr)
    return lines, exprs


def _launch_body(
    kernel: Kernel, name: str, taken: set[str], launcher: str = "_launch_config"
) -> tuple[list[str], list[str], str]:
    """(statements preparing the forward kernel's arguments and output, statements launching it, the
    expression returned); ``kernel``'s numbers are names already (the op's arguments)."""
    local = {n: fresh_local(n, taken) for n in _FORWARD_NAMES}
    launch = (_row_launch if kernel.rows else _pointwise_launch)(kernel, local, taken)
    scalars = [expr for _, expr in kernel.scalars]
    kernel_, grid, config = local["kernel"], local["grid"], local["config"]
    body = [f"    {kernel_}, {grid}, {config} = {launcher}({launch.config}, {kernel.main}.is_cuda)"]
    body += wrap(f"{kernel_}[{grid}]", [*launch.tensors, *launch.sizes, *scalars, f"**{config}"], "    ")
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
    lines = [f"    {n_cols} = {row_width(kernel, main)}"]
    flat: dict[str, str] = {}
    expanded: dict[str, str] = {}

    def tensor(load: Load) -> str:
        if load.placeholder is None:
            return load.source
        if load.kind in (COL, CHANNEL):
            lines.append(f"    {load.placeholder} = {load.placeholder}.contiguous()")
            return load.placeholder
        if load.kind == ROW:
            lines.append(f"    {load.placeholder} = {load.placeholder}.reshape(-1).contiguous()")
            return load.placeholder
        if load.kind == BCAST:
            view = fresh_local(f"{load.placeholder}_expanded", taken)
            lines.append(f"    {view} = {load.placeholder}.expand({main}.shape)")
            expanded[load.ptr] = view
            return view
        if load.placeholder not in flat:
            flat[load.placeholder] = fresh_local(f"{load.placeholder}_2d", taken)
            width = f"2 * {n_cols}" if load.half is not None else n_cols
            lines.append(
                f"    {flat[load.placeholder]} = {load.placeholder}.reshape(-1, {width}).contiguous()"
            )
        return flat[load.placeholder]

    tensors = _unique_tensors(kernel, tensor)
    rows_of = f"{flat[main]}.shape[0]" if main in flat else f"{main}.numel() // {n_cols}"
    lines.append(f"    {n_rows} = {rows_of}")
    shape = f"({n_rows}, {n_cols})" if out.kind == FULL else f"({n_rows},)"
    lines += wrap(
        f"{o} = torch.empty", [shape, f"dtype={dtype_expr(out.dtype)}", f"device={main}.device"], "    "
    )
    full = f"(*{main}.shape[:-1], {n_cols})" if kernel.split else f"{main}.shape"
    back = {FULL: full, ROW: f"(*{main}.shape[:-1], 1)", ROW_FLAT: f"{main}.shape[:-1]"}
    sizes = [n_cols, *(channel_values(main) if channel_sizes(kernel) else [])]
    sizes += broadcast_values(kernel, main, expanded)
    return _Launch(lines, [*tensors, o], sizes, f"{n_rows}, {n_cols}", f"{o}.reshape({back[out.kind]})")


def _pointwise_launch(kernel: Kernel, local: dict[str, str], taken: set[str]) -> _Launch:
    """Contiguous inputs, one flat pass over the output's elements."""
    main, out = kernel.main, kernel.output
    assert out is not None
    o, n_elements, n_cols = local["out"], local["n_elements"], local["n_cols"]
    lines: list[str] = []
    seen: set[str] = set()
    expanded: dict[str, str] = {}
    for load in kernel.loads:
        if load.placeholder is not None and load.placeholder not in seen:
            seen.add(load.placeholder)
            lines.append(f"    {load.placeholder} = {load.placeholder}.contiguous()")
        if load.kind == BCAST and load.ptr not in expanded:
            expanded[load.ptr] = fresh_local(f"{load.placeholder or load.var}_expanded", taken)
            lines.append(f"    {expanded[load.ptr]} = {load.placeholder or load.source}.expand({main}.shape)")
    if kernel.split:  # the output is one half of main's shape
        lines.append(f"    {n_cols} = {main}.shape[-1] // 2")
        args = [f"(*{main}.shape[:-1], {n_cols})", f"dtype={dtype_expr(out.dtype)}", f"device={main}.device"]
        lines += wrap(f"{o} = torch.empty", args, "    ")
    elif out.dtype == (f"{main}.dtype",) and main in seen:
        lines.append(f"    {o} = torch.empty_like({main})")
    else:
        args = [f"{main}.shape", f"dtype={dtype_expr(out.dtype)}", f"device={main}.device"]
        lines += wrap(f"{o} = torch.empty", args, "    ")
    lines.append(f"    {n_elements} = {o}.numel()")
    sizes = [n_elements]
    if kernel.split:
        sizes.append(n_cols)
    elif uses_cols(kernel):
        sizes.append(f"{main}.shape[-1]")
    if channel_sizes(kernel):
        sizes += channel_values(main)
    sizes += broadcast_values(kernel, main, expanded)
    tensors = _unique_tensors(kernel, lambda load: expanded.get(load.ptr) or load.placeholder or load.source)
    return _Launch(lines, [*tensors, o], sizes, n_elements, o)


def fresh_local(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def custom_op_module(
    class_name: str, parts: ClassParts, doc: str, blocks: list[str], forward: list[str]
) -> str:
    """A module of custom-op kernels: ``doc``, the imports and the file's context, the custom-op
    helpers, ``blocks`` (kernels, launch code, ops) in order, and the class with ``forward``."""
    context = [c for c in parts.context if c not in HEADER]
    out = [doc + "\n\n" + "\n".join([*HEADER, *context]) + "\n", CUSTOM_OP.strip("\n") + "\n"]
    out += [b.strip("\n") + "\n" for b in blocks]
    members = [*parts.members, "\n".join(forward) + "\n"]
    body = "\n\n".join(textwrap.indent(m.rstrip("\n"), "    ") for m in members)
    out.append(f"class {class_name}(torch.nn.Module):\n{body}\n")
    return "\n\n".join(out)


def custom_op_candidate(
    render: Callable[..., tuple[str, str, str | None]],
    problem: Problem,
    trace: dict[str, Any],
    generator: str,
    pattern: str,
) -> Candidate:
    """The candidate ``render(problem, trace, backward=...)`` writes, with its backward and without
    (what is suggested if the backward's gradients are wrong); a decline where it cannot."""
    try:
        source, name, backward = render(problem, trace)
        without = render(problem, trace, backward=False)[0]
    except (Unsupported, NotStandalone) as exc:
        raise GeneratorDeclined(f"{generator}: {exc}") from None
    provenance = {"kernel": name, "pattern": pattern, "backward": backward}
    cand = Candidate(name.strip("_"), generator, source, provenance)
    cand.without_backward = without
    return cand
