"""Triton's autotuner in the runners that check a chosen candidate without timing it.

The autotuner times every config at each new key with ``triton.testing.do_bench``: five calls to
estimate, then about 25 ms of warm-up and 100 ms of timed calls, each after a 256 MiB cache
flush. That is what a user's first call pays, and the judge's own runner keeps it (its timings are
the ones reported). Two checks pay it again for nothing:

- the memory check (``runners/memcheck.py``), under compute-sanitizer: every kernel there runs
  tens to hundreds of times slower and every allocation (the flush's too) is its own cudaMalloc,
  so a product's seven tiles at each of the judge's shapes took minutes. The sanitizer needs each
  config's accesses once, not a timing: :func:`install` with ``timed=False`` runs each config
  once and calls them all equal (the autotuner keeps its first that ran).
- the family above 2^31 elements (``runners/above_int32.py``): each call moves GiBs, and the
  family compares the outputs of the config the autotuner picks there, as a user's would be.
  :func:`install` with ``timed=True`` still picks by time, from one warm-up call (the compile)
  and one timed call per config, not dozens.

Both replace ``do_bench`` and ``do_bench_cudagraph`` in ``triton.testing``, where Triton's
backends look them up at each tuning (``driver.active.get_benchmarker()``) and where a kernel
decorated with ``use_cuda_graph`` binds the latter: so it is done before the candidate is
imported. A config that fails to compile still raises out of the call and is skipped by the
autotuner as before. Code in the candidate can undo it; that only makes its own check slower.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def benchmarker(timed: bool) -> Callable[..., Any]:
    """A stand-in for ``triton.testing.do_bench``: ``fn`` run once (``timed``: once more, timed),
    the result in do_bench's shape (one float, or one per quantile asked for)."""

    def bench(
        fn: Callable[[], Any], *args: Any, quantiles: Sequence[float] | None = None, **kwargs: Any
    ) -> Any:
        fn()
        ms = 0.0
        if timed:
            _synchronize()
            start = time.perf_counter()
            fn()
            _synchronize()
            ms = (time.perf_counter() - start) * 1e3
        return [ms] * len(quantiles) if quantiles else ms

    return bench


def install(*, timed: bool) -> None:
    """Triton's benchmarking replaced in this process (see the module's docstring); nothing when
    Triton is not installed."""
    try:
        import triton.testing
    except ImportError:
        return
    bench = benchmarker(timed)
    triton.testing.do_bench = bench
    triton.testing.do_bench_cudagraph = bench
