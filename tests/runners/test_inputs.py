"""runners.inputs: config entries, shape variants, value drawing, guesses and snippets."""

from __future__ import annotations

import ast
import itertools
import textwrap

import pytest
import torch
import torch.nn as nn

from runners.inputs import (
    ConfigError,
    ModuleEntry,
    config_class_names,
    forward_arity,
    guess_init_kwargs,
    guess_input_specs,
    infer_spec,
    load_module_entries,
    make_values,
    match_entry,
    odd_size,
    parse_module_entry,
    shape_variants,
    snippet,
)


def cfg(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def tensor(shape: list[int], dtype: str = "float32", **kw) -> dict:
    return {"tensor": {"shape": shape, "dtype": dtype, "dist": "normal", **kw}}


# ---------------------------------------------------------------------------
# Config parsing


def test_load_valid_config_with_init_list():
    entries = load_module_entries(
        ".github/kernelize.yml",
        cfg(
            """
            other_section: {ignored: true}
            modules:
              pkg/layers.py::RMSNorm:
                init: [32]
                inputs:
                  - {shape: [3, 5, 32], dtype: float32}
                  - {shape: [4], dtype: float16, range: [-2, 2]}
                  - {shape: [2, 3], dtype: int64, range: [0, 10]}
                  - {shape: [7], dtype: bool}
                  - 0.5
                  - {value: [1, 2]}
            """
        ),
    )
    assert list(entries) == ["pkg/layers.py::RMSNorm"]
    e = entries["pkg/layers.py::RMSNorm"]
    assert e.init_args == [{"value": 32}]
    assert e.init_kwargs == {}
    assert e.inputs == [
        {"tensor": {"shape": [3, 5, 32], "dtype": "float32", "dist": "normal"}},
        {"tensor": {"shape": [4], "dtype": "float16", "dist": "uniform", "low": -2, "high": 2}},
        {"tensor": {"shape": [2, 3], "dtype": "int64", "dist": "randint", "low": 0, "high": 10}},
        {"tensor": {"shape": [7], "dtype": "bool", "dist": "bool"}},
        {"value": 0.5},
        {"value": [1, 2]},
    ]


def test_load_valid_config_with_init_args_and_kwargs():
    entries = load_module_entries(
        "k.yml",
        cfg(
            """
            modules:
              m.py::Attn:
                init:
                  args: [64, 4]
                  kwargs: {dropout: 0.0, mask: {shape: [8, 8], dtype: bool}}
                inputs: [{shape: [2, 8, 64]}]
            """
        ),
    )
    e = entries["m.py::Attn"]
    assert e.init_args == [{"value": 64}, {"value": 4}]
    assert e.init_kwargs == {
        "dropout": {"value": 0.0},
        "mask": {"tensor": {"shape": [8, 8], "dtype": "bool", "dist": "bool"}},
    }
    assert e.inputs == [{"tensor": {"shape": [2, 8, 64], "dtype": "float32", "dist": "normal"}}]


@pytest.mark.parametrize("text", ["", "other: 1\n", "modules:\n", "modules: {}\n"])
def test_config_without_modules_is_empty(text):
    assert load_module_entries("k.yml", text) == {}


def test_load_reads_the_file(tmp_path):
    path = tmp_path / "kernelize.yml"
    path.write_text("modules:\n  a.py::A: {inputs: [{shape: [2]}]}\n")
    assert load_module_entries(str(path)) == {
        "a.py::A": ModuleEntry([], {}, [tensor([2])]),
    }


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yml"
    with pytest.raises(ConfigError, match=rf"^{missing}: cannot read config: No such file"):
        load_module_entries(str(missing))


ENTRY = "modules:\n  pkg/m.py::A:\n    inputs:\n      - {}\n"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            "{shape: [2, 3], dtype: float33}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].dtype: 'float33' is not one of float32,",
            id="bad dtype",
        ),
        pytest.param(
            "{shape: [2, -3]}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].shape: expected a list of positive integers, got [2, -3]",
            id="negative shape",
        ),
        pytest.param(
            "{shape: [2, 0]}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].shape: expected a list of positive integers",
            id="zero shape",
        ),
        pytest.param(
            "{shape: 5}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].shape: expected a list of positive integers, got 5",
            id="shape not a list",
        ),
        pytest.param(
            "{shape: [2], range: [1, 1]}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].range: expected [low, high] with low < high, got [1, 1]",
            id="range low == high",
        ),
        pytest.param(
            "{shape: [2], range: [3, -1]}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].range: expected [low, high] with low < high",
            id="range low > high",
        ),
        pytest.param(
            "{shape: [2], range: [0, 1, 2]}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].range: expected [low, high]",
            id="range of three",
        ),
        pytest.param(
            "{shape: [2], dtype: int32}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0].range: integer inputs need a range [low, high)",
            id="int without range",
        ),
        pytest.param(
            "{shape: [2], dtyp: float32}",
            "cfg.yml: modules.pkg/m.py::A.inputs[0]: unknown key 'dtyp' (expected shape, dtype, range)",
            id="unknown tensor key",
        ),
    ],
)
def test_bad_tensor_spec(spec, message):
    with pytest.raises(ConfigError) as info:
        load_module_entries("cfg.yml", ENTRY.replace("{}", spec))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "modules:\n  m.py::A:\n    input: [{shape: [2]}]\n",
            "cfg.yml: modules.m.py::A: unknown key 'input' (expected init, inputs)",
            id="unknown entry key",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    init: {argz: [1]}\n    inputs: [1]\n",
            "cfg.yml: modules.m.py::A.init: unknown key 'argz' (expected args, kwargs)",
            id="unknown init key",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    init: {args: 1}\n    inputs: [1]\n",
            "cfg.yml: modules.m.py::A.init: args must be a list and kwargs a mapping",
            id="init args not a list",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    init: 5\n    inputs: [1]\n",
            "cfg.yml: modules.m.py::A.init: expected a list of arguments or {args, kwargs}",
            id="init scalar",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    init: {kwargs: {w: {shape: [-1]}}}\n    inputs: [1]\n",
            "cfg.yml: modules.m.py::A.init.kwargs.w.shape: expected a list of positive integers",
            id="bad init kwarg tensor",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    init: []\n",
            "cfg.yml: modules.m.py::A.inputs: expected a non-empty list of input specs",
            id="inputs missing",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    inputs: []\n",
            "cfg.yml: modules.m.py::A.inputs: expected a non-empty list of input specs",
            id="inputs empty",
        ),
        pytest.param(
            "modules:\n  m.py::A: 3\n",
            "cfg.yml: modules.m.py::A: expected a mapping with init and inputs",
            id="entry not a mapping",
        ),
        pytest.param(
            "modules: [a, b]\n",
            "cfg.yml: modules: expected a mapping of 'path::Class' to entries",
            id="modules not a mapping",
        ),
        pytest.param(
            "modules:\n  m.py:A:\n    inputs: [1]\n",
            "cfg.yml: modules: key 'm.py:A' must look like 'path/to/file.py::Class'",
            id="key without ::",
        ),
        pytest.param(
            "- modules\n",
            "cfg.yml: expected a mapping at the top level",
            id="top level a list",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    inputs: [1]\n  n.py::B: {inputs: [1]}}\n",
            "cfg.yml:4: not valid YAML: ",
            id="invalid YAML, line 4",
        ),
        pytest.param(
            "modules:\n  m.py::A:\n    inputs:\n      - 1\n\t- 2\n",
            "cfg.yml:5: not valid YAML: found character '\\t'",
            id="invalid YAML, tab on line 5",
        ),
    ],
)
def test_bad_config(text, message):
    with pytest.raises(ConfigError) as info:
        load_module_entries("cfg.yml", text)
    assert str(info.value).startswith(message)


