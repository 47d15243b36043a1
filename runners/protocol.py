"""What the judge and its runners say to each other: typed, versioned, plain data.

The judge (``runners/judge.py``) never imports the code it judges. It writes the inputs of every
call into a buffer file and sends a :class:`RunRequest`; a runner (the reference, or one candidate)
builds its module, runs the calls, writes what came out into a buffer file of its own and answers
with a :class:`RunReply` that says where each tensor lies. Tensors travel as raw bytes plus
:class:`TensorRef` (dtype, shape, strides, storage offset): the judge rebuilds plain tensors from
the bytes, so no subclass, hook or patched method comes along.

Everything in a reply is a claim: the judge checks the tensors it describes, bounds included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# 2: training timing (``RunRequest.training_timing``, ``RunReply.training_timing``).
PROTOCOL_VERSION = 2
DTYPES = frozenset(
    "float64 float32 float16 bfloat16 int64 int32 int16 int8 uint8 bool complex64 complex128".split()
)


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the message says what is wrong."""


@dataclass(frozen=True)
class TensorRef:
    """A tensor inside a buffer file: its storage is ``nbytes`` bytes from ``offset``."""

    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int = 0
    device: str = "cpu"  # where the tensor was (a claim, checked against the call's device)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"shape": list(self.shape), "strides": list(self.strides)}

    @classmethod
    def from_dict(cls, d: Any) -> TensorRef:
        if not isinstance(d, dict):
            raise ProtocolError(f"a tensor reference is {type(d).__name__}, not an object")
        try:
            ref = cls(
                offset=_int(d["offset"]),
                nbytes=_int(d["nbytes"]),
                dtype=str(d["dtype"]),
                shape=tuple(_int(s) for s in d["shape"]),
                strides=tuple(_int(s) for s in d["strides"]),
                storage_offset=_int(d.get("storage_offset", 0)),
                device=str(d.get("device", "cpu")),
            )
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"a tensor reference lacks or mistypes {exc}") from None
        if ref.dtype not in DTYPES:
            raise ProtocolError(f"unknown dtype {ref.dtype!r}")
        if len(ref.shape) != len(ref.strides) or min((*ref.shape, *ref.strides, 0)) < 0:
            raise ProtocolError(f"shape {list(ref.shape)} and strides {list(ref.strides)} do not fit")
        if ref.offset < 0 or ref.nbytes < 0 or ref.storage_offset < 0:
            raise ProtocolError("negative offset or size")
        return ref


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{v!r} is not an integer")
    return v


