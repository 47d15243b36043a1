"""The ``inductor`` generator: TorchInductor's own Triton, made standalone and readable.

In a sandbox on the GPU (``runners/inductor_capture.py``), the module is
compiled with ``torch.compile(dynamic=True, fullgraph=True)``, run once, and
Inductor's output module comes back with the graph's inputs (which argument,
parameter or size each one is) and the launch configuration the autotuner
chose for each kernel. Here, in plain Python, that output becomes one module:

- the kernels, as ``@triton.jit`` functions (Inductor's heuristics decorator
  dropped);
- the wrapper's ``call(args)`` as ``_call_compiled(args)``, each
  ``kernel.run(..., stream=stream0)`` rewritten into
  ``kernel[grid(xnumel)](..., XBLOCK=..., num_warps=..., num_stages=...)``
  with the chosen configuration and a grid computed from the sizes at call
  time;
- a class with the original name, constructor (copied verbatim, as the
  template generator does) and ``forward`` signature, whose ``forward``
  gathers sizes, parameters and inputs in the order the compiled graph takes
  them and calls ``_call_compiled``.

``runners.normalize`` then removes what is left of Inductor (its allocation
and stream helpers, ``triton_helpers``, ``libdevice``); library calls that
Inductor keeps (cuBLAS through ``extern_kernels.mm``, cuDNN convolutions) stay
as ``torch`` calls, and its rewrites say so. Shapes are symbolic (dynamic
shapes, no duck shaping), so nothing is specialised to the example's sizes
except what the module itself fixes (a weight's size). Numbers the module
holds (``self.eps``) and non-tensor arguments are compiled in; ``forward``
checks them, and the input dtypes, and raises rather than compute something
else.

Declined, with a one-line reason: no CUDA GPU, graph breaks, several graphs,
outputs that alias inputs, inputs it cannot name, and Inductor constructs it
cannot make standalone (a grid other than 1D/2D/3D, a wrapper helper it does
not know).
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from runners import pyast, sandbox
from runners.generators.base import Candidate, GeneratorDeclined, GeneratorError, Problem
from runners.generators.template.ir import on_self
from runners.generators.template.ops import Unsupported
from runners.normalize import Normalized, normalize
from runners.source import ClassParts, NotStandalone, class_parts

NEEDS_CUDA = (
    "inductor: needs a CUDA GPU (Inductor's Triton backend generates code for the GPU it compiles on)"
)
CAPTURE_LIMITS = sandbox.Limits(timeout_s=300.0, memory_mb=16384)

# Names the wrapper may use that runners.normalize rewrites (Inductor's module-level aliases).
_NORMALIZED_NAMES = frozenset(
    """
    empty_strided_cuda empty_strided_cpu reinterpret_tensor assert_size_stride assert_alignment
    get_raw_stream extern_kernels
    """.split()
)
# Launch-configuration keys that are block sizes: passed when the kernel takes them.
_BLOCKS = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK")
_GRIDS = {"Grid1D": ("xnumel",), "Grid2D": ("ynumel", "xnumel"), "Grid3D": ("znumel", "ynumel", "xnumel")}
_GRIDS["Grid2DWithYZOverflow"] = _GRIDS["Grid2D"]
CALL = "_call_compiled"
STATIC_CALL = "_call_static"  # the graph compiled for the example's sizes
STATIC_SUFFIX = "_static"  # its kernels' names, apart from the dynamic graph's


class NotStandaloneCapture(Exception):
    """Inductor's output has something this generator cannot make standalone; the message says what."""


@dataclass
class _Kernel:
    name: str
    source: str  # the @triton.jit function(s), without Inductor's decorator
    params: list[str]  # runtime parameters, in order
    constexprs: list[str]
    static_numels: dict[str, str]  # xnumel = 1024 inside the kernel, when it is not a parameter


# ---------------------------------------------------------------------------
# Reading Inductor's output module


