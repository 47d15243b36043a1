"""How to build a module and its inputs.

Three sources, tried in order inside the sandbox (building runs the module's
own code): the KernelBench convention (``get_init_inputs()`` and
``get_inputs()`` in the module's file), an entry in the repository config
(``modules:`` keyed by ``path::Class``), then guarded guesses from the
constructor signature and common argument names. When nothing works the
report says why and shows what to add.

A *spec* is JSON: ``{"tensor": {"shape": [...], "dtype": ..., "dist": ...,
"low": ..., "high": ...}}`` for a tensor drawn fresh for every seed, or
``{"value": x}`` for anything else. The helpers that need torch import it
lazily so configs can be parsed without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import torch

Spec = dict[str, Any]

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, "bool")


class ConfigError(ValueError):
    """The config file is wrong; the message names the file and the key."""


# ---------------------------------------------------------------------------
# Config: the ``modules:`` section of .github/kernelize.yml


@dataclass
class ModuleEntry:
    """A config entry: how to build one module."""

    init_args: list[Spec] = field(default_factory=list)
    init_kwargs: dict[str, Spec] = field(default_factory=dict)
    inputs: list[Spec] = field(default_factory=list)


def _tensor_spec(raw: dict[str, Any], where: str) -> Spec:
    unknown = set(raw) - {"shape", "dtype", "range"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected shape, dtype, range)")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
        raise ConfigError(f"{where}.shape: expected a list of positive integers, got {shape!r}")
    dtype = raw.get("dtype", "float32")
    if dtype not in DTYPES:
        raise ConfigError(f"{where}.dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    rng = raw.get("range")
    spec: dict[str, Any] = {"shape": shape, "dtype": dtype}
    if rng is not None:
        ok = (
            isinstance(rng, list)
            and len(rng) == 2
            and all(isinstance(v, int | float) for v in rng)
            and rng[0] < rng[1]
        )
        if not ok:
            raise ConfigError(f"{where}.range: expected [low, high] with low < high, got {rng!r}")
        spec["low"], spec["high"] = rng
    if dtype in INT_DTYPES:
        if rng is None:
            raise ConfigError(f"{where}.range: integer inputs need a range [low, high)")
        spec["dist"] = "randint"
    elif dtype == "bool":
        spec["dist"] = "bool"
    else:
        spec["dist"] = "uniform" if rng is not None else "normal"
    return {"tensor": spec}


def _object_spec(raw: dict[str, Any], where: str) -> Spec:
    unknown = set(raw) - {"class", "kwargs"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected class, kwargs)")
    name, kwargs = raw["class"], raw.get("kwargs", {})
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"{where}.class: expected the name of a class in the module's file, got {name!r}")
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{where}.kwargs: expected a mapping of constructor arguments")
    return {
        "object": {
            "class": name,
            "kwargs": {str(k): _value_or_tensor(v, f"{where}.kwargs.{k}") for k, v in kwargs.items()},
        }
    }


def _value_or_tensor(raw: Any, where: str) -> Spec:
    if isinstance(raw, dict) and "shape" in raw:
        return _tensor_spec(raw, where)
    if isinstance(raw, dict) and "class" in raw:  # a config object, built from a class in the file
        return _object_spec(raw, where)
    if isinstance(raw, dict) and set(raw) == {"value"}:
        return {"value": raw["value"]}
    return {"value": raw}


def parse_module_entry(raw: Any, where: str) -> ModuleEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with init and inputs")
    unknown = set(raw) - {"init", "inputs"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected init, inputs)")
    entry = ModuleEntry()
    init = raw.get("init", [])
    if isinstance(init, list):
        entry.init_args = [_value_or_tensor(v, f"{where}.init[{i}]") for i, v in enumerate(init)]
    elif isinstance(init, dict):
        bad = set(init) - {"args", "kwargs"}
        if bad:
            raise ConfigError(f"{where}.init: unknown key {sorted(bad)[0]!r} (expected args, kwargs)")
        args, kwargs = init.get("args", []), init.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ConfigError(f"{where}.init: args must be a list and kwargs a mapping")
        entry.init_args = [_value_or_tensor(v, f"{where}.init.args[{i}]") for i, v in enumerate(args)]
        entry.init_kwargs = {
            str(k): _value_or_tensor(v, f"{where}.init.kwargs.{k}") for k, v in kwargs.items()
        }
    else:
        raise ConfigError(f"{where}.init: expected a list of arguments or {{args, kwargs}}")
    inputs = raw.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise ConfigError(f"{where}.inputs: expected a non-empty list of input specs")
    entry.inputs = [_value_or_tensor(v, f"{where}.inputs[{i}]") for i, v in enumerate(inputs)]
    return entry


def load_module_entries(path: str, text: str | None = None) -> dict[str, ModuleEntry]:
    """The ``modules:`` section of a config file, validated. Keys are ``path::Class``."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    modules = data.get("modules", {}) or {}
    if not isinstance(modules, dict):
        raise ConfigError(f"{path}: modules: expected a mapping of 'path::Class' to entries")
    entries = {}
    for key, raw in modules.items():
        if not isinstance(key, str) or "::" not in key:
            raise ConfigError(f"{path}: modules: key {key!r} must look like 'path/to/file.py::Class'")
        entries[key] = parse_module_entry(raw, f"{path}: modules.{key}")
    return entries


