"""Where a launch-bound call's time goes: eager, the suggestion, and each layer of its launch path.

The template generator's suggestion for a module (the kernel path and the original computation,
as ``runners/fallback.py`` combines them) is built here, then called many times at a small size
where the work is negligible, so the wall time per call is the launch path's cost. Each layer of
that path is timed on its own, from the outside in::

    suggestion(x)                  the module as applied: picks a path, then _forward_triton
    _forward_triton(x)             guards, then the autograd.Function (or the op)
    op(x, weight, eps)             the custom op: shapes, output, _launch_config, the launch
    kernel[grid](...)              the autotuned kernel (Triton's Autotuner.run, then the JIT launch)
    best[grid](...)                the plain JIT kernel with the tuned config's settings

    python3 bench/launch_overhead.py [--target tests/problems/layers.py::RMSNorm] [--shape 2,16,64]

Needs CUDA. Prints microseconds per call (the mean over --calls calls after a warm-up, one
synchronize at the end) and the kernel's own time by CUDA events.

Then the judge's harness (``runners/bench.py``: the L2 flush, CUDA events and projection around
each call), as the reference runner times eager and a candidate's runner times the suggestion:
wall time per iteration between the span's marks, beside what the events claim. Last, the same
after the candidate runner's instrumentation (the Triton launch counter, the network audit hook,
one call under the op recorder and one compiled call), and every synchronising CUDA call one
harness iteration of the suggestion makes (``torch.cuda.set_sync_debug_mode``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from runners import bench, fallback, sandbox, verify
from runners.generators.template import TemplateGenerator
from runners.pipeline import problems_for

ROOT = Path(__file__).resolve().parents[1]


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def kernel_us(fn: Callable[[], Any], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


class Stamped:
    """``fn`` with the host's clock read at each call (where a loop stalls, and for how long)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.stamps = fn, [time.perf_counter()]

    def __call__(self, *args: Any) -> Any:
        self.stamps.append(time.perf_counter())
        return self.fn(*args)


