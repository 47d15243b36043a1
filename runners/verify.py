"""Correctness and honesty checks for one candidate (runs inside the sandbox).

A suggestion promises a drop-in replacement, so a candidate must pass all of:

1. it imports and builds with the original constructor arguments, and the
   reference's ``state_dict`` loads into it;
2. it matches a float64 reference on fresh random inputs for several seeds,
   within the per-dtype tolerance table, with shape, dtype and device equal
   and no NaN/Inf the reference lacks;
3. it matches on other shapes than the example and, when it carries the
   original path (the original computation, see ``runners/fallback.py``), on
   CPU tensors too;
4. it leaves its inputs alone and returns fresh outputs (outputs are poisoned
   between calls and the result re-checked at the end, after timing);
5. it launches Triton kernels, and does not still run every PyTorch compute
   op of the original (that kernel would be decoration);
6. it starts no threads, uses no side streams, and patches nothing in torch,
   the timers or this checker;
7. it stays inside its limits (enforced by the sandbox).

``prepare`` runs the reference alone, once per module; ``evaluate`` runs one
candidate. Both return plain dicts for the pipe.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.machinery
import importlib.util
import inspect
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch._library import custom_ops
from torch.utils._python_dispatch import TorchDispatchMode

from runners import bench, inputs, pyast
from runners.buffers import HarnessError
from runners.screen import screen_source
from runners.tolerances import TOLERANCES

SEEDS = (0, 1, 2)


# aten ops that move or allocate memory rather than compute.
NON_COMPUTE_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones
    ones_like full full_like new_zeros new_ones new_full scalar_tensor arange view
    _unsafe_view reshape as_strided t transpose permute expand expand_as unsqueeze
    squeeze select slice split split_with_sizes chunk unbind narrow detach alias
    contiguous clone copy_ _to_copy to lift_fresh lift_fresh_copy set_ fill_ zero_
    resize_ _local_scalar_dense item is_same_size _reshape_alias view_as flatten
    unflatten movedim
    """.split()
)


class Reject(Exception):
    """An honesty rule is broken."""


class Mismatch(Exception):
    """The candidate computes something else."""