def _kernel(name: str, source: str) -> _Kernel:
    tree = pyast.parse(source)
    lines = source.splitlines()
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    main = next((f for f in functions if f.name == name), None)
    if main is None:
        raise NotStandaloneCapture(f"kernel {name}: its source defines no function {name}")
    parts = []
    for fn in functions:
        jit = [d for d in fn.decorator_list if ast.unparse(d) == "triton.jit"]
        if not jit:
            raise NotStandaloneCapture(f"kernel {name}: {fn.name} is not a plain @triton.jit function")
        parts.append("@triton.jit\n" + "\n".join(lines[fn.lineno - 1 : fn.end_lineno]))
    params: list[str] = []
    constexprs: list[str] = []
    for arg in main.args.args:
        annotation = ast.unparse(arg.annotation) if arg.annotation else ""
        (constexprs if annotation.endswith("constexpr") else params).append(arg.arg)
    static = {}
    for st in main.body:
        if (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and st.targets[0].id in ("xnumel", "ynumel", "znumel")
            and isinstance(st.value, ast.Constant)
        ):
            static[st.targets[0].id] = str(st.value.value)
    return _Kernel(name, "\n\n".join(parts), params, constexprs, static)


def _kernels(tree: ast.Module) -> dict[str, _Kernel]:
    out = {}
    for st in tree.body:
        if not (isinstance(st, ast.Assign) and isinstance(st.value, ast.Call)):
            continue
        if ast.unparse(st.value.func) != "async_compile.triton":
            continue
        args = st.value.args
        if len(args) < 2 or not all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args[:2]
        ):
            raise NotStandaloneCapture(f"line {st.lineno}: async_compile.triton without a name and a source")
        name, source = args[0].value, args[1].value  # type: ignore[attr-defined]
        out[name] = _kernel(name, source)
    return out


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    """``def call(args)`` at the top, or ``Runner.call(self, args)`` (torch 2.8+)."""
    for st in tree.body:
        if isinstance(st, ast.FunctionDef) and st.name == "call":
            return st
        if isinstance(st, ast.ClassDef) and st.name == "Runner":
            for member in st.body:
                if isinstance(member, ast.FunctionDef) and member.name == "call":
                    return member
    raise NotStandaloneCapture("Inductor's output has no call(args) function")


def _stored(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
    return names


def _module_names(tree: ast.Module, lines: list[str]) -> dict[str, str]:
    """Top-level statements a wrapper may need copied, by the name they bind: plain imports from
    torch and math (``from math import inf``) and aliases of ``torch.ops`` (``aten = torch.ops.aten``)."""
    out = {}
    for st in tree.body:
        text = "\n".join(lines[st.lineno - 1 : st.end_lineno])
        if isinstance(st, ast.ImportFrom) and st.module in ("math", "torch"):
            for alias in st.names:
                out[alias.asname or alias.name] = f"from {st.module} import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else ""
                )
        elif (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and ast.unparse(st.value).startswith("torch.ops.")
            and not ast.unparse(st.value).startswith("torch.ops.inductor")
        ):
            out[st.targets[0].id] = text
    return out


