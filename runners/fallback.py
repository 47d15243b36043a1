"""The original path: the original computation kept beside the kernel, for inputs Triton cannot run on.

A suggestion replaces a class in someone's file; users on CPU must not break.
:func:`with_original_path` turns a verified-to-be candidate into the code that is
suggested: the candidate's ``forward`` becomes ``_forward_triton``, the
original ``forward`` comes along as ``_forward_eager``, the original path (with any helper
methods and class attributes the candidate lacks), and a new ``forward`` with
the original signature picks one by device, and by whether autograd records::

    def forward(self, x, mask=None):
        if torch.compiler.is_compiling():  # only when the launches are not custom ops
            return self._forward_eager(x, mask)
        tensors = [a for a in (x, mask) if isinstance(a, torch.Tensor)]
        on_gpu = len(tensors) > 0 and all(t.is_cuda for t in tensors)
        records = torch.is_grad_enabled() and (
            any(t.requires_grad for t in tensors)
            or any(p.requires_grad for p in self.parameters())
        )
        if (on_gpu or os.environ.get("TRITON_INTERPRET") == "1") and not records:
            return self._forward_triton(x, mask)
        return self._forward_eager(x, mask)

A Triton launch's output has no autograd history, so a kernel path under training would
silently stop the layer (and everything before it) from learning. A candidate whose ``forward``
applies an ``autograd.Function`` of its file that defines ``backward`` (:func:`has_backward`: the
template generator writes one per kernel, its backward a fused Triton kernel) brings its own
gradients: its suggestion takes the kernel path whether autograd records or not, and drops the
``records`` test. Either way the checks compare the suggestion's input and parameter gradients with
the original's; when a candidate's backward is wrong, :func:`drop_backward` gives the same code
without it, suggested with the original path under training.

A kernel specialised to some instances or inputs says so in leading guards of its ``forward``
(``if self.weight.dtype != torch.float32: raise NotImplementedError(...)``, as the template generator
writes them): in the suggestion each guard returns ``self._forward_eager(...)`` instead, so a model in
another dtype, or a dropout in training mode, gets the original computation rather than an error.

Under ``torch.compile`` Dynamo cannot trace a plain Triton launch: unless the candidate registers
its launches as custom ops (:func:`registers_ops`; the template generator does), the compiled module
is the original computation, which Inductor compiles itself. The judge calls every suggestion through
``torch.compile(fullgraph=True)``, so either way what a compiled model gets is checked.

The result is what the checks run (in the namespace of the original file, as
it will live there), so the code verified is the code suggested; the checks
also run the original path on CPU tensors.
"""

from __future__ import annotations

import ast
import copy
import re
import textwrap

from runners import pyast
from runners.source import Rename, loaded_names, method, segment, top_class

TRITON = "_forward_triton"
EAGER = "_forward_eager"


KERNELIZED = (
    "Already kernelized: it has Kernelize's layout (`_forward_triton` beside the original "
    "`_forward_eager`), so there is nothing to generate. A suggestion applied unchanged is "
    "recognised on the pull request; code edited since is not verified by Kernelize"
)


def is_kernelized(source: str, class_name: str) -> bool:
    """Whether top-level ``class_name`` in ``source`` already has the layout
    :func:`with_original_path` gives (both paths beside a dispatching ``forward``)."""
    try:
        cls = _top_class(pyast.parse(source), class_name, "the file")
    except (SyntaxError, FallbackError):
        return False
    return all(_method(cls, name) is not None for name in ("forward", TRITON, EAGER))


class FallbackError(ValueError):
    """The original computation cannot be carried into the candidate; the message says why."""


def _top_class(tree: ast.Module, name: str, what: str) -> ast.ClassDef:
    cls = top_class(tree, name)
    if cls is None:
        raise FallbackError(f"{what} defines no top-level class {name}")
    return cls


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    fn = method(cls, name)
    return fn if isinstance(fn, ast.FunctionDef) else None


def _members(cls: ast.ClassDef) -> dict[str, ast.stmt]:
    """Methods and simple class attributes by name."""
    out: dict[str, ast.stmt] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for t in node.targets:
                out[t.id] = node  # type: ignore[attr-defined]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node
    return out


