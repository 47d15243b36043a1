"""Timing on CUDA: eager, torch.compile and the candidate, same process, same inputs.

Each callable is timed with CUDA events around a single call, the L2 cache
flushed before every call (H200's L2 is 60 MiB; we write 256 MiB), warm-up
excluded. Rounds alternate between the three callables so clock and thermal
drift hit them alike. We keep the median and the 10th/90th percentiles: a
speedup counts only when it clears the minimum and the spreads do not overlap.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

FLUSH_BYTES = 256 * 2**20
WARMUP_MS = 25.0
ROUNDS = 3
TARGET_MS_PER_ROUND = 100.0
MIN_RUNS, MAX_RUNS = 10, 2000
RECHECK_SPEEDUP = 10.0


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(samples: list[float]) -> dict[str, float | int]:
    return {
        "median_ms": statistics.median(samples),
        "p10_ms": _percentile(samples, 0.1),
        "p90_ms": _percentile(samples, 0.9),
        "runs": len(samples),
    }


def _event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class Timer:
    def __init__(self) -> None:
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def estimate_ms(self, fn: Callable[[], Any]) -> float:
        start, end = _event(), _event()
        fn()
        torch.cuda.synchronize()
        start.record()
        for _ in range(5):
            fn()
        end.record()
        torch.cuda.synchronize()
        return max(float(start.elapsed_time(end)) / 5, 1e-3)

    def warm(self, fn: Callable[[], Any]) -> float:
        est = self.estimate_ms(fn)
        for _ in range(max(1, int(WARMUP_MS / est))):
            fn()
        torch.cuda.synchronize()
        return est

    def samples(self, fn: Callable[[], Any], n: int) -> list[float]:
        starts = [_event() for _ in range(n)]
        ends = [_event() for _ in range(n)]
        for i in range(n):
            self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def time_callables(
    fns: dict[str, Callable[[], Any]], rounds: int = ROUNDS
) -> dict[str, dict[str, float | int]]:
    timer = Timer()
    runs = {}
    for name, fn in fns.items():
        est = timer.warm(fn)
        runs[name] = min(MAX_RUNS, max(MIN_RUNS, int(TARGET_MS_PER_ROUND / est)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += timer.samples(fn, runs[name])
    return {name: summarize(s) for name, s in samples.items()}


def compile_baseline(
    reference: torch.nn.Module, args: list[Any]
) -> tuple[Callable[..., Any] | None, str | None]:
    """``torch.compile`` of the original, compiled and run once; or None and why it failed."""
    try:
        compiled = torch.compile(reference)
        with torch.no_grad():
            compiled(*args)
        torch.cuda.synchronize()
        return compiled, None
    except Exception as exc:  # a baseline that does not compile is a note, not a failure
        first = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"{type(exc).__name__}: {first}"[:300]


def time_all(
    reference: torch.nn.Module,
    compiled: Callable[..., Any] | None,
    candidate: torch.nn.Module,
    args: list[Any],
) -> dict[str, Any]:
    """Timings of eager, torch.compile (when it compiled) and the candidate, in ms."""
    fns: dict[str, Callable[[], Any]] = {"eager": lambda: reference(*args)}
    if compiled is not None:
        fns["compile"] = lambda: compiled(*args)
    fns["candidate"] = lambda: candidate(*args)
    with torch.no_grad():
        timings: dict[str, Any] = time_callables(fns)
        eager, cand = timings["eager"]["median_ms"], timings["candidate"]["median_ms"]
        if eager / cand > RECHECK_SPEEDUP:
            # Too good to believe at once: measure again, twice as long, and keep the slower story.
            again = time_callables({"eager": fns["eager"], "candidate": fns["candidate"]}, rounds=2 * ROUNDS)
            if again["candidate"]["median_ms"] > cand:
                timings["candidate"] = again["candidate"]
            timings["rechecked"] = True
    return timings


def speedup(baseline: dict[str, Any] | None, candidate: dict[str, Any] | None) -> float | None:
    if not baseline or not candidate or candidate["median_ms"] <= 0:
        return None
    return float(baseline["median_ms"]) / float(candidate["median_ms"])


def clears_noise(baseline: dict[str, Any], candidate: dict[str, Any], min_speedup: float) -> bool:
    """Faster only beyond the minimum speedup, with the spreads apart."""
    s = speedup(baseline, candidate)
    return s is not None and s >= min_speedup and candidate["p90_ms"] < baseline["p10_ms"]
