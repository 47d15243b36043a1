"""Out-of-bounds loads and stores under the Triton interpreter (CPU), caught before they happen.

Under ``TRITON_INTERPRET=1`` a kernel's pointers are the addresses of the CPU tensors it was
given, and each load or store is a raw memory access: a store whose mask is off by one writes past
its output into the heap allocator's slack, every element of the output is right, and nothing
notices. :func:`install` makes every launch record the storages of its tensor arguments, and every
load, store and atomic check each address its mask leaves on against them first: one outside
raises :class:`OutOfBounds`, naming the kernel, the access and where it landed, and the access
never happens.

This runs in the candidate's process, like the runner's other checks: what it catches is
evidence, its silence a claim (a kernel written to dodge it could; replacing the wrapped methods
is check 6). On CUDA the judge runs the chosen candidate under compute-sanitizer instead
(``runners/memcheck.py``), whose verdict comes from outside the candidate's process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from runners.verify import Mismatch

KIND = "Triton interpreter bounds check"


class OutOfBounds(Mismatch):
    """A kernel reached memory outside every tensor it was given."""


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    name: str  # the kernel argument the storage came in as


@dataclass
class _Launch:
    kernel: str
    spans: list[Span]


_ACTIVE: list[_Launch] = []  # the launch the interpreter is running (launches do not nest)
# Every access caught, kept: a forward that swallows the exception is still caught afterwards.
FOUND: list[OutOfBounds] = []


def wanted(device: str) -> bool:
    return device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def _tensor(arg: Any) -> Any:
    base = getattr(arg, "base", arg)  # TensorWrapper, TensorDescriptor
    return base if hasattr(base, "untyped_storage") else None


def spans_of(names: list[str], args: Any, kwargs: dict[str, Any]) -> list[Span]:
    """One span per storage among the tensor arguments (tuples of tensors too), sorted by address."""
    found: dict[int, Span] = {}

    def visit(name: str, arg: Any) -> None:
        if isinstance(arg, tuple | list):
            for i, a in enumerate(arg):
                visit(f"{name}[{i}]", a)
            return
        t = _tensor(arg)
        if t is None:
            return
        storage = t.untyped_storage()
        start = int(storage.data_ptr())
        found.setdefault(start, Span(start, start + int(storage.nbytes()), name))

    for i, arg in enumerate(args):
        visit(names[i] if i < len(names) else f"argument {i}", arg)
    for name, arg in kwargs.items():
        visit(name, arg)
    return sorted(found.values(), key=lambda s: s.start)


def check(kind: str, addresses: np.ndarray, mask: Any, itemsize: int) -> None:
    """Raise OutOfBounds when an address the mask leaves on is not inside a span of the launch."""
    if not _ACTIVE:
        return
    launch = _ACTIVE[-1]
    addr = np.asarray(addresses, dtype=np.uint64).reshape(-1)
    if mask is not None:
        on = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(addresses)).reshape(-1)
        addr = addr[on]
    if addr.size == 0:
        return
    bad = addr
    if launch.spans:
        starts = np.array([s.start for s in launch.spans], dtype=np.uint64)
        ends = np.array([s.end for s in launch.spans], dtype=np.uint64)
        at = np.searchsorted(starts, addr, side="right") - 1  # the last span starting at or before
        inside = (at >= 0) & (addr + np.uint64(itemsize) <= ends[np.maximum(at, 0)])
        bad = addr[~inside]
    if bad.size:
        FOUND.append(
            OutOfBounds(describe(kind, launch, int(bad[0]), itemsize, int(bad.size), int(addr.size)))
        )
        raise FOUND[-1]


def describe(kind: str, launch: _Launch, address: int, itemsize: int, bad: int, active: int) -> str:
    """The evidence: the access, and where it landed against the nearest tensor argument."""
    where = "outside every tensor argument"
    if launch.spans:
        near = min(launch.spans, key=lambda s: min(abs(address - s.start), abs(address - s.end)))
        size = near.end - near.start
        if address >= near.end:
            where = f"{address - near.end} bytes past the end of {near.name} ({size} bytes)"
        elif address < near.start:
            where = f"{near.start - address} bytes before the start of {near.name} ({size} bytes)"
        else:
            where = f"straddling the end of {near.name} ({size} bytes)"
    return (
        f"memory check ({KIND}): out-of-bounds {kind} of {itemsize} bytes in kernel {launch.kernel}, "
        f"{where}; {bad} of {active} active lanes out of bounds"
    )


def _itemsize(handle: Any) -> int:
    bits = getattr(handle.get_element_ty(), "primitive_bitwidth", 8)
    return max(1, int(bits) // 8)


def install() -> None:
    """Wrap the interpreter's launches and memory operations (once per process)."""
    from triton.runtime import interpreter
    from triton.runtime.errors import InterpreterError

    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    if getattr(executor.__call__, "_kernelize_bounds", False):
        return
    launch_original = executor.__call__
    init_original = executor._init_args_hst

    def init_args(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = init_original(self, args_dev, kwargs)
        if _ACTIVE:  # the storages the kernel's pointers point into: the host copies
            _ACTIVE[-1].spans = spans_of(list(self.arg_names), args_hst, kwargs_hst)
        return args_hst, kwargs_hst

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ACTIVE.append(_Launch(getattr(self.fn, "__name__", "?"), []))
        try:
            return launch_original(self, *args, **kwargs)
        except InterpreterError as exc:
            if isinstance(exc.__cause__, OutOfBounds):
                raise exc.__cause__ from None
            raise
        finally:
            _ACTIVE.pop()

    load_original, store_original = builder.create_masked_load, builder.create_masked_store
    rmw_original, cas_original = builder.create_atomic_rmw, builder.create_atomic_cas

    def load(self: Any, ptrs: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        check("load", ptrs.data, mask.data, _itemsize(ptrs))
        return load_original(self, ptrs, mask, *rest, **kw)

    def store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        check("store", ptrs.data, mask.data, _itemsize(ptrs))
        return store_original(self, ptrs, value, mask, *rest, **kw)

    def rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        check("atomic", ptr.data, mask.data, _itemsize(ptr))
        return rmw_original(self, op, ptr, val, mask, *rest, **kw)

    def cas(self: Any, ptr: Any, *rest: Any, **kw: Any) -> Any:
        check("atomic", ptr.data, None, _itemsize(ptr))
        return cas_original(self, ptr, *rest, **kw)

    launch._kernelize_bounds = True  # type: ignore[attr-defined]
    executor.__call__ = launch
    executor._init_args_hst = init_args
    builder.create_masked_load, builder.create_masked_store = load, store
    builder.create_atomic_rmw, builder.create_atomic_cas = rmw, cas


def watched() -> dict[str, Any]:
    """What :func:`install` wrapped, for the runner's integrity snapshot (check 6)."""
    import sys

    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is None or not getattr(interpreter.GridExecutor.__call__, "_kernelize_bounds", False):
        return {}
    return {
        "triton interpreter launches": interpreter.GridExecutor,
        "triton interpreter memory operations": interpreter.InterpreterBuilder,
        "triton interpreter builder": interpreter.interpreter_builder,
    }