def _decorators(lines: list[str], fn: ast.FunctionDef) -> list[str]:
    """The source lines of ``fn``'s decorators, dedented."""
    if not fn.decorator_list:
        return []
    start = min(d.lineno for d in fn.decorator_list)
    return textwrap.dedent("\n".join(lines[start - 1 : fn.lineno - 1])).splitlines()


def _rename_def(text: str, old: str, new: str) -> str:
    """Rename the ``def`` line of a dedented function source."""
    out = []
    done = False
    for line in text.splitlines():
        stripped = line.lstrip()
        if not done and stripped.startswith(("def ", "async def ")):
            line = line.replace(f"def {old}(", f"def {new}(", 1)
            done = True
        out.append(line)
    return "\n".join(out)


def _call_and_tensors(fn: ast.FunctionDef) -> tuple[str, list[str]]:
    """How to pass ``fn``'s arguments on (``x, mask, *rest, k=k, **kw``), and what may hold tensors."""
    a = fn.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)][1:]  # without self
    parts = list(positional)
    names = list(positional)
    if a.vararg:
        parts.append(f"*{a.vararg.arg}")
    parts.extend(f"{p.arg}={p.arg}" for p in a.kwonlyargs)
    names.extend(p.arg for p in a.kwonlyargs)
    if a.kwarg:
        parts.append(f"**{a.kwarg.arg}")
    tensors = list(names)
    if a.vararg:
        tensors.append(f"*{a.vararg.arg}")
    if a.kwarg:
        tensors.append(f"*{a.kwarg.arg}.values()")
    return ", ".join(parts), tensors


def _dispatch(
    original_forward: ast.FunctionDef, backward: bool, compiles: bool, decorators: list[str]
) -> str:
    call, tensors = _call_and_tensors(original_forward)
    signature = ast.unparse(original_forward.args)
    returns = f" -> {ast.unparse(original_forward.returns)}" if original_forward.returns else ""
    pool = ", ".join(tensors) + ("," if len(tensors) == 1 else "")
    head = [*decorators, f"def forward({signature}){returns}:"]
    if not compiles:
        head += [
            "    # torch.compile cannot trace these kernels' launches (they are not custom ops):",
            "    # compiled, the module is the original computation, which Inductor compiles itself.",
            "    if torch.compiler.is_compiling():",
            f"        return self.{EAGER}({call})",
        ]
    head.append("    # Triton kernels run on CUDA tensors (on the CPU only under TRITON_INTERPRET=1);")
    if backward:
        return "\n".join(
            [
                *head,
                "    # everything else keeps the original computation. Training takes the kernels too:",
                "    # their autograd.Function has a Triton backward.",
                f"    tensors = [a for a in ({pool}) if isinstance(a, torch.Tensor)]",
                "    on_gpu = len(tensors) > 0 and all(t.is_cuda for t in tensors)",
                '    if on_gpu or os.environ.get("TRITON_INTERPRET") == "1":',
                f"        return self.{TRITON}({call})",
                f"    return self.{EAGER}({call})",
            ]
        )
    return "\n".join(
        [
            *head,
            "    # everything else keeps the original computation. So does training: the kernels",
            "    # have no backward, so whenever autograd would record, the original ops run.",
            f"    tensors = [a for a in ({pool}) if isinstance(a, torch.Tensor)]",
            "    on_gpu = len(tensors) > 0 and all(t.is_cuda for t in tensors)",
            "    records = torch.is_grad_enabled() and (",
            "        any(t.requires_grad for t in tensors)",
            "        or any(p.requires_grad for p in self.parameters())",
            "    )",
            '    if (on_gpu or os.environ.get("TRITON_INTERPRET") == "1") and not records:',
            f"        return self.{TRITON}({call})",
            f"    return self.{EAGER}({call})",
        ]
    )