def _launch(call: ast.Call, kernel: _Kernel, info: dict[str, Any], lines: list[str]) -> str:
    """``kernel.run(a, b, xnumel, stream=stream0)`` -> ``kernel[grid(xnumel)](a, b, xnumel, XBLOCK=...)``."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg != "stream" for k in call.keywords):
        raise NotStandaloneCapture(
            f"line {call.lineno}: {kernel.name}.run(...) with arguments other than positional"
        )
    if len(call.args) != len(kernel.params):
        raise NotStandaloneCapture(
            f"line {call.lineno}: {kernel.name}.run(...) passes {len(call.args)} arguments, "
            f"the kernel takes {len(kernel.params)}"
        )
    args = [ast.get_source_segment("\n".join(lines), a) or ast.unparse(a) for a in call.args]
    by_param = dict(zip(kernel.params, args, strict=True))
    grid_type = info.get("grid_type") or "Grid1D"
    if grid_type not in _GRIDS:
        raise NotStandaloneCapture(f"kernel {kernel.name} uses Inductor's {grid_type} launch grid")
    numels = []
    for numel in _GRIDS[grid_type]:
        expr = by_param.get(numel) or kernel.static_numels.get(numel)
        if expr is None:
            raise NotStandaloneCapture(f"kernel {kernel.name}: cannot tell its {numel} for the launch grid")
        numels.append(expr)
    config = info["config"]
    meta = []
    for key, value in config["kwargs"].items():
        if key in kernel.constexprs:
            meta.append(f"{key}={value!r}")
        elif key not in _BLOCKS:
            raise NotStandaloneCapture(
                f"kernel {kernel.name}: launch setting {key}={value!r} is not a kernel parameter"
            )
    missing = [c for c in kernel.constexprs if c not in config["kwargs"]]
    if missing:
        raise NotStandaloneCapture(f"kernel {kernel.name}: no chosen value for {', '.join(missing)}")
    meta.append(f"num_warps={config['num_warps']}")
    meta.append(f"num_stages={config['num_stages']}")
    if config.get("num_ctas", 1) != 1:
        meta.append(f"num_ctas={config['num_ctas']}")
    if config.get("maxnreg"):
        meta.append(f"maxnreg={config['maxnreg']}")
    return f"{kernel.name}[grid({', '.join(numels)})]({', '.join(args + meta)})"


def _wrapper(
    tree: ast.Module, code: str, kernels: dict[str, _Kernel], capture: dict[str, Any], call_name: str = CALL
) -> tuple[str, list[str]]:
    """(``def <call_name>(args): ...``, the top-level statements it needs copied)."""
    lines = code.splitlines()
    fn = _call_function(tree)
    body = fn.body
    if ast.unparse(fn.args) not in ("args", "self, args"):
        raise NotStandaloneCapture(f"Inductor's call takes ({ast.unparse(fn.args)}), not (args)")
    unpack = body[0]
    if not (isinstance(unpack, ast.Assign) and ast.unparse(unpack.value) == "args"):
        raise NotStandaloneCapture("Inductor's call does not start by unpacking its arguments")
    target = unpack.targets[0]
    count = len(target.elts) if isinstance(target, ast.Tuple) else 1
    if count != len(capture["placeholders"]):
        raise NotStandaloneCapture(
            f"Inductor's call takes {count} arguments, the graph has {len(capture['placeholders'])} inputs"
        )
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    expected = capture["outputs"]["count"]
    if len(returns) != 1 or not isinstance(returns[0].value, ast.Tuple):
        raise NotStandaloneCapture("Inductor's call does not end in one return of a tuple")
    if len(returns[0].value.elts) != expected:
        raise NotStandaloneCapture(
            f"Inductor's call returns {len(returns[0].value.elts)} tensors, forward {expected}"
        )

    # Each launch statement becomes its kernel[grid](...) line.
    replace: dict[int, tuple[int, str]] = {}
    launched = set()
    for st in ast.walk(fn):
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
            continue
        func = st.value.func
        if isinstance(func, ast.Attribute) and func.attr == "run" and isinstance(func.value, ast.Name):
            name = func.value.id
            if name not in kernels:
                raise NotStandaloneCapture(
                    f"line {st.lineno}: launches {name}, which is not one of Inductor's kernels"
                )
            if name not in capture["kernels"]:
                raise NotStandaloneCapture(f"kernel {name}: no launch configuration was recorded")
            indent = lines[st.lineno - 1][: st.col_offset]
            text = indent + _launch(st.value, kernels[name], capture["kernels"][name], lines)
            replace[st.lineno] = (st.end_lineno or st.lineno, text)
            launched.add(name)
    if not launched:
        raise NotStandaloneCapture(
            "Inductor generated no Triton kernel launches (everything stays in library calls)"
        )

    stored = _stored(fn)
    available = _module_names(tree, lines)
    needed: list[str] = []
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)):
            continue
        name = n.id
        if name in stored or name in kernels or hasattr(builtins, name) or name in ("torch", "math"):
            continue
        if name == "self":
            raise NotStandaloneCapture(f"line {n.lineno}: Inductor's call uses its Runner's state")
        if name in available:
            if available[name] not in needed:
                needed.append(available[name])
        elif name not in _NORMALIZED_NAMES:
            raise NotStandaloneCapture(
                f"line {n.lineno}: Inductor's call uses {name}, which has no standalone form"
            )

    out = [f"def {call_name}(args):"]
    first = body[0].lineno
    last = fn.end_lineno or body[-1].end_lineno or first
    i = first
    while i <= last:
        if i in replace:
            end, text = replace[i]
            out.append(text)
            i = end + 1
            continue
        out.append(lines[i - 1])
        i += 1
    body_text = textwrap.dedent("\n".join(out[1:]))
    return out[0] + "\n" + textwrap.indent(body_text, "    "), needed


# ---------------------------------------------------------------------------
# The forward that feeds the compiled graph


def _attr_expr(path: str, kind: str) -> str:
    parts = path.split(".")
    if all(p.isidentifier() for p in parts):
        return "self." + path
    getter = "get_parameter" if kind == "parameter" else "get_buffer"
    return f"self.{getter}({path!r})"


def _graph_inputs(placeholders: list[dict[str, Any]]) -> list[str]:
    """An expression for each graph input, in order: ``x``, ``self.norm.weight``, ``x.size(0)``."""
    tensors: list[tuple[str, dict[str, Any]]] = []
    for p in placeholders:
        origin = p.get("from") or {}
        if p["kind"] != "tensor":
            continue
        if "input" in origin:
            tensors.append((origin["input"], p))
        elif "parameter" in origin or "buffer" in origin:
            kind = "parameter" if "parameter" in origin else "buffer"
            tensors.append((_attr_expr(origin[kind], kind), p))
    exprs = []
    for p in placeholders:
        origin = p.get("from") or {}
        if p["kind"] == "tensor":
            match = next((e for e, q in tensors if q is p), None)
            if match is None:
                raise NotStandaloneCapture(
                    f"graph input {p['name']} is neither an argument, a parameter nor a buffer"
                )
            exprs.append(match)
        elif p["kind"] == "symint":
            if "input" in origin:
                exprs.append(origin["input"])
                continue
            exprs.append(_size_of(p, tensors))
        else:
            raise NotStandaloneCapture(f"graph input {p['name']} is a {p['kind']}, which forward cannot pass")
    return exprs


def _size_of(p: dict[str, Any], tensors: list[tuple[str, dict[str, Any]]]) -> str:
    expr = p.get("expr", "")
    inputs_first = sorted(tensors, key=lambda t: t[0].startswith("self."))
    for method in ("size", "stride"):
        for name, q in inputs_first:
            dims = q.get("shape" if method == "size" else "stride", [])
            if expr in dims:
                return f"{name}.{method}({dims.index(expr)})"
    raise NotStandaloneCapture(f"graph input {p['name']} ({expr}) is not a size of any input")


def _literal(value: Any) -> str:
    return repr(value)


def _checks(capture: dict[str, Any]) -> list[str]:
    """What the compiled graph assumed and forward can check: dtypes, settings, fixed arguments."""
    lines = []
    for p in capture["placeholders"]:
        origin = p.get("from") or {}
        if p["kind"] == "tensor" and "input" in origin:
            name, dtype = origin["input"], p["dtype"]
            lines += [
                f"if {name}.dtype != torch.{dtype}:",
                f'    raise TypeError(f"compiled for {name} in {dtype}, got {{{name}.dtype}}")',
                # Inductor's kernels index by the strides they were compiled for: contiguous ones.
                f"{name} = {name}.contiguous()",
            ]
    # Values come from the sandbox that ran the module: code only as a literal (repr) of a number,
    # flag, string or None; the messages as JSON strings.
    # A path that is not one of names and container indices is refused, never skipped: the graph may
    # depend on the value it names.
    for s in capture.get("settings", []):
        path, raw = s["path"], s["value"]
        if not isinstance(raw, bool | int | float | str):
            continue  # no such setting is captured (only plain values are)
        try:
            held = on_self(path)  # self.norm.eps; self.get_submodule("blocks.0").eps
        except Unsupported as exc:
            raise NotStandaloneCapture(f"a setting of the capture: {exc}") from None
        value = _literal(raw)
        why = json.dumps(f"compiled for self.{path} == {value}; run kernelize again for others")
        lines += [f"if {held} != {value}:", f"    raise ValueError({why})"]
    for f in capture.get("fixed_arguments", []):
        name, value = f["name"], _literal(f["value"])
        op = "is not" if f["value"] is None or isinstance(f["value"], bool) else "!="
        why = json.dumps(f"compiled for {name}={value}; run kernelize again for others")
        lines += [f"if {name} {op} {value}:", f"    raise ValueError({why})"]
    return lines


def _static_test(static: dict[str, Any]) -> tuple[str, list[str]]:
    """(the condition under which the static graph applies: every tensor it takes has the size it
    was compiled for, its inputs in the order it takes them)."""
    exprs = _graph_inputs(static["placeholders"])
    tests = []
    for expr, p in zip(exprs, static["placeholders"], strict=True):
        dims = p.get("shape", [])
        if not all(str(d).isdigit() for d in dims):
            raise NotStandaloneCapture(f"the static graph's input {p['name']} has a symbolic size")
        size = ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "")
        tests.append(f"{expr}.shape == ({size})")
    return " and ".join(tests) or "True", exprs


def _forward(
    capture: dict[str, Any], signature: str, returns: str, static: tuple[str, list[str]] | None = None
) -> str:
    """``static``: the static graph's condition and inputs (:func:`_static_test`), when it is kept."""
    if capture.get("unplain_arguments"):
        raise NotStandaloneCapture(
            f"forward's argument {capture['unplain_arguments'][0]} is compiled in as an object"
        )
    exprs = _graph_inputs(capture["placeholders"])
    kind = capture["outputs"]["kind"]
    call = [
        "# Sizes, parameters and inputs, in the order the compiled graph takes them.",
        f"outputs = {CALL}([{', '.join(exprs)}])",
    ]
    if static is not None:
        test, static_exprs = static
        call = [
            "# At the sizes it was compiled and tuned for, the static graph; at any other, the generic one.",
            f"if {test}:",
            f"    outputs = {STATIC_CALL}([{', '.join(static_exprs)}])",
            "else:",
            *("    " + line for line in call),
        ]
    body = [
        *_checks(capture),
        *call,
        {"tensor": "return outputs[0]", "tuple": "return tuple(outputs)", "list": "return list(outputs)"}[
            kind
        ],
    ]
    return f"def forward({signature}){returns}:\n" + textwrap.indent("\n".join(body), "    ")


