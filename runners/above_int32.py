"""The judge's family "above 2^31 elements" (CUDA): offsets that overflow int32.

``offsets = pid * BLOCK + tl.arange(0, BLOCK)`` with an int32 program id wraps past 2^31
elements: on a larger tensor the kernel reads and writes the wrong places (or faults), on every
smaller one it is right. Before a candidate is suggested (``runners/chosen.py``) the judge plans
one more call: the normal family's inputs with the leading dimension scaled (every input that
shares it) until one tensor has more than 2^31 elements, drawn from its own seed. The original
runs on it once per module in a reference runner of its own, each candidate to be suggested in
a runner of its own (the first one beside the original's, both reading the same inputs file):
forward only, outputs only (no float64 copy, no inputs written back: each
tensor is several GiB), and the judge compares the outputs like any other family
(``verify.compare``, chunk by chunk in float64).

One process on the host at a time runs the family's disk-heavy part. Processes side by side
(modules checked in parallel on one host) would each see the same free disk and then all write
their GiBs into it, so each takes an exclusive lock on one file first (:func:`lock_path`) and
holds it from the free-space check until its files are removed (:meth:`Family.close`): what it
checked is then what it writes, and the next holder's check sees the space given back. The lock
is let go as soon as the family is skipped or raises, and with the process however it ends.

The original and the first candidate run at once, so each has the GPU's memory less the other's.
Where either runs out of it there (``torch.OutOfMemoryError``), that says nothing of its own: the
original runs again alone, then the candidate alone, and only what happens alone decides. A
candidate that runs out of memory alone where the original fits is incorrect (it would fail the
user at that size), and one that hogs memory beside the original to have the family skipped gets
the original's run again without it.

Skipped, the reason listed with the report's skipped families: on CPU (the interpreter runs every
one of millions of program instances in Python); where no input has a leading dimension; where
another process on the host holds the lock longer than the wait allowed (the runners' time
limit); where the GPU's free memory, the disk or the host's available memory cannot hold it
(:func:`need`); where the original itself raises on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runners import buffers, inputs, sandbox
from runners.judge import Judge
from runners.memcheck import Outcome
from runners.protocol import Arg, Call, ProtocolError, RunReply, RunRequest
from runners.verify import Mismatch, compare

FAMILY = "above 2^31 elements"
LIMIT = 2**31
GIB = 2**30
INPUTS = "above-int32-inputs.bin"
REFERENCE = "above-int32-reference.bin"
CANDIDATE = "above-int32-candidate.bin"
# The host's lock for the family: a file in the temp folder, or the one this names (a run that gives
# each process a temp folder of its own names one they share here).
LOCK_ENV = "KERNELIZE_LARGE_FAMILY_LOCK"
LOCK_NAME = "kernelize-large-family.lock"
NOT_ON_CPU = "not run on CPU (the Triton interpreter runs each of millions of program instances in Python)"

Spec = dict[str, Any]


def scaled(specs: list[Spec], limit: int = LIMIT) -> tuple[list[Spec], int, int] | str:
    """(the specs with the leading dimension scaled, its old size, its new size), or why not: every
    input whose leading dimension is the first input's grows to the fewest rows that give one of
    them more than ``limit`` elements."""
    shapes = [s["tensor"]["shape"] for s in specs if "tensor" in s and s["tensor"]["shape"]]
    if not shapes or not shapes[0][0]:
        return "no tensor input with a leading dimension to scale"
    lead = shapes[0][0]
    per_row = max(math.prod(s[1:]) for s in shapes if s[0] == lead)
    if not per_row:
        return "the inputs are empty"
    rows = limit // per_row + 1
    if rows <= lead:
        return f"the normal inputs already have more than {limit} elements"
    out = []
    for spec in specs:
        t = spec.get("tensor")
        if t is not None and t["shape"] and t["shape"][0] == lead:
            spec = {"tensor": {**t, "shape": [rows, *t["shape"][1:]]}}
        out.append(spec)
    return out, lead, rows


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=buffers.dtype_of(dtype)).element_size()


def tensor_bytes(specs: list[Spec], dtype: str | None) -> list[int]:
    """Bytes of each tensor input, floating ones in the dtype the judge checks in."""
    out = []
    for s in specs:
        if "tensor" in s:
            name = s["tensor"]["dtype"]
            if dtype and name.startswith(("float", "bfloat")):
                name = dtype
            out.append(math.prod(s["tensor"]["shape"]) * _itemsize(name))
    return out


@dataclass(frozen=True)
class Need:
    """What the family needs, in bytes: the GPU (the original's runner, then the candidate's, each
    with its inputs, outputs and temporaries; then the judge, with both outputs), the disk (the
    inputs, both runners' outputs) and the host (a tensor on its way to or from the GPU, twice)."""

    gpu: int
    disk: int
    host: int


def need(input_bytes: int, output_bytes: int, largest: int, in_memory: bool = False) -> Need:
    """``in_memory``: the files go to a folder held in memory (tmpfs), so they take host memory too."""
    disk = input_bytes + 2 * output_bytes + GIB
    return Need(
        gpu=2 * (input_bytes + output_bytes) + 2 * GIB,
        disk=disk,
        host=2 * largest + 2 * GIB + (disk if in_memory else 0),
    )


def in_memory(path: Path) -> bool:
    """Whether ``path`` lies on a file system held in memory (tmpfs, ramfs): the mount that holds
    it, by the longest mount point above it in /proc/self/mounts."""
    where = os.path.realpath(path)
    best, kind = "", ""
    with contextlib.suppress(OSError), open("/proc/self/mounts") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 3:
                continue
            point = fields[1].replace("\\040", " ")
            inside = where == point or where.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind in ("tmpfs", "ramfs")


def shortfall(needed: Need, gpu_free: int, disk_free: int, host_free: int) -> str:
    """'' when it fits, else why not, with the figures."""
    for what, want, have in (
        ("GPU memory", needed.gpu, gpu_free),
        ("disk", needed.disk, disk_free),
        ("host memory", needed.host, host_free),
    ):
        if want > have:
            return f"needs about {want / GIB:.1f} GiB of {what}, {have / GIB:.1f} GiB free"
    return ""


def out_of_memory(error: str) -> bool:
    """Whether a runner's error (its own text: untrusted, so a forged one buys only a second run)
    says the GPU's memory ran out."""
    return "OutOfMemoryError" in error or "CUDA out of memory" in error


def _call_error(res: sandbox.SandboxResult) -> str:
    """The error a runner's reply gives for the family's one call, '' if none can be read."""
    if res.outcome != "ok" or res.payload is None:
        return ""
    try:
        reply = RunReply.from_dict(res.payload)
    except ProtocolError:
        return ""
    return reply.error or (reply.calls[0].error if len(reply.calls) == 1 else "") or ""


def _host_available() -> int:
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def lock_path() -> Path:
    """The host's lock file for the family: :data:`LOCK_ENV` where set, else in the temp folder."""
    return Path(os.environ.get(LOCK_ENV) or Path(tempfile.gettempdir()) / LOCK_NAME)


def reserve(path: Path, wait_s: float) -> int | str:
    """A descriptor holding the exclusive lock on ``path`` (closing it lets the lock go), or why
    not: another process held it for all of ``wait_s`` seconds, or the file cannot be opened.

    The descriptor is closed on exec, so no runner started meanwhile inherits it (a runner that
    outlived this process would otherwise keep the host locked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return f"its host-wide lock {path}: {exc.strerror or exc}"
    begun = time.monotonic()
    pause = 0.05
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        except OSError as exc:
            os.close(fd)
            return f"its host-wide lock {path}: {exc.strerror or exc}"
        waited = time.monotonic() - begun
        if waited >= wait_s:
            os.close(fd)
            return f"another module on this host is running it; waited {waited:.1f} s"
        # Polled, not a blocking flock: a blocking one cannot be given up at the limit.
        time.sleep(min(pause, wait_s - waited))
        pause = min(2 * pause, 0.5)


class Family:
    """The family for one module: planned, and the original run, once; each candidate checked.
    The host's lock is taken before the free-space check and held until :meth:`close`.

    ``limit``: the element count to go past (smaller ones test the plumbing on CPU); ``lock``: the
    lock file (:func:`lock_path` by default); ``wait_s``: how long to wait for it (``timeout_s`` by
    default) before the family is skipped."""

    def __init__(
        self,
        judge: Judge,
        timeout_s: float,
        memory_mb: int,
        env: dict[str, str],
        python: str | None,
        limit: int = LIMIT,
        lock: Path | None = None,
        wait_s: float | None = None,
    ) -> None:
        self.judge, self.timeout_s, self.env, self.python = judge, timeout_s, env, python
        self.memory_mb, self.limit = memory_mb, limit
        self.lock = lock if lock is not None else lock_path()
        self.wait_s = timeout_s if wait_s is None else wait_s
        self._lock_fd = -1  # the host's lock, while held
        self.device, self.dir = judge.device, judge.dir
        self.input_bytes = self.output_bytes = 0
        self.skipped = ""  # why not, once known
        self.call: Call | None = None
        self.shapes: list[list[int]] = []
        self.reference: Any = None  # the original's reply to the call
        self._blob: Any = b""
        self.spent: dict[str, float] = {}  # seconds by part (the inputs, the original, ...), for the log
        self._pool: ThreadPoolExecutor | None = None  # the original's run, beside the first candidate's
        self._original: Future[str] | None = None

    def _add(self, part: str, since: float) -> float:
        now = time.monotonic()
        self.spent[part] = self.spent.get(part, 0.0) + now - since
        return now

    def check(self, req: dict[str, Any], readable: list[str], tf32: bool) -> Outcome:
        """The candidate in ``req`` (the request ``runners.verify.evaluate`` takes, without the
        judge's part) on the family; ``readable``: what its runner reads besides the inputs."""
        if self.call is None and not self.skipped:
            self.skipped = self._prepare()
        if self.skipped:
            return Outcome("skipped", self.skipped)
        assert self.call is not None
        path = self.dir / CANDIDATE
        begun = time.monotonic()
        # For the first candidate, the original runs beside it (both only read the inputs file).
        beside = self._original is not None
        res = self._run_candidate(req, readable)
        begun = self._add("candidate", begun)
        try:
            why = self._original_done()
            if why and beside and out_of_memory(why):
                # Short of memory beside the candidate: the original again, alone.
                why = self._run_original()
        except BaseException:
            with contextlib.suppress(OSError):
                path.unlink()
            self.close()
            raise
        if why:
            with contextlib.suppress(OSError):
                path.unlink()
            self.skipped = why
            self.close()
            return Outcome("skipped", why)
        begun = self._add("waiting for the original", begun)
        if beside and out_of_memory(_call_error(res)):
            # Short of memory beside the original: the candidate again, alone, and that decides.
            with contextlib.suppress(OSError):
                path.unlink()
            res = self._run_candidate(req, readable)
            begun = self._add("candidate alone", begun)
        try:
            return self._compare(res, tf32)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
            self._add("compare", begun)

    def _run_candidate(self, req: dict[str, Any], readable: list[str]) -> sandbox.SandboxResult:
        """The candidate on the family's call, in its runner; its outputs collected to CANDIDATE."""
        return sandbox.run(
            "runners.above_int32:candidate_target",
            {**req, "judge": self._request("candidate", CANDIDATE).to_dict()},
            self._limits(),
            env=self.env,
            python=self.python,
            collect=CANDIDATE,
            collect_to=self.dir / CANDIDATE,
            readable=[*readable, str(self.dir / INPUTS)],
        )

    def _compare(self, res: sandbox.SandboxResult, tf32: bool) -> Outcome:
        where = f"judge, {FAMILY}, shape {self.shapes}"
        if res.outcome != "ok" or res.payload is None:
            return Outcome("incorrect", f"{where}: the candidate's runner {res.outcome}: {res.reason}")
        blob = buffers.map_file(res.blob_path)
        try:
            reply = RunReply.from_dict(res.payload)
            if reply.error or len(reply.calls) != 1:
                return Outcome("incorrect", f"{where}: {reply.error or 'no answer'}")
            got = reply.calls[0]
            if got.error and out_of_memory(got.error):
                # Alone on the GPU (a later candidate, or the first one run again alone).
                text = sandbox.untrusted_text(got.error, 600)
                why = f"out of GPU memory alone, where the original fits: {text}"
                return Outcome("incorrect", f"{where}: {why}")
            if got.error:
                return Outcome("incorrect", f"{where}: {sandbox.untrusted_text(got.error, 600)}")
            if any(t.device != self.device for t in got.outputs):
                return Outcome("incorrect", f"{where}: an output is not on {self.device}")
            native = [buffers.rebuild(self._blob, t, self.device) for t in self.reference.outputs]
            mine = [buffers.rebuild(blob, t, self.device) for t in got.outputs]
            # The reference is the original in its own dtype: the candidate may differ from it by the
            # original's own error too, as the normal family measured it against float64 (a
            # convolution in TF32, whose algorithm cuDNN picks by size, differs from one in another).
            own = self.judge.own_error()
            compare(mine, native, native, where, tf32, self.device, self.judge.table, own)
            return Outcome("passed", FAMILY)
        except ProtocolError as exc:
            return Outcome("rejected", f"judge: the candidate runner's reply is malformed: {exc}")
        except Mismatch as exc:
            return Outcome("incorrect", str(exc))
        finally:
            if not isinstance(blob, bytes):
                blob.close()
            self._release()

    def _prepare(self) -> str:
        """Plan the call, write its inputs and start the original on them (in a thread of its own:
        :meth:`_original_done` waits for it); '' or why the family is skipped.

        The host's lock is taken before the free-space check. It stays held while the family's
        files are on disk: the inputs and the original's outputs until :meth:`close`, each
        candidate's outputs in between. Skipped, or on an exception, the files go and the lock is
        let go at once."""
        judge = self.judge
        plan = scaled(judge.build["inputs"], self.limit)
        if isinstance(plan, str):
            return plan
        specs, lead, rows = plan
        sizes = tensor_bytes(specs, judge.dtype)
        normal = next((p for p in judge.planned if p.family == "normal"), None)
        ref = judge.reference.get(normal.call.name) if normal is not None else None
        out_bytes = math.ceil(sum(t.nbytes for t in ref.outputs) * rows / lead) if ref is not None else 0
        self.input_bytes, self.output_bytes = sum(sizes), out_bytes
        held = reserve(self.lock, self.wait_s)
        if isinstance(held, str):
            return held
        self._lock_fd = held
        try:
            why = self._start(specs, max([*sizes, out_bytes]))
        except BaseException:
            self.close()
            raise
        if why:
            self.close()
        return why

    def _start(self, specs: list[Spec], largest: int) -> str:
        """With the host's lock held: check that the family fits, write its inputs and start the
        original on them; '' or why the family is skipped."""
        self._release()
        why = shortfall(
            need(self.input_bytes, self.output_bytes, largest, in_memory(self.dir)),
            torch.cuda.mem_get_info()[0] if self.device == "cuda" else sys.maxsize,
            shutil.disk_usage(self.dir).free,
            _host_available(),
        )
        if why:
            return why
        self.shapes = inputs.tensor_shapes(specs)
        begun = time.monotonic()
        call = Call("call 0", self._write(specs, self.judge.seed + 31))
        self._add("inputs", begun)
        self.call = call
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kernelize-family")
        self._original = self._pool.submit(self._run_original)
        return ""

    def _original_done(self) -> str:
        """Wait for the original's run (once); '' or why the family is skipped. Its exception,
        if it raised, is raised here."""
        if self._original is None:
            return ""
        try:
            return self._original.result()
        finally:
            self._original = None

    def _run_original(self) -> str:
        """The original on the family's inputs, in its runner; '' or why the family is skipped."""
        judge = self.judge
        begun = time.monotonic()
        res = sandbox.run(
            "runners.above_int32:reference_target",
            self._request("reference", REFERENCE).to_dict(),
            self._limits(),
            env=self.env,
            python=self.python,
            collect=REFERENCE,
            collect_to=self.dir / REFERENCE,
            readable=[*sandbox.problem_paths(judge.file, judge.root), str(self.dir / INPUTS)],
        )
        self._add("original", begun)
        if res.outcome != "ok" or res.payload is None:
            return f"the original failed on it in its runner: {res.reason}"
        try:
            reply = RunReply.from_dict(res.payload)
        except ProtocolError as exc:
            return f"the reference runner's reply is malformed: {exc}"
        error = reply.error or (reply.calls[0].error if len(reply.calls) == 1 else "no answer")
        if error:
            return f"the original raised ({sandbox.untrusted_text(error, 300)})"
        self.reference = reply.calls[0]
        self._blob = buffers.map_file(res.blob_path)
        return ""

    def _write(self, specs: list[Spec], seed: int) -> tuple[Arg, ...]:
        """Draw the inputs on the device, one tensor at a time, into the inputs file."""
        checked = getattr(torch, self.judge.dtype) if self.judge.dtype else None
        gen = torch.Generator(device=self.device).manual_seed(seed)
        args = []
        with buffers.Writer(self.dir / INPUTS) as writer:
            for spec in specs:
                value = inputs.make_value(spec, gen, self.device)
                if not isinstance(value, torch.Tensor):
                    args.append(Arg(value=value))
                    continue
                if checked is not None and value.is_floating_point():
                    value = value.to(checked)
                args.append(Arg(tensor=writer.add(value)))
                del value
        (self.dir / INPUTS).chmod(0o444)
        self._release()
        return tuple(args)

    def _release(self) -> None:
        """Hand the judge's own cached GPU memory back, for the runners that come next."""
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def _request(self, role: str, outputs: str) -> RunRequest:
        judge = self.judge
        assert self.call is not None
        return RunRequest(
            role=role,
            device=self.device,
            file=judge.file,
            root=judge.root,
            class_name=judge.class_name,
            build=judge.build,
            inputs_path=str(self.dir / INPUTS),
            inputs_sha256="",  # never hashed (GiBs): the file is read-only in every sandbox
            calls=(self.call,),
            dtype=judge.dtype,
            outputs_name=outputs,
        )

    def _limits(self) -> sandbox.Limits:
        """The runner's usual limits, plus the inputs it maps and the outputs it copies out."""
        extra = math.ceil((self.input_bytes + 2 * self.output_bytes) / 2**20)
        return sandbox.Limits(self.timeout_s, self.memory_mb + extra)

    def close(self) -> None:
        """Wait for the original's run if it is still going, remove the family's files, then let
        the host's lock go (in that order: the next holder's free-space check must see their space
        free)."""
        if self._original is not None:
            with contextlib.suppress(Exception):
                self._original.result()
            self._original = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if not isinstance(self._blob, bytes):
            self._blob.close()
            self._blob = b""
        for name in (INPUTS, REFERENCE, CANDIDATE):
            with contextlib.suppress(OSError):
                (self.dir / name).unlink()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # the flock goes with its last descriptor
            self._lock_fd = -1


# ---------------------------------------------------------------------------
# The runners' side (inside a sandbox)


def _forward(module: torch.nn.Module, r: RunRequest, cast: Any) -> dict[str, Any]:
    """Each call forward only, without autograd; its outputs written, nothing else."""
    from runners import runner
    from runners.protocol import CallReply
    from runners.verify import describe_exc, flatten

    data = runner.read_inputs(r.inputs_path)
    replies = []
    with buffers.Writer(Path.cwd() / r.outputs_name) as writer:
        for call in r.calls:
            try:
                args = runner.call_args(call, data, r.device)
                if cast is not None:
                    args = cast(args)
                with torch.no_grad():
                    outs = flatten(module(*args))
                if r.device == "cuda":
                    torch.cuda.synchronize()
                del args  # the inputs' GiBs, before the outputs are copied out
                replies.append(CallReply(name=call.name, outputs=tuple(writer.add(o) for o in outs)))
                del outs
            except Exception as exc:
                replies.append(CallReply(name=call.name, error=describe_exc(exc, "raised")))
    return RunReply(calls=tuple(replies)).to_dict()


def reference_target(req: dict[str, Any]) -> dict[str, Any]:
    """The original alone on the family's call."""
    from runners import tuning
    from runners.verify import BuiltModule

    tuning.install(timed=True)
    r = RunRequest.from_dict(req)
    base = {"device": r.device, "file": r.file, "root": r.root, "class_name": r.class_name, "dtype": r.dtype}
    problem = BuiltModule(base, r.build)
    return _forward(problem.module, r, problem.cast)


def candidate_target(req: dict[str, Any]) -> dict[str, Any]:
    """The candidate alone on the family's call (built as ``runners.verify.evaluate`` builds it)."""
    from runners import tuning
    from runners.verify import BuiltModule, load_candidate

    tuning.install(timed=True)  # picked by time still, from one timed call a config
    problem = BuiltModule(req, req["build"])
    _, cand = load_candidate(req, problem)
    return _forward(cand, RunRequest.from_dict(req["judge"]), None)
