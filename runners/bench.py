"""Timing on CUDA, run inside the runners: eager and torch.compile in the reference runner (a
process no candidate ever reaches), each candidate in its own runner, on the same fed sequence.

Each call is timed with CUDA events around it, the L2 cache flushed before it (H200's L2 is
60 MiB; we write 1 GiB), warm-up excluded, on fresh inputs (:class:`Feed`); the reference's
rounds alternate eager and torch.compile so drift hits them alike. Medians and the 10th/90th
percentiles are kept: a speedup counts only when it clears the minimum and the spreads do not
overlap. Everything measured here is a claim the judge cross-checks (``runners/judge.py``): the
projection of every timed call's outputs against the reference's, and the times against its own
clock between the runner's ``timing start`` and ``timing end`` marks.

Training is timed the same way (``training=True``): each timed call is forward and backward on fresh
leaves (:class:`TrainingFeed`, :func:`training_step`), its gradients projected, between the
``training timing start`` and ``training timing end`` marks.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from runners import sandbox

# The flush before each call: 1 GiB (H200's L2 is 60 MiB) takes the GPU ~0.3 ms, longer than the
# harness's Python per call, so the GPU, not the CPU, paces every timed loop and the judge's clock
# around the loop resolves the GPU's time (a CPU-paced loop would hide it behind Python).
FLUSH_BYTES = 2**30
WARMUP_MS = 25.0
ROUNDS = 3
TARGET_MS_PER_ROUND = 100.0
CPU_RUNS = 20  # per round on the CPU (tests of the protocol: the figures mean nothing there)
MIN_RUNS, MAX_RUNS = 10, 2000
# Back to back (forward only): each callable again on one fed input, with no flush and no event
# between calls, for ~BACK_TO_BACK_MS by eager's estimate, between marks the judge timestamps. The
# judge's clock over that span is the time per call a loop over batches of this shape sees: at
# launch-bound sizes the launch path's Python, which the flushed, evented calls above hide.
BACK_TO_BACK_MS = 50.0
MIN_BACK_TO_BACK, MAX_BACK_TO_BACK = 20, 20000


def span_marks(training: bool) -> tuple[str, str]:
    """The marks a runner sends around a timed span, by the sandbox's clock."""
    what = "training timing" if training else "timing"
    return f"{what} start", f"{what} end"


def salt_name(training: bool) -> str:
    """What a candidate's runner asks the judge for once its timed span has begun (its salt)."""
    return "training timing salt" if training else "timing salt"


def back_to_back_marks(name: str) -> tuple[str, str]:
    """The marks a runner sends around ``name``'s calls back to back (``eager``, ``compile``,
    ``candidate``)."""
    return f"back-to-back {name} start", f"back-to-back {name} end"


def back_to_back_calls(est_ms: float, device: str) -> int:
    """How many calls back to back: ~BACK_TO_BACK_MS of eager's estimate (on the CPU, a few)."""
    if device != "cuda":
        return MIN_BACK_TO_BACK
    return min(MAX_BACK_TO_BACK, max(MIN_BACK_TO_BACK, int(BACK_TO_BACK_MS / est_ms)))


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


