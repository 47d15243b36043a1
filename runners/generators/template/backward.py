"""The backward: one fused kernel that recomputes the forward's values and applies the chain rule to
them (``autodiff.py``), and the ``torch.autograd.Function`` that launches both kernels.

Each kernel whose output has a gradient gets one: it recomputes the forward's values (row by row for
row kernels, one program walking every ``n_programs``-th row) and writes input gradients
elementwise and parameter gradients summed over rows (in registers, one partial row per program,
added up by torch; per element for pointwise kernels). An input read at each column's partner too
(rotary's halves) gets that load's gradient in a buffer of its own, written at the partner's offsets
and added to the input's by torch: no two lanes write one element. Its launch is a custom op like the
forward's (``emit.py``); the Function saves only the tensors it was given.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from runners import pyast
from runners.generators.template import autodiff
from runners.generators.template.emit import (
    WIDTH,
    broadcast_sizes,
    broadcast_values,
    channel_lines,
    channel_sizes,
    channel_values,
    forward_op,
    fresh_local,
    guard_lines,
    index_lines,
    load_and_compute,
    narrow,
    op_name,
    op_source,
    return_lines,
    row_width,
    scalar_args,
    split_lines,
    uses_cols,
    with_narrow,
    wrap,
)
from runners.generators.template.ir import Kernel, Load, Reduce
from runners.generators.template.ops import BCAST, CHANNEL, COL, FULL, ROW, Unsupported

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
{narrow_line}    return (triton.cdiv(n_elements, 1024),), {"BLOCK_SIZE": 1024, "num_warps": 4{narrow}}
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
    constant = {load.var for load in kernel.loads if load.is_bool or load.no_grad}
    seed = "d_out"  # reserved: no value of the graph takes it
    per_row = {load.var for load in kernel.loads if load.kind == ROW}  # one value per row: not lanes
    vectors = (leaves - per_row) | {"offsets", "cols", "mask"} | ({seed} if out.kind == FULL else set())
    vectors |= {f"coord_{d}" for d in range(len(kernel.shape))} if kernel.coordinates else set()
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
        if load.partner:  # each column's gradient lands on its partner's, a buffer of its own
            where = "partner_offsets"
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
    has_cols = uses_cols(kernel)
    sizes = (
        ["n_rows", "n_cols"] if rows else ["n_elements", *(["n_cols"] if has_cols or kernel.split else [])]
    )
    sizes += channel_sizes(kernel) + broadcast_sizes(kernel)
    params = [
        *pointers,
        "d_out_ptr",
        *(g.d_pointer for g in grads.values()),
        *sizes,
        *(arg for arg, _ in kernel.scalars),
        "BLOCK_SIZE: tl.constexpr",
        *(["NARROW: tl.constexpr"] if narrow(kernel) else []),
    ]
    lines = ["@triton.jit", *wrap(f"def {name}", params, tail=":")]
    if out.kind == FULL:
        seed_line = f"{seed} = tl.load(d_out_ptr + offsets, mask=mask, other=0.0).to(tl.float32)"
    else:
        seed_line = f"{seed} = tl.load(d_out_ptr + row).to(tl.float32)"
    inner = [
        *load_and_compute(kernel),
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
            *(f"        {line}" for line in [*channel_lines(kernel), *split_lines(kernel, "row"), *inner]),
            *(f"    tl.store({ptr} + pid * n_cols + cols, {total}, mask=mask)" for total, ptr in sums),
        ]
        launch = _ROW_BACKWARD_LAUNCH
    else:
        lines += [
            "    # The forward's values are recomputed, then the chain rule runs backwards.",
            "    pid = tl.program_id(0).to(tl.int64)",
            "    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "    mask = offsets < n_elements",
            *(f"    {line}" for line in [*index_lines(kernel), *channel_lines(kernel)]),
            *(f"    {line}" for line in [*split_lines(kernel, "(index // n_cols)"), *inner]),
        ]
        launch = with_narrow(_POINTWISE_BACKWARD_LAUNCH, narrow(kernel))
    source = "\n".join(lines) + "\n\n\n" + launch.strip("\n") + "\n"
    return Backward(name, source, list(grads.values()))


def _function_name(forward_name: str) -> str:
    core = forward_name.strip("_").removesuffix("_fwd_kernel").removesuffix("_kernel")
    return "_" + "".join(part.capitalize() for part in core.split("_")) + "Function"


def _return(values: list[str]) -> list[str]:
    """``return a, b`` in a function body, one value a line when it is too long."""
    one = f"    return {', '.join(values)}"
    if len(one) <= WIDTH:
        return [one]
    return ["    return (", *(f"        {v}," for v in values), "    )"]


def render_function(
    kernel: Kernel, forward_name: str, backward: Backward, signature: str, returns: str
) -> tuple[str, str]:
    """(the ops and the autograd.Function calling them, the module's forward applying it).

    The Function saves the tensors the forward op takes, and its backward op recomputes the rest
    from them."""
    op = forward_op(kernel, forward_name)
    tensors, numbers = op.tensors, op.numbers
    fn = _function_name(forward_name)
    args = [*tensors.values(), *numbers.values()]
    back, grads = _backward_op(op.kernel, backward, tensors, numbers)
    forward = [
        "@staticmethod",
        *wrap("def forward", ["ctx", *args], tail=":"),
        f"    ctx.save_for_backward({', '.join(tensors.values())})",
        *(f"    ctx.{arg} = {arg}" for arg in numbers.values()),
        *wrap(f"return {op.name}", args, "    "),
    ]
    saved = list(tensors.values())
    taken = {"ctx", "d_out", *saved, *numbers.values()}
    d = {arg: fresh_local(f"d_{arg}", taken) for arg in grads}
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
        *wrap(f"{got} = {op_name(backward.name)}", call, "    "),
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
    named, scalars = scalar_args(kernel, sig_taken)
    module_forward = [f"def forward({signature}){returns}:", *guard_lines(kernel), *named]
    pool = ", ".join(tensors) + ("," if len(tensors) == 1 else "")
    module_forward.append(f"    if torch.is_grad_enabled() and any(t.requires_grad for t in ({pool})):")
    module_forward += return_lines(kernel, f"{fn}.apply", [*tensors, *scalars], "        ", set(sig_taken))
    # Nothing to differentiate (inference, no_grad): the forward op alone, without the ~20 us that
    # autograd.Function.apply costs a call.
    module_forward += return_lines(kernel, op.name, [*tensors, *scalars], "    ", set(sig_taken))
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
        n: fresh_local(n, taken) for n in ("n_cols", "n_rows", "n_elements", "programs", "grid", "config")
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
    has_cols = uses_cols(kernel)
    if kernel.rows:
        lines.append(f"    {n_cols} = {row_width(kernel, main)}")
        for ptr, load in by_pointer.items():
            arg = load.source
            if load.kind in (COL, CHANNEL):
                lines.append(f"    {arg} = {arg}.contiguous()")
                passed[ptr] = arg
            elif load.kind == ROW:
                lines.append(f"    {arg} = {arg}.reshape(-1).contiguous()")
                passed[ptr] = arg
            elif load.kind == BCAST:
                passed[ptr] = fresh_local(f"{arg}_expanded", taken)
                lines.append(f"    {passed[ptr]} = {arg}.expand({main}.shape)")
            else:
                passed[ptr] = fresh_local(f"{arg}_2d", taken)
                width = f"2 * {n_cols}" if load.half is not None else n_cols
                lines.append(f"    {passed[ptr]} = {arg}.reshape(-1, {width}).contiguous()")
        main_2d = next(passed[p] for p, load in by_pointer.items() if load.source == main)
        upstream = fresh_local("d_out_2d", taken)
        shape = f"{n_rows}, {n_cols}" if out.kind == FULL else n_rows
        lines += [
            f"    {n_rows} = {main_2d}.shape[0]",
            f"    {upstream} = d_out.reshape({shape}).contiguous()",
            f"    {programs}, {config} = _bwd_launch_config({n_rows}, {n_cols}, {main}.device)",
        ]
        grid = f"({programs},)"
        sizes = [n_rows, n_cols, *(channel_values(main) if channel_sizes(kernel) else [])]
        sizes += broadcast_values(kernel, main, passed)
    else:
        for ptr, load in by_pointer.items():
            if load.source not in passed.values():
                lines.append(f"    {load.source} = {load.source}.contiguous()")
            passed[ptr] = load.source
            if load.kind == BCAST:
                passed[ptr] = fresh_local(f"{load.source}_expanded", taken)
                lines.append(f"    {passed[ptr]} = {load.source}.expand({main}.shape)")
        upstream = fresh_local("d_out_c", taken)
        lines += [f"    {upstream} = d_out.contiguous()", f"    {local['n_elements']} = {upstream}.numel()"]
        sizes = [local["n_elements"]]
        if kernel.split or has_cols:
            lines.append(f"    {n_cols} = {main}.shape[-1]" + (" // 2" if kernel.split else ""))
            sizes.append(n_cols)
        if channel_sizes(kernel):
            sizes += channel_values(main)
        sizes += broadcast_values(kernel, main, passed)
        lines.append(f"    {local['grid']}, {local['config']} = _bwd_launch_config({local['n_elements']})")
        grid = local["grid"]
    results: dict[str, list[str]] = {}
    for ptr, grad in grads.items():
        load = by_pointer[ptr]
        arg, name = load.source, fresh_local(f"d_{load.source}", taken)
        buffers[ptr] = name
        if grad.kind == BCAST:  # per element, then summed back to the tensor's own shape
            lines.append(f"    {name} = torch.empty({main}.shape, dtype=torch.float32, device={main}.device)")
            results.setdefault(arg, []).append(f"{name}.sum_to_size({arg}.shape).to({arg}.dtype)")
        elif grad.kind == CHANNEL:  # per element, then summed over every dimension but the channels
            lines.append(f"    {name} = torch.empty({main}.shape, dtype=torch.float32, device={main}.device)")
            dims = f"[0, *range(2, {main}.dim())]"
            results.setdefault(arg, []).append(f"{name}.sum({dims}).to({arg}.dtype).reshape({arg}.shape)")
        elif grad.kind == COL:
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
    lines += wrap(f"{backward.name}[{grid}]", launch_args, "    ")
    order = [arg for arg in tensors.values() if arg in results]
    lines += _return([" + ".join(results[arg]) for arg in order])
    empty = [f"torch.empty({a}.shape, dtype={a}.dtype, device={a}.device)" for a in order]
    params = [("d_out", "torch.Tensor"), *((a, "torch.Tensor") for a in tensors.values())]
    params += [(a, "torch.types.Number") for a in numbers.values()]
    returns = "torch.Tensor" if len(order) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(order))}]"
    source = op_source(op_name(backward.name), params, returns, lines, _return(empty))
    return source, order
