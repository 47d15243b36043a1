"""What torch.compile's modes are worth on the example problems: eager against torch.compile with
static shapes (its default at a first call), with dynamic shapes (as the inductor generator
captures), and with Inductor's tuning (``max-autotune-no-cudagraphs``, and coordinate-descent
tuning on static shapes).

The inductor candidate is compiled with dynamic shapes; where the static graph is much faster,
capturing it (with a generic path for other shapes) pays, and where tuning is, the capture should
tune. This measures the gap without the engine: each problem file is imported here (the project's
own problems, not a pull request's code), built at its benchmark size on the GPU, and each mode
compiled afresh (``torch._dynamo.reset()``) and timed with CUDA events, the L2 flushed before each
call, as the judge's runners do (``runners.bench.Clock``).

    python3 bench/compile_modes.py --only conv_bias_relu,linear_gelu [--json out.json] [--markdown out.md]
    python3 bench/compile_modes.py --from-json a.json b.json --markdown out.md

Needs CUDA. Prints one row per problem: each mode's median ms, its ratio to eager, and the
seconds its first call took (the compile).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("eager", "static", "dynamic", "max-autotune", "coordinate-descent")
RUNS = 100


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"problem_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_class(problem: Any) -> Any:
    """The file's one ``nn.Module`` class (the problems' convention: one class a file)."""
    import torch

    found = [
        v
        for v in vars(problem).values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == problem.__name__
    ]
    if len(found) != 1:
        raise ValueError(f"{problem.__name__}: {len(found)} module classes, expected one")
    return found[0]


def compiled(model: Any, mode: str) -> Callable[..., Any]:
    import torch
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    inductor_config.coordinate_descent_tuning = mode == "coordinate-descent"
    if mode == "eager":
        return model  # type: ignore[no-any-return]
    if mode == "static":
        return torch.compile(model, dynamic=False)
    if mode == "dynamic":
        return torch.compile(model, dynamic=True)
    if mode == "max-autotune":
        return torch.compile(model, dynamic=False, mode="max-autotune-no-cudagraphs")
    if mode == "coordinate-descent":
        return torch.compile(model, dynamic=False)
    raise ValueError(f"unknown mode {mode!r}")


def median_ms(fn: Callable[..., Any], args: list[Any], runs: int = RUNS) -> float:
    """Median of ``runs`` calls by CUDA events, the L2 flushed before each (after a warm-up)."""
    import torch

    from runners.bench import FLUSH_BYTES

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    with _timing_lock():
        return _median_ms(fn, args, runs, flush)


@contextlib.contextmanager
def _timing_lock() -> Iterator[None]:
    """The GPU to this process while it times, when it shares the GPU with the engine's runners
    (``KERNELIZE_TIMING_LOCK``: no runner's work, timed or not, overlaps these calls)."""
    import os

    from runners.sandbox import gpu_alone, timing_lock_fds

    fds = timing_lock_fds()
    try:
        with gpu_alone(fds):
            yield
    finally:
        for fd in fds:
            os.close(fd)


def _median_ms(fn: Callable[..., Any], args: list[Any], runs: int, flush: Any) -> float:
    import torch

    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]  # type: ignore[no-untyped-call]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]  # type: ignore[no-untyped-call]
    for s, e in zip(starts, ends, strict=True):
        flush.zero_()
        s.record()
        fn(*args)
        e.record()
    torch.cuda.synchronize()
    return float(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)))


def measure(path: Path, modes: list[str]) -> dict[str, Any]:
    import torch

    problem = load(path)
    torch.manual_seed(0)
    model = module_class(problem)(*problem.get_init_inputs()).cuda().eval()
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in problem.get_inputs()]
    row: dict[str, Any] = {"problem": path.stem, "level": getattr(problem, "LEVEL", None), "modes": {}}
    with torch.no_grad():
        for mode in modes:
            try:
                fn = compiled(model, mode)
                start = time.monotonic()
                fn(*args)
                torch.cuda.synchronize()
                first_s = time.monotonic() - start
                row["modes"][mode] = {"ms": median_ms(fn, args), "first_call_s": round(first_s, 2)}
            except Exception as exc:  # one mode failing is a cell, not the row
                row["modes"][mode] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return row


def _cell(row: dict[str, Any], mode: str) -> str:
    got = row["modes"].get(mode)
    if got is None:
        return "not run"
    if "error" in got:
        return f"failed ({got['error'][:60]})"
    eager = row["modes"].get("eager", {}).get("ms")
    ratio = f", {eager / got['ms']:.2f}x" if eager and mode != "eager" else ""
    return f"{got['ms']:.4g} ms{ratio} ({got['first_call_s']:.0f} s)"


def markdown(rows: list[dict[str, Any]], modes: list[str]) -> str:
    head = "| problem | level | " + " | ".join(modes) + " |"
    lines = [head, "|" + "---|" * (len(modes) + 2)]
    for row in sorted(rows, key=lambda r: (r.get("level") or 0, r["problem"])):
        cells = " | ".join(_cell(row, m) for m in modes)
        lines.append(f"| {row['problem']} | {row.get('level') or ''} | {cells} |")
    notes = (
        "\nEach cell: median ms of 100 calls (CUDA events, L2 flushed before each), the speedup over "
        "eager, and the first call's seconds (the compile). static: `torch.compile(dynamic=False)`; "
        "dynamic: `dynamic=True`; max-autotune: `mode='max-autotune-no-cudagraphs'`, static; "
        "coordinate-descent: static with `coordinate_descent_tuning`."
    )
    return "\n".join(lines) + "\n" + notes + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=Path, default=ROOT / "bench" / "problems")
    ap.add_argument("--only", default="", help="comma-separated file stems (default: all)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--from-json", nargs="+", type=Path, help="render earlier --json outputs")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    if args.from_json:
        rows = [r for p in args.from_json for r in json.loads(p.read_text())["rows"]]
    else:
        import torch

        if not torch.cuda.is_available():
            print("compile_modes: needs a CUDA GPU", file=sys.stderr)
            return 2
        stems = [s for s in args.only.split(",") if s]
        paths = [args.problems / f"{s}.py" for s in stems] or sorted(args.problems.glob("*.py"))
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            print(f"compile_modes: no such problem: {', '.join(missing)}", file=sys.stderr)
            return 2
        rows = []
        for path in paths:
            rows.append(measure(path, modes))
            if args.json:  # after each problem: a run cut short keeps what it measured
                args.json.write_text(json.dumps({"rows": rows}, indent=1))
    text = markdown(rows, modes)
    if args.markdown:
        args.markdown.write_text(text)
    with contextlib.suppress(BrokenPipeError):
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