def test_parse_module_entry_names_the_given_path():
    with pytest.raises(ConfigError, match=r"^here\.inputs\[1\]\.dtype: 'complex64' is not one of"):
        parse_module_entry({"inputs": [{"shape": [1]}, {"shape": [1], "dtype": "complex64"}]}, "here")


# ---------------------------------------------------------------------------
# Matching config keys to files


def test_match_entry_paths():
    a, b = ModuleEntry(inputs=[{"value": 1}]), ModuleEntry(inputs=[{"value": 2}])
    entries = {"pkg/layers.py::RMSNorm": a, "./models/net.py::RMSNorm": b}
    assert match_entry(entries, "pkg/layers.py", "RMSNorm") is a
    assert match_entry(entries, "./pkg/layers.py", "RMSNorm") is a
    assert match_entry(entries, "src/pkg/layers.py", "RMSNorm") is a  # key relative to a parent
    assert match_entry(entries, "pkg\\layers.py", "RMSNorm") is a  # Windows separators
    assert match_entry(entries, "models/net.py", "RMSNorm") is b  # "./" in the key
    assert match_entry(entries, "pkg/layers.py", "GatedMLP") is None  # other class
    assert match_entry(entries, "otherpkg/layers.py", "RMSNorm") is None  # not a path suffix
    assert match_entry(entries, "layers.py", "RMSNorm") is None  # key is longer than the path
    assert match_entry({"layers.py::RMSNorm": a}, "deep/pkg/layers.py", "RMSNorm") is a
    assert match_entry({}, "pkg/layers.py", "RMSNorm") is None


