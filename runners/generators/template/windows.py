"""Pooling windows for the ``template`` generator: 2-D max and average pooling of a forward input
as one Triton kernel.

A module whose forward is one pooling of its input, as a module or a function::

    self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)     # ResNet's stem
    return self.pool(x)
    return F.avg_pool2d(x, 2)                                         # DenseNet's transitions

Each program owns ``BLOCK`` elements of the output (``[N, C, OH, OW]`` flattened, offsets in 64
bits) and walks its ``KH x KW`` window (unrolled: the window's sizes are constexpr), loading each
input element once per window that holds it, masked where the window hangs over the padding, in
float32: the maximum (a NaN wins, as in PyTorch; padding is ``-inf``) or the sum divided by the
window's size (with ``count_include_pad``) or by the input elements it covers (without). The output
is stored in the input's dtype.

The window is read at call time: from the module (``self.pool.kernel_size``, its stride and
padding) or from forward's arguments (numbers, or a module's numeric attributes), each an int or a
pair. What the kernel does not compute goes to the original computation by a guard at the top of
forward (``runners/fallback.py``): ``ceil_mode``, dilation other than 1, ``return_indices``,
``divisor_override``, inputs other than contiguous 3-D or 4-D float32, float16 or bfloat16, and
windows PyTorch refuses (padding over half the window, no output), for which the original raises its
own error. Anything else in the graph is declined by name. There is no backward kernel: under autograd
the suggestion keeps the original computation.
"""

from __future__ import annotations

from typing import Any

from runners.generators.base import Candidate, Problem
from runners.generators.template.emit import (
    custom_op_candidate,
    custom_op_module,
    guard_lines,
    op_source,
    wrap,
)
from runners.generators.template.ir import Kernel, module_expr, on_self, read_guards, require_direct
from runners.generators.template.ops import FLOAT_DTYPES, Unsupported
from runners.source import class_parts

_MODULES = {"nn.MaxPool2d": "max", "nn.AvgPool2d": "avg"}
_FUNCTIONS = {"torch.nn.functional.max_pool2d": "max", "torch.nn.functional.avg_pool2d": "avg"}
_PARAMS = {
    "max": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "avg": (
        "input",
        "kernel_size",
        "stride",
        "padding",
        "ceil_mode",
        "count_include_pad",
        "divisor_override",
    ),
}
# What the kernel computes of each setting: the value forward must have (the rest: the original's).
_FIXED: dict[str, dict[str, Any]] = {
    "max": {"dilation": 1, "ceil_mode": False, "return_indices": False},
    "avg": {"ceil_mode": False, "divisor_override": None},
}


def applies(trace: dict[str, Any]) -> bool:
    """Whether the graph pools 2-D windows: rendered here or declined by name."""
    return any(_kind(n) for n in trace.get("nodes", []))


def _kind(node: dict[str, Any]) -> str | None:
    if node.get("op") == "call_module":
        return _MODULES.get(node.get("module", ""))
    if node.get("op") == "call_function":
        return _FUNCTIONS.get(node.get("target", ""))
    return None


def _fail(node: dict[str, Any], why: str) -> Unsupported:
    target = node.get("target") if node["op"] != "output" else "output"
    return Unsupported(f"{why} in 2-D pooling ({target}, node {node['name']!r})")


def _number(node: dict[str, Any], role: str, value: Any) -> str:
    """The forward expression of a window setting: an int or a pair of ints, or a module's int
    attribute (read at call time)."""
    if isinstance(value, dict) and "attr" in value and type(value.get("value")) is int:
        return on_self(value["attr"])
    if type(value) is int or (
        isinstance(value, list) and len(value) in (1, 2) and all(type(v) is int for v in value)
    ):
        return repr(tuple(value) if isinstance(value, list) else value)
    raise _fail(node, f"unsupported {role} {value!r}: only an int, a pair of ints or an int attribute")


