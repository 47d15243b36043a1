"""The runners' side of the judge's protocol (runs inside a sandbox, next to untrusted code).

:func:`reference` builds the original module and runs the judge's calls (natively and, where
the module runs in float64, in float64 too). A candidate's runner is ``runners.verify.evaluate``,
which calls :func:`run_calls` on the candidate it built. Either way the runner only returns data:
the tensors each call produced, the inputs as they were afterwards, and gradients. It decides
nothing; the judge compares.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from runners import bench, buffers, sandbox
from runners.protocol import Call, CallReply, RunReply, RunRequest, TensorRef, TimingPlan, TimingReply
from runners.verify import BuiltModule, describe_exc, flatten


def read_inputs(path: str) -> Any:
    """The judge's inputs, mapped read-only (each call copies what it needs into fresh tensors)."""
    return buffers.map_file(path)


def call_args(call: Call, data: Any, device: str) -> list[Any]:
    out: list[Any] = []
    for a in call.args:
        out.append(buffers.rebuild(data, a.tensor, device) if a.tensor is not None else a.value)
    return out


class Weights:
    """The original's floating parameters (kept on the CPU) and, for a call that asks, other
    weights drawn from its ``weights_seed``: each value scaled by ``1 + 0.25 z`` and moved by a
    tenth of the tensor's mean magnitude times another normal draw, rounded to its dtype.

    Both runners draw the same numbers (the CPU generator, seeded per parameter name) and load
    them in place through ``state_dict`` (parameters and buffers alike), so a kernel that
    captured the weights at its first call (a CUDA graph, a cached copy) answers with stale ones."""

    def __init__(self, original: torch.nn.Module) -> None:
        self.original = {
            n: p.detach().to("cpu", copy=True)
            for n, p in original.named_parameters()
            if p.is_floating_point()
        }
        self.current: int | None = None

    def drawn(self, seed: int) -> dict[str, torch.Tensor]:
        out = {}
        for name, p in sorted(self.original.items()):
            digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
            gen = torch.Generator().manual_seed(int.from_bytes(digest[:6], "little"))
            z = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            shift = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            base = p.double()
            size = max(float(base.abs().mean()) if p.numel() else 0.0, 1e-3)
            out[name] = (base * (1 + 0.25 * z) + 0.1 * size * shift).to(p.dtype)
        return out

    def load(self, seed: int | None, modules: list[tuple[torch.nn.Module, bool]]) -> None:
        """Load the original's weights (None) or those drawn from ``seed`` into each module (the
        second member: a float64 copy, which takes the same values in float64)."""
        if seed == self.current:
            return
        values = self.original if seed is None else self.drawn(seed)
        with torch.no_grad():
            for module, as64 in modules:
                state = module.state_dict()
                for name, v in values.items():
                    if name in state:
                        state[name].copy_(v.double() if as64 else v)
        self.current = seed


NUMERIC_FLAGS = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.deterministic",
    "torch.backends.cudnn.benchmark",
)


def numeric_flags() -> dict[str, str]:
    """The global settings that change what (or how fast) float arithmetic computes."""
    flags: dict[str, str] = {
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "deterministic algorithms": str(torch.are_deterministic_algorithms_enabled()),
    }
    for path in NUMERIC_FLAGS:
        owner, _, attr = path.rpartition(".")
        obj: Any = torch
        try:
            for part in owner.split(".")[1:]:
                obj = getattr(obj, part)
            flags[path] = repr(getattr(obj, attr))
        except (AttributeError, RuntimeError):
            flags[path] = "unavailable"
    return flags


def flags_changed(before: dict[str, str]) -> str:
    now = numeric_flags()
    return "; ".join(f"{k}: {before[k]} -> {now.get(k)}" for k in before if now.get(k) != before[k])


def upstream_for(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor | None]:
    """The upstream gradient the judge asked for: normal draws from ``seed``, on the CPU first so
    both runners get the same numbers on any device."""
    gen = torch.Generator().manual_seed(seed)
    ups: list[torch.Tensor | None] = []
    for o in outs:
        if o.requires_grad and o.is_floating_point():
            ups.append(torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype))
        else:
            ups.append(None)
    return ups


