"""The judge: decides whether a candidate computes what the original computes, from outside both.

The judge never imports the pull request's module nor a candidate. Per module it

1. plans the calls: input families chosen here, with a seed drawn per run that no runner can know
   in advance (normal draws; large magnitudes with outliers; zero and all-negative rows; batch of
   one; other and odd sizes; transposed and strided views; the same inputs again; with autograd
   recording, upstream gradients of its choosing; through ``torch.compile(fullgraph=True)`` of the
   candidate, with and without autograd), shuffled, under names that say nothing
   (``call 7``);
2. writes every input as raw bytes to one file and runs the **reference runner** (a sandbox that
   builds only the original module) over it, keeping the outputs, float64 outputs and gradients
   it returns: the reference is run once per module, before any candidate, so nothing a
   candidate does can reach it;
3. for each candidate, reads back the outputs its runner wrote for the same calls (after that
   runner has exited), rebuilds plain tensors from the bytes and compares them with its own code
   and its own tolerance table. Outputs, in-place changes to inputs and gradients are compared;
   a family on which the original itself raises or is not finite is skipped and reported.

What a runner says about itself is a claim; the verdict rests on these comparisons.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from runners import bench, buffers, inputs, sandbox
from runners.protocol import (
    Arg,
    Call,
    CallReply,
    ProtocolError,
    RunReply,
    RunRequest,
    TensorRef,
    TimingPlan,
    TimingReply,
)
from runners.tolerances import TOLERANCES
from runners.verify import Errors, Mismatch, Reject, compare, own_error, tolerance_key, uses_tf32_dot

CANDIDATE_OUTPUTS = "judge-outputs.bin"
REFERENCE_OUTPUTS = "reference-outputs.bin"
# What the suggestion does when autograd records, once the judge has compared its gradients.
TRAINING_ORIGINAL = "original path (no backward kernel yet)"
TRAINING_TRITON = "Triton backward (gradients checked)"
# A Triton backward that gave other gradients: the suggestion keeps the original path for training.
TRAINING_BACKWARD_WRONG = "original path (the Triton backward was wrong: {reason})"
TRAINING_UNCHECKED = "not checked (the generated code alone: no original path)"
# Above this many input bytes per call, only the families that find the most bugs are planned.
LARGE_CALL_BYTES = 256 * 2**20
# The call the runners make with other weights (``Call.weights_seed``): nothing captured at the
# first call survives it.
OTHER_WEIGHTS = "normal, other weights"
DRAW_THREADS = 8  # threads drawing a module's inputs side by side (at most the machine's cores)
TIMING_SETS = 2  # input sets the timed calls alternate between (each call's elements multiplied afresh)
TIMING_SIGMAS = 6.0  # an honest projection stays within this many standard deviations
# The judge's clock against a claimed time per call: up to CLOCK_SLACK times the claim plus 50 us,
# the claim stands; up to CLOCK_CREDIT times it plus CLOCK_LAUNCH_S, the clock's figure is the
# candidate's time (a call that costs more on the CPU than on the GPU shows so: on an H200 an honest
# 3.6 us kernel on a 16 x 100 input costs 0.19 ms a call through its Python launch path, as much as
# a 0.19 ms kernel that claims a twentieth of its time, so the clock cannot tell those two apart and
# credits both with what it saw); beyond, no launch path explains it: the claim is rejected as false.
CLOCK_SLACK = 1.5
CLOCK_CREDIT = 3.0
CLOCK_LAUNCH_S = 1e-3
# The families a candidate's runner calls through torch.compile(fullgraph=True) of its module.
COMPILED = "torch.compile(fullgraph=True)"
# What the suggestion does under torch.compile, once the judge has compared those calls.
COMPILE_KERNELS = "✓ the kernels, as custom ops (checked with fullgraph=True)"
COMPILE_ORIGINAL = (
    "✓ the original path: the launches are not custom ops, so compiled, the original computation "
    "runs and Inductor compiles it (checked with fullgraph=True)"
)
# How the judge's findings on a candidate's timed training steps begin: a wrong gradient there is
# a wrong backward ("training (" is what runners/pipeline.py falls back to the original path on).
TRAINING_TIMED = "training (timed forward+backward)"


@dataclass
class Timed:
    """Timing, once checked: eager and torch.compile from the reference runner, the candidate's own,
    the judge's view of the timed span; or why it went untimed."""

    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    clock: dict[str, float] = field(default_factory=dict)
    untimed: str = ""
    compile_error: str = ""  # why the reference runner could not time torch.compile
    clocked: str = ""  # why the candidate's time is the judge's clock's figure, not its claim


@dataclass
class Planned:
    family: str  # what the call tests, for the report (the runner never sees it)
    call: Call
    inputs: list[Any]  # the judge's own copy, as sent


@dataclass
class Verdict:
    status: str  # "correct" | "incorrect" | "rejected"
    reason: str = ""
    errors: Errors = field(default_factory=Errors)
    families: list[str] = field(default_factory=list)  # checked
    family_errors: dict[str, float] = field(default_factory=dict)  # family -> its largest abs error
    skipped: dict[str, str] = field(default_factory=dict)  # family -> why the original rules it out
    training_checked: bool = False
    # Timing, once checked: eager and torch.compile from the reference runner, the candidate's own.
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    compile_error: str = ""
    clock: dict[str, float] = field(default_factory=dict)  # the judge's own view of the timed span
    untimed: str = ""  # why a candidate that passed was not timed
    clocked: str = ""  # why the candidate's forward time is the judge's clock's figure
    # Forward and backward, for a candidate asked to time training (``Judge.request``).
    training_timing: Timed = field(default_factory=Timed)