def test_match_entry_keeps_dot_folders_apart():
    entries = {".ci/models.py::Net": ModuleEntry(inputs=[{"value": 1}])}
    assert match_entry(entries, "ci/models.py", "Net") is None


# ---------------------------------------------------------------------------
# Shape variants


def shapes(variant: list[dict]) -> list[list[int]]:
    return [s["tensor"]["shape"] for s in variant if "tensor" in s]


def test_odd_size():
    assert odd_size(64) == 97
    assert odd_size(2) == 3
    assert odd_size(100) == 151
    assert odd_size(48) == 73
    for v in range(2, 300):
        assert odd_size(v) % 2 == 1 and odd_size(v) != v


def test_shape_variants_keep_equal_inputs_equal():
    variants = shape_variants([tensor([4, 64]), tensor([4, 64])])
    assert [shapes(v) for v in variants] == [
        [[8, 64], [8, 64]],  # batch doubled
        [[4, 97], [4, 97]],  # last dim first
        [[7, 64], [7, 64]],
    ]


def test_shape_variants_matmul_substitution_hits_both_operands():
    variants = shape_variants([tensor([32, 48]), tensor([48, 40])])
    got = [shapes(v) for v in variants]
    assert got == [
        [[64, 48], [48, 40]],
        [[32, 73], [73, 40]],  # the shared K changes in both
        [[49, 48], [48, 40]],
        [[32, 48], [48, 61]],
    ]
    for a, b in got:  # every variant is still a valid product
        assert a[1] == b[0]


def test_shape_variants_keep_non_tensor_specs_and_tensor_fields():
    specs = [tensor([16, 100], low=0.0, high=1.0, dist="uniform"), {"value": 3}]
    variants = shape_variants(specs)
    assert [shapes(v) for v in variants] == [[[32, 100]], [[16, 151]], [[25, 100]]]
    for v in variants:
        assert v[1] == {"value": 3}
        assert v[0]["tensor"]["dist"] == "uniform" and v[0]["tensor"]["high"] == 1.0
    assert specs[0]["tensor"]["shape"] == [16, 100]  # the input specs are not modified


def test_shape_variants_without_tensors():
    assert shape_variants([{"value": 1}]) == []
    assert shape_variants([]) == []


# ---------------------------------------------------------------------------
# Drawing values


SPECS = [
    tensor([4, 8]),
    tensor([16], "float16", dist="uniform", low=-3.0, high=-1.0),
    tensor([50], "int32", dist="randint", low=5, high=9),
    tensor([30], "bool", dist="bool"),
    {"value": "as-is"},
]


def test_make_values_is_deterministic_per_seed():
    a, b, c = (
        make_values(SPECS, 0, "cpu"),
        make_values(SPECS, 0, "cpu"),
        make_values(SPECS, 1, "cpu"),
    )
    for x, y in zip(a[:4], b[:4], strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0])
    assert not torch.equal(a[1], c[1])
    assert a[4] == b[4] == c[4] == "as-is"


def test_make_values_dtypes_ranges_and_never_zeros():
    for seed in range(5):
        normal, uniform, ints, bools, value = make_values(SPECS, seed, "cpu")
        assert normal.dtype == torch.float32 and normal.shape == (4, 8)
        assert bool(normal.any()) and bool((normal != 0).all())
        assert uniform.dtype == torch.float16 and bool(((uniform >= -3) & (uniform <= -1)).all())
        assert bool(uniform.any())
        assert ints.dtype == torch.int32 and int(ints.min()) >= 5 and int(ints.max()) <= 8
        assert bools.dtype == torch.bool
        assert value == "as-is"


# ---------------------------------------------------------------------------
# Specs from example values