# ---------------------------------------------------------------------------
# The graph for the example's sizes


@dataclass
class _Static:
    kernels: dict[str, _Kernel]  # its kernels, renamed
    wrapper: str
    copied: list[str]
    test: tuple[str, list[str]]  # when forward takes it, and what it passes (_static_test)


def _renamed(static: dict[str, Any]) -> dict[str, Any]:
    """The static capture with each kernel's name suffixed, so both graphs' kernels can live in one
    module (Inductor numbers each compile's kernels from 0: both graphs have a ..._0)."""
    names = list(static.get("kernels", {}))
    if not names:
        return static
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b")
    code = pattern.sub(lambda m: m.group(1) + STATIC_SUFFIX, static["code"])
    kernels = {n + STATIC_SUFFIX: info for n, info in static["kernels"].items()}
    return {**static, "code": code, "kernels": kernels}


def _static_part(capture: dict[str, Any], generic: dict[str, _Kernel]) -> _Static | str:
    """The static graph, standalone, or why there is none (then the generic graph serves every
    size: the static one is an optimisation, never needed)."""
    raw = capture.get("static")
    if raw is None:
        return "not captured"
    if not raw.get("ok"):
        return str(raw.get("reason") or "its compile failed")
    static = {**_renamed(raw), "outputs": capture["outputs"]}
    try:
        tree = pyast.parse(static["code"])
        kernels = _kernels(tree)
        defined = {n for k in generic.values() for n in _functions(k.source)}
        clash = defined & {n for k in kernels.values() for n in _functions(k.source)}
        if clash:
            raise NotStandaloneCapture(f"both graphs define {sorted(clash)[0]}")
        wrapper, copied = _wrapper(tree, static["code"], kernels, static, STATIC_CALL)
        test = _static_test(static)
    except (NotStandaloneCapture, SyntaxError) as exc:
        return f"cannot make it standalone: {exc}"
    return _Static(kernels, wrapper, copied, test)


