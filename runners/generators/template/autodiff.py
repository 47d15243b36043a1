"""Reverse-mode differentiation of a template kernel's straight-line body, as Triton statements.

The template generator's kernels compute one value per statement, from loads, earlier statements,
scalar arguments and literals, with the Triton expressions of ``ops.py``
(arithmetic, ``tl.exp``, ``tl.where``, ``tl.maximum``, ...), and row reductions (``tl.sum``,
``tl.max``, ``tl.min`` over the lanes of a row, with a template such as ``{r} / n_cols`` around
the reduced value). :func:`adjoints` walks those statements backwards and writes, for each one the
output depends on, the statements that accumulate its adjoint ``d_<name>``: the chain rule applied
to the Python syntax tree of each expression. Plain Python on strings; nothing here runs Triton.

Values are either vectors (a block of lanes: loads and what is computed from them) or per-row
scalars (reductions and what is computed from them alone). A vector's contribution to a scalar's
adjoint is summed over the lanes ``mask`` keeps; a scalar's contribution to a vector broadcasts.
Ties follow torch: ``tl.maximum``/``tl.minimum`` of two values share the gradient equally (as
``torch.maximum``); against a number, the bound passes it (as ``torch.clamp``) except
``tl.maximum(x, 0.0)``, a ReLU, which passes nothing at 0 (a ``clamp_min(0.0)`` spelled so gets
the ReLU's rule); the lanes that attain a row's max or min share it equally (as ``torch.amax``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from runners import pyast


class NoDerivative(Exception):
    """The body uses something without a rule here; the message names it."""


@dataclass
class Stmt:
    """``var = expr``, or with ``reduce``, ``var = template(reduce(where(mask, expr, neutral)))``."""

    var: str
    expr: str
    reduce: str | None = None  # "sum", "max" or "min"
    template: str = "{r}"


def _norm(text: str) -> str:
    """The expression with only the parentheses it needs."""
    return ast.unparse(pyast.parse_expr(text))


def _names(text: str) -> set[str]:
    return {n.id for n in ast.walk(pyast.parse_expr(text)) if isinstance(n, ast.Name)}


# d(value)/d(operand) for functions of one operand: (adjoint g, operand a, value v) -> contribution.
_UNARY_RULES: dict[str, Callable[[str, str, str], str]] = {
    "tl.exp": lambda g, a, v: f"({g}) * ({v})",
    "tl.log": lambda g, a, v: f"({g}) / ({a})",
    "tl.sqrt": lambda g, a, v: f"({g}) * 0.5 / ({v})",
    "tl.rsqrt": lambda g, a, v: f"({g}) * -0.5 * ({v}) / ({a})",
    "tl.sigmoid": lambda g, a, v: f"({g}) * ({v}) * (1.0 - ({v}))",
    "_tanh_of": lambda g, a, v: f"({g}) * (1.0 - ({v}) * ({v}))",
    # d erf(a) / da = 2 / sqrt(pi) * exp(-a^2)
    "tl.erf": lambda g, a, v: f"({g}) * 1.1283791670955126 * tl.exp(-({a}) * ({a}))",
    "tl.abs": lambda g, a, v: f"tl.where(({a}) > 0, {g}, tl.where(({a}) < 0, -({g}), 0.0))",
    "tl.cos": lambda g, a, v: f"-({g}) * tl.sin({a})",
    "tl.sin": lambda g, a, v: f"({g}) * tl.cos({a})",
}


class _Walk:
    def __init__(
        self,
        differentiable: set[str],
        vectors: set[str],
        fresh: Callable[[str], str],
        mask: str,
        block: str,
    ) -> None:
        self.differentiable = differentiable
        self.vectors = set(vectors)
        self.fresh = fresh
        self.mask = mask
        self.block = block
        self.adjoint: dict[str, str] = {}
        self.lines: list[tuple[str, str]] = []

    # -- accumulating -----------------------------------------------------------

    def is_vector(self, text: str) -> bool:
        return bool(_names(text) & self.vectors)

    def add(self, target: str, contribution: str) -> None:
        if target not in self.differentiable:
            return
        vector_target, vector_contribution = target in self.vectors, self.is_vector(contribution)
        if vector_target and not vector_contribution and target not in self.adjoint:
            contribution = f"tl.zeros(({self.block},), dtype=tl.float32) + ({contribution})"
        elif not vector_target and vector_contribution:  # a per-row value used on every lane
            contribution = f"tl.sum(tl.where({self.mask}, {contribution}, 0.0), axis=0)"
        if target in self.adjoint:
            name = self.adjoint[target]
            self.lines.append((name, _norm(f"{name} + ({contribution})")))
            return
        name = self.fresh(f"d_{target}")
        self.adjoint[target] = name
        if vector_target:
            self.vectors.add(name)
        self.lines.append((name, _norm(contribution)))

    # -- the chain rule over one expression ---------------------------------------

    def depends(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.differentiable
        if isinstance(node, ast.Compare | ast.Constant):
            return False  # a comparison's value is piecewise constant
        if isinstance(node, ast.Call):
            args = node.args[1:] if _func(node) == "tl.where" else node.args
            inner = [node.func.value] if isinstance(node.func, ast.Attribute) and _func(node) == ".to" else []
            return any(self.depends(a) for a in [*args, *inner])
        return any(self.depends(c) for c in ast.iter_child_nodes(node))

    def back(self, node: ast.expr, g: str, value: str | None = None) -> None:
        """Propagate the adjoint ``g`` of ``node`` (whose value is the variable ``value``, if named)."""
        if not self.depends(node):
            return
        v = value or ast.unparse(node)
        if isinstance(node, ast.Name):
            self.add(node.id, g)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            self.back(node.operand, f"-({g})" if isinstance(node.op, ast.USub) else g)
        elif isinstance(node, ast.BinOp):
            left, right = ast.unparse(node.left), ast.unparse(node.right)
            if isinstance(node.op, ast.Add):
                self.back(node.left, g)
                self.back(node.right, g)
            elif isinstance(node.op, ast.Sub):
                self.back(node.left, g)
                self.back(node.right, f"-({g})")
            elif isinstance(node.op, ast.Mult):
                self.back(node.left, f"({g}) * ({right})")
                self.back(node.right, f"({left}) * ({g})")
            elif isinstance(node.op, ast.Div):
                self.back(node.left, f"({g}) / ({right})")
                self.back(node.right, f"-({g}) * ({v}) / ({right})")
            else:
                raise NoDerivative(f"no derivative for the operator {type(node.op).__name__} in {v}")
        elif isinstance(node, ast.Call):
            self.call(node, g, v)
        else:
            raise NoDerivative(f"no derivative for {v}")

    def call(self, node: ast.Call, g: str, v: str) -> None:
        func = _func(node)
        args = [ast.unparse(a) for a in node.args]
        if func == ".to" and isinstance(node.func, ast.Attribute):  # a cast: computed in float32 anyway
            self.back(node.func.value, g)
        elif func in _UNARY_RULES and len(node.args) == 1:
            self.back(node.args[0], _UNARY_RULES[func](g, args[0], v))
        elif func in ("tl.maximum", "tl.minimum") and len(node.args) == 2:
            wins = ">" if func == "tl.maximum" else "<"
            a, b = args
            for (mine, other), arg, bound in zip(((a, b), (b, a)), node.args, node.args[::-1], strict=True):
                if self.depends(bound):  # torch.maximum / minimum: ties share the gradient
                    tie = f"tl.where(({mine}) == ({other}), 0.5 * ({g}), 0.0)"
                elif func == "tl.maximum" and other == "0.0":  # relu: nothing at 0, as torch
                    tie = "0.0"
                else:  # a clamp to a number: the bound itself passes the gradient, as torch.clamp
                    tie = f"tl.where(({mine}) == ({other}), {g}, 0.0)"
                self.back(arg, f"tl.where(({mine}) {wins} ({other}), {g}, {tie})")
        elif func == "tl.where" and len(node.args) == 3:
            cond = args[0]
            self.back(node.args[1], f"tl.where({cond}, {g}, 0.0)")
            self.back(node.args[2], f"tl.where({cond}, 0.0, {g})")
        else:
            raise NoDerivative(f"no derivative for {func or ast.unparse(node.func)}")

    # -- statements -----------------------------------------------------------------

    def statement(self, stmt: Stmt) -> None:
        g = self.adjoint.get(stmt.var)
        if g is None:
            return
        expr = pyast.parse_expr(stmt.expr).body
        if stmt.reduce is None:
            self.back(expr, g, stmt.var)
            return
        # var = template(r): the adjoint of r, the reduced value (the template's own value is var).
        template = pyast.parse_expr(stmt.template.format(r="reduced_")).body
        inner = _Walk({"reduced_"}, set(), self.fresh, self.mask, self.block)
        inner.adjoint = {}
        inner.back(template, g, stmt.var)
        if "reduced_" not in inner.adjoint:
            return
        (_, d_reduced), *rest = inner.lines
        if rest or "reduced_" in _names(d_reduced):
            raise NoDerivative(f"no derivative for the reduction template {stmt.template}")
        if stmt.reduce == "sum":
            self.back(expr, d_reduced)
        elif stmt.reduce in ("max", "min"):
            count = self.fresh(f"{stmt.var}_count")
            hit = f"({stmt.expr}) == {stmt.var}"
            self.lines.append((count, _norm(f"tl.sum(tl.where({self.mask} & ({hit}), 1.0, 0.0), axis=0)")))
            self.back(expr, f"tl.where({hit}, ({d_reduced}) / {count}, 0.0)")
        else:
            raise NoDerivative(f"no derivative for the reduction {stmt.reduce}")


def _func(node: ast.Call) -> str:
    if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        return ".to"
    return ast.unparse(node.func)


def adjoints(
    body: list[Stmt],
    output: str,
    seed: str,
    leaves: set[str],
    vectors: set[str],
    constant: set[str],
    fresh: Callable[[str], str],
    mask: str = "mask",
    block: str = "BLOCK_SIZE",
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(statements, adjoint of each leaf that gets one) for the gradient ``seed`` of ``output``.

    ``leaves`` are the loaded values; ``vectors`` the loaded values that are vectors (all, in a
    row kernel) and the index vectors they are read at; ``constant`` the leaves whose values are not
    differentiable (boolean loads); a statement is differentiable where it reads a differentiable
    value, so nothing is written for values computed from indices or constants alone;
    ``fresh`` gives unused names. Raises NoDerivative for anything without a rule."""
    differentiable = leaves - constant
    for s in body:  # what a differentiable value reaches (not a comparison: piecewise constant)
        if s.reduce is None and isinstance(pyast.parse_expr(s.expr).body, ast.Compare):
            continue
        if _names(s.expr) & differentiable:
            differentiable.add(s.var)
    vector = set(vectors)
    for s in body:  # a statement is a vector when it reads one (a reduction is per row)
        if s.reduce is None and _names(s.expr) & vector:
            vector.add(s.var)
    walk = _Walk(differentiable, vector, fresh, mask, block)
    if output not in differentiable:
        return [], {}
    walk.add(output, seed)
    for stmt in reversed(body):
        walk.statement(stmt)
    return walk.lines, {leaf: walk.adjoint[leaf] for leaf in leaves if leaf in walk.adjoint}