def test_infer_spec():
    g = torch.Generator().manual_seed(0)
    assert infer_spec(torch.randn(3, 4, generator=g)) == {
        "tensor": {"shape": [3, 4], "dtype": "float32", "dist": "normal"}
    }
    pos = torch.rand(5, generator=g, dtype=torch.float64)
    assert infer_spec(pos) == {
        "tensor": {"shape": [5], "dtype": "float64", "dist": "uniform", "low": 0.0, "high": 1.0}
    }
    big = torch.tensor([0.5, 7.0])
    assert infer_spec(big)["tensor"]["high"] == 7.0  # the example's own spread
    ints = torch.tensor([[3, 9], [4, 5]], dtype=torch.int64)
    assert infer_spec(ints) == {
        "tensor": {"shape": [2, 2], "dtype": "int64", "dist": "randint", "low": 3, "high": 10}
    }
    same = torch.full((4,), 2, dtype=torch.int32)
    assert infer_spec(same)["tensor"] == {
        "shape": [4],
        "dtype": "int32",
        "dist": "randint",
        "low": 2,
        "high": 3,
    }
    assert infer_spec(torch.tensor([True, False])) == {
        "tensor": {"shape": [2], "dtype": "bool", "dist": "bool"}
    }
    assert infer_spec(3) == {"value": 3}
    assert infer_spec(None) == {"value": None}


def test_inferred_spec_draws_like_the_example():
    ints = torch.tensor([3, 9, 4])
    drawn = make_values([infer_spec(ints)], 0, "cpu")[0]
    assert drawn.dtype == torch.int64 and int(drawn.min()) >= 3 and int(drawn.max()) <= 9
    pos = make_values([infer_spec(torch.rand(100))], 0, "cpu")[0]
    assert float(pos.min()) >= 0.0


# ---------------------------------------------------------------------------
# Guesses


class _Norm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.weight