def _functions(source: str) -> list[str]:
    return [n.name for n in pyast.parse(source).body if isinstance(n, ast.FunctionDef)]


# ---------------------------------------------------------------------------
# The module


_HEADER = ("import torch", "import triton", "import triton.language as tl")


def render_module(problem: Problem, capture: dict[str, Any]) -> tuple[str, list[str]]:
    """(standalone source, normalize's rewrites) for a capture; raises NotStandaloneCapture."""
    source, rewrites, _ = render(problem, capture)
    return source, rewrites


def render(problem: Problem, capture: dict[str, Any]) -> tuple[str, list[str], str]:
    """(standalone source, normalize's rewrites, what became of the static graph) for a capture;
    raises NotStandaloneCapture."""
    code = capture["code"]
    tree = pyast.parse(code)
    kernels = _kernels(tree)
    wrapper, copied = _wrapper(tree, code, kernels, capture)
    try:
        parts = class_parts(problem.source, problem.class_name)
    except NotStandalone as exc:
        raise NotStandaloneCapture(str(exc)) from None
    generic = (kernels, wrapper, copied)
    part = _static_part(capture, kernels)
    if isinstance(part, _Static):
        norm = _assemble(problem, capture, parts, generic, part)
        if not norm.rejected:
            return norm.source, norm.rewrites, f"used at {_shapes(capture)}: {', '.join(part.kernels)}"
        part = f"cannot make it standalone: {norm.rejected}"
    norm = _assemble(problem, capture, parts, generic, None)
    if norm.rejected:
        raise NotStandaloneCapture(f"cannot make Inductor's output standalone: {norm.rejected}")
    return norm.source, norm.rewrites, f"not used: {part}"