class Feed:
    """Fresh inputs for every timed call, the same sequence in every runner.

    Call ``i`` gets the judge's input set ``i % len(sets)`` copied into one buffer set and each of
    its floating tensors multiplied element by element by factors in [0.75, 1.25) drawn for that
    call and tensor from ``seed`` and ``salt`` (on the tensor's device, so every runner draws the
    same), before the call and outside the timed span. A candidate's runner learns the salt from
    the judge only once its timed span has begun (:func:`time_candidate`), so no timed input can be
    made, nor its output computed, before the span. Consecutive calls see other values in the same memory, so
    a module that keys a cache on its argument objects or pointers hands back stale outputs, and the
    projections (below) show it. One factor a call was not enough: a norm's output is the same for
    any positive multiple of its input, so a cache keyed on what a scale keeps (the signs, the
    buffer) handed back outputs that were right. The factors keep every sign and zero. Index ``i``
    wraps at ``total``: a re-timing repeats the first calls' inputs."""

    def __init__(self, sets: list[list[Any]], seed: int, total: int) -> None:
        self.sets = sets
        self.slot = [a.clone() if isinstance(a, torch.Tensor) else a for a in sets[0]]
        self.seed = seed
        self.salt = 0
        self.total = max(1, total)

    def salted(self, salt: int) -> None:
        """Draw every later call's factors with ``salt`` too."""
        self.salt = salt

    def __call__(self, i: int) -> list[Any]:
        i %= self.total
        for k, (buf, src) in enumerate(zip(self.slot, self.sets[i % len(self.sets)], strict=True)):
            if isinstance(buf, torch.Tensor):
                buf.copy_(src)
                if buf.is_floating_point():
                    gen = torch.Generator(device=buf.device)
                    gen.manual_seed((self.seed * 1_000_003 + self.salt * 7_919 + i * 1_009 + k) % 2**62)
                    factors = torch.empty(buf.shape, dtype=buf.dtype, device=buf.device)
                    buf.mul_(factors.uniform_(0.75, 1.25, generator=gen))
        return self.slot


def grad_leaves(args: list[Any]) -> list[Any]:
    """The floating tensors of ``args`` as new leaves that require grad (same memory, no copy)."""
    return [
        a.detach().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in args
    ]