class _NeedsConfig(nn.Module):
    def __init__(self, hidden_size, config, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class _Proj(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x, scale=1.0):
        return self.lin(x) * scale


def test_guess_init_kwargs_for_dim_and_eps():
    options, why_not = guess_init_kwargs(_Norm)
    assert why_not is None
    assert options == [{"dim": 64}, {"dim": -1}]  # a size, then an axis


def test_guess_init_kwargs_refuses_an_unknown_argument():
    options, why_not = guess_init_kwargs(_NeedsConfig)
    assert options == []
    assert why_not == "no safe guess for constructor argument 'config'"


def test_guess_init_kwargs_named_sizes():
    options, why_not = guess_init_kwargs(_Proj)
    assert why_not is None
    assert options == [{"in_features": 64, "out_features": 64}]  # defaults left alone


class _Clipped(nn.Module):
    """As transformers' ClippedGELUActivation: bounds a guess must order."""

    def __init__(self, min: float, max: float):
        super().__init__()
        if min > max:
            raise ValueError(f"min should be < max (got min: {min}, max: {max})")
        self.min, self.max = min, max

    def forward(self, x):
        return torch.clip(torch.nn.functional.gelu(x), self.min, self.max)


def test_guess_init_kwargs_for_clamp_bounds():
    options, why_not = guess_init_kwargs(_Clipped)
    assert why_not is None
    assert options == [{"min": -10.0, "max": 10.0}]
    _Clipped(**options[0])  # ordered: it builds


def test_guess_input_specs_follow_the_first_layer():
    mod = _Proj(24, 8)
    assert forward_arity(mod) == 1
    specs = guess_input_specs(mod, 1, {"in_features": 24, "out_features": 8})
    assert [shapes(s) for s in specs] == [[[2, 16, 24]], [[8, 24]]]
    out = mod(*make_values(specs[0], 0, "cpu"))
    assert out.shape == (2, 16, 8)


def test_guess_input_specs_without_known_layers_use_the_sizes():
    specs = guess_input_specs(_Norm(40), 2, {"dim": 40})
    assert [shapes(s) for s in specs] == [
        [[2, 16, 40], [2, 16, 40]],
        [[8, 40], [8, 40]],
        [[2, 4, 16, 40], [2, 4, 16, 40]],
    ]


class _Rotary(nn.Module):
    def __init__(self, max_position_embeddings: int = 300):
        super().__init__()
        self.max_seq_len_cached = max_position_embeddings
        self.inv_freq = nn.Buffer(torch.ones(8))

    def forward(self, x, position_ids):
        return position_ids[..., None].float() * self.inv_freq + x.mean()


def test_position_ids_are_guessed_as_integer_positions_below_the_longest_sequence():
    specs = guess_input_specs(_Rotary(), 2, {})
    positions = {"tensor": {"shape": [2, 16], "dtype": "int64", "dist": "randint", "low": 0, "high": 300}}
    assert [s[1] for s in specs] == [positions] * 3
    assert [shapes(s)[0] for s in specs] == [[2, 16, 64], [8, 64], [2, 4, 16, 64]]
    values = make_values(specs[0], 0, "cpu")
    assert values[1].dtype == torch.int64 and int(values[1].min()) >= 0 and int(values[1].max()) < 300


# ---------------------------------------------------------------------------
# The snippet shown when a module cannot be built


def test_snippet_for_an_unbuildable_class():
    text = snippet("NeedsConfig", "pkg/layers.py", ("config",), ("x", "mask"))
    assert "def get_init_inputs():" in text
    assert "def get_inputs():" in text
    assert "return [config_value]" in text
    assert "forward(x, mask)" in text
    assert "# or in pkg/layers.py, next to NeedsConfig (KernelBench convention):" in text
    yaml_part, _, python = text.partition("\n# or in ")
    ast.parse(python.partition("\n")[2])  # pastes as valid Python
    assert yaml_part.startswith("# in .github/kernelize.yml:\nmodules:\n  pkg/layers.py::NeedsConfig:\n")
    entries = load_module_entries("snippet.yml", yaml_part)  # and as a valid config entry
    entry = entries["pkg/layers.py::NeedsConfig"]
    assert entry.init_kwargs == {"config": {"value": None}}  # null: to fill in, and it says so
    assert "init: {kwargs: {config: null}}  # fill in: config" in text
    assert len(entry.inputs) == 2
    assert all(s["tensor"]["shape"] == [8, 64] for s in entry.inputs)


def test_the_snippet_proposes_the_files_config_class_and_the_name_guesses():
    """A config entry for the one class it names (KernelBench functions would serve every class of
    the file, and it says so), with a config object of the file's config class and known sizes."""
    source = "from dataclasses import dataclass\n\n\n@dataclass\nclass GPTConfig:\n    n_embd: int = 8\n"
    configs = config_class_names(source + "from transformers import LlamaConfig\n")
    assert configs == ["GPTConfig", "LlamaConfig"]
    text = snippet("Block", "m.py", ("config", "ndim", "bias"), ("x",), configs, classes_in_file=3)
    assert "init: {kwargs: {config: {class: GPTConfig, kwargs: {}}, ndim: 64, bias: true}}\n" in text
    assert "(KernelBench convention; every one of its 3 module classes would use them)" in text
    entry = load_module_entries("s.yml", text.partition("\n# or in ")[0])["m.py::Block"]
    assert entry.init_kwargs["config"] == {"object": {"class": "GPTConfig", "kwargs": {}}}
    assert entry.init_kwargs["ndim"] == {"value": 64}


def test_snippet_skips_star_parameters():
    text = snippet("Any", "a.py", ("dim", "*args", "**kwargs"), ("*xs",))
    assert "return [dim_value]" in text
    assert "init: {kwargs: {dim: 64}}" in text
    assert "forward(x)" in text
    assert "*args" not in text and "**kwargs" not in text and "xs" not in text


# ---------------------------------------------------------------------------
# Config objects: built inside the sandbox from a recipe, never passed as objects


GPT_FILE = """
import dataclasses


@dataclasses.dataclass
class GPTConfig:
    n_embd: int = 768
    n_head: int = 12
    block_size: int = 1024
    bias: bool = True


@dataclasses.dataclass
class Needy:
    width: int
"""


def _namespace(source: str = GPT_FILE) -> object:
    """The module's file, loaded as the sandbox loads it (a module of its own in sys.modules)."""
    import sys
    import types

    name = f"kernelize_reference_{next(_LOADED)}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, "gpt.py", "exec"), module.__dict__)
    return module


_LOADED = itertools.count()


def test_a_config_object_from_get_init_inputs_travels_as_a_recipe_and_is_built_again():
    ns = _namespace()
    spec = infer_spec(ns.GPTConfig(n_embd=32))  # type: ignore[attr-defined]
    assert spec == {
        "object": {
            "class": "GPTConfig",
            "kwargs": {
                "n_embd": {"value": 32},
                "n_head": {"value": 12},
                "block_size": {"value": 1024},
                "bias": {"value": True},
            },
        }
    }
    import json

    again = json.loads(json.dumps(spec))  # what crosses the process boundary: plain JSON
    [built] = make_values([again], 0, "cpu", ns)
    assert built == ns.GPTConfig(n_embd=32)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="no class 'GPTConfig' in the module's file"):
        make_values([again], 0, "cpu", _namespace("x = 1"))