def _shapes(capture: dict[str, Any]) -> str:
    return ", ".join(str(s) for s in capture.get("example_shapes", []))


def _assemble(
    problem: Problem,
    capture: dict[str, Any],
    parts: ClassParts,
    generic: tuple[dict[str, _Kernel], str, list[str]],
    static: _Static | None,
) -> Normalized:
    """The module's source, normalized: the generic graph, and the static one where given."""
    kernels, wrapper, copied = generic
    context = [c for c in parts.context if c not in _HEADER]
    shapes = _shapes(capture)
    gpu = capture.get("device_name", "the GPU")
    doc = textwrap.fill(
        f"{problem.class_name} as compiled by TorchInductor (torch {capture.get('torch', '?')}, "
        f"dynamic shapes) into {len(kernels)} Triton kernel(s): {', '.join(kernels)}.",
        width=100,
    )
    doc += "\n\n" + textwrap.fill(
        f"Launch settings are those Inductor's autotuner chose on {gpu} "
        f"for inputs of shape {shapes}; grids follow the sizes at call time.",
        width=100,
    )
    if static is not None:
        doc += "\n\n" + textwrap.fill(
            f"For inputs of shape {shapes} exactly, forward takes the graph compiled for those sizes "
            f"({', '.join(static.kernels)}), its launch settings tuned on {gpu} by coordinate descent.",
            width=100,
        )
        copied = [*copied, *(c for c in static.copied if c not in copied)]
    blocks = [f'"""{doc}\n"""\n\n' + "\n".join([*_HEADER, *copied, *context]) + "\n"]
    blocks += [k.source.rstrip() + "\n" for k in kernels.values()]
    blocks.append(wrapper.rstrip() + "\n")
    if static is not None:
        blocks += [k.source.rstrip() + "\n" for k in static.kernels.values()]
        blocks.append(static.wrapper.rstrip() + "\n")
    forward = _forward(capture, parts.signature, parts.returns, static.test if static else None)
    members = [*parts.members, forward]
    body = "\n\n".join(textwrap.indent(m.rstrip("\n"), "    ") for m in members)
    blocks.append(f"class {problem.class_name}(torch.nn.Module):\n{body}\n")
    return normalize("\n\n".join(blocks), problem.class_name)