def trained_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The floating parameters by name (the same order in every runner), each requiring grad."""
    params = [p for _, p in sorted(module.named_parameters()) if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    return params


class TrainingFeed(Feed):
    """A training step's arguments for call ``i``: the fed inputs (:class:`Feed`) as fresh leaves
    that require grad and the upstream gradient, fed the same way from ``upstream_sets`` (one
    normal draw per input set, from the judge's seed: :func:`upstream_sets`), with every
    parameter's gradient cleared (as ``zero_grad`` does), all outside the timed span."""

    def __init__(
        self,
        sets: list[list[Any]],
        seed: int,
        total: int,
        params: list[torch.nn.Parameter],
        upstream: list[list[Any]],
    ) -> None:
        super().__init__(sets, seed, total)
        self.params = params
        self.upstream = Feed(upstream, seed + 1, total)

    def salted(self, salt: int) -> None:
        super().salted(salt)
        self.upstream.salted(salt)

    def __call__(self, i: int) -> list[Any]:
        for p in self.params:
            p.grad = None
        return [grad_leaves(super().__call__(i)), self.upstream(i)]


def upstream_sets(fn: Callable[..., Any], sets: list[list[Any]], seed: int) -> list[list[Any]]:
    """One upstream gradient per input set, in the shapes of what ``fn`` returns with autograd
    recording (a call made for this, not timed): normal draws from ``seed + 2 + k`` on the CPU
    (``runners.runner.upstream_for``), so every runner draws the same numbers."""
    from runners.runner import upstream_for
    from runners.verify import flatten

    with torch.enable_grad():
        outs = [o.detach().requires_grad_(o.requires_grad) for o in flatten(fn(*grad_leaves(sets[0])))]
    if not any(o.requires_grad and o.is_floating_point() for o in outs):
        raise ValueError("no output requires grad: there is no backward to time")
    return [upstream_for(outs, seed + 2 + k) for k in range(len(sets))]


def training_step(
    fn: Callable[..., Any], params: list[torch.nn.Parameter], device: str
) -> Callable[[list[Any]], list[torch.Tensor]]:
    """One timed training call on what :class:`TrainingFeed` gives: forward, then backward from the
    upstream gradient into ``.grad`` (as ``loss.backward()`` does); it returns the gradients of
    the inputs that require grad, then of the parameters (a zero for one that got none)."""
    from runners.verify import flatten

    none = torch.zeros((), device=device)

    def step(fed: list[Any]) -> list[torch.Tensor]:
        args, ups = fed
        outs = flatten(fn(*args))
        pairs = [(o, u) for o, u in zip(outs, ups, strict=True) if u is not None]
        torch.autograd.backward([o for o, _ in pairs], [u for _, u in pairs])
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        return [w.grad if w.grad is not None else none for w in [*leaves, *params]]

    return step


def _on_fed(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    def call(args: list[Any]) -> Any:
        return fn(*args)

    return call


def _timed(
    named: dict[str, Callable[..., Any]],
    module: torch.nn.Module,
    sets: list[list[Any]],
    seed: int,
    device: str,
    training: bool,
) -> tuple[dict[str, Callable[[list[Any]], Any]], Callable[[int], Feed]]:
    """What a timing loop calls, by name, on fed arguments, and the feed for ``total`` calls: each
    of ``named`` on the fed inputs, or with ``training`` each as a training step."""
    if not training:
        return {k: _on_fed(f) for k, f in named.items()}, lambda total: Feed(sets, seed, total)
    params = trained_parameters(module)
    ups = upstream_sets(next(iter(named.values())), sets, seed)
    fns = {k: training_step(f, params, device) for k, f in named.items()}
    return fns, lambda total: TrainingFeed(sets, seed, total, params, ups)


class Projector:
    """One number per call that the judge can check: the outputs' dot product with fixed random
    weights (drawn from ``seed`` on the outputs' device, so every runner draws the same ones).

    Recorded right after each timed call, on the device and outside the timed span, into a tensor
    read once at the end (no synchronisation in between). With ``quadratic`` it also records the
    outputs' squared norm: the reference's, from which the judge bounds an honest difference."""

    def __init__(self, seed: int, calls: int, device: str, quadratic: bool = False) -> None:
        self.seed, self.device = seed, device
        self.values = torch.zeros(calls, dtype=torch.float64, device=device)
        self.quad = torch.zeros(calls, dtype=torch.float64, device=device) if quadratic else None
        self.weights: list[torch.Tensor] = []

    def _w(self, k: int, numel: int) -> torch.Tensor:
        while len(self.weights) <= k:
            self.weights.append(torch.empty(0))
        if self.weights[k].numel() != numel:
            gen = torch.Generator(device=self.device).manual_seed(self.seed + k)
            self.weights[k] = torch.randn(numel, generator=gen, device=self.device, dtype=torch.float32)
        return self.weights[k]

    def record(self, i: int, out: Any) -> None:
        from runners.verify import flatten

        if i >= self.values.numel():
            return
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        quad = torch.zeros((), dtype=torch.float64, device=self.device)
        for k, o in enumerate(t for t in flatten(out) if t.is_floating_point()):
            flat = o.detach().reshape(-1).float()
            w = self._w(k, flat.numel())
            total += torch.dot(flat, w).double()
            if self.quad is not None:
                quad += torch.dot(flat, flat).double()
        self.values[i] = total
        if self.quad is not None:
            self.quad[i] = quad

    def weights_sq(self) -> float:
        return float(sum(float(torch.dot(w, w)) for w in self.weights))


class Clock:
    """CUDA events around each call with the L2 flushed before it; on the CPU (tests of the
    protocol under the interpreter), ``time.perf_counter``."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if self.cuda else None

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def samples(
        self, fn: Callable[[list[Any]], Any], feed: Feed, first: int, n: int, proj: Projector | None
    ) -> list[float]:
        if not self.cuda:
            out = []
            for j in range(n):
                args = feed(first + j)
                t0 = time.perf_counter()
                got = fn(args)
                out.append((time.perf_counter() - t0) * 1e3)
                if proj is not None:
                    proj.record(first + j, got)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]  # type: ignore[no-untyped-call]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]  # type: ignore[no-untyped-call]
        for j in range(n):
            args = feed(first + j)
            assert self.flush is not None
            self.flush.zero_()
            starts[j].record()
            got = fn(args)
            ends[j].record()
            if proj is not None:
                proj.record(first + j, got)
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def back_to_back(
        self, fns: dict[str, Callable[[list[Any]], Any]], feed: Feed, calls: int, mark: Callable[[str], None]
    ) -> None:
        """Each of ``fns`` ``calls`` times on one fed input (the first), nothing between the calls,
        between its :func:`back_to_back_marks`: the judge's clock over each span is the figure."""
        args = feed(0)
        for name, fn in fns.items():
            fn(args)
            self.sync()
            start, end = back_to_back_marks(name)
            mark(start)
            for _ in range(calls):
                fn(args)
            self.sync()
            mark(end)

    def estimate_ms(self, fn: Callable[[list[Any]], Any], feed: Feed) -> float:
        """Warm ``fn`` for ~WARMUP_MS and return its time per call (calls not projected)."""
        fn(feed(0))
        self.sync()
        est = max(statistics.median(self.samples(fn, feed, 1, 5, None)), 1e-3)
        for k in range(max(1, int(WARMUP_MS / est))):
            fn(feed(k))
        self.sync()
        return est


def runs_for(est_ms: float, device: str) -> int:
    if device != "cuda":  # the interpreter's candidates run ~1000x slower than eager: a few calls
        return CPU_RUNS
    return min(MAX_RUNS, max(MIN_RUNS, int(TARGET_MS_PER_ROUND / est_ms)))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off (after one collection) while a runner times, as
    ``timeit`` does: a collection in the middle of a timed loop stalls whatever is on the CPU then
    for tens of milliseconds, and a launch-bound call (its time mostly Python) is charged for it."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def time_reference(
    module: torch.nn.Module,
    compiled: Callable[..., Any] | None,
    sets: list[list[Any]],
    seed: int,
    rounds: int,
    device: str,
    mark: Callable[[str], None],
    training: bool = False,
    salt: int = 0,
) -> dict[str, Any]:
    """The reference runner's timing: eager (and torch.compile) on the fed sequence (its factors
    drawn with ``salt``, the judge's), eager's outputs (with ``training``, its gradients) projected
    with their quadratic sizes. The calls per round follow eager's estimate; a candidate is then
    timed on the same number of calls."""
    clock = Clock(device)
    named: dict[str, Callable[..., Any]] = {"eager": module}
    if compiled is not None:
        named["compile"] = compiled
    start, end = span_marks(training)
    with torch.set_grad_enabled(training), collector_paused(), sandbox.gpu_alone():
        fns, feed_for = _timed(named, module, sets, seed, device, training)
        probe = feed_for(1)
        est = clock.estimate_ms(fns["eager"], probe)
        runs = runs_for(est, device)
        for name in fns:
            if name != "eager":
                clock.estimate_ms(fns[name], probe)
        feed = feed_for(runs * rounds)
        feed.salted(salt)
        # Every call in the span carries the same harness work, torch.compile's too (its
        # projections are not sent): the judge takes the span's cost beyond the claimed times as
        # the harness's per call and subtracts it from the candidate's, whose every call is
        # projected. Compile's calls unprojected made that figure half a projection short, and an
        # honest kernel on 2^27 floats was seen 1.8x slower than it ran (0.633 ms for 0.356).
        projs = {name: Projector(seed, runs * rounds, device, quadratic=True) for name in fns}
        proj = projs["eager"]
        for other in projs.values():
            other.weights = proj.weights  # the same draws: one copy in memory
        samples: dict[str, list[float]] = {name: [] for name in fns}
        mark(start)
        for r in range(rounds):
            for name, fn in fns.items():
                samples[name] += clock.samples(fn, feed, r * runs, runs, projs[name])
        clock.sync()
        mark(end)
        wall_calls = 0 if training else back_to_back_calls(est, device)
        if wall_calls:
            clock.back_to_back(fns, feed, wall_calls, mark)
    assert proj.quad is not None
    return {
        "summaries": {name: summarize(s) for name, s in samples.items()},
        "runs": runs,
        "wall_calls": wall_calls,
        "projections": proj.values.cpu().tolist(),
        "quadratic": proj.quad.cpu().tolist(),
        "weights_sq": proj.weights_sq(),
    }


def time_candidate(
    candidate: torch.nn.Module,
    sets: list[list[Any]],
    seed: int,
    runs: int,
    rounds: int,
    device: str,
    mark: Callable[[str], None],
    training: bool = False,
    wall_calls: int = 0,
    salt: Callable[[], int] | int = 0,
) -> dict[str, Any]:
    """The candidate's timing on the reference's sequence: every timed call's outputs (with
    ``training``, its gradients) projected; then, with ``wall_calls``, that many calls back to back
    (:meth:`Clock.back_to_back`). ``salt``: the judge's, or how to ask for it, once the span's start
    is marked (the judge answers only then). The span holds exactly ``runs * rounds`` calls, the number the
    judge divides its clock by: a second timing of claims too good to believe once sat in it, and a
    runner claiming it had made one (without making it) tripled the calls the clock was divided by."""
    clock = Clock(device)
    total = runs * rounds
    start, end = span_marks(training)
    # The same harness work per call as the reference's (its squared norm too), so the harness
    # cost the judge measures on the original's runner is this runner's too.
    proj = Projector(seed, total, device, quadratic=True)
    with torch.set_grad_enabled(training), collector_paused(), sandbox.gpu_alone():
        fns, feed_for = _timed({"candidate": candidate}, candidate, sets, seed, device, training)
        fn, feed = fns["candidate"], feed_for(total)
        clock.estimate_ms(fn, feed)
        mark(start)
        feed.salted(salt() if callable(salt) else salt)
        samples: list[float] = []
        for r in range(rounds):
            samples += clock.samples(fn, feed, r * runs, runs, proj)
        timing = summarize(samples)
        clock.sync()
        mark(end)
        if wall_calls and not training:
            clock.back_to_back({"candidate": fn}, feed, wall_calls, mark)
    return {
        "summaries": {"candidate": timing},
        "runs": runs,
        "wall_calls": wall_calls if not training else 0,
        "projections": proj.values.cpu().tolist(),
    }


def compile_baseline(
    reference: torch.nn.Module, args: list[Any], training: bool = False
) -> tuple[Callable[..., Any] | None, str | None]:
    """``torch.compile`` of the original, compiled and run once (with ``training``, forward and
    backward: both compiled); or None and why it failed."""
    try:
        compiled = torch.compile(reference)
        if training:
            params = trained_parameters(reference)
            ups = upstream_sets(compiled, [args], 0)[0]
            training_step(compiled, params, "cuda")([grad_leaves(args), ups])
            for p in params:
                p.grad = None
        else:
            with torch.no_grad():
                compiled(*args)
        torch.cuda.synchronize()
        return compiled, None
    except Exception as exc:  # a baseline that does not compile is a note, not a failure
        first = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"{type(exc).__name__}: {first}"[:300]


def speedup(baseline: dict[str, Any] | None, candidate: dict[str, Any] | None) -> float | None:
    if not baseline or not candidate or candidate["median_ms"] <= 0:
        return None
    return float(baseline["median_ms"]) / float(candidate["median_ms"])


def slower_back_to_back(timings: dict[str, Any]) -> str:
    """Why the candidate is no faster in a loop, or "": its calls back to back (the judge's clock,
    ``wall_ms``) took longer than eager's. At a launch-bound size the launch path can cost more than
    the kernel saves, which the flushed, evented times do not show."""
    eager, cand = timings.get("eager") or {}, timings.get("candidate") or {}
    if eager.get("wall_ms") is None or cand.get("wall_ms") is None or cand["wall_ms"] <= eager["wall_ms"]:
        return ""
    return (
        f"no faster in a loop: {cand['wall_ms'] * 1e3:.4g} us per call back to back against eager's "
        f"{eager['wall_ms'] * 1e3:.4g} us (the launch path costs more than the kernel saves at this size)"
    )


def clears_noise(baseline: dict[str, Any], candidate: dict[str, Any], min_speedup: float) -> bool:
    """Faster only beyond the minimum speedup, with the spreads apart."""
    s = speedup(baseline, candidate)
    return s is not None and s >= min_speedup and candidate["p90_ms"] < baseline["p10_ms"]