def test_an_object_that_is_no_plain_recipe_stays_a_value():
    class Opaque:
        pass

    thing = Opaque()
    assert infer_spec(thing) == {"value": thing}


def test_a_config_entry_names_a_class_of_the_file_with_its_arguments():
    entry = parse_module_entry(
        {
            "init": {"kwargs": {"config": {"class": "GPTConfig", "kwargs": {"n_embd": 64}}}},
            "inputs": [{"shape": [2, 64]}],
        },
        "modules.gpt.py::Block",
    )
    assert entry.init_kwargs == {
        "config": {"object": {"class": "GPTConfig", "kwargs": {"n_embd": {"value": 64}}}}
    }
    [cfg_obj] = make_values(list(entry.init_kwargs.values()), 0, "cpu", _namespace())
    assert (cfg_obj.n_embd, cfg_obj.n_head) == (64, 12)
    with pytest.raises(
        ConfigError, match=r"init.kwargs.config: unknown key 'args' \(expected class, kwargs\)"
    ):
        parse_module_entry({"init": {"kwargs": {"config": {"class": "C", "args": []}}}, "inputs": [1]}, "m")
    with pytest.raises(ConfigError, match="expected the name of a class"):
        parse_module_entry({"init": [{"class": "not a name"}], "inputs": [1]}, "m")


def test_a_config_argument_is_guessed_from_the_files_config_class_with_small_sizes():
    class Block(nn.Module):
        def __init__(self, config, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(config.n_embd))

    ns = _namespace()
    options, why = guess_init_kwargs(Block, ns)
    assert why is None
    config = options[0]["config"]
    assert type(config).__name__ == "GPTConfig"
    assert (config.n_embd, config.n_head, config.block_size, config.bias) == (64, 4, 64, True)
    # A config class with a required field no small size covers is not guessed; no class at all: none.
    only_needy = _namespace(
        GPT_FILE.replace("class GPTConfig", "class _Unused").replace("_Unused:", "_Unused:")
    )
    del only_needy._Unused  # type: ignore[attr-defined]
    assert guess_init_kwargs(Block, only_needy) == ([], "no safe guess for constructor argument 'config'")
    assert guess_init_kwargs(Block) == ([], "no safe guess for constructor argument 'config'")


def test_the_kernelbench_file_builds_the_config_object_and_carries_its_class():
    from runners.kernelbench import problem_source

    source = (
        GPT_FILE
        + """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(config.n_embd))

    def forward(self, x):
        return x * self.weight
"""
    )
    build = {
        "init_args": [],
        "init_kwargs": {"config": {"object": {"class": "GPTConfig", "kwargs": {"n_embd": {"value": 64}}}}},
        "inputs": [{"tensor": {"shape": [2, 64], "dtype": "float32"}}],
    }
    text = problem_source(source, "Block", build, ("config",))
    assert "class GPTConfig:" in text and "class Needy" not in text
    assert "def get_init_inputs():\n    return [GPTConfig(n_embd=64)]" in text
    ns: dict[str, object] = {}
    exec(compile(text, "problem.py", "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]())  # type: ignore[operator]
    assert model(*ns["get_inputs"]()).shape == (2, 64)  # type: ignore[operator]


def test_a_transformers_config_travels_as_the_fields_that_differ_from_its_defaults():
    """transformers 5's PreTrainedConfig is itself a dataclass with fields no recipe can carry
    (dtypes, nested configs): what ``to_diff_dict`` gives is what builds it again."""
    import json

    from transformers.models.llama import configuration_llama

    from runners.inputs import small_config

    config = small_config(configuration_llama.LlamaConfig)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 4, 2)
    spec = json.loads(json.dumps(infer_spec(config)))
    assert spec["object"]["class"] == "LlamaConfig"
    [again] = make_values([spec], 0, "cpu", configuration_llama)
    assert (again.hidden_size, again.intermediate_size, again.vocab_size) == (64, 128, 256)