# ---------------------------------------------------------------------------
# The generator


class InductorGenerator:
    name = "inductor"
    samples = False

    def __init__(self, device: str, dtype: str | None = None) -> None:
        self.device = device
        self.dtype = dtype

    def capture(self, problem: Problem) -> dict[str, Any]:
        """Inductor's output for ``problem``, compiled in a sandbox with fresh compiler caches (the
        sandbox's own)."""
        req = {
            "device": "cuda",  # the sandbox then limits memory by RSS: CUDA reserves too much address space
            "file": problem.file,
            "root": problem.root,
            "class_name": problem.class_name,
            "build": problem.build,
            "dtype": self.dtype,
        }
        readable = sandbox.problem_paths(problem.file, problem.root)
        res = sandbox.run("runners.inductor_capture:capture", req, CAPTURE_LIMITS, readable=readable)
        if res.outcome != "ok" or res.payload is None:
            last = res.stdout_tail.strip().splitlines()[-1:] if res.stdout_tail else []
            detail = f" ({last[0][:300]})" if last else ""
            raise GeneratorError(f"inductor: compiling failed: {res.reason}{detail}")
        if not res.payload.get("ok"):
            raise GeneratorDeclined(f"inductor: {res.payload.get('reason', 'compiling failed')}")
        return res.payload

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        if self.device != "cuda":
            raise GeneratorError(NEEDS_CUDA)
        if problem.build is None:
            raise GeneratorError("inductor: the module's build is not resolved yet")
        return [candidate(problem, self.capture(problem))]


def candidate(problem: Problem, capture: dict[str, Any]) -> Candidate:
    """The candidate for a capture (from the sandbox, or a fixture); raises GeneratorError."""
    try:
        source, rewrites, static = render(problem, capture)
    except (NotStandaloneCapture, SyntaxError) as exc:
        raise GeneratorDeclined(f"inductor: {exc}") from None
    kernels = {name: info["config"] for name, info in capture["kernels"].items()}
    if static.startswith("used"):
        raw = capture["static"]["kernels"]
        kernels |= {name + STATIC_SUFFIX: info["config"] for name, info in raw.items()}
    provenance = {
        "kernels": list(kernels),
        "launch_configs": json.loads(json.dumps(kernels)),
        "compiled_with": f"torch {capture.get('torch')}, triton {capture.get('triton')}",
        "rewrites": rewrites,
        "static_graph": static,
    }
    # Not "inductor": a candidate named like its generator reads as that generator's error row.
    return Candidate("compiled", "inductor", source, provenance)
