"""Keep the original computation as the path for inputs Triton cannot run on.

A suggestion replaces a class in someone's file; users on CPU must not break.
:func:`with_eager_path` turns a verified-to-be candidate into the code that is
suggested: the candidate's ``forward`` becomes ``_forward_triton``, the
original ``forward`` comes along as ``_forward_eager`` (with any helper
methods and class attributes the candidate lacks), and a new ``forward`` with
the original signature picks one by device, and by whether autograd records::

    def forward(self, x, mask=None):
        tensors = [a for a in (x, mask) if isinstance(a, torch.Tensor)]
        on_gpu = bool(tensors) and all(t.is_cuda for t in tensors)
        records = torch.is_grad_enabled() and (
            any(t.requires_grad for t in tensors)
            or any(p.requires_grad for p in self.parameters())
        )
        if (on_gpu or os.environ.get("TRITON_INTERPRET") == "1") and not records:
            return self._forward_triton(x, mask)
        return self._forward_eager(x, mask)

A Triton launch's output has no autograd history, so a kernel path under training would
silently stop the layer (and everything before it) from learning; the checks compare the
suggestion's input and parameter gradients with the original's.

The result is what the checks run (in the namespace of the original file, as
it will live there), so the code verified is the code suggested; the checks
also run the eager path on CPU tensors.
"""

from __future__ import annotations

import ast
import copy
import textwrap

TRITON = "_forward_triton"
EAGER = "_forward_eager"


class FallbackError(ValueError):
    """The original computation cannot be carried into the candidate; the message says why."""


def _top_class(tree: ast.Module, name: str, what: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise FallbackError(f"{what} defines no top-level class {name}")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


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


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The source of ``node`` with its decorators, dedented."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    end = node.end_lineno or node.lineno
    return textwrap.dedent("\n".join(lines[start - 1 : end]))


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


def _dispatch(original_forward: ast.FunctionDef) -> str:
    call, tensors = _call_and_tensors(original_forward)
    signature = ast.unparse(original_forward.args)
    returns = f" -> {ast.unparse(original_forward.returns)}" if original_forward.returns else ""
    pool = ", ".join(tensors) + ("," if len(tensors) == 1 else "")
    return "\n".join(
        [
            f"def forward({signature}){returns}:",
            "    # Triton kernels run on CUDA tensors (on the CPU only under TRITON_INTERPRET=1);",
            "    # everything else keeps the original computation. So does training: the kernels",
            "    # have no backward, so whenever autograd would record, the original ops run.",
            f"    tensors = [a for a in ({pool}) if isinstance(a, torch.Tensor)]",
            "    on_gpu = bool(tensors) and all(t.is_cuda for t in tensors)",
            "    records = torch.is_grad_enabled() and (",
            "        any(t.requires_grad for t in tensors)",
            "        or any(p.requires_grad for p in self.parameters())",
            "    )",
            '    if (on_gpu or os.environ.get("TRITON_INTERPRET") == "1") and not records:',
            f"        return self.{TRITON}({call})",
            f"    return self.{EAGER}({call})",
        ]
    )


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node


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
    init.body = [_Rename(mapping).visit(stmt) for stmt in init.body]
    init.args, init.returns, init.decorator_list = copy.deepcopy(oa), orig.returns, []
    return ast.unparse(ast.fix_missing_locations(init))


def _imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def with_eager_path(candidate: str, original: str, class_name: str) -> str:
    """``candidate`` with ``original``'s forward kept as the path for non-CUDA inputs."""
    try:
        cand_tree = ast.parse(candidate)
    except SyntaxError as exc:
        raise FallbackError(f"the candidate does not parse (line {exc.lineno}: {exc.msg})") from None
    orig_tree = ast.parse(original)
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
    carried = [_rename_def(_segment(orig_lines, orig_forward), "forward", EAGER)]
    seen: set[int] = set()
    for name, node in _members(orig_cls).items():
        if name in cand_members or name in ("forward", "__init__") or id(node) in seen:
            continue
        seen.add(id(node))
        carried.append(_segment(orig_lines, node))
    carried.append(_dispatch(orig_forward))

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
    lines[end:end] = ["", *block.splitlines()]

    missing = [m for m in ("os", "torch") if m not in _imports(cand_tree)]
    first = min((n.lineno for n in cand_tree.body if isinstance(n, ast.Import | ast.ImportFrom)), default=1)
    lines[first - 1 : first - 1] = [f"import {m}" for m in missing]
    out = "\n".join(lines) + "\n"
    try:
        ast.parse(out)
    except SyntaxError as exc:  # e.g. a class body indented with tabs
        raise FallbackError(f"combining gave invalid code (line {exc.lineno}: {exc.msg})") from None
    return out