# ---------------------------------------------------------------------------
# Loading


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles from the source every time: never reads a ``.pyc`` beside it, never writes one."""

    def path_stats(self, path: str) -> Any:
        raise OSError("bytecode is not used for the repository's files")


class _SourceOnlyFinder:
    """Imports of files under ``roots`` (the repository, the problem's folder) go through
    :class:`_SourceOnlyLoader`: an earlier runner may have planted a ``__pycache__/*.pyc`` whose
    header matches the source's size and time, which Python would otherwise run instead."""

    def __init__(self) -> None:
        self.roots: list[Path] = []
        # Installed packages (a virtualenv may sit inside the repository) keep their bytecode.
        self.installed = [Path(p).resolve() for p in {sys.prefix, sys.exec_prefix, sys.base_prefix}]

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        origin = Path(spec.origin or "").resolve()
        if not any(origin.is_relative_to(root) for root in self.roots):
            return None
        if any(origin.is_relative_to(p) for p in self.installed) or PROJECT in origin.parents:
            return None
        spec.loader = _SourceOnlyLoader(spec.loader.name, spec.loader.path)
        return spec


PROJECT = Path(__file__).resolve().parent  # this package: imported already, never the PR's code
_SOURCE_ONLY = _SourceOnlyFinder()


def ignore_planted_bytecode(*roots: str | Path) -> None:
    """From now on, files under ``roots`` are compiled from their source (see _SourceOnlyFinder)."""
    if _SOURCE_ONLY not in sys.meta_path:
        sys.meta_path.insert(0, _SOURCE_ONLY)
    for root in roots:
        resolved = Path(root).resolve()
        if resolved not in _SOURCE_ONLY.roots:
            _SOURCE_ONLY.roots.append(resolved)


def load_file_module(path: str, root: str | None, name_hint: str) -> Any:
    """Import a file by its dotted name, so relative imports and the package's other modules
    resolve: under the folder its package hangs from (the nearest one above without an
    ``__init__.py``: a ``src/`` layout, an installed package), else under ``root``; a loose file
    outside both by its path."""
    from runners.sandbox import package_root

    file = Path(path).resolve()
    package = package_root(str(file))
    ignore_planted_bytecode(file.parent, *([root] if root else []), *([package] if package else []))
    for base in (package, root):
        if not base:
            continue
        base_path = Path(base).resolve()
        if str(base_path) not in sys.path:
            sys.path.insert(0, str(base_path))
        try:
            rel = file.relative_to(base_path).with_suffix("")
        except ValueError:
            continue
        if all(p.isidentifier() for p in rel.parts):
            return importlib.import_module(".".join(rel.parts))
    spec = importlib.util.spec_from_file_location(
        name_hint, file, loader=_SourceOnlyLoader(name_hint, str(file))
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name_hint] = module
    spec.loader.exec_module(module)
    return module


def load_in_namespace(path: str, file_module: Any, name: str, whole_file: bool = False) -> Any:
    """Run ``path`` in a copy of ``file_module``'s globals: the code as it will live in that file.
    ``whole_file``: ``path`` is that whole file (every suggestion applied), run from the top in a
    namespace of its own, as importing it would (only the package is ``file_module``'s)."""
    import types

    module = types.ModuleType(name)
    module.__dict__.update(
        {
            k: v
            for k, v in vars(file_module).items()
            if k == "__package__" or not (whole_file or k.startswith("__"))
        }
    )
    module.__file__ = str(Path(path).resolve())
    sys.modules[name] = module
    code = compile(Path(path).read_text(encoding="utf-8"), module.__file__, "exec")
    exec(code, module.__dict__)
    return module


def build_module(cls: type, args: list[Any], kwargs: dict[str, Any], device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    module = cls(*args, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{cls.__name__}(...) is not an nn.Module")
    return module.to(device).eval()


def flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in flatten(out[k])]
    return []


def describe_exc(exc: BaseException, where: str) -> str:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return f"{where}: {last}"[:600]


# ---------------------------------------------------------------------------
# Instrumentation: Triton launches and the aten ops that run outside them


class _Probe:
    def __init__(self) -> None:
        self.launches = 0
        self.in_kernel = 0
        self.ops: list[str] = []


PROBE = _Probe()


def _install_triton_counter() -> None:
    """Count every Triton launch (compiled or interpreted); ops inside a launch are not PyTorch's."""
    classes = []
    from triton.runtime.jit import JITFunction

    classes.append(JITFunction)
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - older Triton
        pass
    for cls in classes:
        if getattr(cls.run, "_kernelize_counter", False):
            continue
        original = cls.run

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):
                PROBE.launches += 1
            PROBE.in_kernel += 1
            try:
                return _original(self, *args, **kwargs)
            finally:
                PROBE.in_kernel -= 1

        counted._kernelize_counter = True  # type: ignore[attr-defined]
        cls.run = counted


class OpRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        inner = None if PROBE.in_kernel else _custom_op_body(func)
        if inner is not None:
            # A custom op (torch's library.custom_op) is the kernel's wrapper, not PyTorch's compute:
            # its own body runs under the recorder instead, so what it calls is recorded.
            with self:
                return inner(*args, **(kwargs or {}))
        if not PROBE.in_kernel:
            PROBE.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _custom_op_body(func: Any) -> Any:
    """The Python function behind a ``custom_op`` (torch's ``library``) with one implementation for
    every device, or None (aten ops; ops registered otherwise, which are recorded by name)."""
    if getattr(func, "namespace", "aten") in ("aten", "prims"):
        return None
    opdef = custom_ops.OPDEFS.get(func._schema.name)
    if opdef is None or set(opdef._backend_fns) - {None}:  # None: the one for every device
        return None
    return opdef._init_fn


def compute_ops(ops: list[str]) -> list[str]:
    return sorted(
        {op.rstrip("_") for op in ops if op not in NON_COMPUTE_OPS and op.rstrip("_") not in NON_COMPUTE_OPS}
    )


@contextmanager
def recording() -> Iterator[None]:
    PROBE.launches, PROBE.ops = 0, []
    with OpRecorder():  # type: ignore[no-untyped-call]
        yield


# ---------------------------------------------------------------------------
# Runtime integrity (the static screen is runners/screen.py)


def _watched() -> dict[str, Any]:
    import triton

    mods: dict[str, Any] = {
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.nn.functional": torch.nn.functional,
        "torch.nn.Module": torch.nn.Module,
        "torch.cuda": torch.cuda,
        "torch.testing": torch.testing,
        "time": time,
        "threading": threading,
        "threading.Thread": threading.Thread,
        "builtins": builtins,
        "triton": triton,
        "runners.verify": sys.modules[__name__],
        "runners.bench": bench,
    }
    if hasattr(triton, "testing"):
        mods["triton.testing"] = triton.testing
    # The timing harness's classes, the reply classes that carry its answers to the judge, and the
    # CUDA events and streams it times with: patched through ``type.__setattr__``, a module
    # snapshot would not see them.
    from runners import protocol

    for cls in (
        bench.Clock,
        bench.Projector,
        bench.Feed,
        bench.TrainingFeed,
        protocol.RunReply,
        protocol.TimingReply,
        protocol.CallReply,
        torch.cuda.Event,
        torch.cuda.Stream,
    ):
        mods[f"{cls.__module__}.{cls.__qualname__}"] = cls
    from runners import bounds

    mods.update(bounds.watched())
    return mods


def _callables(obj: Any) -> dict[str, int]:
    """Identities of the callables reachable on ``obj``; for classes, inherited ones too,
    so shadowing ``Tensor.abs`` (defined on ``TensorBase``) with a new attribute is seen."""
    if isinstance(obj, type):
        out = {}
        for name in dir(obj):
            try:
                value = inspect.getattr_static(obj, name)
            except AttributeError:
                continue
            if callable(value) or isinstance(value, staticmethod | classmethod | property):
                out[name] = id(value)
        return out
    return {k: id(v) for k, v in list(vars(obj).items()) if callable(v)}


def settle_torch_patches() -> None:
    """Let torch patch what it patches on its own first use (torch.compile's first call tags every
    new nn.Module through a wrapped ``Module.__init__``), so the snapshot taken next does not count
    the compile baseline's own patching against the candidate."""
    import torch._dynamo  # noqa: F401 (importing it patches torch too: before the snapshot)

    try:
        from torch._dynamo.mutation_guard import install_generation_tagging_init
    except ImportError:  # pragma: no cover - other torch versions
        return
    install_generation_tagging_init()


def snapshot() -> dict[str, dict[str, int]]:
    """Identities of the callables we rely on (module state like ``torch.cuda._initialized`` may change)."""
    return {name: _callables(obj) for name, obj in _watched().items()}


def patched_since(before: dict[str, dict[str, int]]) -> str | None:
    for name, obj in _watched().items():
        now = _callables(obj)
        for key, ident in before.get(name, {}).items():
            if key not in now:
                return f"{name}.{key} was deleted"
            if now[key] != ident and not (key.startswith("__") and not isinstance(obj, type)):
                return f"{name}.{key} was replaced (monkey-patching)"
    return None


def comparison_still_works(device: str) -> None:
    """A tamper canary: a comparison that must fail. If it passes, the checker was subverted."""
    ref = torch.linspace(1.0, 2.0, 64, device=device)
    try:
        compare(ref + 1, ref.double(), ref, "self-test", False, device)
    except Mismatch:
        return
    raise Reject("check 6: the checker's own comparison was tampered with")


# ---------------------------------------------------------------------------
# Comparison


@dataclass
class Errors:
    max_abs: float = 0.0
    max_rel: float = 0.0

    def add(self, other: Errors) -> None:
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)


def tolerance_key(dtype: torch.dtype, tf32: bool) -> str:
    name = str(dtype).removeprefix("torch.")
    if name == "float32" and tf32:
        return "float32 (tf32)"
    return name


def compare(
    got: Any,
    ref64: Any,
    native: Any,
    where: str,
    tf32: bool,
    device: str,
    table: dict[str, tuple[float, float, float]] | None = None,
    own: Sequence[tuple[float, float]] = (),
) -> Errors:
    """Raise Mismatch (or Reject) with evidence unless ``got`` matches the reference.

    ``table``: the tolerance table to use (default: this process's ``TOLERANCES``). ``own``: where
    the reference is the original in its own dtype (``ref64`` is ``native``, so its own error cannot
    be seen here), that error as measured on another family, per output (:func:`own_error`)."""
    g, r, n = flatten(got), flatten(ref64), flatten(native)
    if len(g) != len(r):
        raise Mismatch(f"{where}: returned {len(g)} tensor(s), the original returns {len(r)}")
    errors = Errors()
    for i, (gt, rt, nt) in enumerate(zip(g, r, n, strict=True)):
        label = f"output {i}" if len(g) > 1 else "output"
        if tuple(gt.shape) != tuple(nt.shape):
            raise Mismatch(f"{where}: {label} shape {tuple(gt.shape)} != {tuple(nt.shape)}")
        if gt.dtype != nt.dtype:
            raise Mismatch(f"{where}: {label} dtype {gt.dtype} != {nt.dtype}")
        if gt.device.type != torch.device(device).type:
            raise Mismatch(f"{where}: {label} is on {gt.device}, expected {device}")
        if not gt.is_floating_point():
            if not torch.equal(gt.cpu(), nt.cpu()):
                raise Mismatch(f"{where}: {label} differs in {int((gt != nt).sum())} element(s)")
            continue
        ratio = own[i] if i < len(own) else (0.0, 0.0)
        errors.add(_compare_float(gt, rt, nt, f"{where}: {label}", tf32, table or TOLERANCES, ratio))
    return errors


def own_error(native: torch.Tensor, ref64: torch.Tensor) -> tuple[float, float]:
    """The original's own rounding error in its dtype against its float64 reference, relative to the
    reference's size: (largest absolute error over the reference's RMS, relative L2 error), over the
    elements finite in both; (0, 0) where none is."""
    count, worst = 0, 0.0
    sum_r2, sum_e2 = _SquareSum(), _SquareSum()
    for _, n, r, _ in _chunks(native, ref64, native):
        ok = torch.isfinite(n) & torch.isfinite(r)
        e, rv = (n - r).abs()[ok], r[ok]
        if e.numel() == 0:
            continue
        count += e.numel()
        worst = max(worst, float(e.max()))
        sum_r2.add(rv, float(rv.abs().max()))
        sum_e2.add(e, float(e.max()))
    if count == 0 or sum_r2.norm() == 0.0:
        return 0.0, 0.0
    return worst / sum_r2.rms(count), sum_e2.over(sum_r2)


COMPARE_CHUNK = 1 << 22  # elements per step: a few float64 chunks at a time, whatever the size


def _chunks(gt: torch.Tensor, rt: torch.Tensor, nt: torch.Tensor) -> Iterator[tuple[int, Any, Any, Any]]:
    """(offset, got, reference, native) as float64, chunk by chunk over the flattened tensors."""
    g, r, n = gt.detach().reshape(-1), rt.detach().reshape(-1), nt.detach().reshape(-1)
    for start in range(0, g.numel(), COMPARE_CHUNK):
        stop = start + COMPARE_CHUNK
        yield (
            start,
            g[start:stop].double(),
            r[start:stop].to(g.device).double(),
            n[start:stop].to(g.device).double(),
        )


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else 0)
        flat //= max(size, 1)
    return tuple(reversed(out))


class _SquareSum:
    """A sum of squares kept as ``scale**2 * ssq`` (as LAPACK's dnrm2 does), so a reference whose
    squares pass float64's range (magnitudes past ~1e154) still has a finite RMS and L2 norm: summed
    plainly, they became infinite, and the bounds built on them let every element through."""

    def __init__(self) -> None:
        self.scale = 0.0
        self.ssq = 0.0

    def add(self, v: torch.Tensor, largest: float, plain: float | None = None) -> None:
        """Add the squares of ``v``, whose largest magnitude is ``largest``; ``plain``: their sum
        already taken, if it is. Non-finite values (the original overflowing in its own dtype where
        float64 does not) add nothing."""
        if not math.isfinite(largest):
            v = v[torch.isfinite(v)]
            largest, plain = (float(v.abs().max()) if v.numel() else 0.0), None
        if largest == 0.0:
            return
        plain = float(torch.dot(v, v)) if plain is None else plain
        square = largest * largest
        if math.isfinite(plain) and math.isfinite(square) and square > 0.0:
            part = plain / square
        else:  # the squares overflow (or underflow): sum them scaled
            scaled = v / largest
            part = float(torch.dot(scaled, scaled))
        if largest > self.scale:
            self.ssq = self.ssq * (self.scale / largest) ** 2 + part
            self.scale = largest
        else:
            self.ssq += part * (largest / self.scale) ** 2

    def norm(self) -> float:
        return self.scale * math.sqrt(self.ssq)

    def rms(self, count: int) -> float:
        """The root mean square over ``count`` values (the norm over sqrt(count), never overflowing)."""
        return self.scale * math.sqrt(self.ssq / count)

    def over(self, other: _SquareSum) -> float:
        """This norm over ``other``'s (positive)."""
        if self.scale == 0.0:
            return 0.0
        return (self.scale / other.scale) * math.sqrt(self.ssq / other.ssq)


def _compare_float(
    gt: torch.Tensor,
    rt: torch.Tensor,
    nt: torch.Tensor,
    where: str,
    tf32: bool,
    table: dict[str, tuple[float, float, float]],
    own_ratio: tuple[float, float] = (0.0, 0.0),
) -> Errors:
    """Two streaming passes (statistics, then bounds), so a tensor of several GiB never needs more
    than a few float64 chunks beside it. ``own_ratio``: the original's own error measured elsewhere
    (:func:`own_error`), for a reference that is the original in its own dtype: the candidate may
    then differ from it by its own allowance (twice that error) plus the original's (once)."""
    key = tolerance_key(gt.dtype, tf32)
    atol, rtol, l2tol = table.get(key, table["float32"])
    count = 0
    own = max_abs = max_rel = 0.0
    sum_r2, sum_d2, sum_own2 = _SquareSum(), _SquareSum(), _SquareSum()
    finite: set[int] = set()  # the chunks where both are finite everywhere: no masks needed
    for start, g, r, n in _chunks(gt, rt, nt):
        d = (g - r).abs()
        squares = float(torch.dot(d, d))  # NaN or infinite where either has a NaN or an infinity
        d2 = squares if math.isfinite(squares) else None
        if d2 is not None:
            finite.add(start)
            diff, rv, nv = d, r, (n - r).abs()
        else:
            ref_bad, got_bad = ~torch.isfinite(r), ~torch.isfinite(g)
            # The original's own value where it overflows in its own dtype and float64 does not:
            # what the user's module gives there, so the candidate may give it too.
            as_native = ~ref_bad & ~torch.isfinite(n) & ((g == n) | (g.isnan() & n.isnan()))
            new_bad = got_bad & ~ref_bad & ~as_native
            if bool(new_bad.any()):
                idx = _unravel(start + int(torch.nonzero(new_bad)[0][0]), tuple(gt.shape))
                raise Mismatch(f"{where}: NaN/Inf at index {idx} where the original is finite")
            same_special = torch.where(ref_bad, (g == r) | (g.isnan() & r.isnan()), True)
            if not bool(same_special.all()):
                raise Mismatch(f"{where}: NaN/Inf pattern differs from the original")
            ok = ~ref_bad & ~as_native
            if not bool(ok.any()):
                continue
            diff, rv, nv = d[ok], r[ok], (n - r).abs()[ok]
        count += diff.numel()
        # The original in its own dtype is allowed its own rounding error; the candidate twice that.
        # Where it overflowed (float64 did not), it says nothing of its rounding: left out.
        largest = float(nv.max())
        if not math.isfinite(largest):
            finite_nv = nv[torch.isfinite(nv)]
            largest = float(finite_nv.max()) if finite_nv.numel() else 0.0
        own = max(own, largest)
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / rv.abs().clamp_min(atol)).max()))
        sum_r2.add(rv, float(rv.abs().max()))
        sum_d2.add(diff, float(diff.max()), d2)
        sum_own2.add(nv, float(nv.max()))
    if count == 0:
        return Errors()
    errors = Errors(max_abs, max_rel)
    # Rounding in a reduction scales with the output's overall size, not with each element's:
    # a 4096-deep TF32 dot product is off by ~0.28 on an output near zero when the RMS is 64.
    rms = sum_r2.rms(count)
    atol_eff = max(atol, 2 * own, 3 * own_ratio[0] * rms)
    over_count, worst, example = 0, -math.inf, (0.0, 0.0)
    for start, g, r, _n in _chunks(gt, rt, nt):
        if start in finite:
            gv, rv = g, r
        else:  # the special values, vetted above, left out
            ok = torch.isfinite(r) & torch.isfinite(g)
            if not bool(ok.any()):
                continue
            gv, rv = g[ok], r[ok]
        excess = (gv - rv).abs() - (atol_eff + rtol * rv.abs().clamp_min(rms))
        over = excess > 0
        if bool(over.any()):
            over_count += int(over.sum())
            at = int(torch.argmax(excess))
            if float(excess[at]) > worst:
                worst, example = float(excess[at]), (float(gv[at]), float(rv[at]))
    if over_count:
        raise Mismatch(
            f"{where}: max abs error {max_abs:.3g} > tol {atol_eff:.3g} + {rtol:g}*max(|ref|, rms {rms:.3g}) "
            f"({key}); "
            f"{over_count} of {count} elements off, e.g. got {example[0]:.6g} expected {example[1]:.6g}"
        )
    norm = sum_r2.norm()
    if norm > 0:
        rel_l2 = sum_d2.over(sum_r2)
        l2_eff = max(l2tol, 2 * sum_own2.over(sum_r2), 3 * own_ratio[1])
        if rel_l2 > l2_eff:
            raise Mismatch(f"{where}: relative L2 error {rel_l2:.3g} > {l2_eff:.3g} ({key})")
    return errors


def uses_tf32_dot(source: str) -> bool:
    """True when the code calls ``tl.dot`` (or ``triton.language.dot``) without asking for IEEE
    precision (or ``tf32x3``, three TF32 products that keep about float32's accuracy, held to
    float32's tolerance): read from the syntax tree, so a comment or a string mentioning it changes
    nothing."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot":
            owner = ast.unparse(node.func.value)
            if owner not in ("tl", "triton.language", "language"):
                continue
            precise = any(
                (
                    kw.arg == "input_precision"
                    and isinstance(kw.value, ast.Constant)
                    and kw.value.value in ("ieee", "tf32x3")
                )
                or (kw.arg == "allow_tf32" and isinstance(kw.value, ast.Constant) and kw.value.value is False)
                for kw in node.keywords
            )
            if not precise:
                return True
    return False


def storages(values: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in flatten(values) if t.untyped_storage().nbytes()}


def poison(out: Any) -> None:
    """Overwrite outputs we hold, so a candidate that hands them back again is caught."""
    for t in flatten(out):
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.fill_(-1 if t.dtype != torch.bool else True)


def poison_allocator(out: Any, device: str) -> None:
    """Fill freed memory with NaN, so ``torch.empty`` cannot return a leftover answer."""
    nbytes = sum(t.numel() * t.element_size() for t in flatten(out))
    if device == "cuda" and nbytes:
        junk = torch.full((2 * nbytes // 4 + 1,), float("nan"), device=device)
        del junk


# ---------------------------------------------------------------------------
# The reference


def _resolve_build(
    req: dict[str, Any], module: Any, cls: type, device: str
) -> tuple[dict[str, Any], list[str]]:
    """Try the sources in order; the first that builds the module and runs forward wins."""
    tried: list[str] = []
    if hasattr(module, "get_inputs") and hasattr(module, "get_init_inputs"):
        try:
            torch.manual_seed(0)
            init = list(module.get_init_inputs())
            torch.manual_seed(0)
            example = list(module.get_inputs())
            mod = build_module(cls, init, {}, device)
            with torch.no_grad():
                mod(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in example])
            return {
                "source": "kernelbench",
                "init_args": [inputs.infer_spec(v) for v in init],
                "init_kwargs": {},
                "inputs": [inputs.infer_spec(v) for v in example],
            }, tried
        except Exception as exc:
            tried.append(describe_exc(exc, "get_init_inputs()/get_inputs()"))
    entry = req.get("config_entry")
    if entry:
        try:
            mod = build_module(
                cls,
                inputs.make_values(entry["init_args"], 0, device, module),
                dict(
                    zip(
                        entry["init_kwargs"],
                        inputs.make_values(list(entry["init_kwargs"].values()), 0, device, module),
                        strict=True,
                    )
                ),
                device,
            )
            with torch.no_grad():
                mod(*inputs.make_values(entry["inputs"], 0, device))
            return {"source": "config", **entry}, tried
        except Exception as exc:
            tried.append(describe_exc(exc, "config entry"))
    kwarg_sets, why_not = inputs.guess_init_kwargs(cls, module)
    if why_not:
        tried.append(f"guess: {why_not}")
    for kwargs in kwarg_sets:
        try:
            mod = build_module(cls, [], kwargs, device)
        except Exception as exc:
            tried.append(describe_exc(exc, f"guess {cls.__name__}(**{kwargs})"))
            continue
        arity = inputs.forward_arity(mod)
        for specs in inputs.guess_input_specs(mod, max(arity, 1), kwargs):
            try:
                with torch.no_grad():
                    out = mod(*inputs.make_values(specs, 0, device))
                if not flatten(out):
                    raise TypeError("forward returned no tensor")
                return {
                    "source": "guess",
                    "init_args": [],
                    "init_kwargs": {k: inputs.infer_spec(v) for k, v in kwargs.items()},
                    "inputs": specs,
                }, tried
            except Exception as exc:
                shapes = inputs.tensor_shapes(specs)
                tried.append(describe_exc(exc, f"guess inputs {shapes}"))
    return {}, tried


class BuiltModule:
    """The reference module, built from a resolved build spec."""

    def __init__(self, req: dict[str, Any], build: dict[str, Any]) -> None:
        self.device: str = req["device"]
        self.file_module = load_file_module(req["file"], req.get("root"), "kernelize_reference")
        self.cls = getattr(self.file_module, req["class_name"])
        self.build = build
        self.init_args = inputs.make_values(build["init_args"], 0, self.device, self.file_module)
        kw = build["init_kwargs"]
        made = inputs.make_values(list(kw.values()), 0, self.device, self.file_module)
        self.init_kwargs = dict(zip(kw, made, strict=True))
        self.module = build_module(self.cls, self.init_args, self.init_kwargs, self.device)
        self.kernelbench = build["source"] == "kernelbench"
        # A dtype to check in (the repository's or the command's): floating parameters and inputs.
        self.dtype: torch.dtype | None = getattr(torch, req["dtype"]) if req.get("dtype") else None
        if self.dtype is not None:
            self.module.to(self.dtype)

    def cast(self, values: list[Any]) -> list[Any]:
        if self.dtype is None:
            return values
        return [
            v.to(self.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values
        ]

    def values(self, specs: list[Any], seed: int, device: str | None = None) -> list[Any]:
        return self.cast(inputs.make_values(specs, seed, device or self.device))

    def positional_init_args(self) -> list[Any] | None:
        """The constructor arguments in the original signature's order, or None if keywords leave a gap."""
        params = [
            p.name
            for p in inspect.signature(self.cls).parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ][len(self.init_args) :]
        args, kwargs = list(self.init_args), dict(self.init_kwargs)
        for name in params:
            if not kwargs:
                break
            if name not in kwargs:
                return None
            args.append(kwargs.pop(name))
        return None if kwargs else args

    def example_inputs(self, seed: int) -> list[Any]:
        if self.kernelbench:  # the author's own distribution, reseeded
            torch.manual_seed(seed)
            values = list(self.file_module.get_inputs())
            out = []
            for v, spec in zip(values, self.build["inputs"], strict=True):
                if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(v.any()):
                    # Never test on zeros: a kernel that writes nothing would pass.
                    v = inputs.make_value(spec, torch.Generator(self.device).manual_seed(seed), self.device)
                out.append(v.to(self.device) if isinstance(v, torch.Tensor) else v)
            return self.cast(out)
        return self.values(self.build["inputs"], seed)

    def reference64(self) -> torch.nn.Module | None:
        """A float64 copy of the module, or None when it cannot run in float64."""
        if not any(p.is_floating_point() for p in self.module.parameters()) and not self.build["inputs"]:
            return None
        import copy

        try:
            return copy.deepcopy(self.module).double()
        except Exception:
            return None

    def run_reference(self, args: list[Any], ref64: torch.nn.Module | None) -> tuple[Any, Any]:
        """(float64 output cast back per tensor, native output)."""
        with torch.no_grad():
            native = self.module(*args)
            if ref64 is None:
                return native, native
            args64 = [
                a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
            ]
            try:
                out64 = ref64(*args64)
            except Exception:
                return native, native
        if len(flatten(out64)) != len(flatten(native)):
            return native, native
        return out64, native


def prepare(req: dict[str, Any]) -> dict[str, Any]:
    """Resolve how to build the module, run it, and find the other shapes it accepts."""
    device = req["device"]
    try:
        file_module = load_file_module(req["file"], req.get("root"), "kernelize_reference")
    except BaseException as exc:
        return {"ok": False, "reason": describe_exc(exc, f"importing {req['file']}")}
    cls = getattr(file_module, req["class_name"], None)
    if not isinstance(cls, type):
        return {"ok": False, "reason": f"{req['class_name']} is not defined at import time"}
    build, tried = _resolve_build(req, file_module, cls, device)
    if not build:
        return {
            "ok": False,
            "reason": "could not build the module: " + "; ".join(tried[-4:]),
            "tried": tried,
        }
    problem = BuiltModule(req, build)
    args = problem.example_inputs(0)
    with recording(), torch.no_grad():
        out = problem.module(*args)
    ops = compute_ops(PROBE.ops)
    variants = []
    for specs in inputs.shape_variants(build["inputs"]):
        try:
            with torch.no_grad():
                problem.module(*problem.values(specs, 0))
            variants.append(specs)
        except Exception:
            continue  # the module fixes this size (a Linear's features, say)
        if len(variants) == 3:
            break
    return {
        "ok": True,
        "build": build,
        "variants": variants,
        "reference_ops": ops,
        "outputs": [
            {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in flatten(out)
        ],
        "returns_input": bool(storages(out) & storages(args)),
    }


# ---------------------------------------------------------------------------
# One candidate


def _replaced_ops(module: Any) -> None:
    """Check 1: no custom op the module's code holds was registered again under its name. The later
    registration replaces the earlier one in the dispatcher, and a call through the earlier one's
    handle is undefined (it may run the later one's code, fail or crash), so it is never made."""
    held = {k: v for k, v in vars(module).items() if isinstance(v, custom_ops.CustomOpDef)}
    for name, opdef in held.items():
        latest = custom_ops.OPDEFS.get(opdef._qualname)
        if latest is not opdef:
            by = next((k for k, v in held.items() if v is latest), None)
            again = f" again (by `{by}`)" if by else " again"
            raise Mismatch(
                f"check 1: the custom op {opdef._qualname} that `{name}` registers is registered{again}: "
                f"the later registration replaces the earlier, so `{name}` no longer runs its own "
                "code; give each op a name of its own"
            )


def _candidate_class(module: Any, class_name: str) -> type:
    for name in ("ModelNew", class_name):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            return cls
    raise Reject(f"defines neither ModelNew nor {class_name} as an nn.Module")


def _build_candidate(
    cls: type, problem: BuiltModule, device: str, keywords_only: bool = False
) -> torch.nn.Module:
    """Build with the original arguments; by keyword first, then (unless ``keywords_only``: a suggestion
    must keep the original's argument names) positionally in the original's order (a model sees them
    positionally, through get_init_inputs, and may rename them)."""
    attempts = [(problem.init_args, problem.init_kwargs)]
    positional = problem.positional_init_args()
    if problem.init_kwargs and positional is not None and not keywords_only:
        attempts.append((positional, {}))
    failure: Exception | None = None
    for args, kwargs in attempts:
        try:
            return build_module(cls, args, kwargs, device)
        except Exception as exc:
            failure = failure or exc
    assert failure is not None
    raise Reject("check 1: " + describe_exc(failure, "cannot be built with the original arguments"))


def load_candidate(
    req: dict[str, Any], problem: BuiltModule, before: dict[str, dict[str, int]] | None = None
) -> tuple[type, torch.nn.Module]:
    """Check 1: the candidate imports, builds with the original arguments and loads the original's
    weights; (its class, the module). ``before``: the integrity snapshot its import is held to."""
    try:
        if req.get("original_path"):
            cand_mod = load_in_namespace(
                req["candidate"], problem.file_module, "kernelize_candidate", bool(req.get("whole_file"))
            )
        else:
            cand_mod = load_file_module(req["candidate"], None, "kernelize_candidate")
    except SyntaxError as exc:
        raise Reject(f"check 1: syntax error at line {exc.lineno}: {exc.msg}") from None
    if before is not None:
        _integrity(before, "importing the candidate")
    _replaced_ops(cand_mod)
    cls = _candidate_class(cand_mod, req["class_name"])
    cand = _build_candidate(cls, problem, problem.device, keywords_only=bool(req.get("original_path")))
    if problem.dtype is not None:
        cand.to(problem.dtype)
    try:
        cand.load_state_dict(problem.module.state_dict(), strict=True)
    except RuntimeError as exc:
        msg = str(exc).replace("\n", " ").replace("\t", "")
        raise Reject(f"check 1: the original's state_dict does not load: {msg[:400]}") from None
    return cls, cand


_CANDIDATE_THREADS: list[str] = []


def _install_thread_watch(candidate_file: str) -> None:
    """Record threads started from the candidate's own code, however they are started.

    torch.compile starts worker threads of its own, legitimately, so a thread
    counts against the candidate only when its code is on the starting stack.
    Every Python thread starts through ``_thread.start_new_thread`` (also behind
    ``threading.Thread.start``), so that is where we look.
    """
    import _thread

    target = str(Path(candidate_file).resolve())

    def watch(original: Any) -> Any:
        def start(*args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code.co_filename == target:
                    _CANDIDATE_THREADS.append(f"line {frame.f_lineno}")
                    break
                frame = frame.f_back  # type: ignore[assignment]
            return original(*args, **kwargs)

        return start

    names = ("start_new_thread", "_start_new_thread", "start_joinable_thread", "_start_joinable_thread")
    for owner in (_thread, threading):
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, watch(getattr(owner, name)))


def evaluate(req: dict[str, Any]) -> dict[str, Any]:
    """All checks on one candidate; on CUDA also its timing against eager and torch.compile."""
    result: dict[str, Any] = {"status": "error", "reason": ""}
    try:
        _evaluate(req, result)
    except Reject as exc:
        result.update(status="rejected", reason=str(exc))
    except Mismatch as exc:
        result.update(status="incorrect", reason=str(exc))
    except HarnessError as exc:
        result.update(status="error", reason=str(exc))
    except torch.cuda.OutOfMemoryError as exc:
        result.update(status="error", reason=describe_exc(exc, "out of GPU memory"))
    except MemoryError:  # Python's own allocation failed under the limit (torch's raises below)
        result.update(status="error", reason="check 7: exceeded the memory limit (MemoryError)")
    except Exception as exc:
        reason = describe_exc(exc, "raised")
        if "can't allocate memory" in reason or "out of memory" in reason.lower():
            reason = "check 7: exceeded the memory limit (" + reason + ")"
        elif req["device"] == "cpu" and ("is_cuda" in reason or "cuda" in reason.lower()):
            reason = "needs a CUDA device and cannot be checked on CPU (" + reason + ")"
        result.update(status="error", reason=reason)
    return result


def _evaluate(req: dict[str, Any], result: dict[str, Any]) -> None:
    device = req["device"]
    for key, bounds in (req.get("tolerance") or {}).items():  # the repository's, only ever tighter
        if key in TOLERANCES:
            TOLERANCES[key] = tuple(min(a, b) for a, b in zip(bounds, TOLERANCES[key], strict=True))
    source = Path(req["candidate"]).read_text(encoding="utf-8")
    # The generated code is screened; what runners/fallback.py adds around it is ours and the user's.
    problem_screen = screen_source(req.get("generated") or source)
    if problem_screen:
        raise Reject(f"check 6 (static screen): {problem_screen}")
    tf32 = device == "cuda" and uses_tf32_dot(req.get("generated") or source)

    from runners.runner import numeric_flags

    flags = numeric_flags()  # before the candidate loads: checked unchanged after its timing
    settle_torch_patches()
    _install_triton_counter()
    from runners import bounds as memory_bounds  # (``bounds`` above: the tolerance loop's)

    if memory_bounds.wanted(device):  # every interpreted load and store checked against its tensors
        memory_bounds.install()
    _install_thread_watch(req["candidate"])
    problem = BuiltModule(req, req["build"])
    ref64 = problem.reference64()
    before = snapshot()

    cls, cand = load_candidate(req, problem, before)
    from runners.sandbox import mark  # where the check's time goes, for the log (never a verdict)

    mark("candidate loaded")
    errors = Errors()
    held: list[Any] = []  # every output stays alive, poisoned, until the end
    launches: list[int] = []
    kept: set[str] = set()

    def check(args: list[Any], where: str) -> Any:
        out64, native = problem.run_reference(args, ref64)
        poison_allocator(native, device)
        saved = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with recording(), torch.no_grad():
            got = cand(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        launches.append(PROBE.launches)
        kept.update(compute_ops(PROBE.ops))
        if PROBE.launches == 0:
            raise Reject(f"check 5: no Triton kernel was launched by forward ({where})")
        _integrity(before, where)
        comparison_still_works(device)
        for i, (a, s) in enumerate(zip(args, saved, strict=True)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, s):
                raise Reject(f"check 4: forward modifies input {i} in place ({where})")
        if storages(got) & storages(args) and not req.get("returns_input"):
            raise Reject(f"check 4: returns (a view of) an input ({where})")
        for earlier in held:
            if storages(got) & storages(earlier):
                raise Reject(f"check 4: returns the same output memory as an earlier call ({where})")
        errors.add(compare(got, out64, native, where, tf32, device))
        return got

    shapes = []
    for seed in SEEDS:
        args = problem.example_inputs(seed)
        got = check(args, f"seed {seed}, shape {_shapes(args)}")
        held.append(got)
        poison(got)
        shapes.append(_shapes(args))

    ref_ops = set(req.get("reference_ops", []))
    if ref_ops and ref_ops <= kept:
        raise Reject(
            "check 5: forward still runs every PyTorch compute op of the original "
            f"({', '.join(sorted(ref_ops))}); the Triton kernel is decoration"
        )

    for specs in req.get("variants", []):
        args = problem.values(specs, 7)
        got = check(args, f"shape {_shapes(args)}")
        held.append(got)
        poison(got)
        shapes.append(_shapes(args))

    result.update(
        max_abs_error=errors.max_abs,
        max_rel_error=errors.max_rel,
        triton_launches=min(launches),
        torch_ops_kept=sorted(kept),
        shapes_checked=shapes,
        notes=["float32 dot products run in TF32 (checked with the TF32 tolerance)"] if tf32 else [],
    )

    if req.get("original_path"):
        _check_original_path(cls, problem, req)
        _integrity(before, "the original path")

    # After the other checks: the same inputs again must still give the right answer.
    args = problem.example_inputs(0)
    got = check(args, "re-check after the other checks")
    held.clear()
    mark("own checks done")
    if req.get("judge"):
        # The judge's calls: outputs, inputs afterwards and gradients go back as bytes; the judge
        # (another process, which never imports this code) compares them and decides.
        from runners import buffers, runner
        from runners.judge import CANDIDATE_OUTPUTS
        from runners.protocol import RunReply, RunRequest, TimingReply

        judged = RunRequest.from_dict(req["judge"])
        data = runner.read_inputs(judged.inputs_path)
        weights = runner.Weights(problem.module)
        with buffers.Writer(Path.cwd() / CANDIDATE_OUTPUTS) as writer:
            replies = runner.run_calls(
                cand, judged.calls, data, device, writer, weights=weights, compile_calls=True
            )
        mark("judge's calls done")
        timed: dict[str, TimingReply | None] = {"timing": None, "training_timing": None}
        for key, plan in (("timing", judged.timing), ("training_timing", judged.training_timing)):
            if plan is None:
                continue
            # Timed on the judge's fed sequence; the judge checks every timed call's outputs (or
            # gradients, for training) by projection and the times against its own clock.
            try:
                timed[key] = runner.time_candidate(cand, plan, data, device, flags)
            except Exception as exc:  # untimed (so never "faster"); the checks above stand
                timed[key] = TimingReply(summaries={}, runs=0, error=describe_exc(exc, "timing raised"))
            _integrity(before, key.replace("_", " "))
        reply = RunReply(calls=replies, timing=timed["timing"], training_timing=timed["training_timing"])
        result["judge_reply"] = reply.to_dict()
    _integrity(before, "the judge's calls")
    result["status"] = "correct"
    result["reason"] = ""


def _check_original_path(cls: type, problem: BuiltModule, req: dict[str, Any]) -> None:
    """Check 3 on CPU tensors: the suggestion keeps the original computation there, and it must hold."""
    import copy

    args = problem.values(problem.build["inputs"], 3, "cpu")
    reference = copy.deepcopy(problem.module).to("cpu")
    interpret = os.environ.pop("TRITON_INTERPRET", None)  # so the original path is taken on this machine too
    try:
        cand = build_module(cls, [_to_cpu(a) for a in problem.init_args], _to_cpu(problem.init_kwargs), "cpu")
        if problem.dtype is not None:
            cand.to(problem.dtype)
        cand.load_state_dict(reference.state_dict(), strict=True)
        PROBE.launches = 0
        with torch.no_grad():
            expected, got = reference(*args), cand(*args)
    except Exception as exc:
        why = describe_exc(exc, "the original computation raised")
        raise Mismatch(f"check 3 (original path, CPU inputs): {why}") from None
    finally:
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = interpret
    if PROBE.launches:
        raise Reject("check 3 (original path, CPU inputs): launched a Triton kernel on CPU tensors")
    exp, out = flatten(expected), flatten(got)
    if len(exp) != len(out):
        raise Mismatch(f"check 3 (original path, CPU inputs): {len(out)} outputs, expected {len(exp)}")
    for i, (e, g) in enumerate(zip(exp, out, strict=True)):
        same = e.shape == g.shape and e.dtype == g.dtype
        if not same or not torch.allclose(g, e, rtol=1e-5, atol=1e-6, equal_nan=True):
            raise Mismatch(
                f"check 3 (original path, CPU inputs): output {i} differs from the original's on CPU"
            )


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _shapes(args: list[Any]) -> list[list[int]]:
    return [list(a.shape) for a in args if isinstance(a, torch.Tensor)]


def _integrity(before: dict[str, dict[str, int]], where: str) -> None:
    patched = patched_since(before)
    if patched:
        raise Reject(f"check 6: {patched} ({where})")
    if _CANDIDATE_THREADS:
        raise Reject(f"check 6: started a thread: {_CANDIDATE_THREADS[0]} ({where})")
    from runners import bounds

    if bounds.FOUND:  # caught even where the forward swallowed the exception
        raise bounds.FOUND[0]
    cuda_ready = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    if cuda_ready and torch.cuda.current_stream() != torch.cuda.default_stream():
        raise Reject(f"check 6: left a side stream current ({where})")


def warm_up(device: str) -> None:
    """Run by a sandbox before its request arrives (``runners.sandbox.start``): the imports every
    evaluation makes (Dynamo, the backend the judge compiles with, Triton), so that a runner
    started ahead of its candidate has them behind it. Imports only: no state a check reads."""
    from torch._dynamo.backends.registry import lookup_backend

    from runners.runner import compile_backend

    settle_torch_patches()
    lookup_backend(compile_backend(device))
    for name in ("triton.language", "torch._inductor.pattern_matcher", "torch._functorch.partitioners"):
        with suppress(ImportError):  # triton is a dependency; a candidate without it says so itself
            importlib.import_module(name)


def noop(req: dict[str, Any]) -> dict[str, Any]:
    """Used by tests and benchmarks: the fixed cost of one sandboxed evaluation."""
    return {"pid": os.getpid(), "math": math.pi}
