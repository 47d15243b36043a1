"""``capture(req) -> dict``: what TorchInductor makes of a module, in JSON (runs in the sandbox).

Compiling runs the module's own code, so it happens in a sandbox like every
other evaluation; the parent (``runners/generators/inductor.py``) turns what
comes back into a standalone module without importing torch.

The module is built from the resolved build spec (``verify.BuiltModule``) on the
GPU and compiled with ``torch.compile(dynamic=True, fullgraph=True)`` through
a backend that records Dynamo's graph before handing it to Inductor's
``compile_fx``. Duck shaping is off, so two example sizes that happen to be
equal stay two symbols. It then runs once under ``run_and_get_code``, which
keeps the wrapper Inductor wrote; after that run each kernel's autotuner holds
the one launch configuration it chose. Then the module is compiled again with
static shapes (``dynamic=False``) and coordinate-descent tuning of each kernel's
launch settings: Inductor plans layouts (channels-last convolutions) and
reductions for known sizes that it cannot plan for symbolic ones. What comes back::

    {"ok": true,
     "code": "<Inductor's output module, as written>",
     "placeholders": [  # the graph's inputs, in the order its call(args) takes them
        {"name": "s0", "kind": "symint", "expr": "s0", "source": "L['x'].size()[0]"},
        {"name": "L_x_", "kind": "tensor", "shape": ["s0", "64"], "dtype": "float32",
         "source": "L['x']", "from": {"input": "x"}},
        {"name": "L_self_parameters_weight_", "kind": "tensor", "shape": ["64"], ...,
         "from": {"parameter": "weight"}}],
     "outputs": {"kind": "tensor", "count": 1},
     "kernels": {"triton_poi_fused_add_0": {"config": {"kwargs": {"XBLOCK": 1024}, "num_warps": 4,
                 "num_stages": 1}, "grid_type": "Grid1D", "configs_tried": 2}},
     "static": {"ok": true, "code": "...", "placeholders": [...], "kernels": {...}},  # the example's
               # sizes only (or {"ok": false, "reason": ...}: the dynamic graph then stands alone)
     "settings": [{"path": "eps", "value": 1e-06}],  # numbers the graph was specialised on
     "fixed_arguments": [{"name": "clamp", "value": true}],
     "example_shapes": [[8, 64]], "device_name": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0"}

Anything the generator cannot stand behind (no GPU, a graph break, more than
one graph, an output that is an input or a view of one, an input it cannot
name) is ``{"ok": false, "reason": ...}``.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from runners import trace, verify
from runners.generators.inductor import NEEDS_CUDA

# Inductor settings for code a person can read and a fresh, private cache.
_INDUCTOR_CONFIG: dict[str, Any] = {
    "fx_graph_cache": False,
    "autotune_local_cache": False,
    "freezing": False,
    "cpp_wrapper": False,
    "max_autotune": False,
    "size_asserts": False,  # assert_size_stride lines: the standalone code has no guards to keep
    "alignment_asserts": False,
    "compile_threads": 1,  # no worker pool inside the sandbox
    "triton.cudagraphs": False,
    "triton.descriptive_names": "original_aten",  # triton_poi_fused_add_relu_0, not triton_0
    "triton.unique_kernel_names": True,
}


def _configure() -> list[str]:
    """Apply ``_INDUCTOR_CONFIG`` where this torch has the setting; the names it lacks."""
    import torch._inductor.config as inductor_config

    missing = []
    for key, value in _INDUCTOR_CONFIG.items():
        owner: Any = inductor_config
        *parents, name = key.split(".")
        try:
            for part in parents:
                owner = getattr(owner, part)
            getattr(owner, name)
            setattr(owner, name, value)
        except (AttributeError, KeyError):
            missing.append(key)
    # A float the module holds (self.eps) is compiled in as a constant (forward checks it is unchanged),
    # not passed as a 0-d float64 tensor input.
    import torch._dynamo.config as dynamo_config

    dynamo_config.specialize_float = True
    # Without duck shaping, x: [64, 64] gets two symbols, so other shapes (64 x 128) still fit.
    import torch.fx.experimental._config as fx_config

    fx_config.use_duck_shape = False
    return missing


def _source_name(node: torch.fx.Node) -> str:
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    if source is None:
        return ""
    name = getattr(source, "name", "")
    return str(name() if callable(name) else name)


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _tensor_origins(module: torch.nn.Module, bound: dict[str, Any]) -> dict[int, dict[str, str]]:
    """id(tensor) -> where forward gets it: an argument, a parameter or a buffer."""
    origins: dict[int, dict[str, str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        origins.setdefault(id(p), {"parameter": name})
    for name, b in module.named_buffers(remove_duplicate=False):
        origins.setdefault(id(b), {"buffer": name})
    for name, value in bound.items():
        if isinstance(value, torch.Tensor):
            origins[id(value)] = {"input": name}
    return origins


_KEY = re.compile(r"\['([^']*)'\]|\.(\w+)")


def _origin_from_source(source: str, bound: dict[str, Any]) -> dict[str, str] | None:
    """``L['x']`` -> input x; ``L['self']._modules['norm']._parameters['weight']`` -> norm.weight."""
    keys = [a or b for a, b in _KEY.findall(source)]
    if source.startswith("L[") and len(keys) == 1 and keys[0] in bound:
        return {"input": keys[0]}
    if not keys or keys[0] != "self":
        return None
    path = [k for k in keys[1:] if k not in ("_modules", "_parameters", "_buffers")]
    kind = "parameter" if "_parameters" in keys else "buffer" if "_buffers" in keys else None
    return {kind: ".".join(path)} if kind and path else None


def _placeholders(
    gm: torch.fx.GraphModule, examples: list[Any], origins: dict[int, dict[str, str]], bound: dict[str, Any]
) -> list[dict[str, Any]]:
    out = []
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(nodes, examples, strict=True):
        value = node.meta.get("example_value", example)
        entry: dict[str, Any] = {"name": node.name, "source": _source_name(node)}
        if isinstance(value, torch.Tensor):
            entry.update(kind="tensor", shape=[str(s) for s in value.shape], dtype=_dtype(value))
            entry["stride"] = [str(s) for s in value.stride()]
            origin = origins.get(id(example)) if isinstance(example, torch.Tensor) else None
            origin = origin or _origin_from_source(entry["source"], bound)
            if origin:
                entry["from"] = origin
        elif isinstance(value, torch.SymInt):
            entry.update(kind="symint", expr=str(value.node.expr))
            origin = _origin_from_source(entry["source"], bound)
            if origin and "input" in origin and not isinstance(bound.get(origin["input"]), torch.Tensor):
                entry["from"] = origin  # an int argument of forward, passed through
        else:
            entry.update(kind=type(value).__name__, value=repr(value))
        out.append(entry)
    return out


def _settings(module: torch.nn.Module) -> list[dict[str, Any]]:
    """Numbers, flags and strings the user's own module classes hold (``self.eps``, ``self.causal``,
    ``self.approximate``), on the instance or on its class (``is_causal = True`` in the class body,
    which an instance may set otherwise): compiled in as constants, or as the branch they chose."""
    out = []
    for prefix, sub in module.named_modules():
        if type(sub).__module__.startswith("torch."):
            continue
        for name, value in trace.held(sub).items():
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, bool | int | float | str):
                out.append({"path": f"{prefix}.{name}" if prefix else name, "value": value})
    return out


def _kernels(code: str) -> tuple[dict[str, Any], str | None]:
    """Each kernel's chosen launch configuration, read from the loaded output module's autotuners."""
    from torch._inductor.codecache import PyCodeCache

    names = re.findall(r"^(\w+) = async_compile\.triton\(", code, flags=re.M)
    loaded = [m for m in PyCodeCache.modules if all(hasattr(m, n) for n in names)]
    # Two compiles of one module name their kernels alike: the module loaded from this very code.
    loaded = [m for m in loaded if _source_of(m) == code] or loaded
    tuners = {n: getattr(loaded[-1], n) for n in names} if loaded else _tuners_by_name(names)
    out: dict[str, Any] = {}
    for name in names:
        tuner = tuners.get(name)
        if tuner is None:
            return {}, f"cannot find the autotuner of kernel {name} after the run"
        launchers = list(getattr(tuner, "launchers", None) or [])
        if not launchers:
            return {}, f"kernel {name} has no launcher after the run (it never ran)"
        cfg = launchers[0].config
        meta = dict(getattr(tuner, "inductor_meta", None) or {})
        out[name] = {
            "config": {
                "kwargs": {k: v for k, v in cfg.kwargs.items() if isinstance(v, int | float | bool)},
                "num_warps": cfg.num_warps,
                "num_stages": cfg.num_stages,
                "num_ctas": getattr(cfg, "num_ctas", 1),
                "maxnreg": getattr(cfg, "maxnreg", None),
            },
            "grid_type": meta.get("grid_type"),
            "configs_tried": len(getattr(tuner, "configs", None) or []),
            "launchers": len(launchers),
        }
    return out, None


def _source_of(module: Any) -> str | None:
    try:
        return Path(module.__file__).read_text(encoding="utf-8")
    except (AttributeError, TypeError, OSError):
        return None


def _tuners_by_name(names: list[str]) -> dict[str, Any]:
    """The live autotuners whose kernel has one of ``names`` (when the output module is not at hand)."""
    import gc

    found: dict[str, Any] = {}
    for obj in gc.get_objects():
        fn = getattr(obj, "fn", None) if hasattr(obj, "launchers") else None
        name = getattr(fn, "__name__", None)
        if name in names:
            found[name] = obj
    return found


def _output_kind(out: Any) -> dict[str, Any] | None:
    if isinstance(out, torch.Tensor):
        return {"kind": "tensor", "count": 1}
    if isinstance(out, tuple | list) and all(isinstance(t, torch.Tensor) for t in out):
        return {"kind": type(out).__name__, "count": len(out)}
    return None


def capture(req: dict[str, Any]) -> dict[str, Any]:
    """Build the module on the GPU, compile it with Inductor, and describe what came out."""
    if not torch.cuda.is_available():
        return {"ok": False, "reason": NEEDS_CUDA}
    try:
        problem = verify.BuiltModule({**req, "device": "cuda"}, req["build"])
    except BaseException as exc:
        return {"ok": False, "reason": verify.describe_exc(exc, "building the module")}
    module = problem.module
    if any(m.training for m in module.modules()):
        return {"ok": False, "reason": "the module is in training mode; only inference is compiled"}
    args = problem.example_inputs(0)
    try:
        bound = inspect.signature(module.forward).bind(*args)
    except TypeError as exc:
        return {"ok": False, "reason": f"the example inputs do not fit forward: {exc}"}
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    if any(
        p.kind is inspect.Parameter.VAR_POSITIONAL or p.kind is inspect.Parameter.VAR_KEYWORD
        for p in inspect.signature(module.forward).parameters.values()
    ):
        return {"ok": False, "reason": "forward takes *args or **kwargs, whose order cannot be named"}
    with torch.no_grad():
        eager = module(*args)
    outputs = _output_kind(eager)
    if outputs is None:
        return {"ok": False, "reason": "forward returns something other than a tensor or a tuple of tensors"}
    if verify.storages(eager) & verify.storages([*args, *module.parameters(), *module.buffers()]):
        return {"ok": False, "reason": "forward returns an input or a parameter (or a view of one)"}

    missing = _configure()
    with _index_in_64_bits() as patched:
        first = _compiled(module, args, arguments, dynamic=True)
    if not patched:
        missing.append("SIMDScheduling.can_use_32bit_indexing")
    if not first.get("ok"):
        return first
    graph_inputs = {p["from"]["input"] for p in first["placeholders"] if "input" in p.get("from", {})}
    fixed = [
        {"name": name, "value": value}
        for name, value in arguments.items()
        if name not in graph_inputs and not isinstance(value, torch.Tensor)
    ]
    # The same module with static shapes and tuned launch settings, for the example's sizes (the
    # forward takes it when every input has them): with static sizes Inductor plans layouts and
    # reductions it cannot plan for symbolic ones.
    torch._dynamo.reset()
    import torch._inductor.config as inductor_config

    inductor_config.coordinate_descent_tuning = True
    try:
        static = _compiled(module, args, arguments, dynamic=False)
    finally:
        inductor_config.coordinate_descent_tuning = False
    import triton

    return {
        "ok": True,
        "code": first["code"],
        "placeholders": first["placeholders"],
        "outputs": outputs,
        "kernels": first["kernels"],
        "static": static if static.get("ok") else {"ok": False, "reason": static.get("reason", "")},
        "settings": _settings(module),
        "fixed_arguments": [f for f in fixed if _plain(f["value"])],
        "unplain_arguments": [f["name"] for f in fixed if not _plain(f["value"])],
        "example_shapes": [list(a.shape) for a in args if isinstance(a, torch.Tensor)],
        "device_name": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "missing_settings": missing,
    }


@contextlib.contextmanager
def _index_in_64_bits() -> Iterator[bool]:
    """Every kernel of the dynamic graph indexes in 64 bits (yields whether that could be set).

    For symbolic sizes Inductor picks 32-bit indexing when the example's sizes fit and installs a
    guard (numel <= 2^31 - 1) so that torch.compile recompiles past it. The standalone module has
    no guards: its generic graph serves every size, so its kernels must index in 64 bits (at
    2^31 elements and more a 32-bit offset wraps: found by the judge's family above 2^31 elements
    as an illegal memory access). The static graph keeps 32 bits: it runs only at its own sizes."""
    try:
        from torch._inductor.codegen.simd import SIMDScheduling
    except ImportError:
        yield False
        return
    original = SIMDScheduling.__dict__.get("can_use_32bit_indexing")
    if original is None:
        yield False
        return
    SIMDScheduling.can_use_32bit_indexing = staticmethod(lambda numel, buffers: False)  # type: ignore[method-assign]
    try:
        yield True
    finally:
        SIMDScheduling.can_use_32bit_indexing = original  # type: ignore[method-assign]


def _compiled(
    module: torch.nn.Module, args: list[Any], arguments: dict[str, Any], dynamic: bool
) -> dict[str, Any]:
    """One compile of ``module`` on ``args``: {"ok", "code", "placeholders", "kernels"} or a reason."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append((gm, list(example_inputs)))
        return compile_fx(gm, example_inputs)

    compiled = torch.compile(module, backend=backend, dynamic=dynamic, fullgraph=True)

    def run() -> Any:
        with torch.no_grad():
            result = compiled(*args)
        torch.cuda.synchronize()
        return result

    try:
        _, codes = run_and_get_code(run)
    except Exception as exc:
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        if "graph break" in str(exc).lower() or type(exc).__name__ in ("Unsupported", "UserError"):
            return {"ok": False, "reason": f"forward does not compile as one graph: {first}"[:500]}
        return {"ok": False, "reason": f"torch.compile failed: {type(exc).__name__}: {first}"[:500]}
    if len(graphs) != 1 or len(codes) != 1:
        return {
            "ok": False,
            "reason": f"torch.compile made {len(graphs)} graphs and {len(codes)} modules, not one",
        }
    gm, examples = graphs[0]
    placeholders = _placeholders(gm, examples, _tensor_origins(module, arguments), arguments)
    kernels, why = _kernels(codes[0])
    if why:
        return {"ok": False, "reason": why}
    return {"ok": True, "code": codes[0], "placeholders": placeholders, "kernels": kernels}


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)
