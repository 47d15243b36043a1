"""The fixed cost of evaluating a candidate, and the cost per candidate on a small problem.

    python bench/harness_overhead.py [--device cpu|cuda] [--repeat 5]

Prints a markdown table (median and spread of wall seconds over --repeat runs):
- sandbox round trip: fresh interpreter, isolation, request and result over the pipe, no torch;
- sandbox + torch/triton import: the same with the verification module imported;
- reference runner (once per module): building the original and finding its input shapes, the
  judge planning its input families from that, and the original run on them, in one sandbox;
- evaluate: all checks on one correct candidate (tests/problems/add_relu.py, 16 x 100), the judge's
  calls in its runner and the judge's comparison of what came back;
- the same with its runner started ahead and its imports done (``pipeline.start_runner``), as a
  module's candidates after the first one run: what is left is the fixed cost on the critical path;
- a whole module (``pipeline.kernelize``) with the candidates in ``MODULE_CANDIDATES``, each runner
  started while the one before it runs, and the same with every runner started when its turn comes.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runners import pipeline, sandbox  # noqa: E402
from runners.generators.base import Generator  # noqa: E402
from runners.generators.files import FilesGenerator  # noqa: E402

# A module's candidates as a generator gives them: right, wrong and cheating ones, none that hangs.
MODULE_CANDIDATES = ("ok.py", "wrong.py", "cached.py", "mutate.py", "no_kernel.py", "reused_buffer.py")


def measure(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    settings = pipeline.EngineSettings(device=args.device, compile_baseline=False)
    problems, _ = pipeline.problems_for(str(ROOT / "tests/problems/add_relu.py"), str(ROOT), "Model")
    problem = problems[0]
    cand = next(
        c for c in FilesGenerator(ROOT / "tests/candidates/add_relu").generate(problem, 1) if c.id == "ok.py"
    )
    limits = sandbox.Limits(120, 8192)
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(pipeline._cache_dirs(args.device))
        prep, judge = pipeline._prepare(problem, settings, env, stack)
        assert prep["ok"] and judge is not None, prep
        problem.build = prep["build"]
        # As a module's candidates are checked: with the original path kept (runners/fallback.py).
        assert pipeline._normalize(cand, problem, settings.original_path) is None

        def evaluate(runner: pipeline.Runner | None = None) -> None:
            result = pipeline.evaluate_candidate(problem, cand, prep, settings, env, judge, runner=runner)
            assert result.status.value == "correct", result.reason

        def reference_runner() -> None:
            with contextlib.ExitStack() as inner:
                again, _ = pipeline._prepare(problem, settings, env, inner)
                assert again["ok"], again

        rows = {
            "sandbox round trip (no torch)": lambda: sandbox.run("runners.sandbox:echo", {}, limits, env=env),
            "sandbox + torch/triton import": lambda: sandbox.run("runners.verify:noop", {}, limits, env=env),
            f"reference runner: build, plan, {len(judge.planned)} calls (per module)": reference_runner,
            "evaluate one correct candidate (its checks, the judge's calls and verdict)": evaluate,
        }
        ahead = "the same, its runner started ahead (a module's next candidate)"
        print(f"| step ({args.device}, {args.repeat} runs) | median s | min s | max s |")
        print("|---|---|---|---|")
        for name, fn in rows.items():
            med, lo, hi = measure(fn, args.repeat)
            print(f"| {name} | {med:.2f} | {lo:.2f} | {hi:.2f} |", flush=True)
        times = []
        for _ in range(args.repeat):
            runner = pipeline.start_runner(problem, settings, env, judge)
            assert runner.sandbox.wait_warm(120), "the runner never finished its imports"
            begin = time.perf_counter()
            evaluate(runner)
            times.append(time.perf_counter() - begin)
        print(f"| {ahead} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")

    with tempfile.TemporaryDirectory() as folder:
        for name in MODULE_CANDIDATES:
            shutil.copy(ROOT / "tests/candidates/add_relu" / name, folder)
        generators: list[Generator] = [FilesGenerator(Path(folder))]
        runs_ahead = pipeline.runs_ahead
        for label, ahead_on in (("started ahead", True), ("each started in turn", False)):
            pipeline.runs_ahead = lambda s, on=ahead_on: on and runs_ahead(s)  # type: ignore[misc]
            med, lo, hi = measure(lambda: pipeline.kernelize(problem, generators, settings), args.repeat)
            row = f"a module, {len(MODULE_CANDIDATES)} candidates, runners {label}"
            print(f"| {row} | {med:.2f} | {lo:.2f} | {hi:.2f} |", flush=True)
        pipeline.runs_ahead = runs_ahead


if __name__ == "__main__":
    main()