def _guards(fn: ast.FunctionDef) -> list[ast.If]:
    """The leading ``if <cond>: raise NotImplementedError(...)`` statements of a candidate's forward
    (after its docstring): how a kernel specialised to some instances or inputs refuses the others.
    In the suggestion they take the original computation instead of raising."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    out = []
    for stmt in body:
        if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1):
            break
        raised = stmt.body[0]
        exc = raised.exc if isinstance(raised, ast.Raise) else None
        if isinstance(exc, ast.Call):
            exc = exc.func
        if not (isinstance(exc, ast.Name) and exc.id == "NotImplementedError"):
            break
        out.append(stmt)
    return out


def _guard_reason(raised: ast.stmt) -> str:
    """The one-line message a guard raises with, if it is a plain string."""
    exc = raised.exc if isinstance(raised, ast.Raise) else None
    if isinstance(exc, ast.Call) and exc.args and isinstance(exc.args[0], ast.Constant):
        text = str(exc.args[0].value)
        return text if "\n" not in text else ""
    return ""


def _is_function(node: ast.stmt) -> bool:
    """A top-level ``class X(torch.autograd.Function)`` that defines ``backward``."""
    if not isinstance(node, ast.ClassDef):
        return False
    bases = {ast.unparse(b) for b in node.bases}
    if not bases & {"torch.autograd.Function", "autograd.Function", "Function"}:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == "backward" for n in node.body)


def _applied_functions(tree: ast.Module, class_name: str) -> list[ast.ClassDef]:
    """The autograd.Functions with a backward that ``class_name.forward`` applies itself."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and _is_function(n)}
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    forward = _method(cls, "forward") if cls is not None else None
    if forward is None:
        return []
    applied = []
    for n in ast.walk(forward):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "apply"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in functions
            and functions[n.func.value.id] not in applied
        ):
            applied.append(functions[n.func.value.id])
    return applied


_OP_REGISTRARS = frozenset({"custom_op", "triton_op"})


def _callee(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def registers_ops(candidate: str) -> bool:
    """Whether the candidate registers its launches as custom ops: a function decorated with
    ``custom_op`` or ``triton_op`` (torch's ``library``), or with a function of its file that calls one
    (the template generator's ``_custom_op``, whatever a suggestion renamed it to). Then
    torch.compile calls them as ops, and its suggestion keeps the kernel path when compiled. The
    judge's torch.compile calls check it either way."""
    try:
        tree = pyast.parse(candidate)
    except SyntaxError:
        return False
    registrars = set(_OP_REGISTRARS)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(n, ast.Call) and _callee(n) in _OP_REGISTRARS for n in ast.walk(node)
        ):
            registrars.add(node.name)
    return any(
        isinstance(node, ast.FunctionDef) and any(_callee(d) in registrars for d in node.decorator_list)
        for node in ast.walk(tree)
    )


def has_backward(candidate: str, class_name: str) -> bool:
    """Whether the candidate's ``forward`` applies an autograd.Function of its file with a backward:
    then it brings its own gradients, and its suggestion takes the kernel path under training too."""
    try:
        tree = pyast.parse(candidate)
    except SyntaxError:
        return False
    return bool(_applied_functions(tree, class_name))


def drop_backward(candidate: str, class_name: str) -> str:
    """The candidate without the backward of the autograd.Functions its forward applies, nor the
    top-level definitions only those backwards used (their kernels and launch helpers): what is
    suggested when the backward is wrong (the forward is kept; training takes the original path)."""
    tree = pyast.parse(candidate)
    lines = candidate.splitlines()
    cut: list[tuple[int, int]] = []
    unused: set[str] = set()  # names the removed code read
    for fn in _applied_functions(tree, class_name):
        for node in fn.body:
            if isinstance(node, ast.FunctionDef) and node.name == "backward":
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                cut.append((start, node.end_lineno or node.lineno))
                unused |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    for start, end in sorted(cut, reverse=True):
        del lines[start - 1 : end]
    text = "\n".join(lines) + "\n"
    while True:  # then whatever only they used, until nothing more goes
        tree = pyast.parse(text)
        dead = next((n for n in tree.body if _only_for(n, tree, unused, class_name)), None)
        if dead is None:
            return re.sub(r"\n{4,}", "\n\n\n", re.sub(r"\n\s*\n(\s*\n)+(?=    \S)", "\n\n", text))
        unused |= {n.id for n in ast.walk(dead) if isinstance(n, ast.Name)}
        lines = text.splitlines()
        start = min([dead.lineno, *(d.lineno for d in getattr(dead, "decorator_list", []))])
        del lines[start - 1 : dead.end_lineno or dead.lineno]
        text = "\n".join(lines) + "\n"