# ---------------------------------------------------------------------------
# Input families


def _floating(v: Any) -> bool:
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def _map_float(values: list[Any], fn: Any) -> list[Any]:
    return [fn(v) if _floating(v) else v for v in values]


def _floats(fn: Any) -> Any:
    """``fn`` applied to each floating tensor of a list of values."""
    return lambda values: _map_float(values, fn)


def _clones(values: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _large(v: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Magnitudes in the hundreds (an unstabilised softmax overflows past ~88) and a few outliers
    a hundred times larger still."""
    out = v.double() * 100.0
    flat = out.reshape(-1)
    if flat.numel():
        k = max(1, flat.numel() // 1000)
        idx = torch.randint(0, flat.numel(), (k,), generator=gen)
        flat[idx] = flat[idx] * 100.0
    return out.to(v.dtype)


def _zero_negative_rows(v: torch.Tensor) -> torch.Tensor:
    """Exact zeros in the first row (over the last dimension), all-negative values in the second."""
    out = v.clone()
    if out.dim() == 0:
        return out
    rows = out.reshape(-1, out.shape[-1]) if out.shape[-1] else out.reshape(1, -1)
    if rows.shape[0] >= 2:
        rows[0].zero_()
        rows[1] = -rows[1].abs() - 0.5
    else:
        rows.copy_(-rows.abs() - 0.5)
    return out


def _transposed(v: torch.Tensor) -> torch.Tensor:
    if v.dim() < 2:
        return v
    return v.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, column-major last dims


def _strided(v: torch.Tensor) -> torch.Tensor:
    if v.dim() < 1 or v.shape[-1] == 0:
        return v
    wide = torch.empty((*v.shape[:-1], 2 * v.shape[-1]), dtype=v.dtype)
    wide.fill_(float("nan") if v.is_floating_point() else 0)
    view = wide[..., 1::2]  # odd storage offset, stride 2: the gaps are NaN
    view.copy_(v)
    return view


def _batch_of_one(specs: list[Any]) -> list[Any] | None:
    shapes = inputs.tensor_shapes(specs)
    if not shapes or not shapes[0] or shapes[0][0] <= 1:
        return None
    batch = shapes[0][0]
    out = []
    for spec in specs:
        if "tensor" in spec and spec["tensor"]["shape"] and spec["tensor"]["shape"][0] == batch:
            t = dict(spec["tensor"])
            t["shape"] = [1, *t["shape"][1:]]
            out.append({"tensor": t})
        else:
            out.append(spec)
    return out


def _draw(specs: list[Any], seed: int, dtype: torch.dtype | None) -> list[Any]:
    values = inputs.make_values(specs, seed, "cpu")
    if dtype is not None:
        values = [v.to(dtype) if _floating(v) else v for v in values]
    for i, (v, spec) in enumerate(zip(values, specs, strict=True)):
        if _floating(v) and v.numel() and not bool(v.any()):  # never all zeros: a no-op would pass
            values[i] = inputs.make_value(spec, torch.Generator().manual_seed(seed + 1), "cpu").to(v.dtype)
    return values


class _Draws:
    """Inputs drawn on a pool of threads: each draw has its own generator (``_draw``), so the values
    are the same bits as drawn one after the other, and drawing benchmark-size inputs (seconds a
    tensor on one core) takes the time of the longest few instead of their sum."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=min(DRAW_THREADS, os.cpu_count() or 1))

    def __enter__(self) -> _Draws:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def draw(
        self, specs: list[Any], seed: int, dtype: torch.dtype | None, make: Any = None
    ) -> Future[list[Any]]:
        """The values drawn for ``specs`` with ``seed``, and ``make`` of them when given (on the same
        thread: it must draw nothing)."""
        if make is None:
            return self.pool.submit(_draw, specs, seed, dtype)
        return self.pool.submit(lambda: make(_draw(specs, seed, dtype)))


def plan_families(
    specs: list[Any],
    variants: list[list[Any]],
    dtype: torch.dtype | None,
    seed: int,
    grad: bool,
    compiled: bool = False,
) -> list[tuple[str, list[Any], bool]]:
    """(family, inputs on the CPU, autograd records) for each call, before shuffling; with
    ``compiled``, calls through torch.compile too (families starting with COMPILED)."""
    rng = random.Random(seed)

    def s() -> int:
        return rng.randrange(2**31)

    gen = torch.Generator().manual_seed(s())
    with _Draws() as pool:

        def draw(make: Any = None, of: list[Any] = specs) -> Future[list[Any]]:
            return pool.draw(of, s(), dtype, make)

        # (family, its draw, what is then made of it on this thread (None: nothing), records): large
        # magnitudes take their outliers from ``gen``, in the order the families were always made, and
        # the same inputs again are copies of the first.
        wanted: list[tuple[str, Future[list[Any]], Any, bool]] = []
        first = draw()
        wanted += [
            ("normal", first, None, False),
            ("normal", draw(), None, False),
            ("large magnitudes and outliers", draw(), _floats(lambda v: _large(v, gen)), False),
            ("strided views (non-contiguous)", draw(_floats(_strided)), None, False),
            (OTHER_WEIGHTS, draw(), None, False),
        ]
        per_call = sum(v.numel() * v.element_size() for v in first.result() if isinstance(v, torch.Tensor))
        if per_call <= LARGE_CALL_BYTES:
            wanted += [
                ("zero and all-negative rows", draw(_floats(_zero_negative_rows)), None, False),
                ("transposed views (non-contiguous)", draw(_floats(_transposed)), None, False),
                ("the same inputs again", first, _clones, False),
            ]
            one = _batch_of_one(specs)
            if one is not None:
                wanted.append(("batch of one", draw(of=one), None, False))
            for variant in variants[:3]:
                shapes = inputs.tensor_shapes(variant)
                wanted.append((f"other sizes {shapes}", draw(of=variant), None, False))
        # Compiled, as a user who compiles the model calls it: the suggestion must keep working (a graph
        # break, a launch Dynamo cannot trace or a wrong fake implementation fails these calls).
        if compiled:
            wanted.append((COMPILED, draw(), None, False))
        if compiled and grad:
            wanted.append((f"{COMPILED}, autograd recording", draw(), None, True))
        if grad:
            wanted.append(("normal, autograd recording", draw(), None, True))
            wanted.append(("strided views, autograd recording", draw(_floats(_strided)), None, True))
            if per_call <= LARGE_CALL_BYTES:  # a Triton backward is held to the families that find bugs
                wanted.append(
                    ("large magnitudes, autograd recording", draw(), _floats(lambda v: _large(v, gen)), True)
                )
                wanted.append(
                    (
                        "zero and all-negative rows, autograd recording",
                        draw(_floats(_zero_negative_rows)),
                        None,
                        True,
                    )
                )
        plan: list[tuple[str, list[Any], bool]] = []
        for family, drawn, make, records in wanted:
            values = drawn.result()
            plan.append((family, values if make is None else make(values), records))
    return plan


def draw_sets(specs: list[Any], seeds: list[int], dtype: torch.dtype | None) -> list[list[Any]]:
    """One set of inputs per seed, drawn side by side (``_Draws``)."""
    with _Draws() as pool:
        drawn = [pool.draw(specs, seed, dtype) for seed in seeds]
        return [d.result() for d in drawn]


# Bytes on disk per byte of a call's inputs, over the module's checks: the inputs, the reference's
# outputs (native and float64) and its inputs afterwards, one candidate's outputs and inputs
# afterwards (outputs taken as large as the inputs); a call that records autograd adds gradients
# (native and float64 from the reference, the candidate's own).
DISK_PER_INPUT_BYTE = 7
DISK_PER_INPUT_BYTE_GRAD = 11
DISK_SHARE = 0.8  # of the free disk the judge's plan may fill
# Left out first when the disk is short, in this order (a family is matched by its start); the
# first "normal" call always stays.
DISK_DROP_ORDER = (
    "other sizes",
    "batch of one",
    "the same inputs again",
    "transposed views",
    "zero and all-negative rows",
    "large magnitudes, autograd recording",
    "strided views, autograd recording",
    "normal",  # the second
    f"{COMPILED}, autograd recording",
    OTHER_WEIGHTS,
    "strided views (non-contiguous)",
    COMPILED,
    "large magnitudes and outliers",
    "normal, autograd recording",  # last: without it the backward goes unchecked (the original path)
)


def _input_bytes(values: list[Any]) -> int:
    return sum(v.untyped_storage().nbytes() for v in values if isinstance(v, torch.Tensor))


def fit_disk(
    families: list[tuple[str, list[Any], bool]], free: int, timing: bool = False
) -> tuple[list[tuple[str, list[Any], bool]], dict[str, str]]:
    """The planned families whose buffers fit in ``DISK_SHARE`` of ``free`` bytes, and why each
    other one was left out ({family: reason}). The timing sets (two calls' inputs) always stay."""

    def need(fam: list[tuple[str, list[Any], bool]]) -> int:
        per = [_input_bytes(v) * (DISK_PER_INPUT_BYTE_GRAD if g else DISK_PER_INPUT_BYTE) for _, v, g in fam]
        return sum(per) + (TIMING_SETS * _input_bytes(fam[0][1]) if timing and fam else 0)

    kept = list(families)
    budget = int(free * DISK_SHARE)
    full = need(kept)
    if full <= budget:
        return kept, {}
    left: dict[str, str] = {}
    why = f"needs about {full / 2**30:.1f} GiB of disk for every family, {free / 2**30:.1f} GiB free"
    for prefix in DISK_DROP_ORDER:
        while need(kept) > budget:
            # Index 0 is the first "normal" call: never left out. "normal" itself is matched whole.
            at = next(
                (
                    i
                    for i, (f, _, _) in enumerate(kept)
                    if i > 0 and (f == prefix or (prefix != "normal" and f.startswith(prefix)))
                ),
                None,
            )
            if at is None:
                break
            left[kept.pop(at)[0]] = why
        if need(kept) <= budget:
            break
    return kept, left


# ---------------------------------------------------------------------------
# The judge


class Judge:
    """One module: its planned calls, the reference's answers, and verdicts on candidates."""

    def __init__(
        self,
        *,
        device: str,
        file: str,
        root: str | None,
        class_name: str,
        build: dict[str, Any],
        variants: list[list[Any]],
        dtype: str | None,
        grad: bool,
        compiled: bool = False,
        tolerance: dict[str, list[float]] | None = None,
        seed: int | None = None,
        timing: bool = False,
        compile_baseline: bool = False,
        time_training: bool = False,
    ) -> None:
        """``time_training`` (with ``timing`` and ``grad``): the reference also times training
        steps (forward and backward), for the candidates that bring their own backward.
        ``compiled``: candidates are also called through ``torch.compile(fullgraph=True)``."""
        self.device = device
        self.file, self.root, self.class_name, self.build = file, root, class_name, build
        self.dtype = dtype
        self.seed = secrets.randbits(31) if seed is None else seed
        self.table = dict(TOLERANCES)
        for key, bounds in (tolerance or {}).items():  # the repository's, only ever tighter
            if key in self.table:
                self.table[key] = tuple(min(a, b) for a, b in zip(bounds, self.table[key], strict=True))  # type: ignore[assignment]
        self.dir = Path(tempfile.mkdtemp(prefix="kernelize-judge-"))
        self.inputs_path = self.dir / "inputs.bin"
        self.reference_path = self.dir / REFERENCE_OUTPUTS
        checked = getattr(torch, dtype) if dtype else None
        families = plan_families(build["inputs"], variants, checked, self.seed, grad, compiled)
        # Families the disk cannot hold the buffers of are left out, and every verdict says so.
        families, self.left_out = fit_disk(families, shutil.disk_usage(self.dir).free, timing)
        order = list(range(len(families)))
        random.Random(self.seed ^ 0x5F3759DF).shuffle(order)
        self.planned: list[Planned] = []
        rng = random.Random(self.seed + 1)
        self._written: list[torch.Tensor] = []  # every tensor in the inputs file, in order
        self.timing: TimingPlan | None = None
        self.training_timing: TimingPlan | None = None
        with buffers.Writer(self.inputs_path) as writer:

            def arg(v: Any) -> Arg:
                if not isinstance(v, torch.Tensor):
                    return Arg(value=v)
                self._written.append(v)
                return Arg(tensor=writer.add(v))

            for n, k in enumerate(order):
                family, values, records = families[k]
                call = Call(
                    f"call {n}",
                    tuple(arg(v) for v in values),
                    grad=records,
                    upstream_seed=rng.randrange(2**31),
                    weights_seed=rng.randrange(2**31) if family == OTHER_WEIGHTS else None,
                    compiled=family.startswith(COMPILED),
                )
                self.planned.append(Planned(family, call, values))
            if timing:
                seeds = [rng.randrange(2**31) for _ in range(TIMING_SETS)]
                sets = tuple(tuple(arg(v) for v in d) for d in draw_sets(build["inputs"], seeds, checked))
                # The salts are secret, not seeded: a candidate's runner learns one only once its
                # timed span has begun (``asker``), so it cannot make the timed inputs before.
                self.timing = TimingPlan(
                    sets=sets, seed=rng.randrange(2**31), compile=compile_baseline, salt=secrets.randbits(62)
                )
                if grad and time_training:  # the same input sets, other scales, weights and upstreams
                    self.training_timing = dataclasses.replace(
                        self.timing, seed=rng.randrange(2**31), training=True, salt=secrets.randbits(62)
                    )
        self.inputs_path.chmod(0o444)
        self.inputs_sha256 = buffers.sha256_file(self.inputs_path)
        self.reference_timing: TimingReply | None = None
        self.reference_training: TimingReply | None = None
        self.training_asked = False  # whether the last candidate request asked for training timing
        self.reference_marks: list[tuple[str, float]] = []
        self.reference: dict[str, CallReply] = {}
        self._reference_blob: Any = b""
        self._candidates = 0
        self._normal_finite: bool | None = None
        self._own: list[tuple[float, float]] | None = None
        self.reference_error = ""

    # -- requests --------------------------------------------------------------

    def asker(self) -> sandbox.Asker:
        """Answers a candidate runner's asks for the salts of its timed spans, only once the span's
        start is marked, so its inputs cannot be made (nor its outputs computed) before the span
        the judge's clock covers. A runner that marks its start early to ask early starts its span
        early too: the span runs from the first start mark."""
        plans = {bench.salt_name(False): self.timing, bench.salt_name(True): self.training_timing}

        def answer(what: str, marks: list[tuple[str, float]]) -> int | None:
            plan = plans.get(what)
            start, _ = bench.span_marks(plan is not None and plan.training)
            return plan.salt if plan is not None and start in {n for n, _ in marks} else None

        return answer

    def request(self, role: str, outputs_name: str, training: bool = False) -> RunRequest:
        """What a runner is asked. A candidate with ``training`` (its training path is its own
        backward) also times training steps, on the reference's terms."""
        self._restore_inputs()
        timing, training_timing = self.timing, self.training_timing
        if role == "candidate":
            timing = _candidate_plan(timing, self.reference_timing)
            training_timing = _candidate_plan(training_timing, self.reference_training) if training else None
            self.training_asked = training
        return RunRequest(
            role=role,
            device=self.device,
            file=self.file,
            root=self.root,
            class_name=self.class_name,
            build=self.build,
            inputs_path=str(self.inputs_path),
            inputs_sha256=self.inputs_sha256,
            calls=tuple(p.call for p in self.planned),
            dtype=self.dtype,
            outputs_name=outputs_name,
            timing=timing,
            training_timing=training_timing,
        )

    def _restore_inputs(self) -> None:
        """Every runner gets the bytes the judge wrote, whatever an earlier runner did to the file."""
        try:
            same = buffers.sha256_file(self.inputs_path) == self.inputs_sha256
        except OSError:
            same = False
        if not same:  # rewritten from the judge's own copies of the inputs
            with contextlib.suppress(OSError):
                self.inputs_path.unlink()
            with buffers.Writer(self.inputs_path) as writer:
                for v in self._written:
                    writer.add(v)
            self.inputs_path.chmod(0o444)

    def run_reference(self, limits: sandbox.Limits, env: dict[str, str], python: str | None) -> str:
        """Run the original over every call in a reference runner of its own; '' or why not."""
        res = sandbox.run(
            "runners.runner:reference",
            self.request("reference", REFERENCE_OUTPUTS).to_dict(),
            limits,
            env=env,
            python=python,
            collect=REFERENCE_OUTPUTS,
            collect_to=self.reference_path,
            readable=[*sandbox.problem_paths(self.file, self.root), self.inputs_path],
        )
        return self.accept_reference(res)

    def accept_reference(self, res: sandbox.SandboxResult) -> str:
        """Keep the reference runner's answers (read once it has exited); '' or why they are unusable."""
        if res.outcome != "ok" or res.payload is None:
            self.reference_error = f"the original failed in the reference runner: {res.reason}"
            return self.reference_error
        try:
            reply = RunReply.from_dict(res.payload)
        except ProtocolError as exc:
            self.reference_error = f"the reference runner's reply is malformed: {exc}"
            return self.reference_error
        if reply.error:
            self.reference_error = reply.error
            return reply.error
        self.reference = {c.name: c for c in reply.calls}
        self.reference_timing, self.reference_marks = reply.timing, list(res.marks)
        self.reference_training = reply.training_timing
        self._reference_blob = buffers.map_file(res.blob_path) if res.blob_path else res.blob
        return ""

    # -- verdicts --------------------------------------------------------------

    def candidate_path(self) -> Path:
        """Where the next candidate's outputs are moved to once its runner has exited."""
        self._candidates += 1
        return self.dir / f"candidate-{self._candidates}.bin"

    def check_file(
        self, payload: Any, path: Path | None, generated: str, marks: list[tuple[str, float]] | None = None
    ) -> Verdict:
        """:meth:`check` on outputs collected into ``path`` (mapped, then removed)."""
        data = buffers.map_file(path)
        try:
            return self.check(payload, data, generated, marks)
        finally:
            if not isinstance(data, bytes):
                data.close()
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    def _tensors(self, blob: Any, refs: tuple[TensorRef, ...]) -> list[torch.Tensor]:
        return [buffers.rebuild(blob, r, self.device) for r in refs]

    def check(
        self, payload: Any, blob: Any, generated: str, marks: list[tuple[str, float]] | None = None
    ) -> Verdict:
        """The verdict on a candidate from its runner's reply (``payload``), output bytes and the
        marks its sandbox timestamped (the judge's clock around its timing)."""
        try:
            reply = RunReply.from_dict(payload)
            tf32 = uses_tf32_dot(generated) and self.device == "cuda"
            verdict = self._check(reply, blob, tf32)
            self._check_timing(reply, marks or [], tf32, verdict)
            return verdict
        except ProtocolError as exc:
            return Verdict("rejected", f"judge: the candidate runner's reply is malformed: {exc}")
        except Reject as exc:
            return Verdict("rejected", str(exc))
        except Mismatch as exc:
            return Verdict("incorrect", str(exc))

    def _check(self, reply: RunReply, blob: Any, tf32: bool) -> Verdict:
        if reply.error:
            raise Mismatch(f"judge: {reply.error}")
        got_calls = {c.name: c for c in reply.calls}
        verdict = Verdict("correct", skipped=dict(self.left_out))
        for p in self.planned:
            where = f"judge, {p.family}, shape {_shapes(p.inputs)}"
            ref = self.reference.get(p.call.name)
            if ref is None or ref.error:
                verdict.skipped.setdefault(
                    p.family, f"the original raised ({ref.error if ref else 'no answer'})"
                )
                continue
            native = self._tensors(self._reference_blob, ref.outputs)
            ref64 = self._tensors(self._reference_blob, ref.outputs64) if ref.outputs64 else native
            if len(ref64) != len(native):
                ref64 = native
            if not _finite(native) and p.family != "normal" and self._normal_is_finite():
                # Overflow the original itself shows on this family: nothing to hold a kernel to.
                # (A module that gives inf on normal inputs too, a mask say, is compared as it is:
                # the candidate must give the same NaN/Inf pattern.)
                verdict.skipped.setdefault(p.family, "the original's outputs are not finite")
                continue
            cand = got_calls.get(p.call.name)
            if cand is None:
                raise Reject(f"{where}: the candidate's runner did not answer {p.call.name}")
            if cand.error:
                raise Mismatch(f"{where}: {cand.error}")
            for i, t in enumerate(cand.outputs):
                if t.device != torch.device(self.device).type:
                    raise Mismatch(f"{where}: output {i} is on {t.device}, the inputs on {self.device}")
            got = self._tensors(blob, cand.outputs)
            errors = compare(got, ref64, native, where, tf32, self.device, self.table)
            verdict.errors.add(errors)
            verdict.family_errors[p.family] = max(verdict.family_errors.get(p.family, 0.0), errors.max_abs)
            self._check_inputs_after(p, ref, cand, blob, where)
            if p.call.grad:
                self._check_gradients(p, ref, cand, blob, tf32, verdict.skipped)
                verdict.training_checked = True
            if p.family not in verdict.families:
                verdict.families.append(p.family)
        if not verdict.families:
            raise Reject("judge: the original ruled out every input family: nothing was checked")
        return verdict

    def _normal_is_finite(self) -> bool:
        """Whether the original's outputs on the normal family are finite (computed once)."""
        if self._normal_finite is None:
            refs = [self.reference.get(p.call.name) for p in self.planned if p.family == "normal"]
            self._normal_finite = all(
                _finite(self._tensors(self._reference_blob, r.outputs)) for r in refs if r and not r.error
            )
        return self._normal_finite

    def own_error(self) -> list[tuple[float, float]]:
        """Per output, the original's own error in its dtype on the normal family, against its
        float64 reference (``verify.own_error``; the largest over the family's calls), computed once:
        for a family whose reference is the original in its own dtype (above 2^31 elements)."""
        if self._own is None:
            own: list[tuple[float, float]] = []
            for p in self.planned:
                ref = self.reference.get(p.call.name)
                if p.family != "normal" or ref is None or ref.error or not ref.outputs64:
                    continue
                native = self._tensors(self._reference_blob, ref.outputs)
                ref64 = self._tensors(self._reference_blob, ref.outputs64)
                for i, (n, r) in enumerate(zip(native, ref64, strict=False)):
                    ratio = own_error(n, r) if n.is_floating_point() and n.shape == r.shape else (0.0, 0.0)
                    if i == len(own):
                        own.append(ratio)
                    else:
                        own[i] = (max(own[i][0], ratio[0]), max(own[i][1], ratio[1]))
            self._own = own
        return self._own

    def _check_inputs_after(self, p: Planned, ref: CallReply, cand: CallReply, blob: Any, where: str) -> None:
        sent = p.inputs
        if len(cand.inputs_after) != len(sent):
            raise Reject(
                f"{where}: the candidate's runner reported {len(cand.inputs_after)} inputs, not {len(sent)}"
            )
        for i, v in enumerate(sent):
            if not isinstance(v, torch.Tensor):
                continue
            after_ref, after_cand = ref.inputs_after[i], cand.inputs_after[i]
            if after_cand is None:
                raise Reject(f"{where}: the candidate's runner did not report input {i}")
            got = buffers.rebuild(blob, after_cand, "cpu")
            base = v.detach().cpu()
            expected = (
                buffers.rebuild(self._reference_blob, after_ref, "cpu") if after_ref is not None else base
            )
            if _same(expected, base):  # the original leaves it alone: so must the candidate, exactly
                if not _same(got, base):
                    raise Reject(f"check 4: forward modifies input {i} in place ({where})")
            else:  # the original updates it in place: the candidate must update it the same way
                compare(
                    got,
                    expected.double(),
                    expected,
                    f"{where}: input {i} after the call",
                    False,
                    "cpu",
                    self.table,
                )

    def _check_gradients(
        self, p: Planned, ref: CallReply, cand: CallReply, blob: Any, tf32: bool, skipped: dict[str, str]
    ) -> None:
        where = f"training ({p.family}, shape {_shapes(p.inputs)})"
        lost = sorted(set(cand.no_history) - set(ref.no_history))
        if lost:
            which = ", ".join(f"output {i}" for i in lost)
            raise Mismatch(
                f"{where}: {which} has no autograd history with grad enabled (no grad_fn): "
                "the layer and everything before it would stop learning"
            )
        for name, r in ref.grads.items():
            c = cand.grads.get(name)
            if c is None:
                raise Mismatch(f"{where}: no gradient for {name}")
            native = buffers.rebuild(self._reference_blob, r, self.device)
            r64 = ref.grads64.get(name)
            want = buffers.rebuild(self._reference_blob, r64, self.device) if r64 is not None else native
            got = buffers.rebuild(blob, c, self.device)
            bad = ~torch.isfinite(want) | ~torch.isfinite(native)
            if p.family != "normal, autograd recording" and bool(bad.any()) and got.shape == want.shape:
                # As for outputs: where the original's own gradient overflows or is 0 * inf (a sqrt
                # at an exact zero), there is nothing to hold a backward to; the rest is compared.
                skipped[f"{p.family}: gradient of {name}"] = (
                    f"the original's gradient is not finite at {int(bad.sum())} of {bad.numel()} "
                    "elements, which are not compared"
                )
                zero = torch.zeros((), dtype=want.dtype, device=want.device)
                want, native = torch.where(bad, zero, want), torch.where(bad, zero.to(native.dtype), native)
                got = torch.where(bad, zero.to(got.dtype), got)
            compare(got, want, native, f"{where}: gradient of {name}", tf32, self.device, self.table)

    def _check_timing(
        self, reply: RunReply, marks: list[tuple[str, float]], tf32: bool, verdict: Verdict
    ) -> None:
        """What was timed is what was checked, and the times agree with the judge's clock: the
        forward timing and, for a candidate asked to time training, its training steps (their
        gradients projected), each on its own span (:meth:`_checked_timing`)."""
        ref = self.reference_timing
        if ref is not None:
            verdict.compile_error = ref.compile_error
        normal = self._reference_call("normal")
        forward = self._checked_timing(
            self.timing, ref, reply.timing, marks, tf32, normal.outputs if normal else (), training=False
        )
        if forward is not None:
            verdict.timings, verdict.clock = forward.timings, forward.clock
            verdict.untimed = forward.untimed
            verdict.clocked = forward.clocked
        if not self.training_asked or self.training_timing is None:  # nothing timed: nothing to say
            return
        recorded = self._reference_call("normal, autograd recording")
        ref_training = self.reference_training
        grads = tuple(recorded.grads.values()) if recorded else ()
        training = self._checked_timing(
            self.training_timing, ref_training, reply.training_timing, marks, tf32, grads, training=True
        )
        if training is None:  # no baseline: the original's training steps were not timed
            why = ref_training.error if ref_training is not None and ref_training.error else "no baseline"
            training = Timed(untimed=f"training not timed: {why}")
        verdict.training_timing = training

    def _reference_call(self, family: str) -> CallReply | None:
        """The reference's answer to the first call of ``family``."""
        return self.reference.get(next((p.call.name for p in self.planned if p.family == family), ""))

    def _checked_timing(
        self,
        plan: TimingPlan | None,
        ref: TimingReply | None,
        got: TimingReply | None,
        marks: list[tuple[str, float]],
        tf32: bool,
        projected: tuple[TensorRef, ...],
        training: bool,
    ) -> Timed | None:
        """One timing reply checked against the reference's; None when nothing was planned or
        there is no baseline.

        Every timed call's projection (of its outputs; with ``training``, of its gradients, whose
        dtypes ``projected`` gives, as it does the outputs') must match the reference's on the
        same fed inputs within ``TIMING_SIGMAS`` standard deviations of an honest difference (an
        error within the L2 row projects onto normal weights drawn independently of it with a
        standard deviation of at most its norm). The times: between the runner's start and end
        marks (``bench.span_marks``) the judge's clock must have seen at least what the runner
        claims, and no more than :func:`clock_check` allows beyond it."""
        if plan is None or ref is None or not ref.runs or "eager" not in ref.summaries:
            return None
        what = TRAINING_TIMED if training else "timing"
        if got is not None and got.error:
            return Timed(untimed=f"{'training ' if training else ''}not timed: {got.error}")
        if got is None or "candidate" not in got.summaries:
            raise Reject(f"{what}: the candidate's runner returned no timing")
        total = ref.runs * plan.rounds
        if got.runs != ref.runs or len(got.projections) != total:
            raise Reject(
                f"{what}: the candidate's runner timed {len(got.projections)} calls, "
                f"not the {total} asked for"
            )
        if got.flags_changed:
            raise Reject(f"{what}: the candidate changed global numeric settings ({got.flags_changed[:300]})")
        dtypes = {r.dtype for r in projected} or {"float32"}
        rows = [self.table.get(tolerance_key(getattr(torch, d), tf32)) for d in dtypes]
        atol, _rtol, l2 = max((r for r in rows if r), default=self.table[tolerance_key(torch.float32, tf32)])
        for i in range(total):
            pr, pc = ref.projections[i], got.projections[i]
            if not math.isfinite(pr):
                continue
            # An honest error e (||e|| within twice the L2 row of ||ref||: the original's own
            # rounding too) projects onto weights drawn independently of it as N(0, ||e||^2).
            sd = 2 * l2 * math.sqrt(max(ref.quadratic[i], 0.0)) + 1e-2 * atol * math.sqrt(ref.weights_sq)
            bound = TIMING_SIGMAS * sd + 1e-9 * abs(pr)
            if not abs(pc - pr) <= bound:
                raise Mismatch(
                    f"{what}: timed call {i + 1} of {total} gave other "
                    f"{'gradients' if training else 'outputs'} than the original on the "
                    f"same inputs (projection {pc:.6g}, the original's {pr:.6g}, allowed ±{bound:.3g}): "
                    "what was timed is not what was checked"
                )
        # The calls in the span are the judge's count (every one projected and checked above),
        # never the runner's: claiming more than it made would divide the clock by more.
        cand = {k: v for k, v in got.summaries["candidate"].items() if k != "calls"}
        calls = total
        span, ref_span = _span(marks, training), _span(self.reference_marks, training)
        if span is None:
            raise Reject(f"{what}: the candidate's runner marked no timed span: its times cannot be checked")
        seen, overhead = clock_check(cand, calls, span, ref.summaries, ref_span, what)
        clock = {
            "span_s": round(span, 6),
            "calls": calls,
            "harness_ms_per_call": round(overhead * 1e3, 6),
            "seen_ms_per_call": round(seen * 1e3, 6),
        }
        if plan.salt is not None:  # in the report (no runner reads it): the timed inputs can be made again
            clock["salt"] = plan.salt
        clocked = ""
        by_clock = timed_by_clock(cand, seen)
        if by_clock is not None:
            clock["claimed_ms_per_call"] = cand["median_ms"]
            clocked = (
                f"{what}: timed by the judge's clock, {seen * 1e3:.4g} ms per call ({calls} calls in "
                f"{span:.3f} s, less {overhead * 1e3:.3g} ms of harness per call measured on the original); "
                f"the runner claimed {cand['median_ms']:.4g} ms"
            )
            cand = by_clock
        timings = {k: dict(v) for k, v in ref.summaries.items()} | {"candidate": cand}
        if not training and ref.wall_calls:
            for name, ms in self._back_to_back(ref, got, marks, what).items():
                timings[name]["wall_ms"] = ms
        return Timed(
            timings=timings,
            clock=clock,
            compile_error=ref.compile_error,
            clocked=clocked,
        )

    def _back_to_back(
        self, ref: TimingReply, got: TimingReply, marks: list[tuple[str, float]], what: str
    ) -> dict[str, float]:
        """Each callable's ms per call back to back, by the judge's clock alone: the span between
        its :func:`bench.back_to_back_marks` over the calls made in it. The original's (eager,
        torch.compile) from the reference runner's marks; the candidate's runner must have made
        the same number of calls between its own marks."""
        calls = min(ref.wall_calls, bench.MAX_BACK_TO_BACK)
        out = {}
        for name in ref.summaries:
            per_call = _per_call(self.reference_marks, name, calls)
            if per_call is not None:
                out[name] = per_call
        cand = _per_call(marks, "candidate", calls)
        if got.wall_calls != calls or cand is None:
            raise Reject(
                f"{what}: the candidate's runner did not make the {calls} calls back to back between "
                "its marks that the original's runner made"
            )
        return out | {"candidate": cand}

    def close(self) -> None:
        if not isinstance(self._reference_blob, bytes):
            self._reference_blob.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _candidate_plan(plan: TimingPlan | None, ref: TimingReply | None) -> TimingPlan | None:
    """A candidate's plan: the reference's number of calls; None when there is no baseline to hold
    it to (untimed)."""
    if plan is None or ref is None or not ref.runs or "eager" not in ref.summaries:
        return None
    calls = min(ref.wall_calls, bench.MAX_BACK_TO_BACK)
    return dataclasses.replace(plan, runs=ref.runs, compile=False, wall_calls=calls, salt=None)


def clock_check(
    cand: dict[str, float],
    calls: int,
    span: float,
    ref_summaries: dict[str, dict[str, float]],
    ref_span: float | None,
    what: str = "timing",
) -> tuple[float, float]:
    """The judge's clock against a runner's claimed times: (seen s per call, harness s per call).

    ``cand``: the candidate's summary (median and p10 in ms); ``calls``: how many calls it timed in
    ``span`` seconds of the judge's clock. The harness's own cost per call (feeding inputs, the
    flush, the projection) is what the reference runner's span held beyond its claimed busy time
    (each summary's ``runs`` counts every sample it took, over all rounds). Raises Reject when the
    claims add up to more than the clock saw (no honest runner does that), or the clock saw more
    than ``CLOCK_CREDIT`` times the median claim plus the harness and ``CLOCK_LAUNCH_S`` (more than
    a Python launch path costs). Between ``CLOCK_SLACK`` and that, the caller times the candidate
    by the clock."""
    median, p10 = cand["median_ms"] / 1e3, cand["p10_ms"] / 1e3
    if p10 * calls * 0.9 > span + 0.05:
        raise Reject(
            f"{what}: the runner's times add up to at least {p10 * calls:.3f} s, but the judge's clock "
            f"saw {span:.3f} s for those {calls} calls"
        )
    overhead = 0.0
    if ref_span is not None:
        ref_calls = sum(int(v["runs"]) for v in ref_summaries.values())
        busy = sum(v["median_ms"] * v["runs"] for v in ref_summaries.values()) / 1e3
        overhead = max(0.0, (ref_span - busy) / max(ref_calls, 1))
    seen = span / calls - overhead
    if seen > CLOCK_CREDIT * median + CLOCK_LAUNCH_S:
        raise Reject(
            f"{what}: the runner claims {median * 1e3:.4g} ms per call, but the judge's clock saw "
            f"{seen * 1e3:.4g} ms per call ({calls} calls in {span:.3f} s, less {overhead * 1e3:.3g} ms "
            "of harness per call measured on the original)"
        )
    return seen, overhead


def timed_by_clock(cand: dict[str, float], seen: float) -> dict[str, float] | None:
    """The candidate's summary scaled to the judge's clock (``seen`` s per call), where the clock
    saw more than ``CLOCK_SLACK`` times the claimed median plus 50 us; None where the claim stands.

    More than timing noise means the call costs more on the CPU than its events show (the launch
    path's Python), or the events understate it. Either way the clock's figure is what the judge
    saw, so it is the candidate's time: understating buys nothing, an honest call is not turned away."""
    claimed = cand["median_ms"] / 1e3
    if seen <= CLOCK_SLACK * claimed + 5e-5:
        return None
    scale = seen / claimed
    return cand | {k: cand[k] * scale for k in ("median_ms", "p10_ms", "p90_ms") if k in cand}


def _between(marks: list[tuple[str, float]], start: str, end: str) -> float | None:
    """Seconds from the first ``start`` mark to the last ``end`` mark, by the judge's clock; None
    without both, or with the end before the start."""
    starts = [t for name, t in marks if name == start]
    ends = [t for name, t in marks if name == end]
    if not starts or not ends or max(ends) < min(starts):
        return None
    return max(ends) - min(starts)


def _span(marks: list[tuple[str, float]], training: bool = False) -> float | None:
    """From the first ``timing start`` to the last ``timing end`` (``training timing ...`` with
    ``training``; a runner's extra marks only lengthen it), by the judge's clock."""
    return _between(marks, *bench.span_marks(training))


def _per_call(marks: list[tuple[str, float]], name: str, calls: int) -> float | None:
    """ms per call between ``name``'s back-to-back marks, by the judge's clock; None without both
    marks or without calls."""
    span = _between(marks, *bench.back_to_back_marks(name))
    return None if span is None or not calls else span * 1e3 / calls


def _finite(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal values (so NaN equals NaN), whatever the strides."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(_bytes(a), _bytes(b)))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _shapes(values: list[Any]) -> list[list[int]]:
    return [list(v.shape) for v in values if isinstance(v, torch.Tensor)]


@contextlib.contextmanager
def judging(**kwargs: Any) -> Iterator[Judge]:
    judge = Judge(**kwargs)
    try:
        yield judge
    finally:
        judge.close()