class _Call:
    """The one pooling of the graph: its input (a forward argument), its kind and the forward
    expressions of its window and settings."""

    def __init__(self, trace: dict[str, Any]) -> None:
        inputs: dict[str, dict[str, Any]] = {}
        call: dict[str, Any] | None = None
        for node in trace["nodes"]:
            if node["op"] == "placeholder":
                if node.get("shape") is None or node["target"].startswith("*"):
                    raise _fail(node, "unsupported forward argument that is not a tensor")
                inputs[node["name"]] = node
            elif _kind(node) and call is None:
                call = node
            elif node["op"] == "output":
                args = node.get("args", [])
                if call is None or len(args) != 1 or args[0] != {"node": call["name"]}:
                    raise _fail(node, "unsupported output: forward must return the pooling's output")
            else:
                raise _fail(node, f"unsupported {node.get('target') or node['op']}")
        assert call is not None  # applies() found it; the output check above needs it
        self.kind = kind = _kind(call) or ""
        args = call.get("args", [])
        given = (
            inputs.get(args[0]["node"]) if args and isinstance(args[0], dict) and "node" in args[0] else None
        )
        if given is None:
            raise _fail(call, "unsupported input: only an input of forward")
        self.x = given["target"]
        if len(given.get("shape", [])) not in (3, 4) or given.get("dtype") not in FLOAT_DTYPES:
            raise _fail(
                call, f"unsupported input {given.get('shape')} {given.get('dtype')}: only 3-D or 4-D floats"
            )
        if call["op"] == "call_module":
            if len(args) != 1 or call.get("kwargs"):
                raise _fail(call, "unsupported arguments: only the input")
            m = module_expr(call["target"])  # self.pool; self.get_submodule("features.3")
            self.window = [f"{m}.kernel_size", f"{m}.stride", f"{m}.padding"]
            self.count_pad = f"{m}.count_include_pad" if kind == "avg" else "True"
            self.checks = [(f"{m}.ceil_mode", "the kernel takes ceil_mode=False only")]
            if kind == "max":
                self.checks += [
                    (f"{m}.return_indices", "the kernel takes return_indices=False only"),
                    (f"{m}.dilation not in (1, (1, 1), [1, 1])", "the kernel takes dilation 1 only"),
                ]
            else:
                self.checks.append(
                    (f"{m}.divisor_override is not None", "the kernel takes no divisor_override")
                )
            return
        params = _PARAMS[kind]
        bound = dict(zip(params, args, strict=False)) | dict(call.get("kwargs", {}))
        if set(bound) - set(params):
            raise _fail(call, f"unsupported arguments {sorted(set(bound) - set(params))}")
        for key, want in _FIXED[kind].items():
            value = bound.get(key, want)
            if value != want and not (key == "dilation" and value in ([1], [1, 1])):
                raise _fail(call, f"unsupported {key} {value!r}: only {want!r}")
        if "kernel_size" not in bound:
            raise _fail(call, "unsupported call without kernel_size")
        stride = bound.get("stride")
        self.window = [
            _number(call, "kernel_size", bound["kernel_size"]),
            "None" if stride in (None, []) else _number(call, "stride", stride),
            _number(call, "padding", bound.get("padding", 0)),
        ]
        count_pad = bound.get("count_include_pad", True)
        if not isinstance(count_pad, bool):
            raise _fail(call, f"unsupported count_include_pad {count_pad!r}")
        self.count_pad = repr(count_pad)
        self.checks = []


_KERNEL = """
@triton.jit
def {name}(
    x_ptr, out_ptr, n_out, H, W, OH, OW, SH, SW, PH, PW, N_BUCKET,
    KH: tl.constexpr, KW: tl.constexpr, IS_MAX: tl.constexpr, COUNT_PAD: tl.constexpr, NARROW: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Program pid owns BLOCK elements of the output [planes, OH, OW] (a plane: one sample's channel)
    # and walks each one's window, unrolled. Each element's coordinates are divided out of its offset:
    # in 32 bits where every offset of the input and the output fits them (NARROW, set by the launch),
    # since a 64-bit division is a subroutine call for every element; in 64 bits past 2^31 elements.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    index = offs.to(tl.int32) if NARROW else offs
    rest = index // OW
    ow = index - rest * OW
    oh = rest % OH
    plane = rest // OH
    h0 = oh * SH - PH
    w0 = ow * SW - PW
    base = x_ptr + plane * H * W
    if IS_MAX:
        acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
    for i in tl.static_range(KH):
        h = h0 + i
        inside = mask & (h >= 0) & (h < H)
        for j in tl.static_range(KW):
            w = w0 + j
            ok = inside & (w >= 0) & (w < W)
            if IS_MAX:
                v = tl.load(base + h * W + w, mask=ok, other=float("-inf")).to(tl.float32)
                acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)  # a NaN wins, as in PyTorch
            else:
                acc += tl.load(base + h * W + w, mask=ok, other=0.0).to(tl.float32)
    if IS_MAX:
        out = acc
    elif COUNT_PAD:
        out = acc / (KH * KW)  # without ceil_mode every window lies within the padding
    else:
        rows = tl.minimum(h0 + KH, H) - tl.maximum(h0, 0)
        cols = tl.minimum(w0 + KW, W) - tl.maximum(w0, 0)
        out = acc / (rows * cols).to(tl.float32)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)
"""