def _only_for(node: ast.stmt, tree: ast.Module, unused: set[str], class_name: str) -> bool:
    """Whether ``node`` is a top-level definition that removed code read and nothing else reads."""
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        names = {node.name}
    elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        names = {t.id for t in node.targets}  # type: ignore[attr-defined]
    else:
        return False
    if not names <= unused or class_name in names:
        return False
    everywhere, inside = loaded_names(tree), loaded_names(node)
    return all(everywhere.count(name) == inside.count(name) for name in names)


def _init_with_original_signature(cand: ast.FunctionDef, orig: ast.FunctionDef) -> str | None:
    """The candidate's ``__init__`` taking the original's argument names, or None when it already does.

    Generated code often renames constructor arguments (a model sees them positionally); the
    suggestion must keep them, or callers passing them by keyword break.
    """
    ca, oa = cand.args, orig.args
    cnames = [p.arg for p in (*ca.posonlyargs, *ca.args)]
    onames = [p.arg for p in (*oa.posonlyargs, *oa.args)]
    if cnames == onames and [p.arg for p in ca.kwonlyargs] == [p.arg for p in oa.kwonlyargs]:
        return None
    if len(cnames) != len(onames) or ca.kwonlyargs or oa.kwonlyargs or ca.vararg or ca.kwarg:
        raise FallbackError("the candidate's constructor takes different arguments than the original's")
    mapping = dict(zip(cnames, onames, strict=True))
    used = {n.id for n in ast.walk(cand) if isinstance(n, ast.Name)}
    if (used - set(cnames)) & set(onames):
        raise FallbackError("the candidate's constructor uses the original's argument names for other things")
    init = copy.deepcopy(cand)
    init.body = [Rename(mapping).visit(stmt) for stmt in init.body]
    init.args, init.returns, init.decorator_list = copy.deepcopy(oa), orig.returns, []
    return ast.unparse(ast.fix_missing_locations(init))


def _imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def with_original_path(candidate: str, original: str, class_name: str, backward: bool | None = None) -> str:
    """``candidate`` with ``original``'s forward kept as the original path: taken for non-CUDA inputs,
    and for training unless it brings its own backward (``backward``; None: :func:`has_backward`)."""
    try:
        cand_tree = pyast.parse(candidate)
    except SyntaxError as exc:
        raise FallbackError(f"the candidate does not parse (line {exc.lineno}: {exc.msg})") from None
    orig_tree = pyast.parse(original)
    cand_cls = _top_class(cand_tree, class_name, "the candidate")
    orig_cls = _top_class(orig_tree, class_name, "the original file")
    cand_forward = _method(cand_cls, "forward")
    orig_forward = _method(orig_cls, "forward")
    if cand_forward is None:
        raise FallbackError(f"the candidate's {class_name} has no forward method")
    if orig_forward is None:
        raise FallbackError(f"the original {class_name} defines no forward of its own (it inherits it)")
    cand_members = _members(cand_cls)
    for reserved in (TRITON, EAGER):
        if reserved in cand_members or reserved in _members(orig_cls):
            raise FallbackError(f"{class_name} already defines {reserved}")

    orig_lines = original.splitlines()
    # The original forward's decorators (torch.no_grad(), transformers' dynamic_rope_update) wrap the
    # forward that picks a path, so both paths run under them, as the original did.
    carried = [_rename_def(segment(orig_lines, orig_forward, decorators=False), "forward", EAGER)]
    seen: set[int] = set()
    for name, node in _members(orig_cls).items():
        if name in cand_members or name in ("forward", "__init__") or id(node) in seen:
            continue
        seen.add(id(node))
        carried.append(segment(orig_lines, node))
    if backward is None:
        backward = bool(_applied_functions(cand_tree, class_name))
    decorators = _decorators(orig_lines, orig_forward)
    carried.append(_dispatch(orig_forward, backward, registers_ops(candidate), decorators))

    lines = candidate.splitlines()
    indent = " " * cand_forward.col_offset
    cand_init, orig_init = _method(cand_cls, "__init__"), _method(orig_cls, "__init__")
    init = _init_with_original_signature(cand_init, orig_init) if cand_init and orig_init else None
    if init is not None and cand_init is not None:
        if cand_init.lineno > cand_forward.lineno:
            raise FallbackError("the candidate defines __init__ after forward")
        start = min([cand_init.lineno, *(d.lineno for d in cand_init.decorator_list)]) - 1
        stop = cand_init.end_lineno or cand_init.lineno
        new_init = textwrap.indent(init, " " * cand_init.col_offset).splitlines()
        lines[start:stop] = new_init
        shift = len(new_init) - (stop - start)
    else:
        shift = 0
    def_line = cand_forward.lineno - 1 + shift
    lines[def_line] = lines[def_line].replace("def forward(", f"def {TRITON}(", 1)
    if f"def {TRITON}(" not in lines[def_line]:
        raise FallbackError("the candidate's forward signature spans an unusual layout")
    block = "\n\n".join(textwrap.indent(text, indent) for text in carried)
    end = (cand_cls.end_lineno or len(lines)) + shift
    if ast.unparse(cand_forward.args) == ast.unparse(orig_forward.args):
        call = _call_and_tensors(orig_forward)[0]
        for guard in reversed(_guards(cand_forward)):
            raised = guard.body[0]
            start, stop = raised.lineno - 1 + shift, (raised.end_lineno or raised.lineno) + shift
            pad = " " * raised.col_offset
            why = _guard_reason(raised)
            comment = textwrap.wrap(f"{why}; otherwise the original computation", 96) if why else []
            new = [f"{pad}# {line}" for line in comment]
            new.append(f"{pad}return self.{EAGER}({call})")
            lines[start:stop] = new
            end += len(new) - (stop - start)
    lines[end:end] = ["", *block.splitlines()]

    missing = [m for m in ("os", "torch") if m not in _imports(cand_tree)]
    first = min((n.lineno for n in cand_tree.body if isinstance(n, ast.Import | ast.ImportFrom)), default=1)
    lines[first - 1 : first - 1] = [f"import {m}" for m in missing]
    out = "\n".join(lines) + "\n"
    try:
        pyast.parse(out)
    except SyntaxError as exc:  # e.g. a class body indented with tabs
        raise FallbackError(f"combining gave invalid code (line {exc.lineno}: {exc.msg})") from None
    return _keep_the_class_frame(out, orig_lines, orig_cls, class_name)


