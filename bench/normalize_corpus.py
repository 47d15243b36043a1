"""How many Inductor-style samples import before and after ``runners.normalize``.

    python bench/normalize_corpus.py [--corpus DIR] [--no-run] [--device cpu|cuda] [--jobs N]

For each sample in tests/normalize_corpus/ (KernelBook / KernelLLM-style files that
imitate torch.compile output; see their header comments), prints a markdown row:

- imports before: whether the file imports in a fresh interpreter, as written;
- imports after: whether ``normalize(source, original)``'s output does (``-`` when rejected);
- rewrites: how many kinds of rewrite were reported;
- matches original: whether the normalized module, built with the original's constructor
  arguments and loaded with its state_dict, computes what the original module computes on
  the sample's inputs (on the CPU under TRITON_INTERPRET=1, or compiled on --device cuda;
  skipped with --no-run);
- rejected: normalize's reason, when it refused the file.

The header of a sample says what it imitates::

    # original: LayerNorm            the original module's class name (normalize's class_name)
    # init: 32                       its constructor arguments (optional)
    # inputs: torch.randn(4, 32)     forward inputs, evaluated after torch.manual_seed(2)
    # expect: ok | rejected: TEXT    what normalize should do (the tests check it)
    # --- original ---
    # <the original module's source, commented out>
    # --- end ---

This file also holds the helpers tests/runners/test_normalize.py uses to run samples.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "normalize_corpus"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runners.normalize import Normalized, normalize  # noqa: E402

# Imports a file the way runners.verify loads a candidate (by path, as a fresh module).
IMPORT_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kernelize_candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["kernelize_candidate"] = module
spec.loader.exec_module(module)
"""

# For each job: builds the original and the candidate, loads the original's weights into the
# candidate, and compares their outputs on the sample's inputs. One process for all jobs (torch's
# import is most of the cost); the parent sets TRITON_INTERPRET (1 on the CPU). Prints one JSON line.
RUN_CHILD = """
import importlib.util, json, sys, traceback
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

def check(i, job):
    original = getattr(load(job["original"], f"kernelize_original_{i}"), job["class_name"])
    candidate = getattr(load(job["candidate"], f"kernelize_candidate_{i}"), job["class_name"])
    args = eval("[" + job["init"] + "]")
    torch.manual_seed(0)
    reference = original(*args).eval()
    torch.manual_seed(1)
    model = candidate(*args).eval()
    model.load_state_dict(reference.state_dict(), strict=True)
    reference, model = reference.to(job["device"]), model.to(job["device"])
    torch.manual_seed(2)
    values = [v.to(job["device"]) for v in eval("[" + job["inputs"] + "]")]
    with torch.no_grad():
        expected = reference(*[v.clone() for v in values])
        got = model(*[v.clone() for v in values])
    torch.testing.assert_close(got, expected)

results = []
for i, job in enumerate(json.load(open(sys.argv[1]))):
    try:
        check(i, job)
        results.append([True, "match"])
    except Exception as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[-1]
        results.append([False, last])
print(json.dumps(results))
"""


@dataclass
class Sample:
    path: Path
    class_name: str
    init: str
    inputs: str
    expect: str  # "ok" or "rejected: <text the reason contains>"
    original: str  # the original module's source

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")


def load_sample(path: Path) -> Sample:
    text = path.read_text(encoding="utf-8")
    fields = dict(re.findall(r"^# (original|init|inputs|expect): (.*)$", text, re.MULTILINE))
    match = re.search(r"^# --- original ---\n(.*?)^# --- end ---$", text, re.MULTILINE | re.DOTALL)
    original = ""
    if match:
        original = "".join(
            line[2:] if line.startswith("# ") else "\n" for line in match.group(1).splitlines(True)
        )
    return Sample(
        path, fields["original"], fields.get("init", ""), fields["inputs"], fields["expect"], original
    )


def samples(corpus: Path = CORPUS) -> list[Sample]:
    return [load_sample(p) for p in sorted(corpus.glob("*.py"))]


def _child(
    code: str, args: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            cwd=tempfile.gettempdir(),  # not the repository: nothing to import from there by accident
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1] if lines else f"exit code {proc.returncode}"


