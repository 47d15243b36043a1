"""Make Inductor-style Triton candidates standalone.

KernelLLM and models like it learned Triton from torch.compile's output, so
their candidates read like Inductor's generated code: they import
``torch._inductor`` internals (``grid``, ``triton_helpers``, ``libdevice``,
``extern_kernels``, ...) and ``torch._C._dynamo`` guards, pin everything to
``cuda:0`` and launch on Inductor's raw stream. Those internals move between
PyTorch releases (``from torch._inductor.runtime.triton_heuristics import grid``
fails on recent torch), so such a candidate often does not even import.

``normalize(source, class_name)`` rewrites one candidate into a module that
imports only torch, triton, triton.language and the standard library, and whose
replacement class is named ``class_name``:

- ``grid(...)`` and ``reinterpret_tensor(...)`` keep their call sites and get
  small local definitions, emitted once after the imports (``grid`` has
  Inductor's semantics: ``grid(ynumel, xnumel)``'s *last* numel is x);
- ``empty_strided_cuda(size, stride, dtype)`` becomes
  ``torch.empty_strided(size, stride, dtype=dtype, device=_kz_device)``;
- ``assert_size_stride``, ``get_raw_stream``, ``torch.cuda.set_device`` calls,
  ``stream=`` launch arguments and Inductor's ``@triton_heuristics.*``
  decorators are removed; ``with torch.cuda._DeviceGuard(0):`` blocks are
  unwrapped;
- ``triton_helpers.maximum/minimum`` become ``tl.maximum/tl.minimum`` (asked to
  propagate NaN, as Inductor's do), ``max2/min2`` become ``tl.max/tl.min``,
  ``promote_to_tensor(x)`` becomes ``x``; Inductor's Welford, argmax/argmin,
  ``any``, ``prod`` and integer-division helpers become local ``@triton.jit``
  copies (``_kz_welford`` ...);
- ``libdevice.f`` / ``tl_math.f`` become ``tl.f`` where triton.language has
  ``f`` (``libdevice.sqrt``, correctly rounded, becomes ``_kz_sqrt_rn``: ``tl.sqrt_rn`` in
  float32, the only dtype it compiles for on a GPU, ``tl.sqrt`` in float64, where it is exact);
  ``tanh``, ``log1p``, ``expm1``, ``sinh``, ``cosh``, ``tan``,
  ``log10``, ``isnan``, ``isinf`` and ``trunc`` become local ``@triton.jit``
  formulas on ``tl`` primitives (``tl.extra.cuda.libdevice`` would not run
  on the CPU interpreter, nor on other GPUs); anything else is rejected;
- ``extern_kernels.mm/addmm/bmm/baddbmm`` become the ``torch`` functions and
  ``extern_kernels.convolution`` becomes ``torch.nn.functional.conv{1,2,3}d``
  (or ``conv_transpose*``; ``torch.convolution`` when the arguments are not
  literals): that work stays in PyTorch, and the rewrites say so;
- the class ``ModelNew`` (or ``<class_name>New``, KernelBook's convention) is
  renamed to ``class_name`` everywhere it is referred to (a copy of the original
  class in the same file becomes ``_kz_original_<class_name>``);
- Inductor's boilerplate goes: its imports and module-level aliases
  (``assert_size_stride = torch._C._dynamo.guards.assert_size_stride``, ...),
  ``async_compile.wait``, the ``benchmark_compiled_module`` harness, and unused
  imports of modules a kernel may not import (``os``, ``ctypes``, ...); a
  missing ``import torch`` / ``triton`` / ``triton.language as tl`` is added,
  and names KernelLLM uses without importing them (``grid``, ``tl_math``,
  ``triton_helpers``, ...) are recognised.

Devices. Inductor hard-codes ``device(type='cuda', index=0)``, ``'cuda:0'`` and
``empty_strided_cuda``. The rewritten code follows its inputs instead: a
function that needs a device gets, as its first statement,
``_kz_device = _kz_device_of(<its parameters>)`` (a method's ``self`` last), and
every hard-coded CUDA device in it becomes ``_kz_device``. ``_kz_device_of``
returns the device of the first tensor it finds (searching lists, tuples, dicts
and a module's parameters and buffers), else CUDA when available, else the CPU.
In ``call(args)`` this runs before ``args.clear()``, so it sees the inputs. The
device is a local variable, not module state, so nested or concurrent calls
cannot see each other's device. Code outside any function uses
``_kz_device_of()`` directly.

Mechanics. Every change is an edit of a span of the original text located by
``ast``, so comments, layout and everything not rewritten stay as they were; a
file that needs nothing is returned unchanged. Anything that resolves to a
``torch._inductor`` / ``torch._dynamo`` / ``torch._C._dynamo`` name and has no
rewrite rejects the file, naming the construct and its line; the output is
parsed and checked again before it is returned. ``normalize`` never raises and
does not import torch or triton.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from runners import pyast
from runners.screen import ALLOWED_IMPORTS
from runners.source import rename_identifiers, segment

__all__ = ["Normalized", "normalize"]


@dataclass
class Normalized:
    source: str  # the rewritten, standalone module source (the input itself when rejected)
    rewrites: list[str]  # what was changed, in order of first occurrence
    rejected: str | None = None  # why it cannot be made standalone, naming the construct and line


_INDUCTOR_PREFIXES = ("torch._inductor", "torch._dynamo", "torch._C._dynamo", "torch.ops.inductor")

# Names KernelLLM output uses without importing them (the import was Inductor's boilerplate).
_FREE_NAMES = {
    "grid": "torch._inductor.runtime.triton_heuristics.grid",
    "triton_helpers": "torch._inductor.runtime.triton_helpers",
    "triton_heuristics": "torch._inductor.runtime.triton_heuristics",
    "libdevice": "torch._inductor.runtime.triton_helpers.libdevice",
    "tl_math": "torch._inductor.runtime.triton_helpers.math",
    "extern_kernels": "torch._inductor.select_algorithm.extern_kernels",
    "assert_size_stride": "torch._C._dynamo.guards.assert_size_stride",
    "empty_strided_cuda": "torch._C._dynamo.guards._empty_strided_cuda",
    "empty_strided_cpu": "torch._C._dynamo.guards._empty_strided_cpu",
    "reinterpret_tensor": "torch._C._dynamo.guards._reinterpret_tensor",
    "get_raw_stream": "torch._C._cuda_getCurrentRawStream",
    # and the modules themselves, when their import is missing (it gets added)
    "torch": "torch",
    "triton": "triton",
    "tl": "triton.language",
}
_MODULE_NAMES = {"torch": "torch", "triton": "triton", "tl": "tl"}

# libdevice / tl_math functions that triton.language has under the same (or the given) name.
_TL_DIRECT = {
    name: name
    for name in (
        "abs ceil cos div_rn erf exp exp2 fdiv floor fma log log2 rsqrt sin sqrt umulhi "
        "sigmoid cdiv maximum minimum"
    ).split()
} | {"fabs": "abs", "fmax": "maximum", "fmin": "minimum"}
# libdevice.sqrt is correctly rounded; tl.sqrt may be approximate on GPUs (tl_math.sqrt stays tl.sqrt).
# tl.sqrt_rn takes float32 only, and Inductor's generic graphs take square roots of sizes in float64
# (``math.sqrt(q.size(-1))``): _kz_sqrt_rn picks by dtype.
_LIBDEVICE_ONLY = {"sqrt": "sqrt_rn"}

# Local @triton.jit helpers, each ``_kz_<name>`` in runners/normalize_sources.py: name -> (the helpers it
# calls, what it replaces).
_JIT_HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
    "tanh": ((), "2 * sigmoid(2x) - 1"),
    "log1p": ((), "log(1 + x), corrected for rounding"),
    "expm1": ((), "exp(x) - 1, corrected for rounding"),
    "sinh": ((), "(exp(x) - exp(-x)) / 2"),
    "cosh": ((), "(exp(x) + exp(-x)) / 2"),
    "tan": ((), "sin(x) / cos(x)"),
    "log10": ((), "log(x) / log(10)"),
    "isnan": ((), "x != x"),
    "isinf": ((), "|x| == inf"),
    "trunc": ((), "ceil below zero, floor above"),
    "sqrt_rn": ((), "tl.sqrt_rn in float32, the only dtype it takes; float64's tl.sqrt is correctly rounded"),
    # Copies of torch._inductor.runtime.triton_helpers (BSD-3-Clause, PyTorch contributors).
    "welford_reduce": ((), "Inductor's Welford step"),
    "welford_combine": ((), "Inductor's Welford combine"),
    "welford": (("welford_combine",), "Inductor's Welford reduction"),
    "maximum_with_index": ((), "Inductor's argmax combine"),
    "minimum_with_index": ((), "Inductor's argmin combine"),
    "max_with_index": (("maximum_with_index",), "Inductor's argmax reduction"),
    "min_with_index": (("minimum_with_index",), "Inductor's argmin reduction"),
    "any_combine": ((), "a | b"),
    "any": (("any_combine",), "Inductor's any-reduction"),
    "prod_accumulate": ((), "a * b"),
    "prod": (("prod_accumulate",), "Inductor's product reduction"),
    "div_floor_integer": ((), "Inductor's integer floor division"),
    "remainder_integer": ((), "Inductor's integer remainder"),
}
_FORMULAS = ("tanh", "log1p", "expm1", "sinh", "cosh", "tan", "log10", "isnan", "isinf", "trunc", "sqrt_rn")
_HELPER_COPIES = (
    "welford_reduce welford_combine welford max_with_index min_with_index any prod "
    "div_floor_integer remainder_integer"
).split()

_SOURCES = Path(__file__).with_name("normalize_sources.py")


@functools.cache
def _helper_sources() -> dict[str, str]:
    """Each top-level function of runners/normalize_sources.py: its name -> its exact text."""
    text = _SOURCES.read_text(encoding="utf-8")
    lines = text.splitlines()
    return {n.name: segment(lines, n) for n in pyast.parse(text).body if isinstance(n, ast.FunctionDef)}


def _helper_source(names: tuple[str, ...], renames: dict[str, str]) -> str:
    """The functions ``names`` of runners/normalize_sources.py, two blank lines apart, with
    ``renames`` (``tl`` -> the candidate's alias, ...) applied to their identifiers."""
    text = "\n\n\n".join(_helper_sources()[name] for name in names)
    changed = {old: new for old, new in renames.items() if old != new}
    return rename_identifiers(text, changed) if changed else text


_HEADER_OPEN = "# --- kernelize normalize: local replacements for Inductor helpers ---"
_HEADER_CLOSE = "# --- end of replacements ---"

_CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class _Reject(Exception):
    pass


@dataclass(order=True)
class _Edit:
    start: int
    end: int
    seq: int
    text: str = field(compare=False)
    removal: bool = field(default=False, compare=False)


@dataclass
class _Ctx:
    func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    params: str = ""
    inline: bool = False
    class_body: bool = False
    needs_device: bool = False


_Def = ast.FunctionDef | ast.AsyncFunctionDef


def normalize(source: str, class_name: str) -> Normalized:
    """Rewrite an Inductor-style candidate into a standalone module defining ``class_name``."""
    if not isinstance(source, str) or not isinstance(class_name, str) or not class_name.isidentifier():
        return Normalized(str(source), [], f"class name {class_name!r} is not an identifier")
    try:
        return _Normalizer(source, class_name).run()
    except _Reject as exc:
        return Normalized(source, [], str(exc))
    except RecursionError:
        return Normalized(source, [], "the source is nested too deeply to analyse")
    except Exception as exc:  # never raise on bad input: report it instead
        return Normalized(source, [], f"could not normalize ({type(exc).__name__}: {exc})")


def _is_inductor(qual: str) -> bool:
    return any(qual == p or qual.startswith(p + ".") for p in _INDUCTOR_PREFIXES)


def _classify(qual: str) -> str | None:
    """What an (import-resolved) dotted name is, for the names this module rewrites."""
    parts = qual.split(".")
    last = parts[-1]
    if qual in ("torch.cuda._DeviceGuard", "torch.cuda.device"):
        return "device_guard"
    if qual == "torch.cuda.set_device":
        return "set_device"
    if qual == "torch.device":
        return "device_ctor"
    if qual.startswith("torch.") and last in ("_cuda_getCurrentRawStream", "get_raw_stream"):
        return "raw_stream"
    if not _is_inductor(qual):
        return None
    # Modules whose members are rewritten one by one: "<tag>:<member>" ("<tag>" for the module).
    for module, tag in (
        ("triton_helpers", "helper"),
        ("extern_kernels", "extern"),
        ("triton_heuristics", "triton_heuristics"),
        ("AsyncCompile()", "async"),
    ):
        if module not in parts:
            continue
        rest = parts[parts.index(module) + 1 :]
        if tag == "helper" and rest and rest[0] in ("libdevice", "math"):
            tag, rest = ("libdevice" if rest[0] == "libdevice" else "tlmath"), rest[1:]
        elif tag == "triton_heuristics" and rest and rest[0] == "grid":
            return "grid"
        elif tag == "triton_heuristics" and rest and rest[0] in ("start_graph", "end_graph"):
            return "noop"
        return f"{tag}:{rest[0]}" if rest else tag
    if last in ("assert_size_stride", "assert_alignment"):
        return "assert"
    if last in ("_empty_strided_cuda", "empty_strided_cuda"):
        return "empty_cuda"
    if last in ("_empty_strided_cpu", "empty_strided_cpu"):
        return "empty_cpu"
    if last in ("_reinterpret_tensor", "reinterpret_tensor"):
        return "reinterpret"
    if last == "run_intermediate_hooks":
        return "noop"
    return "inductor"


def _cuda_literal(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _CUDA_DEVICE.fullmatch(node.value) is not None
    )


class _Normalizer:
    def __init__(self, source: str, class_name: str) -> None:
        self.src = source
        self.class_name = class_name
        # Lines as the tokenizer counts them (str.splitlines also splits at \f, \x1c, \u2028, ...).
        self.lines = _LINE.findall(source)
        self.newline = "\r\n" if "\r\n" in source else "\n"  # what added lines end with
        self.line_starts: list[int] = []
        pos = 0
        for line in self.lines:
            self.line_starts.append(pos)
            pos += len(line)
        self.line_starts.append(pos)
        self.edits: list[_Edit] = []
        self.inserts: list[tuple[int, str]] = []  # (line number, statement text): indented at the end
        self.dedent: dict[int, int] = {}
        self.notes: dict[str, list[str]] = {}  # message -> items ("" per occurrence when counted)
        self.used_helpers: set[str] = set()
        self.need_device_of = False
        self.need_imports: set[str] = set()  # "torch", "triton", "tl" when the module lacks them
        self.removed_vars: set[str] = set()  # local names bound to removed values (stream0)
        self.removed_globals: set[str] = set()  # module-level names whose binding was removed
        self.bound: dict[str, str] = {}
        self.all_names: set[str] = set()
        self.rename: dict[str, str] = {}
        self.string_lines: set[int] = set()

    # ------------------------------------------------------------------
    # Positions and edits

    def _off(self, lineno: int, col: int) -> int:
        """Character offset of (1-based line, UTF-8 byte column)."""
        if lineno > len(self.lines):
            return len(self.src)
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def _span(self, node: ast.AST) -> tuple[int, int]:
        start = self._off(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._off(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def _dotted(self, node: ast.expr) -> str:
        """A callee as a reader would name it (``triton_helpers.welford``), whatever its layout."""
        if isinstance(node, ast.Attribute):
            return f"{self._dotted(node.value)}.{node.attr}"
        if isinstance(node, ast.Name):
            return node.id
        return " ".join(self._text(node).split())

    def _text(self, node: ast.AST) -> str:
        start, end = self._span(node)
        return self.src[start:end]

    def _edit(self, start: int, end: int, text: str, removal: bool = False) -> None:
        self.edits.append(_Edit(start, end, len(self.edits), text, removal))

    def _replace(self, node: ast.AST, text: str) -> None:
        self._edit(*self._span(node), text)

    def _note(self, message: str, item: str = "") -> None:
        items = self.notes.setdefault(message, [])
        if not item or item not in items:
            items.append(item)

    def _notes(self) -> list[str]:
        out = []
        for message, items in self.notes.items():
            named = [i for i in items if i]
            if named:
                out.append(f"{message}: {', '.join(named)}")
            else:
                out.append(f"{message} ({len(items)})" if len(items) > 1 else message)
        return out

    def _line_start(self, lineno: int) -> int:
        return self.line_starts[min(lineno - 1, len(self.lines))]

    def _indent(self, lineno: int) -> str:
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return line[: len(line) - len(line.lstrip(" \t"))]

    def _whole_lines(self, node: ast.AST, prefix: str = "") -> bool:
        """Whether node alone fills its lines (before it: indentation and ``prefix``; after: a comment)."""
        start, end = self._span(node)
        first = node.lineno  # type: ignore[attr-defined]
        last = node.end_lineno  # type: ignore[attr-defined]
        before = self.src[self._line_start(first) : start].strip()
        after_line = self.lines[last - 1] if last <= len(self.lines) else ""
        after = self.src[end : self._line_start(last) + len(after_line)].strip()
        return before == prefix and (after == "" or after.startswith("#"))

    def _remove_lines(self, first: int, last: int) -> None:
        self._edit(self._line_start(first), self._line_start(last + 1), "", removal=True)

    def _remove_stmt(self, st: ast.stmt) -> bool:
        """Remove a statement; True when a ``pass`` stands in (it shared its line)."""
        if self._whole_lines(st):
            self._remove_lines(st.lineno, st.end_lineno or st.lineno)
            return False
        self._edit(*self._span(st), "pass", removal=True)
        return True

    def _reject(self, node: ast.AST, message: str) -> _Reject:
        return _Reject(f"line {getattr(node, 'lineno', '?')}: {message}")

    # ------------------------------------------------------------------
    # Names

    def _resolve(self, node: ast.expr) -> str | None:
        """The dotted name an expression refers to, through the module's imports."""
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id not in self.all_names and node.id in _FREE_NAMES:
                return _FREE_NAMES[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _resolve_value(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            base = self._resolve(node.func)
            return base + "()" if base else None
        return self._resolve(node)

    def _kind(self, node: ast.expr) -> tuple[str | None, str | None]:
        qual = self._resolve(node)
        return qual, (_classify(qual) if qual else None)

    def _collect_names(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    if isinstance(node, ast.Import):
                        name = alias.asname or alias.name.split(".")[0]
                        origin = alias.name if alias.asname else name
                    else:
                        name = alias.asname or alias.name
                        origin = f"{node.module or ''}.{alias.name}" if not node.level else ""
                    self.all_names.add(name)
                    if origin:
                        self.bound[name] = origin
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self.all_names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.all_names.add(node.name)
            elif isinstance(node, ast.arg):
                self.all_names.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.all_names.add(node.name)
            elif isinstance(node, ast.Constant | ast.JoinedStr) and node.end_lineno != node.lineno:
                self.string_lines.update(range(node.lineno + 1, (node.end_lineno or node.lineno) + 1))
        for st in tree.body:  # module-level aliases: assert_size_stride = torch._C._dynamo...
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                value = self._resolve_value(st.value)
                if value:
                    self.bound[st.targets[0].id] = value

    def _alias_of(self, qual: str, default: str) -> str:
        """The name the module binds ``qual`` to (``default`` if it does, or binds it nowhere)."""
        names = sorted(name for name, origin in self.bound.items() if origin == qual)
        return default if default in names or not names else names[0]

    # ------------------------------------------------------------------
    # Driver

    def run(self) -> Normalized:
        try:
            tree = pyast.parse(self.src)
        except SyntaxError as exc:
            return Normalized(self.src, [], f"line {exc.lineno}: syntax error: {exc.msg}")
        except ValueError as exc:  # null bytes
            return Normalized(self.src, [], f"cannot parse: {exc}")
        self._collect_names(tree)
        self._plan_rename(tree)
        self.torch = self._alias_of("torch", "torch")
        self.triton = self._alias_of("triton", "triton")
        self.tl = self._alias_of("triton.language", "tl")
        self.used_loads = self._used_names(tree)
        self.has_import_torch = any(
            isinstance(n, ast.Import)
            and any(a.name == "torch" and a.asname in (None, "torch") for a in n.names)
            for n in tree.body
        )
        top_level = {
            n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        self.grid_name = "_kz_grid" if "grid" in top_level else "grid"
        self.reinterpret_name = (
            "_kz_reinterpret_tensor" if "reinterpret_tensor" in top_level else "reinterpret_tensor"
        )
        # An output of normalize() needs nothing more; anything else clashing is refused.
        reserved = ("_kz_device", "_kz_device_of", "_kz_find_device", "_kz_grid", "_kz_reinterpret_tensor")
        self.reserved_clash = next((n for n in reserved if n in self.all_names), None)
        self._body(tree.body, _Ctx())
        if not self.edits and not self.inserts and not self.dedent:
            return Normalized(self.src, [])
        if self.reserved_clash and (self.need_device_of or self.used_helpers):
            raise _Reject(f"the source already defines {self.reserved_clash}, a name normalize needs")
        out = self._apply(tree)
        self._check_output(out)
        return Normalized(out, self._notes())

    def _plan_rename(self, tree: ast.Module) -> None:
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        old = next((c for c in ("ModelNew", f"{self.class_name}New") if c in classes), None)
        if old is None or old == self.class_name:
            if self.class_name not in classes:
                raise _Reject(f"defines neither ModelNew nor {self.class_name} as a class at module level")
            return
        self.rename[old] = self.class_name
        if self.class_name in classes:
            # The file carries the original module too: keep it, out of the replacement's way.
            self.rename[self.class_name] = f"_kz_original_{self.class_name}"

    def _used_names(self, tree: ast.Module) -> set[str]:
        used: set[str] = set()
        for st in tree.body:
            if self._is_harness(st):
                continue
            used.update(n.id for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        return used

    def _is_harness(self, st: ast.stmt) -> bool:
        """Inductor's benchmark scaffolding at the end of an output_code file."""
        if isinstance(st, ast.FunctionDef) and st.name == "benchmark_compiled_module":
            return True
        if isinstance(st, ast.If) and "__main__" in self._text(st.test):
            body = "\n".join(self._text(s) for s in st.body)
            return "compiled_module_main" in body or "benchmark_compiled_module" in body
        return False

    # ------------------------------------------------------------------
    # Statements

    def _body(self, stmts: list[ast.stmt], ctx: _Ctx) -> int:
        return sum(self._stmt(st, ctx) for st in stmts)

    def _block(self, stmts: list[ast.stmt], ctx: _Ctx) -> int:
        kept = self._body(stmts, ctx)
        if stmts and kept == 0:
            self.inserts.append((stmts[0].lineno, "pass"))
        return kept

    def _stmt(self, st: ast.stmt, ctx: _Ctx) -> int:
        if ctx.func is None and not ctx.class_body and self._is_harness(st):
            self._remove_stmt(st)
            self._note("removed Inductor's benchmark harness")
            return 0
        if isinstance(st, ast.Import | ast.ImportFrom):
            return self._import(st)
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            self._function(st, ctx)
            return 1
        if isinstance(st, ast.ClassDef):
            self._class(st, ctx)
            return 1
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            message = self._removable_call(st.value)
            if message:
                self._note(message)
                return int(self._remove_stmt(st))
        if isinstance(st, ast.Assign):
            return self._assign(st, ctx)
        if isinstance(st, ast.Delete):
            gone = [
                t
                for t in st.targets
                if isinstance(t, ast.Name) and (t.id in self.removed_globals or t.id in self.removed_vars)
            ]
            if gone and len(gone) == len(st.targets):
                return int(self._remove_stmt(st))
            if gone:
                raise self._reject(st, f"deletes {gone[0].id} together with other names")
        if isinstance(st, ast.With) and self._device_guard(st):
            return self._unwrap(st, ctx)
        self._generic(st, ctx)
        return 1

    def _removable_call(self, call: ast.Call) -> str | None:
        qual, kind = self._kind(call.func)
        if kind == "assert":
            return f"removed {qual.rsplit('.', 1)[-1] if qual else 'assert'} calls"
        if kind == "raw_stream":
            return "removed get_raw_stream(...) calls"
        if kind == "set_device":
            return "removed torch.cuda.set_device(...) calls (the device follows the inputs)"
        if kind == "noop":
            return f"removed {qual.rsplit('.', 1)[-1] if qual else 'no-op'}(...) calls"
        if kind == "async:wait":
            return "removed async_compile.wait(...)"
        if kind == "helper:set_driver_to_gpu":
            return "removed triton_helpers.set_driver_to_gpu()"
        return None

    def _device_guard(self, st: ast.With) -> bool:
        if len(st.items) != 1 or st.items[0].optional_vars is not None:
            return False
        expr = st.items[0].context_expr
        return isinstance(expr, ast.Call) and self._kind(expr.func)[1] == "device_guard"

    def _unwrap(self, st: ast.With, ctx: _Ctx) -> int:
        self._note(
            f"unwrapped `with {self._text(st.items[0].context_expr)}:` (the device follows the inputs)"
        )
        first = st.body[0]
        if first.lineno == st.lineno:
            self._edit(self._span(st)[0], self._span(first)[0], "", removal=True)
        else:
            self._remove_lines(st.lineno, first.lineno - 1)
            outer, inner = self._indent(st.lineno), self._indent(first.lineno)
            if not inner.startswith(outer) or len(inner) == len(outer):
                raise self._reject(st, "inconsistent indentation in the with-block")
            for lineno in range(first.lineno, (st.end_lineno or first.lineno) + 1):
                if lineno not in self.string_lines:
                    self.dedent[lineno] = self.dedent.get(lineno, 0) + len(inner) - len(outer)
        return self._body(st.body, ctx)

    def _import(self, st: ast.Import | ast.ImportFrom) -> int:
        if isinstance(st, ast.ImportFrom) and st.level:
            raise self._reject(st, "relative import (a kernel must be standalone)")
        keep: list[ast.alias] = []
        internal: list[str] = []
        unused: list[str] = []
        for alias in st.names:
            if isinstance(st, ast.Import):
                origin, name = alias.name, alias.asname or alias.name.split(".")[0]
            else:
                origin, name = f"{st.module}.{alias.name}", alias.asname or alias.name
            module = origin.split(".")[0]
            if alias.name == "*" and (_is_inductor(origin) or origin.startswith("torch._C.")):
                raise self._reject(st, f"{origin.removesuffix('.*')} import * (names cannot be traced)")
            if _is_inductor(origin) or _classify(origin) == "raw_stream":
                internal.append(name if isinstance(st, ast.ImportFrom) or alias.asname else origin)
                if isinstance(st, ast.Import) and not alias.asname and not self.has_import_torch:
                    keep.append(ast.alias(name="torch"))  # `import torch._inductor.x` also bound torch
                    self.has_import_torch = True
                continue
            if module not in ALLOWED_IMPORTS:
                if name not in self.used_loads:
                    unused.append(name)
                    continue
                imported = alias.name if isinstance(st, ast.Import) else st.module
                raise self._reject(st, f"imports {imported}, which a standalone kernel does not need")
            keep.append(alias)
        for name in internal:
            self._note("removed imports of torch internals", name)
        for name in unused:
            self._note("removed unused imports of modules a kernel may not import", name)
        if len(keep) == len(st.names):
            return 1
        if not keep:
            return int(self._remove_stmt(st))
        if isinstance(st, ast.Import):
            new: ast.stmt = ast.Import(names=keep)
        else:
            new = ast.ImportFrom(module=st.module, names=keep, level=0)
        self._replace(st, ast.unparse(new))
        return 1

    def _assign(self, st: ast.Assign, ctx: _Ctx) -> int:
        target = st.targets[0] if len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) else None
        if target is not None and ctx.func is None and not ctx.class_body:
            origin = self._resolve_value(st.value)
            if origin and (_is_inductor(origin) or _classify(origin) == "raw_stream"):
                self.removed_globals.add(target.id)
                self._note("removed module-level aliases of torch internals", target.id)
                return int(self._remove_stmt(st))
            if origin and origin.startswith("torch.ops.") and target.id not in self.used_loads:
                self._note("removed unused module-level aliases", target.id)
                return int(self._remove_stmt(st))
        if (
            target is not None
            and isinstance(st.value, ast.Call)
            and self._kind(st.value.func)[1] == "raw_stream"
        ):
            self.removed_vars.add(target.id)
            self._note("removed get_raw_stream(...) calls")
            return int(self._remove_stmt(st))
        self._generic(st, ctx)
        return 1

    def _function(self, st: _Def, ctx: _Ctx) -> None:
        decorators: list[ast.expr] = []
        inductor: list[ast.expr] = []
        for deco in st.decorator_list:
            kind = self._kind(deco.func if isinstance(deco, ast.Call) else deco)[1]
            (inductor if kind and kind.startswith("triton_heuristics") else decorators).append(deco)
        if inductor:
            has_jit = any(
                self._resolve(d.func if isinstance(d, ast.Call) else d) == "triton.jit" for d in decorators
            )
            for i, deco in enumerate(inductor):
                self._note("removed Inductor's @triton_heuristics decorators")
                if i == 0 and not has_jit:
                    self._replace(deco, f"{self._use('triton')}.jit")
                    self._note(f"added @triton.jit to {st.name}")
                elif self._whole_lines(deco, prefix="@"):
                    self._remove_lines(deco.lineno, deco.end_lineno or deco.lineno)
                else:
                    raise self._reject(deco, "cannot remove this decorator: it shares its line")
        for deco in decorators:
            self._expr(deco, ctx)
        self._generic(st.args, ctx)
        if st.returns:
            self._expr(st.returns, ctx)
        inner = _Ctx(func=st, params=self._params(st, ctx.class_body), inline=st.body[0].lineno == st.lineno)
        self._block(st.body, inner)
        if inner.needs_device and not inner.inline:
            body = st.body
            first = body[1] if len(body) > 1 and self._is_docstring(body[0]) else body[0]
            self.inserts.insert(0, (first.lineno, f"_kz_device = _kz_device_of({inner.params})"))

    @staticmethod
    def _is_docstring(st: ast.stmt) -> bool:
        return (
            isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Constant)
            and isinstance(st.value.value, str)
        )

    def _params(self, st: _Def, method: bool) -> str:
        a = st.args
        names = [p.arg for p in a.posonlyargs + a.args]
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in st.decorator_list)
        if method and names and not static:
            names = names[1:] + names[:1]  # self (or cls) last: the arguments say more about the device
        if a.vararg:
            names.append(a.vararg.arg)
        names += [p.arg for p in a.kwonlyargs]
        if a.kwarg:
            names.append(a.kwarg.arg)
        return ", ".join(names)

    def _class(self, st: ast.ClassDef, ctx: _Ctx) -> None:
        if st.name in self.rename:
            new = self.rename[st.name]
            start = self._off(st.lineno, st.col_offset)
            match = re.compile(r"class\s+" + re.escape(st.name) + r"\b").match(self.src, start)
            if match is None:
                raise self._reject(st, f"cannot find the name of class {st.name}")
            self._edit(match.end() - len(st.name), match.end(), new)
            if new == self.class_name:
                self._note(f"renamed {st.name} to {new}")
            else:
                self._note(f"renamed the file's own {st.name} (the original module) to {new}")
        for node in [*st.decorator_list, *st.bases, *(k.value for k in st.keywords)]:
            self._expr(node, ctx)
        self._block(st.body, _Ctx(class_body=True))

    def _generic(self, node: ast.AST, ctx: _Ctx) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                if value and all(isinstance(v, ast.stmt) for v in value):
                    self._block(value, ctx)
                    continue
                for item in value:
                    if isinstance(item, ast.AST):
                        self._any(item, ctx)
            elif isinstance(value, ast.AST):
                self._any(value, ctx)

    def _any(self, node: ast.AST, ctx: _Ctx) -> None:
        if isinstance(node, ast.stmt):
            self._stmt(node, ctx)
        elif isinstance(node, ast.expr):
            self._expr(node, ctx)
        else:
            self._generic(node, ctx)

    # ------------------------------------------------------------------
    # Expressions

    def _use(self, name: str) -> str:
        """The module's alias for torch / triton / triton.language, imported if missing."""
        alias = {"torch": self.torch, "triton": self.triton, "tl": self.tl}[name]
        origin = {"torch": "torch", "triton": "triton", "tl": "triton.language"}[name]
        if self.bound.get(alias) != origin and not (name == "torch" and self.has_import_torch):
            self.need_imports.add(name)
        return alias

    def _device(self, ctx: _Ctx) -> str:
        self.need_device_of = True
        self._use("torch")
        self._note("hard-coded CUDA device -> the device of the inputs (_kz_device_of)")
        if ctx.func is None:
            return "_kz_device_of()"
        if ctx.inline:
            return f"_kz_device_of({ctx.params})"
        ctx.needs_device = True
        return "_kz_device"

    def _expr(self, node: ast.expr, ctx: _Ctx) -> None:
        if isinstance(node, ast.Call):
            self._call(node, ctx)
            return
        if isinstance(node, ast.Name):
            if node.id in self.rename:
                self._replace(node, self.rename[node.id])
            if isinstance(node.ctx, ast.Load):
                self._check_ref(node)
                if node.id in _MODULE_NAMES and node.id not in self.all_names:
                    self._use(_MODULE_NAMES[node.id])
                    self._note("added missing imports", node.id)
            return
        if isinstance(node, ast.Attribute):
            qual = self._resolve(node)
            if qual is not None:
                self._check_ref(node)
                root: ast.expr = node
                while isinstance(root, ast.Attribute):
                    root = root.value
                self._expr(root, ctx)
                return
        self._generic(node, ctx)

    def _check_ref(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.removed_vars:
            raise self._reject(node, f"uses {node.id} (Inductor's raw CUDA stream) other than as stream=")
        qual, kind = self._kind(node)
        if qual and (_is_inductor(qual) or kind == "raw_stream"):
            raise self._reject(node, f"uses {qual}, which has no standalone equivalent here")

    def _args(self, call: ast.Call, ctx: _Ctx, skip: tuple[ast.AST, ...] = ()) -> None:
        """Visit a call's arguments; rewrite device= and drop stream= keywords."""
        for arg in call.args:
            if arg not in skip:
                self._expr(arg, ctx)
        launch = isinstance(call.func, ast.Subscript)
        for kw in call.keywords:
            if kw in skip:
                continue
            if kw.arg == "device" and _cuda_literal(kw.value):
                self._replace(kw.value, self._device(ctx))
            elif kw.arg == "stream" and (launch or self._is_stream(kw.value)):
                self._drop_arg(call, kw)
                self._note("removed stream= launch arguments (kernels run on the current stream)")
            else:
                self._expr(kw.value, ctx)

    def _is_stream(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name) and node.id in self.removed_vars:
            return True
        return isinstance(node, ast.Call) and self._kind(node.func)[1] == "raw_stream"

    def _drop_arg(self, call: ast.Call, arg: ast.AST) -> None:
        items = sorted([*call.args, *call.keywords], key=lambda n: self._span(n))
        i = items.index(arg)
        start, end = self._span(arg)
        if i > 0:
            start = self._span(items[i - 1])[1]
        elif i + 1 < len(items):
            end = self._span(items[i + 1])[0]
        self._edit(start, end, "")

    def _call(self, call: ast.Call, ctx: _Ctx) -> None:
        func = call.func
        qual, kind = self._kind(func)
        name = self._dotted(func)
        if kind is None or kind in ("device_guard", "set_device"):
            self._plain_call(call, ctx)
            return
        if kind == "device_ctor":
            type_kw = [k.value for k in call.keywords if k.arg == "type"]
            if (call.args and _cuda_literal(call.args[0])) or (type_kw and _cuda_literal(type_kw[0])):
                self._replace(call, self._device(ctx))
                return
            self._plain_call(call, ctx)
            return
        if kind == "grid":
            if not (isinstance(func, ast.Name) and func.id == self.grid_name):
                self._replace(func, self.grid_name)
            self.used_helpers.add("grid")
            self._note("replaced Inductor's grid(...) with a local grid helper")
        elif kind in ("empty_cuda", "empty_cpu"):
            if len(call.args) != 3 or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
                raise self._reject(call, f"{name}(...) without the (size, stride, dtype) arguments")
            device = self._device(ctx) if kind == "empty_cuda" else '"cpu"'
            self._replace(func, f"{self._use('torch')}.empty_strided")
            dtype = call.args[2]
            self._edit(self._span(dtype)[0], self._span(dtype)[0], "dtype=")
            self._edit(self._span(dtype)[1], self._span(dtype)[1], f", device={device}")
            self._note(f"{name}(size, stride, dtype) -> torch.empty_strided(..., device=...)")
        elif kind == "reinterpret":
            self._replace(func, self.reinterpret_name)
            self.used_helpers.add("reinterpret_tensor")
            self._use("torch")
            self._note("replaced reinterpret_tensor with a local torch.as_strided helper")
        elif kind.startswith("extern:"):
            self._extern(call, kind.split(":", 1)[1], ctx)
            return
        elif kind.startswith("helper:"):
            if self._helper(call, kind.split(":", 1)[1], name, ctx):
                return
        elif kind.startswith(("libdevice:", "tlmath:")):
            fn = kind.split(":", 1)[1]
            if kind.startswith("libdevice:") and fn in _LIBDEVICE_ONLY:
                fn = _LIBDEVICE_ONLY[fn]
            if fn in _TL_DIRECT:
                target = _TL_DIRECT[fn]
                self._replace(func, f"{self._use('tl')}.{target}")
                self._note(f"{name} -> tl.{target}")
            elif fn in _FORMULAS:
                self._replace(func, f"_kz_{fn}")
                self._jit_helper(fn)
                self._note(f"{name} -> _kz_{fn}, a local @triton.jit formula ({_JIT_HELPERS[fn][1]})")
            else:
                raise self._reject(
                    call,
                    f"uses {name}, which triton.language lacks (and tl.extra.cuda.libdevice is not portable: "
                    "it does not run on the CPU interpreter)",
                )
        elif kind == "async:triton":
            raise self._reject(
                call,
                "async_compile.triton(...) builds an Inductor-autotuned kernel from a source string "
                "(its block sizes are chosen at run time), which has no standalone equivalent here",
            )
        elif kind in ("assert", "raw_stream", "noop", "async:wait"):
            raise self._reject(call, f"{name}(...) is used as a value; it can only be dropped as a statement")
        else:
            raise self._reject(call, f"uses {qual}, which has no standalone equivalent here")
        self._args(call, ctx)

    def _plain_call(self, call: ast.Call, ctx: _Ctx) -> None:
        func = call.func
        to_cuda = isinstance(func, ast.Attribute) and func.attr == "cuda" and not call.keywords
        if to_cuda and (not call.args or (len(call.args) == 1 and isinstance(call.args[0], ast.Constant))):
            assert isinstance(func, ast.Attribute)
            if self._resolve(func.value) != "torch":
                self._expr(func.value, ctx)
                self._edit(self._span(func.value)[1], self._span(call)[1], f".to({self._device(ctx)})")
                return
        self._expr(func, ctx)
        skip: tuple[ast.AST, ...] = ()
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "to"
            and call.args
            and _cuda_literal(call.args[0])
        ):
            self._replace(call.args[0], self._device(ctx))
            skip = (call.args[0],)
        self._args(call, ctx, skip)

    def _helper(self, call: ast.Call, fn: str, name: str, ctx: _Ctx) -> bool:
        """triton_helpers.<fn>(...); True when the arguments were already visited."""
        tl = self._use("tl")
        if fn in ("maximum", "minimum"):
            if len(call.args) != 2 or call.keywords:
                raise self._reject(call, f"{name}(...) takes two arguments")
            self._replace(call.func, f"{tl}.{fn}")
            end = self._span(call.args[1])[1]
            self._edit(end, end, f", propagate_nan={tl}.PropagateNan.ALL")
            self._note(f"{name} -> tl.{fn} (NaN-propagating, as Inductor's)")
        elif fn in ("max2", "min2"):
            self._replace(call.func, f"{tl}.{fn[:3]}")
            self._note(f"{name} -> tl.{fn[:3]}")
        elif fn == "promote_to_tensor":
            if len(call.args) != 1 or call.keywords:
                raise self._reject(call, f"{name}(...) takes one argument")
            start, end = self._span(call)
            arg_start, arg_end = self._span(call.args[0])
            self._edit(start, arg_start, "")
            self._edit(arg_end, end, "")
            self._note(f"{name}(x) -> x")
        elif fn == "exp":
            if not 1 <= len(call.args) <= 2 or call.keywords:
                raise self._reject(call, f"{name}(...) takes (x, use_fast_math)")
            self._replace(call.func, f"{tl}.exp")
            if len(call.args) == 2:
                self._edit(self._span(call.args[0])[1], self._span(call.args[1])[1], "")
            self._expr(call.args[0], ctx)
            self._note(f"{name}(x, fast) -> tl.exp(x)")
            return True
        elif fn in _HELPER_COPIES:
            self._replace(call.func, f"_kz_{fn}")
            self._jit_helper(fn)
            self._note(f"{name} -> _kz_{fn}, a local @triton.jit copy of Inductor's helper")
        else:
            raise self._reject(call, f"uses {name}, which has no standalone equivalent here")
        return False

    def _jit_helper(self, fn: str) -> None:
        self._use("tl")
        self._use("triton")
        self.used_helpers.add(fn)
        for dep in _JIT_HELPERS[fn][0]:
            self._jit_helper(dep)

    def _extern(self, call: ast.Call, fn: str, ctx: _Ctx) -> None:
        name = self._dotted(call.func)
        torch = self._use("torch")
        if fn in ("mm", "bmm", "addmm", "baddbmm"):
            self._replace(call.func, f"{torch}.{fn}")
            self._note(f"{name} -> torch.{fn} (this part stays in PyTorch, not Triton)")
            self._args(call, ctx)
            return
        if fn != "convolution":
            raise self._reject(call, f"uses {name}, which has no standalone equivalent here")
        kws = {k.arg: k for k in call.keywords if k.arg}
        expected = {"stride", "padding", "dilation", "transposed", "output_padding", "groups", "bias"}
        if len(call.args) != 2 or len(kws) != len(call.keywords) or not set(kws) <= expected:
            raise self._reject(
                call, f"{name}(...) with arguments other than Inductor's (x, w, stride=..., ...)"
            )
        values = {k: ast.literal_eval(kw.value) for k, kw in kws.items() if self._is_literal(kw.value)}
        stride = values.get("stride")
        dims = len(stride) if isinstance(stride, list | tuple) else 0
        transposed = values.get("transposed", None if "transposed" in kws else False)
        out_pad = values.get("output_padding", None if "output_padding" in kws else 0)
        zero_pad = out_pad == 0 or (isinstance(out_pad, list | tuple) and not any(out_pad))
        if 1 <= dims <= 3 and (transposed is True or (transposed is False and zero_pad)):
            drop = ["transposed"] if transposed else ["transposed", "output_padding"]
            target = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
            self._replace(call.func, f"{torch}.nn.functional.{target}")
            for key in drop:
                if key in kws:
                    self._drop_arg(call, kws[key])
            self._note(f"{name} -> torch.nn.functional.{target} (this part stays in PyTorch, not Triton)")
            self._args(call, ctx, tuple(kws[k] for k in drop if k in kws))
            return
        if set(kws) == expected:
            self._replace(call.func, f"{torch}.convolution")
            self._note(f"{name} -> torch.convolution (this part stays in PyTorch, not Triton)")
            self._args(call, ctx)
            return
        raise self._reject(call, f"uses {name} with arguments that cannot be mapped to torch.nn.functional")

    @staticmethod
    def _is_literal(node: ast.expr) -> bool:
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    # ------------------------------------------------------------------
    # Output

    def _header(self) -> str:
        parts: list[str] = []
        imports = []
        if "torch" in self.need_imports:
            imports.append("import torch")
        if "triton" in self.need_imports:
            imports.append("import triton")
        if "tl" in self.need_imports:
            imports.append(f"import triton.language as {self.tl}")
        aliases = {"torch": self.torch, "triton": self.triton, "tl": self.tl}
        if self.need_device_of:
            parts.append(_helper_source(("_kz_device_of", "_kz_find_device"), aliases))
        if "grid" in self.used_helpers:
            parts.append(_helper_source(("_kz_grid",), {"_kz_grid": self.grid_name}))
        if "reinterpret_tensor" in self.used_helpers:
            renamed = {**aliases, "_kz_reinterpret_tensor": self.reinterpret_name}
            parts.append(_helper_source(("_kz_reinterpret_tensor",), renamed))
        for name in _JIT_HELPERS:  # a fixed order: the output is deterministic
            if name in self.used_helpers:
                parts.append(_helper_source((f"_kz_{name}",), aliases))
        if not parts and not imports:
            return ""
        text = f"\n{_HEADER_OPEN}\n" + "".join(f"{line}\n" for line in imports)
        if parts:
            text += "\n\n" + "\n\n\n".join(parts) + "\n\n"
        return text + f"{_HEADER_CLOSE}\n"

    def _header_position(self, tree: ast.Module) -> int:
        last: ast.stmt | None = None
        for st in tree.body:
            first_docstring = self._is_docstring(st) and st is tree.body[0]
            if isinstance(st, ast.Import | ast.ImportFrom) or first_docstring:
                last = st
            elif not isinstance(st, ast.Assign | ast.Expr):
                break
        if last is None:
            return 0
        return self._line_start((last.end_lineno or last.lineno) + 1)

    def _apply(self, tree: ast.Module) -> str:
        header = self._header()
        if header:
            pos = self._header_position(tree)
            if pos == len(self.src) and self.src and not self.src.endswith("\n"):
                header = "\n" + header
            if pos == 0:
                header = header.lstrip("\n")
            self._edit(pos, pos, header.replace("\n", self.newline))
        for lineno, text in self.inserts:
            indent = self._indent(lineno)
            indent = indent[: len(indent) - self.dedent.get(lineno, 0)]
            pos = self._line_start(lineno)
            self._edit(pos, pos, f"{indent}{text}{self.newline}")
        dedents: list[_Edit] = []
        for lineno, amount in sorted(self.dedent.items()):
            width = min(amount, len(self._indent(lineno)))
            if width:
                pos = self._line_start(lineno)
                dedents.append(_Edit(pos, pos + width, len(self.edits) + len(dedents), ""))
        removals = [e for e in self.edits if e.removal]
        # Edits inside removed statements are moot; so is re-indenting a continuation line that
        # another edit already reaches into (only a statement's first line must be re-indented).
        kept = [
            e
            for e in self.edits
            if e.removal
            or e.start == e.end
            or not any(r.start <= e.start and e.end <= r.end for r in removals)
        ]
        kept += [
            d
            for d in dedents
            if not any(e.start < d.end and d.start < e.end and e.start != e.end for e in kept)
        ]
        kept.sort()
        for a, b in itertools.pairwise(kept):
            if a.end > b.start:
                line = self.src.count("\n", 0, a.start) + 1
                raise _Reject(f"line {line}: overlapping rewrites (please report this file)")
        out = self.src
        for e in reversed(kept):
            out = out[: e.start] + e.text + out[e.end :]
        return out

    def _check_output(self, out: str) -> None:
        try:
            tree = pyast.parse(out)
        except SyntaxError as exc:
            raise _Reject(
                f"the rewritten source does not parse (line {exc.lineno}: {exc.msg}); please report this file"
            ) from None
        check = _Normalizer(out, self.class_name)
        check._collect_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                )
                for module in modules:
                    if _is_inductor(module):
                        raise _Reject(f"the rewritten source still imports {module}; please report this file")
            elif isinstance(node, ast.Name | ast.Attribute):
                qual = check._resolve(node)
                if qual and _is_inductor(qual):
                    raise _Reject(f"the rewritten source still uses {qual}; please report this file")
        if not any(isinstance(n, ast.ClassDef) and n.name == self.class_name for n in tree.body):
            raise _Reject(f"the rewritten source does not define {self.class_name}; please report this file")