def _clean_path(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path.lstrip("/")


def match_entry(entries: dict[str, ModuleEntry], rel_path: str, class_name: str) -> ModuleEntry | None:
    """The entry for ``rel_path::class_name``; a key may name the path relative to any parent."""
    rel = _clean_path(rel_path)
    for key, entry in entries.items():
        path, _, cls = key.rpartition("::")
        path = _clean_path(path)
        if cls == class_name and (rel == path or rel.endswith("/" + path)):
            return entry
    return None


# ---------------------------------------------------------------------------
# Specs to values (inside the sandbox)


def make_value(spec: Spec, gen: torch.Generator, device: str, namespace: Any = None) -> Any:
    """A fresh value for ``spec``, drawn on ``device`` (large inputs never pass through host memory).
    An ``object`` spec (a config object: ``{"class": name, "kwargs": {...}}``) is built here, from
    the class of that name in ``namespace`` (the module's own file): a recipe crosses processes,
    never the object."""
    import torch

    if "value" in spec:
        return spec["value"]
    if "object" in spec:
        obj = spec["object"]
        cls = getattr(namespace, obj["class"], None) if namespace is not None else None
        if not isinstance(cls, type):
            why = f"no class {obj['class']!r} in the module's file to build a constructor argument from"
            raise ConfigError(why)
        kwargs = {k: make_value(v, gen, device, namespace) for k, v in obj.get("kwargs", {}).items()}
        return cls(**kwargs)
    t = spec["tensor"]
    shape, dtype = t["shape"], getattr(torch, t["dtype"])
    dist = t.get("dist", "normal")
    draw = torch.float64 if dtype == torch.float64 else torch.float32
    if dist == "randint":
        return torch.randint(int(t["low"]), int(t["high"]), shape, generator=gen, dtype=dtype, device=device)
    if dist == "bool":
        return torch.rand(shape, generator=gen, device=device) < 0.5
    if dist == "uniform":
        low, high = float(t.get("low", 0.0)), float(t.get("high", 1.0))
        out = torch.rand(shape, generator=gen, dtype=draw, device=device) * (high - low) + low
    else:
        out = torch.randn(shape, generator=gen, dtype=draw, device=device)
    return out.to(dtype)


def make_values(specs: list[Spec], seed: int, device: str, namespace: Any = None) -> list[Any]:
    import torch

    # The meta device (sizes only) has no generator of its own; factories there take the CPU's.
    gen = torch.Generator(device="cpu" if device == "meta" else device).manual_seed(seed)
    return [make_value(s, gen, device, namespace) for s in specs]


def infer_spec(value: Any) -> Spec:
    """A spec that draws values like ``value`` (a tensor from ``get_inputs()``, say)."""
    import torch

    if not isinstance(value, torch.Tensor):
        recipe = object_recipe(value)
        return {"object": recipe} if recipe is not None else {"value": value}
    dtype = str(value.dtype).removeprefix("torch.")
    spec: dict[str, Any] = {"shape": list(value.shape), "dtype": dtype}
    if value.dtype == torch.bool:
        spec["dist"] = "bool"
    elif not value.is_floating_point():
        lo = int(value.min()) if value.numel() else 0
        hi = int(value.max()) + 1 if value.numel() else 1
        spec.update(dist="randint", low=lo, high=max(hi, lo + 1))
    elif value.numel() and float(value.min()) >= 0:
        # rand()-style inputs (probabilities, log arguments) stay positive.
        spec.update(dist="uniform", low=0.0, high=max(1.0, float(value.max())))
    else:
        spec["dist"] = "normal"
    return {"tensor": spec}


_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return isinstance(value, _PLAIN)


def object_recipe(value: Any) -> dict[str, Any] | None:
    """How to build ``value`` again in another process: a dataclass instance or a transformers
    ``PretrainedConfig`` whose fields are plain values (``{"class", "kwargs"}``); None otherwise."""
    import dataclasses

    cls = type(value)
    # transformers' config (PretrainedConfig, PreTrainedConfig in 5.x, itself a dataclass there):
    # what differs from the defaults is what builds it again.
    if any(c.__name__.lower() == "pretrainedconfig" for c in cls.__mro__) and hasattr(value, "to_diff_dict"):
        skip = ("transformers_version", "model_type")
        kwargs = {k: v for k, v in value.to_diff_dict().items() if k not in skip}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        kwargs = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    else:
        return None
    if not _plain(kwargs):
        return None
    return {"class": cls.__name__, "kwargs": {k: {"value": v} for k, v in kwargs.items()}}


def tensor_shapes(specs: list[Spec]) -> list[list[int]]:
    return [list(s["tensor"]["shape"]) for s in specs if "tensor" in s]


def odd_size(v: int) -> int:
    """Another size for a dimension of ``v``: odd, and different (64 -> 97, 2 -> 3)."""
    return (v + v // 2) | 1


def shape_variants(specs: list[Spec]) -> list[list[Spec]]:
    """Input specs at other sizes, to catch kernels with the example's shape baked in.

    First the batch doubled, then each distinct size replaced everywhere by an
    odd one (so inputs that share a size keep agreeing). The caller keeps the
    variants the reference module accepts.
    """
    shapes = tensor_shapes(specs)
    if not shapes:
        return []
    sizes: list[int] = []
    for shape in shapes:  # last dims first: they are where mask bugs hide
        for s in reversed(shape):
            if s > 1 and s not in sizes:
                sizes.append(s)
    subs: list[dict[int, int]] = []
    if shapes[0] and shapes[0][0] > 0:
        subs.append({shapes[0][0]: shapes[0][0] * 2})
    subs.extend({s: odd_size(s)} for s in sizes)
    variants = []
    for sub in subs:
        variant = []
        for spec in specs:
            if "tensor" in spec:
                t = dict(spec["tensor"])
                t["shape"] = [sub.get(s, s) for s in t["shape"]]
                variant.append({"tensor": t})
            else:
                variant.append(spec)
        if tensor_shapes(variant) != shapes:
            variants.append(variant)
    return variants


# ---------------------------------------------------------------------------
# Guarded guesses

_INT_GUESSES = {
    64: (
        "in_features out_features in_channels out_channels dim d_model hidden_size hidden_dim "
        "embed_dim embedding_dim n_embd features num_features channels input_size output_size "
        "intermediate_size ffn_dim d_ff in_dim out_dim input_dim output_dim emb_dim "
        "normalized_shape size width n_state ndim num_channels dim_in dim_out hidden d_hidden n_embed"
    ),
    4: "num_heads n_heads n_head heads num_attention_heads num_groups n_kv_heads num_key_value_heads "
    "mlp_ratio expansion_factor",
    16: "head_dim",
    32: "multiple_of",
    3: "kernel_size",
    1: "stride",
    128: "num_embeddings vocab_size max_len max_seq_len block_size seq_len",
    10: "num_classes",
    2: "num_layers n_layers depth",
}
_NAME_GUESSES: dict[str, Any] = {n: v for v, names in _INT_GUESSES.items() for n in names.split()}
_NAME_GUESSES.update(
    eps=1e-5,
    p=0.0,
    dropout=0.0,
    dropout_p=0.0,
    bias=True,
    scale=1.0,
    alpha=1.0,
    beta=1.0,
    negative_slope=0.01,
    padding=1,
    dilation=1,
    groups=1,
    inplace=False,
    affine=True,
    # Clamp bounds (transformers' ClippedGELUActivation(min, max), nn.Hardtanh's min_val/max_val):
    # wide enough that both the clipped and the unclipped parts are checked on N(0,1) and outliers.
    min=-10.0,
    max=10.0,
    min_val=-1.0,
    max_val=1.0,
)
_AXIS_NAMES = {"dim", "axis"}


# Small sizes for the fields of a config object (nanoGPT's GPTConfig, transformers' configs,
# llama's ModelArgs), so a guessed module is quick to check; fields not named keep their defaults.
_SMALL_CONFIG: dict[str, Any] = {
    **dict.fromkeys("n_embd hidden_size d_model dim embed_dim n_embed".split(), 64),
    **dict.fromkeys("n_head num_attention_heads num_heads n_heads".split(), 4),
    **dict.fromkeys("n_kv_heads num_key_value_heads".split(), 4),
    **dict.fromkeys("n_layer num_hidden_layers n_layers num_layers".split(), 2),
    **dict.fromkeys("intermediate_size ffn_dim d_ff n_inner".split(), 128),
    **dict.fromkeys("block_size max_position_embeddings n_positions max_seq_len n_ctx".split(), 64),
    **dict.fromkeys("attn_pdrop resid_pdrop embd_pdrop dropout".split(), 0.0),
    **dict.fromkeys("attention_dropout hidden_dropout".split(), 0.0),
    "vocab_size": 256,
    "head_dim": 16,
    "multiple_of": 32,
}


def _config_classes(namespace: Any, annotation: Any) -> list[type]:
    """Config classes a constructor argument could take: its annotation if it is one, else the
    dataclasses and transformers configs the module's file defines or imports ("Config" and
    "Args" in the name first)."""
    import dataclasses

    def config_like(c: Any) -> bool:
        if not isinstance(c, type):
            return False
        if dataclasses.is_dataclass(c):
            return True
        return any(b.__name__.lower() == "pretrainedconfig" for b in c.__mro__[1:])

    if config_like(annotation):
        return [annotation]
    found = [v for v in vars(namespace).values() if config_like(v)] if namespace is not None else []
    return sorted(dict.fromkeys(found), key=lambda c: not any(w in c.__name__ for w in ("Config", "Args")))


def small_config(cfg: type) -> Any:
    """An instance of a config class with small sizes (:data:`_SMALL_CONFIG`); raises TypeError
    when a field it requires has no default and no small size."""
    import dataclasses

    if dataclasses.is_dataclass(cfg):
        fields = [f.name for f in dataclasses.fields(cfg) if f.init]
        kwargs = {name: _SMALL_CONFIG[name] for name in fields if name in _SMALL_CONFIG}
        return cfg(**kwargs)
    default = cfg()
    return cfg(**{k: v for k, v in _SMALL_CONFIG.items() if hasattr(default, k)})


def guess_init_kwargs(cls: type, namespace: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """Constructor keyword sets to try, or the reason there are none. An argument no name guess
    covers may be a config object: one of the config classes the module's file (``namespace``)
    defines or imports, built with small sizes."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError) as exc:
        return [], f"cannot read the constructor signature: {exc}"
    required = [
        p
        for p in sig.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    configs: dict[str, list[Any]] = {}
    for p in required:
        if p.name in _NAME_GUESSES:
            continue
        made = []
        for cfg in _config_classes(namespace, p.annotation):
            try:
                made.append(small_config(cfg))
            except Exception:  # a config this guess cannot fill: the next one
                continue
        if not made:
            return [], f"no safe guess for constructor argument {p.name!r}"
        configs[p.name] = made
    base = {p.name: _NAME_GUESSES[p.name] for p in required if p.name not in configs}
    options = [base | {name: made[0] for name, made in configs.items()}]
    for name, made in configs.items():  # the other config classes, one at a time
        options += [options[0] | {name: other} for other in made[1:]]
    base = options[0]
    if any(n in _AXIS_NAMES for n in base):  # `dim` is a size in a Linear, an axis in a softmax
        options.append({n: (-1 if n in _AXIS_NAMES else v) for n, v in base.items()})
    return options, None


def guess_input_specs(
    module: torch.nn.Module, n_inputs: int, init_kwargs: dict[str, Any]
) -> list[list[Spec]]:
    """Forward inputs to try, shaped for the module's first layer; arguments named for positions
    (``position_ids``) get integer positions [2, 16] below the module's longest sequence."""
    names = [
        p.name
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ][:n_inputs]
    positions = [i for i, name in enumerate(names) if name in _POSITION_NAMES]
    options = _shaped_inputs(module, n_inputs, init_kwargs)
    if not positions:
        return options
    longest = next(
        (v for a in _LONGEST_NAMES if isinstance(v := getattr(module, a, None), int) and v >= 16), 64
    )
    spec = {"tensor": {"shape": [2, 16], "dtype": "int64", "dist": "randint", "low": 0, "high": longest}}
    return [[spec if i in positions else s for i, s in enumerate(specs)] for specs in options]


# Forward arguments that hold token positions, and the attributes that bound them.
_POSITION_NAMES = {"position_ids", "pos_ids", "positions"}
_LONGEST_NAMES = ("max_seq_len_cached", "max_position_embeddings", "max_seq_len", "max_len")


def _shaped_inputs(module: torch.nn.Module, n_inputs: int, init_kwargs: dict[str, Any]) -> list[list[Spec]]:
    import torch.nn as nn

    def t(shape: list[int], dtype: str = "float32", **kw: Any) -> Spec:
        return {"tensor": {"shape": shape, "dtype": dtype, "dist": "normal", **kw}}

    for sub in module.modules():
        if isinstance(sub, nn.Embedding):
            idx = t([2, 16], "int64", dist="randint", low=0, high=sub.num_embeddings)
            return [[idx] * n_inputs]
        if isinstance(sub, nn.Conv2d | nn.BatchNorm2d | nn.ConvTranspose2d):
            c = sub.in_channels if isinstance(sub, nn.Conv2d | nn.ConvTranspose2d) else sub.num_features
            return [[t([2, c, 16, 16])] * n_inputs]
        if isinstance(sub, nn.Conv1d | nn.BatchNorm1d):
            c = sub.in_channels if isinstance(sub, nn.Conv1d) else sub.num_features
            return [[t([2, c, 32])] * n_inputs]
        if isinstance(sub, nn.Linear):
            f = sub.in_features
            return [[t([2, 16, f])] * n_inputs, [t([8, f])] * n_inputs]
        if isinstance(sub, nn.LayerNorm | nn.RMSNorm) and sub.normalized_shape:
            return [[t([2, 16, *sub.normalized_shape])] * n_inputs]
    sizes = [v for v in init_kwargs.values() if isinstance(v, int) and not isinstance(v, bool) and v >= 8]
    f = sizes[0] if sizes else 64
    return [[t(shape)] * n_inputs for shape in ([2, 16, f], [8, f], [2, 4, 16, f])]


def forward_arity(module: torch.nn.Module) -> int:
    """How many inputs ``forward`` requires (parameters without defaults)."""
    sig = inspect.signature(module.forward)
    return sum(
        1
        for p in sig.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


def _yaml_init_value(name: str, configs: Sequence[str]) -> str:
    """A constructor argument for the snippet's config entry: a config object of the file's config
    class where the name says so, the name guess where there is one, else null to fill in."""
    if configs and any(w in name.lower() for w in ("config", "cfg", "args", "params")):
        return f"{{class: {configs[0]}, kwargs: {{}}}}"
    if name in _NAME_GUESSES:
        return (
            yaml.safe_dump(_NAME_GUESSES[name], default_flow_style=True).strip().removesuffix("...").strip()
        )
    return "null"


def snippet(
    class_name: str,
    rel_path: str,
    init_params: tuple[str, ...],
    forward_params: tuple[str, ...],
    configs: Sequence[str] = (),
    classes_in_file: int = 1,
) -> str:
    """What to paste to make a module buildable: a config entry for this one class (its
    constructor arguments by name, a config object of ``configs``, the file's config classes, where
    the name says so; null where nothing can be proposed), or KernelBench functions, which every
    class of the file would use."""
    init = [p for p in init_params if not p.startswith("*")]
    fwd = [p for p in forward_params if not p.startswith("*")] or ["x"]
    values = {p: _yaml_init_value(p, configs) for p in init}
    kwargs = ", ".join(f"{p}: {v}" for p, v in values.items())
    nulls = [p for p, v in values.items() if v == "null"]
    todo = f"  # fill in: {', '.join(nulls)}" if nulls else ""
    cfg_inputs = "\n".join(f"      - {{shape: [8, 64], dtype: float32}}  # {p}" for p in fwd)
    init_args = ", ".join(f"{p}_value" for p in init)
    tensors = ", ".join("torch.randn(8, 64)" for _ in fwd)
    every = ""
    if classes_in_file > 1:
        every = f"; every one of its {classes_in_file} module classes would use them"
    return (
        f"# in .github/kernelize.yml:\n"
        f"modules:\n  {rel_path}::{class_name}:\n    init: {{kwargs: {{{kwargs}}}}}{todo}\n"
        f"    inputs:\n{cfg_inputs}\n\n"
        f"# or in {rel_path}, next to {class_name} (KernelBench convention{every}):\n"
        f"def get_init_inputs():\n    return [{init_args}]  # constructor arguments\n\n"
        f"def get_inputs():\n    return [{tensors}]  # forward({', '.join(fwd)})\n"
    )


def config_class_names(source: str) -> list[str]:
    """Config classes a file defines or imports, by reading it: dataclasses and classes whose name
    or base says Config (``GPTConfig``, ``LlamaConfig(PretrainedConfig)``, ``ModelArgs``)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            deco = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
            named = any(w in node.name for w in ("Config", "Args"))
            based = any("Config" in ast.unparse(b) for b in node.bases)
            if deco or (named and (based or not node.bases)) or based:
                found.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            found += [a.asname or a.name for a in node.names if a.name.endswith("Config")]
    return list(dict.fromkeys(found))