@dataclass(frozen=True)
class Arg:
    """One positional argument: a tensor in the inputs file, or a plain JSON value."""

    tensor: TensorRef | None = None
    value: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor.to_dict()} if self.tensor is not None else {"value": self.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Arg:
        if "tensor" in d:
            return cls(tensor=TensorRef.from_dict(d["tensor"]))
        return cls(value=d.get("value"))


@dataclass(frozen=True)
class Call:
    """One forward call. Its name says nothing of why the judge chose it (``call 7``).

    ``grad``: autograd records (floating inputs and every parameter require grad); the runner then
    takes gradients for an upstream gradient drawn from ``upstream_seed`` (normal, on the CPU,
    in the output's shape and dtype) for every output that requires grad."""

    name: str
    args: tuple[Arg, ...]
    grad: bool = False
    upstream_seed: int = 0
    # Other weights for this call: every floating parameter moved by draws from this seed
    # (``runners.runner.set_weights``); None: the original's weights.
    weights_seed: int | None = None
    # A candidate's runner makes this call through ``torch.compile(fullgraph=True)`` of its module
    # (the reference's runner makes it eagerly: the original as written is the answer).
    compiled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": [a.to_dict() for a in self.args],
            "grad": self.grad,
            "upstream_seed": self.upstream_seed,
            "weights_seed": self.weights_seed,
            "compiled": self.compiled,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Call:
        seed = d.get("weights_seed")
        return cls(
            name=str(d["name"]),
            args=tuple(Arg.from_dict(a) for a in d["args"]),
            grad=bool(d.get("grad", False)),
            upstream_seed=int(d.get("upstream_seed", 0)),
            weights_seed=None if seed is None else _int(seed),
            compiled=bool(d.get("compiled", False)),
        )


@dataclass(frozen=True)
class TimingPlan:
    """How to time the module (CUDA only): on fresh inputs every call, chosen by the judge.

    Call ``i`` of ``rounds * runs`` takes input set ``i % len(sets)`` copied into one buffer set,
    each element multiplied by a factor drawn from ``seed`` for that call (outside the timed span,
    ``runners.bench.Feed``): no two calls see the same values, or a multiple of them, in the same
    memory. After each call the runner records a projection of
    its outputs on weights drawn from ``seed`` (the reference also their quadratic size), which
    the judge compares call by call with the reference's: every timed output counts. ``runs`` 0:
    the runner chooses (the reference, from its own estimate); a candidate gets the reference's.

    ``training``: each timed call is a training step instead: forward on the fed inputs as fresh
    leaves that require grad (every floating parameter too, its gradient cleared before the call),
    then backward with an upstream gradient drawn from ``seed`` (normal, on the CPU, in the
    outputs' shapes, one per input set, multiplied afresh every call); what is projected is every
    input's and parameter's gradient, in that order (parameters by name)."""

    sets: tuple[tuple[Arg, ...], ...]
    seed: int
    runs: int = 0
    rounds: int = 3
    compile: bool = False  # the reference also times torch.compile of the original
    training: bool = False
    # What the fed inputs' factors are drawn with beside ``seed`` (``runners.bench.Feed``): in the
    # reference's plan; None in a candidate's, whose runner asks the judge once its span has begun.
    salt: int | None = None
    # Calls back to back after the timed rounds (``bench.Clock.back_to_back``): 0 in the reference's
    # plan (it chooses from eager's estimate); a candidate's plan has the reference's number.
    wall_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["sets"] = [[a.to_dict() for a in args] for args in self.sets]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> TimingPlan:
        if not isinstance(d, dict):
            raise ProtocolError("a timing plan is not an object")
        return cls(
            sets=tuple(tuple(Arg.from_dict(a) for a in args) for args in d["sets"]),
            seed=_int(d["seed"]),
            runs=_int(d.get("runs", 0)),
            rounds=_int(d.get("rounds", 3)),
            compile=bool(d.get("compile", False)),
            training=bool(d.get("training", False)),
            salt=None if d.get("salt") is None else _int(d["salt"]),
            wall_calls=_int(d.get("wall_calls", 0)),
        )


@dataclass(frozen=True)
class TimingReply:
    """What timing gave: per timed callable (``eager``, ``compile``, ``candidate``) its summary
    (median, p10, p90 in ms, runs: claims), and for the module under test the projection of every
    timed call's outputs, or its gradients for a ``training`` plan (the reference adds their
    quadratic sizes, for the judge's bound)."""

    summaries: dict[str, dict[str, float]]
    runs: int
    projections: tuple[float, ...] = ()
    quadratic: tuple[float, ...] = ()  # reference: the outputs' squared norm per call
    weights_sq: float = 0.0  # reference: sum of w^2 over the outputs
    compile_error: str = ""
    flags_changed: str = ""  # global numeric flags the module changed while loading or running
    error: str = ""  # timing itself failed (out of memory, say): untimed, never called faster
    wall_calls: int = 0  # calls made back to back per callable, between marks (0: none)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["projections"], d["quadratic"] = list(self.projections), list(self.quadratic)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> TimingReply:
        if not isinstance(d, dict):
            raise ProtocolError("a timing reply is not an object")
        try:
            summaries = {
                str(k): {str(f): float(x) for f, x in dict(v).items()}
                for k, v in dict(d["summaries"]).items()
            }
            return cls(
                summaries=summaries,
                runs=_int(d["runs"]),
                projections=tuple(float(x) for x in d.get("projections", [])),
                quadratic=tuple(float(x) for x in d.get("quadratic", [])),
                weights_sq=float(d.get("weights_sq", 0.0)),
                compile_error=str(d.get("compile_error", "")),
                flags_changed=str(d.get("flags_changed", "")),
                error=str(d.get("error", ""))[:500],
                wall_calls=_int(d.get("wall_calls", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"a timing reply is malformed: {exc}") from None


@dataclass(frozen=True)
class CallReply:
    """What one call gave: outputs (flattened in order), the inputs as they were afterwards,
    and with ``grad`` the gradients by name (``input 0``, ``parameter weight``). The reference
    also answers in float64 (``outputs64``, ``grads64``) where its module runs in float64."""

    name: str
    outputs: tuple[TensorRef, ...] = ()
    inputs_after: tuple[TensorRef | None, ...] = ()
    grads: dict[str, TensorRef] = field(default_factory=dict)
    no_history: tuple[int, ...] = ()  # outputs without autograd history where the call wanted it
    outputs64: tuple[TensorRef, ...] = ()
    grads64: dict[str, TensorRef] = field(default_factory=dict)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outputs": [t.to_dict() for t in self.outputs],
            "inputs_after": [t.to_dict() if t is not None else None for t in self.inputs_after],
            "grads": {k: t.to_dict() for k, t in self.grads.items()},
            "no_history": list(self.no_history),
            "outputs64": [t.to_dict() for t in self.outputs64],
            "grads64": {k: t.to_dict() for k, t in self.grads64.items()},
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: Any) -> CallReply:
        if not isinstance(d, dict):
            raise ProtocolError("a call reply is not an object")
        try:
            return cls(
                name=str(d["name"]),
                outputs=tuple(TensorRef.from_dict(t) for t in d.get("outputs", [])),
                inputs_after=tuple(
                    TensorRef.from_dict(t) if t is not None else None for t in d.get("inputs_after", [])
                ),
                grads={str(k): TensorRef.from_dict(t) for k, t in dict(d.get("grads", {})).items()},
                no_history=tuple(_int(i) for i in d.get("no_history", [])),
                outputs64=tuple(TensorRef.from_dict(t) for t in d.get("outputs64", [])),
                grads64={str(k): TensorRef.from_dict(t) for k, t in dict(d.get("grads64", {})).items()},
                error=str(d.get("error", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProtocolError):
                raise
            raise ProtocolError(f"a call reply is malformed: {exc}") from None


@dataclass(frozen=True)
class RunRequest:
    """Build the module (the original, or ``candidate`` in a copy of the file's namespace when
    ``original_path``) and run ``calls`` on the tensors in ``inputs_path``; write what comes out to
    ``outputs_name`` in the working directory. ``timing``, then ``training_timing`` (a plan with
    ``training``): what to time, each answered by a :class:`TimingReply` of its own."""

    role: str  # "reference" | "candidate"
    device: str
    file: str
    root: str | None
    class_name: str
    build: dict[str, Any]
    inputs_path: str
    inputs_sha256: str
    calls: tuple[Call, ...]
    dtype: str | None = None
    outputs_name: str = "outputs.bin"
    timing: TimingPlan | None = None
    training_timing: TimingPlan | None = None
    version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["calls"] = [c.to_dict() for c in self.calls]
        for key in ("timing", "training_timing"):
            plan = getattr(self, key)
            d[key] = plan.to_dict() if plan is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRequest:
        if d.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {d.get('version')!r} is not {PROTOCOL_VERSION}")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in fields}
        values["calls"] = tuple(Call.from_dict(c) for c in d["calls"])
        for key in ("timing", "training_timing"):
            values[key] = TimingPlan.from_dict(d[key]) if d.get(key) is not None else None
        return cls(**values)


@dataclass(frozen=True)
class RunReply:
    calls: tuple[CallReply, ...]
    error: str = ""  # the module could not be built or loaded: no call ran
    timing: TimingReply | None = None
    training_timing: TimingReply | None = None  # the answer to the request's ``training_timing``
    version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "error": self.error,
            "calls": [c.to_dict() for c in self.calls],
            "timing": self.timing.to_dict() if self.timing is not None else None,
            "training_timing": self.training_timing.to_dict() if self.training_timing is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Any) -> RunReply:
        if not isinstance(d, dict):
            raise ProtocolError("the reply is not an object")
        if d.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {d.get('version')!r} is not {PROTOCOL_VERSION}")
        calls = d.get("calls", [])
        if not isinstance(calls, list):
            raise ProtocolError("the reply's calls are not a list")
        timing, training = (
            TimingReply.from_dict(d[key]) if d.get(key) is not None else None
            for key in ("timing", "training_timing")
        )
        return cls(
            calls=tuple(CallReply.from_dict(c) for c in calls),
            error=str(d.get("error", "")),
            timing=timing,
            training_timing=training,
        )