def imports(path: Path) -> tuple[bool, str]:
    """Whether the file imports in a fresh interpreter (and the last error line when not)."""
    return _child(IMPORT_CHILD, [str(path)])


def imports_source(source: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(source, encoding="utf-8")
        return imports(path)


def run_checks(
    jobs: list[tuple[Sample, str]], device: str = "cpu", timeout: float = 600
) -> list[tuple[bool, str]]:
    """For each (sample, normalized source): whether the source computes what the sample's
    original module does (one child process): on CPU tensors under the Triton interpreter,
    or compiled, on a GPU, with ``device="cuda"``."""
    if not jobs:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        specs = []
        for i, (sample, source) in enumerate(jobs):
            original = Path(tmp) / f"original_{i}.py"
            candidate = Path(tmp) / f"candidate_{i}.py"
            original.write_text(sample.original, encoding="utf-8")
            candidate.write_text(source, encoding="utf-8")
            specs.append(
                {
                    "original": str(original),
                    "candidate": str(candidate),
                    "class_name": sample.class_name,
                    "init": sample.init,
                    "inputs": sample.inputs,
                    "device": device,
                }
            )
        listing = Path(tmp) / "jobs.json"
        listing.write_text(json.dumps(specs), encoding="utf-8")
        env = {"TRITON_INTERPRET": "1" if device == "cpu" else "0"}
        ok, out = _child(RUN_CHILD, [str(listing)], env=env, timeout=timeout)
    if not ok:
        return [(False, out)] * len(jobs)
    return [(bool(r[0]), str(r[1])) for r in json.loads(out.splitlines()[-1])]


def run_check(sample: Sample, source: str) -> tuple[bool, str]:
    return run_checks([(sample, source)])[0]


@dataclass
class Row:
    sample: Sample
    result: Normalized
    before: tuple[bool, str]
    after: tuple[bool, str] | None
    runs: tuple[bool, str] | None


def measure(sample: Sample) -> Row:
    result = normalize(sample.source, sample.class_name)
    before = imports(sample.path)
    after = imports_source(result.source) if result.rejected is None else None
    return Row(sample, result, before, after, None)


def _cell(outcome: tuple[bool, str] | None) -> str:
    if outcome is None:
        return "-"
    ok, detail = outcome
    if ok:
        return "yes"
    detail = re.sub(r" \(/[^)]*\)", "", detail)  # drop file paths
    return "no (" + detail.replace("|", "\\|")[:100] + ")"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--no-run", action="store_true", help="skip running the normalized samples")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run them")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = parser.parse_args()

    todo = samples(args.corpus)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(measure, todo))
    if not args.no_run:
        runnable = [r for r in rows if r.after and r.after[0]]
        outcomes = run_checks([(r.sample, r.result.source) for r in runnable], args.device)
        for row, outcome in zip(runnable, outcomes, strict=True):
            row.runs = outcome

    print("| sample | original | imports before | imports after | rewrites | matches original | rejected |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        rejected = (row.result.rejected or "").replace("|", "\\|")
        print(
            f"| {row.sample.name} | {row.sample.class_name} | {_cell(row.before)} | {_cell(row.after)} "
            f"| {len(row.result.rewrites)} | {_cell(row.runs)} | {rejected} |"
        )
    total = len(rows)
    before = sum(r.before[0] for r in rows)
    after = sum(bool(r.after and r.after[0]) for r in rows)
    print()
    print(f"{before} of {total} import before, {after} of {total} after.")
    if not args.no_run:
        matched = sum(bool(r.runs and r.runs[0]) for r in rows)
        where = "CPU, TRITON_INTERPRET=1" if args.device == "cpu" else "CUDA, compiled Triton"
        print(f"{matched} of {total} match their original module after normalization ({where}).")
    rejected = sum(r.result.rejected is not None for r in rows)
    print(f"{rejected} of {total} rejected by normalize.")
    import torch  # only to say which versions the numbers are for
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, Python {sys.version.split()[0]}.")


if __name__ == "__main__":
    main()