def harness_us(fn: Callable[..., Any], x: torch.Tensor, candidate: bool) -> dict[str, float]:
    """``fn`` timed as the judge's runners time it (eager by the reference's loop, a candidate by
    the candidate's): wall and process CPU us per iteration between the span's marks, the events'
    median us, the longest gap between two calls' starts, and the garbage collector's pauses."""
    marks: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.perf_counter())
        cpu.setdefault(name, time.process_time())

    pauses: list[float] = []

    def collector(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            pauses.append(-time.perf_counter())
        elif pauses:
            pauses[-1] += time.perf_counter()

    start, end = bench.span_marks(False)
    sets = [[x], [x.clone()]]
    stamped = Stamped(fn)
    gc.callbacks.append(collector)
    try:
        if candidate:
            got = bench.time_candidate(stamped, sets, 0, 400, 2, "cuda", mark)  # type: ignore[arg-type]
            median, calls = got["summaries"]["candidate"]["median_ms"], 800
        else:
            got = bench.time_reference(stamped, None, sets, 0, 2, "cuda", mark)  # type: ignore[arg-type]
            median, calls = got["summaries"]["eager"]["median_ms"], int(got["summaries"]["eager"]["runs"])
    finally:
        gc.callbacks.remove(collector)
    timed = [t for t in stamped.stamps if marks[start] <= t <= marks[end]]
    gaps = [b - a for a, b in itertools.pairwise(timed)]
    return {
        "wall_us": (marks[end] - marks[start]) / calls * 1e6,
        "cpu_us": (cpu[end] - cpu[start]) / calls * 1e6,
        "events_us": median * 1e3,
        "max_gap_ms": max(gaps, default=0.0) * 1e3,
        "gc_pauses": len(pauses),
        "gc_ms": sum(p for p in pauses if p > 0) * 1e3,
        "threads": len(os.listdir("/proc/self/task")),
    }


def syncs(fn: Callable[[], Any]) -> list[str]:
    """Where ``fn`` makes the host wait for the GPU (CUDA's synchronising calls, as torch warns)."""
    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}: {str(w.message).splitlines()[0]}" for w in caught]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="tests/problems/layers.py::RMSNorm")
    parser.add_argument("--shape", default="2,16,64")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args(argv)
    file, cls_name = args.target.split("::")
    (problem,), _ = problems_for(str(ROOT / file), str(ROOT), cls_name)
    req = {"device": "cpu", "file": problem.file, "root": str(ROOT), "class_name": cls_name, "dtype": None}
    problem.build = verify.prepare(req)["build"]
    (cand,) = TemplateGenerator().generate(problem, 1)
    original = Path(problem.file).read_text(encoding="utf-8")
    suggestion = fallback.with_original_path(cand.source, original, cls_name)

    def load(name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, problem.file)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    ref_mod, sug_mod = load("original"), load("suggested")
    # Triton reads a kernel's source from its file: the suggestion is written to one, then run in
    # the original file's namespace, as it will live there.
    path = Path(tempfile.mkdtemp()) / "suggested.py"
    path.write_text(suggestion, encoding="utf-8")
    exec(compile(suggestion, str(path), "exec"), vars(sug_mod))
    shape = [int(s) for s in args.shape.split(",")]
    # Built at the shape's width: constructor sizes equal to the guessed input's width follow it.
    guessed = problem.build["inputs"][0]["tensor"]["shape"][-1]

    def sized(v: Any) -> Any:
        return shape[-1] if v == guessed and not isinstance(v, bool) else v

    init = [sized(v["value"]) for v in problem.build["init_args"]]
    kwargs = {k: sized(v["value"]) for k, v in problem.build["init_kwargs"].items() if "value" in v}
    ref = getattr(ref_mod, cls_name)(*init, **kwargs).cuda().eval()
    sug = getattr(sug_mod, cls_name)(*init, **kwargs).cuda().eval()
    sug.load_state_dict(ref.state_dict())
    x = torch.randn(*shape, device="cuda")
    ns = vars(sug_mod)
    name = cand.provenance["kernel"]
    op = ns[name.removesuffix("_kernel")]
    jit, autotuned = ns[name], ns[f"{name}_autotuned"]
    weight, eps = sug.weight, sug.eps
    n_cols = shape[-1]
    n_rows = x.numel() // n_cols
    out = torch.empty_like(x)
    x2d = x.reshape(-1, n_cols)
    block = 1 << (n_cols - 1).bit_length()
    rows: dict[str, float] = {}
    with torch.no_grad():
        assert torch.allclose(sug(x), ref(x), atol=1e-5, rtol=1e-5)
        rows["eager original"] = per_call_us(lambda: ref(x), args.calls)
        rows["suggestion(x)"] = per_call_us(lambda: sug(x), args.calls)
        rows["_forward_triton(x)"] = per_call_us(lambda: sug._forward_triton(x), args.calls)
        rows["op(x, weight, eps)"] = per_call_us(lambda: op(x, weight, eps), args.calls)
        config = ns["_launch_config"]
        rows["_launch_config(...)"] = per_call_us(lambda: config(n_rows, n_cols, True), args.calls)
        launch = lambda: autotuned[(n_rows,)](x2d, weight, out, n_cols, eps, BLOCK_SIZE=block)  # noqa: E731
        rows["autotuned kernel[grid](...)"] = per_call_us(launch, args.calls)
        best = autotuned.cache[next(iter(autotuned.cache))]
        plain = lambda: jit[(n_rows,)](  # noqa: E731
            x2d, weight, out, n_cols, eps, BLOCK_SIZE=block, num_warps=best.num_warps
        )
        rows[f"plain JIT launch ({best})"] = per_call_us(plain, args.calls)
        rows["empty_like(x)"] = per_call_us(lambda: torch.empty_like(x), args.calls)
        rows["kernel on the GPU (CUDA events)"] = kernel_us(plain, args.calls)
        harness: dict[str, dict[str, float]] = {
            "eager, the reference's loop": harness_us(ref, x, False),
            "suggestion, the candidate's loop": harness_us(sug, x, True),
            "suggestion, again": harness_us(sug, x, True),
            "eager, again": harness_us(ref, x, False),
            "suggestion, a third time": harness_us(sug, x, True),
        }
        # The candidate runner's instrumentation, as runners/verify.py installs it.
        verify._install_triton_counter()
        sys.addaudithook(sandbox._deny_network)
        with verify.recording():
            sug(x)
        harness["suggestion, with the launch counter and audit hook"] = harness_us(sug, x, True)
        torch.compile(sug, fullgraph=True)(x)
        harness["suggestion, after a compiled call"] = harness_us(sug, x, True)
        harness["eager, after a compiled call"] = harness_us(ref, x, False)
        clock = bench.Clock("cuda")
        feed = bench.Feed([[x], [x.clone()]], 0, 4)
        projector = bench.Projector(0, 4, "cuda", quadratic=True)
        found = {
            "suggestion(x)": syncs(lambda: sug(x)),
            "one harness iteration of the suggestion": syncs(
                lambda: clock.samples(lambda a: sug(*a), feed, 0, 1, projector)
            ),
            "one harness iteration of eager": syncs(
                lambda: clock.samples(lambda a: ref(*a), feed, 1, 1, projector)
            ),
        }
    print(f"{args.target} at {shape}, {args.calls} calls each, torch {torch.__version__}")
    for what, us in rows.items():
        print(f"  {what:48} {us:9.2f} us")
    print("the judge's harness (flush, events, projection), per iteration between the span's marks:")
    for what, h in harness.items():
        print(f"  {what:52} " + "  ".join(f"{k} {v:.4g}" for k, v in h.items()))
    for what, where in found.items():
        print(f"synchronising calls in {what}: {len(where) or 'none'}")
        for w in where[:12]:
            print(f"  {w}")
    print(json.dumps({"rows": rows, "harness": harness, "syncs": found}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