def _grad_leaves(args: list[Any]) -> list[Any]:
    return [
        a.detach().clone().requires_grad_(True)
        if isinstance(a, torch.Tensor) and a.is_floating_point()
        else a
        for a in args
    ]


def _one(
    module: Any, call: Call, args: list[Any], writer: buffers.Writer, owner: torch.nn.Module | None = None
) -> dict[str, Any]:
    """Run one call; the tensors it produced, written. ``owner``: the module whose parameters
    ``module`` (a compiled wrapper of it) uses, named as the judge knows them."""
    if not call.grad:
        with torch.no_grad():
            outs = flatten(module(*args))
        if args and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            torch.cuda.synchronize()
        return {
            "outputs": tuple(writer.add(o) for o in outs),
            "inputs_after": tuple(writer.add(a) if isinstance(a, torch.Tensor) else None for a in args),
        }
    args = _grad_leaves(args)
    params = dict((owner or module).named_parameters())
    for p in params.values():
        p.requires_grad_(True)
        p.grad = None
    with torch.enable_grad():
        outs = flatten(module(*args))
        ups = upstream_for(outs, call.upstream_seed)
        # Outputs the original would differentiate but that carry no history: the layer stops learning.
        no_history = tuple(
            i for i, (o, u) in enumerate(zip(outs, ups, strict=True)) if u is None and o.is_floating_point()
        )
        pairs = [(o, u) for o, u in zip(outs, ups, strict=True) if u is not None]
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        names = [f"input {i}" for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        names += [f"parameter {n}" for n in params]
        wrt = [*leaves, *params.values()]
        grads: dict[str, TensorRef] = {}
        if pairs and wrt:
            got = torch.autograd.grad(
                [o for o, _ in pairs], wrt, grad_outputs=[u for _, u in pairs], allow_unused=True
            )
            for name, g, w in zip(names, got, wrt, strict=True):
                grads[name] = writer.add(g if g is not None else torch.zeros_like(w))
    return {
        "outputs": tuple(writer.add(o) for o in outs),
        "inputs_after": tuple(writer.add(a) if isinstance(a, torch.Tensor) else None for a in args),
        "grads": grads,
        "no_history": no_history,
    }


def compile_backend(device: str) -> str:
    """What the judge's torch.compile calls use: Inductor on CUDA, as users compile; on the CPU
    (under the Triton interpreter) ``aot_eager``, the same Dynamo capture, fake-tensor tracing and
    autograd graphs without Inductor's C++ code generation, where graph breaks, untraceable launches
    and wrong fake implementations fail."""
    return "inductor" if device.startswith("cuda") else "aot_eager"


def compiled_module(module: torch.nn.Module, device: str) -> Any:
    """``torch.compile(module, fullgraph=True)``: a graph break is an error, not a silent fallback."""
    return torch.compile(module, fullgraph=True, backend=compile_backend(device))


def run_calls(
    module: torch.nn.Module,
    calls: tuple[Call, ...],
    data: Any,
    device: str,
    writer: buffers.Writer,
    module64: torch.nn.Module | None = None,
    cast: Any = None,
    weights: Weights | None = None,
    compile_calls: bool = False,
) -> tuple[CallReply, ...]:
    """Every call in order; a call that raises is reported and the next one runs. With
    ``compile_calls`` (a candidate's runner), the calls marked ``compiled`` go through
    :func:`compiled_module`; otherwise they run eagerly like the rest."""
    replies = []
    modules = [(module, False)] + ([(module64, True)] if module64 is not None else [])
    compiled: Any = None
    for call in calls:
        try:
            if weights is not None:
                weights.load(call.weights_seed, modules)
            args = call_args(call, data, device)
            if cast is not None:
                args = cast(args)
            if call.compiled and compile_calls:
                if compiled is None:
                    compiled = compiled_module(module, device)
                got = _one(compiled, call, args, writer, owner=module)
            else:
                got = _one(module, call, args, writer)
            if module64 is not None:
                args64 = [
                    a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
                ]
                try:
                    more = _one(module64, call, args64, writer)
                    got["outputs64"] = more["outputs"]
                    got["grads64"] = more.get("grads", {})
                except buffers.HarnessError:
                    raise
                except Exception:  # no float64 answer for this call: the native one stands
                    pass
            replies.append(CallReply(name=call.name, **got))
        except buffers.HarnessError:
            raise  # the checks' own failure, not the module's: the runner stops and says so
        except Exception as exc:
            replies.append(CallReply(name=call.name, error=describe_exc(exc, "raised")))
    if weights is not None:
        weights.load(None, modules)
    return tuple(replies)


def timing_sets(plan: TimingPlan, data: Any, device: str, cast: Any = None) -> list[list[Any]]:
    sets = []
    for args in plan.sets:
        values = [buffers.rebuild(data, a.tensor, device) if a.tensor is not None else a.value for a in args]
        sets.append(cast(values) if cast is not None else values)
    return sets


def time_reference(
    module: torch.nn.Module, plan: TimingPlan, data: Any, device: str, cast: Any
) -> TimingReply:
    sets = timing_sets(plan, data, device, cast)
    compiled, compile_error = None, None
    if plan.compile:
        what = "training " if plan.training else ""
        sandbox.mark(f"{what}baseline compile start")  # where the build's time goes (a log line)
        compiled, compile_error = bench.compile_baseline(module, sets[0], plan.training)
        sandbox.mark(f"{what}baseline compile end")
    got = bench.time_reference(
        module, compiled, sets, plan.seed, plan.rounds, device, sandbox.mark, plan.training, plan.salt or 0
    )
    return TimingReply(**got, compile_error=compile_error or "")


def time_candidate(
    candidate: torch.nn.Module, plan: TimingPlan, data: Any, device: str, before: dict[str, str]
) -> TimingReply:
    sets = timing_sets(plan, data, device)
    got = bench.time_candidate(
        candidate,
        sets,
        plan.seed,
        plan.runs,
        plan.rounds,
        device,
        sandbox.mark,
        plan.training,
        plan.wall_calls,
        plan.salt if plan.salt is not None else (lambda: asked_salt(plan.training)),
    )
    return TimingReply(**got, flags_changed=flags_changed(before))


def asked_salt(training: bool) -> int:
    """The judge's salt for this span (``runners.judge.Judge.asker``); 0 where it gave none, and the
    timed outputs then differ from the original's."""
    got = sandbox.ask(bench.salt_name(training))
    return got if isinstance(got, int) and not isinstance(got, bool) else 0


def reference(req: dict[str, Any]) -> dict[str, Any]:
    """The reference runner: the original module alone (no candidate is on its path)."""
    r = RunRequest.from_dict(req)
    try:
        problem = BuiltModule(
            {
                "device": r.device,
                "file": r.file,
                "root": r.root,
                "class_name": r.class_name,
                "dtype": r.dtype,
            },
            r.build,
        )
        module64 = problem.reference64()
    except Exception as exc:
        return RunReply(calls=(), error=describe_exc(exc, "building the original")).to_dict()
    data = read_inputs(r.inputs_path)
    weights = Weights(problem.module)
    try:
        with buffers.Writer(Path.cwd() / r.outputs_name) as writer:
            replies = run_calls(
                problem.module, r.calls, data, r.device, writer, module64, problem.cast, weights
            )
    except buffers.HarnessError as exc:
        return RunReply(calls=(), error=str(exc)).to_dict()
    timing, training = (
        _reference_timing(problem, plan, data, r.device) if plan is not None else None
        for plan in (r.timing, r.training_timing)
    )
    return RunReply(calls=replies, timing=timing, training_timing=training).to_dict()


def _reference_timing(problem: BuiltModule, plan: TimingPlan, data: Any, device: str) -> TimingReply:
    try:
        return time_reference(problem.module, plan, data, device, problem.cast)
    except Exception as exc:  # no baseline: the candidates go untimed, the checks stand
        if plan.training:  # (a module without gradients, say): training untimed, inference stands
            why = describe_exc(exc, "timing the original's training")
            return TimingReply(summaries={}, runs=0, error=why)
        return TimingReply(summaries={}, runs=0, compile_error=describe_exc(exc, "timing the original"))


def prepare_and_reference(req: dict[str, Any]) -> Any:
    """The reference runner, once per module: resolve how the module is built (``verify.prepare``),
    hand that to the judge, and run the calls the judge then sends (a generator: the sandbox
    carries the one round trip)."""
    from runners.verify import prepare

    prep = prepare(req)
    follow = yield prep
    if not prep.get("ok") or follow is None:
        return {"ok": False}
    return reference(follow)