# On CUDA the kernel is tuned per output size (rounded up to a power of two) and window over the
# elements a program owns; under the Triton interpreter, where timing settings means nothing, a
# plain launch.
_LAUNCH = '''
{name}_autotuned = triton.autotune(
    configs=[
        triton.Config({{"BLOCK": b}}, num_warps=w) for b, w in ((256, 2), (512, 4), (1024, 4), (1024, 8))
    ],
    key=["N_BUCKET", "KH", "KW", "NARROW"],
)({name})


def _pair(value):
    """An int or a sequence of one or two ints as (height, width); None for anything else."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) in (1, 2) and all(isinstance(v, int) for v in value):
        return value[0], value[-1]
    return None


def _pool_window(x, kernel_size, stride, padding):
    """(KH, KW, SH, SW, PH, PW) of a 2-D pooling window over x's last two dimensions, or None where
    PyTorch refuses the window (the original computation then says why)."""
    kernel, step, pad = _pair(kernel_size), _pair(kernel_size if stride is None else stride), _pair(padding)
    if kernel is None or step is None or pad is None or min(*kernel, *step) < 1 or min(pad) < 0:
        return None
    if 2 * pad[0] > kernel[0] or 2 * pad[1] > kernel[1]:
        return None
    if x.shape[-2] + 2 * pad[0] < kernel[0] or x.shape[-1] + 2 * pad[1] < kernel[1]:
        return None
    return (*kernel, *step, *pad)


def _pool_launch_config(n_in, n_out, on_cuda):
    """(kernel, grid, settings) for one program per BLOCK elements of the output; NARROW where every
    offset of the input and of the output (and a block past its end) fits 32 bits."""
    bucket = {{"N_BUCKET": triton.next_power_of_2(n_out), "NARROW": max(n_in, n_out + 1024) < 2**31}}
    if on_cuda and isinstance({name}, triton.JITFunction):
        return {name}_autotuned, lambda meta: (triton.cdiv(n_out, meta["BLOCK"]),), bucket
    return {name}, (triton.cdiv(n_out, 1024),), {{**bucket, "BLOCK": 1024, "num_warps": 4}}
'''


def _op(name: str, is_max: bool) -> tuple[str, str]:
    """(the op's source, its name): the launch over x of [N, C, H, W] or [C, H, W]."""
    op = name.removesuffix("_kernel")
    prep = [
        "    height, width = x.shape[-2], x.shape[-1]",
        "    out_h, out_w = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1",
        "    out = torch.empty((*x.shape[:-2], out_h, out_w), dtype=x.dtype, device=x.device)",
    ]
    body = [
        *prep,
        "    if out.numel() == 0:",
        "        return out",
        "    kernel, grid, config = _pool_launch_config(x.numel(), out.numel(), x.is_cuda)",
        "    kernel[grid](",
        "        x, out, out.numel(), height, width, out_h, out_w, sh, sw, ph, pw,",
        f"        KH=kh, KW=kw, IS_MAX={is_max}, COUNT_PAD=count_pad, **config,",
        "    )",
        "    return out",
    ]
    params = [("x", "torch.Tensor"), *((n, "int") for n in ("kh", "kw", "sh", "sw", "ph", "pw"))]
    params.append(("count_pad", "bool"))
    return op_source(op, params, "torch.Tensor", body, [*prep, "    return out"]), op


def render_module(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, str | None]:
    """(source, kernel name, None: no backward) for a traced 2-D pooling."""
    del backward  # forward only: under autograd the suggestion keeps the original computation
    require_direct(problem.class_name, trace)
    call = _Call(trace)
    x = call.x
    parts = class_parts(problem.source, problem.class_name)
    name = f"_{call.kind}_pool2d_kernel"
    op_text, op = _op(name, call.kind == "max")
    window = f"_pool_window({x}, {', '.join(call.window)})"
    checks = [
        (
            f"{x}.dim() not in (3, 4) or not {x}.is_contiguous() "
            f"or {x}.dtype not in (torch.float32, torch.float16, torch.bfloat16)",
            "the kernel takes contiguous 3-D or 4-D float32, float16 or bfloat16 input only",
        ),
        *call.checks,
        (f"{window} is None", "the kernel takes the windows PyTorch takes only"),
    ]
    guards = Kernel([], x, guards=[*read_guards(trace), *checks])
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(guards)]
    forward += wrap(f"return {op}", [x, f"*{window}", call.count_pad], "    ")
    what = "maximum" if call.kind == "max" else "average"
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} (the {what} of each 2-D window, one '
        "output element a\nlane). Each launch is a custom op, so torch.compile(fullgraph=True) takes "
        'the module as it is. No\nbackward: under autograd the original computation runs."""'
    )
    blocks = [_KERNEL.format(name=name), _LAUNCH.format(name=name), op_text]
    return custom_op_module(problem.class_name, parts, doc, blocks, forward), name, None


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    return custom_op_candidate(render_module, problem, trace, generator, "2-D pooling")
