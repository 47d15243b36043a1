"""The runners' side of the judge's protocol (runs inside a sandbox, next to untrusted code).

:func:`reference` builds the original module and runs the judge's calls (natively and, where
the module runs in float64, in float64 too). A candidate's runner is ``runners.verify.evaluate``,
which calls :func:`run_calls` on the candidate it built. Either way the runner only returns data:
the tensors each call produced, the inputs as they were afterwards, and gradients. It decides
nothing; the judge compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from runners import buffers
from runners.protocol import Call, CallReply, RunReply, RunRequest, TensorRef
from runners.verify import Problem, describe_exc, flatten


def read_inputs(path: str) -> Any:
    """The judge's inputs, mapped read-only (each call copies what it needs into fresh tensors)."""
    return buffers.map_file(path)


def call_args(call: Call, data: Any, device: str) -> list[Any]:
    out: list[Any] = []
    for a in call.args:
        out.append(buffers.rebuild(data, a.tensor, device) if a.tensor is not None else a.value)
    return out


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


def _one(module: torch.nn.Module, call: Call, args: list[Any], writer: buffers.Writer) -> dict[str, Any]:
    """Run one call; the tensors it produced, written."""
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
    params = dict(module.named_parameters())
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


def run_calls(
    module: torch.nn.Module,
    calls: tuple[Call, ...],
    data: Any,
    device: str,
    writer: buffers.Writer,
    module64: torch.nn.Module | None = None,
    cast: Any = None,
) -> tuple[CallReply, ...]:
    """Every call in order; a call that raises is reported and the next one runs."""
    replies = []
    for call in calls:
        try:
            args = call_args(call, data, device)
            if cast is not None:
                args = cast(args)
            got = _one(module, call, args, writer)
            if module64 is not None:
                args64 = [
                    a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
                ]
                try:
                    more = _one(module64, call, args64, writer)
                    got["outputs64"] = more["outputs"]
                    got["grads64"] = more.get("grads", {})
                except Exception:  # no float64 answer for this call: the native one stands
                    pass
            replies.append(CallReply(name=call.name, **got))
        except Exception as exc:
            replies.append(CallReply(name=call.name, error=describe_exc(exc, "raised")))
    return tuple(replies)


def reference(req: dict[str, Any]) -> dict[str, Any]:
    """The reference runner: the original module alone (no candidate is on its path)."""
    r = RunRequest.from_dict(req)
    try:
        problem = Problem(
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
    with buffers.Writer(Path.cwd() / r.outputs_name) as writer:
        replies = run_calls(problem.module, r.calls, data, r.device, writer, module64, problem.cast)
    return RunReply(calls=replies).to_dict()


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