def _keep_the_class_frame(code: str, orig_lines: list[str], orig_cls: ast.ClassDef, class_name: str) -> str:
    """The original class's frame on the suggested class: its decorators (a registration such as
    ``@use_kernel_forward_from_hub(...)`` must survive), its base classes and its docstring, where
    the generated class has none of its own. Only the computation is the suggestion's to change."""
    lines = code.splitlines()
    tree = pyast.parse(code)
    cls = _top_class(tree, class_name, "the combined code")
    orig_header = orig_lines[orig_cls.lineno - 1]
    body = cls.body[0]
    has_doc = (
        isinstance(body, ast.Expr)
        and isinstance(body.value, ast.Constant)
        and isinstance(body.value.value, str)
    )
    doc = ast.get_docstring(orig_cls, clean=False)
    if doc is not None and not has_doc:
        first = orig_cls.body[0]
        text = orig_lines[first.lineno - 1 : first.end_lineno or first.lineno]
        shift = body.col_offset - first.col_offset
        doc_lines = [(" " * shift + t) if shift > 0 and t.strip() else t for t in text]
        lines[body.lineno - 1 : body.lineno - 1] = [*doc_lines, ""]
    # The original's spelling of the base, where it is nn.Module by a name this code binds too.
    bases = [ast.unparse(b) for b in orig_cls.bases]
    imports = (n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom))
    bound = {a.asname or a.name.split(".")[0] for n in imports for a in n.names}
    plain = len(bases) == 1 and bases[0] in ("nn.Module", "torch.nn.Module", "Module")
    one_line = orig_header.rstrip().endswith(":") and lines[cls.lineno - 1].rstrip().endswith(":")
    one_line = one_line and orig_header.lstrip().startswith(f"class {class_name}(")
    if plain and bases[0].split(".")[0] in bound and one_line and not orig_cls.keywords:
        lines[cls.lineno - 1] = orig_header
    if orig_cls.decorator_list and not cls.decorator_list:
        start = min(d.lineno for d in orig_cls.decorator_list)
        lines[cls.lineno - 1 : cls.lineno - 1] = orig_lines[start - 1 : orig_cls.lineno - 1]
    out = "\n".join(lines) + "\n"
    try:
        pyast.parse(out)
    except SyntaxError:  # an unusual layout: the generated frame stands
        return code
    return out
