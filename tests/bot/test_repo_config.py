"""The repository config: every key valid and invalid, path globs, tolerances, overrides, the schema."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bot.repo_config import (
    CONFIG_PATH,
    RepoConfig,
    RepoConfigError,
    json_schema,
    load_repo_config,
    main,
)
from runners.tolerances import TOLERANCES

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "kernelize.schema.json"
DOC_FILE = ROOT / "docs" / "config.md"
ENTRY = "{init: [64], inputs: [{shape: [8, 64]}]}"


def _error(text: str) -> RepoConfigError:
    with pytest.raises(RepoConfigError) as caught:
        load_repo_config(text)
    return caught.value


def _example_yaml() -> str:
    blocks: list[str] = re.findall(r"```yaml\n(.*?)```", DOC_FILE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "docs/config.md has one complete example"
    return blocks[0]


# ---------------------------------------------------------------------------
# Defaults


@pytest.mark.parametrize("text", [None, "", "  \n\n", "# nothing here yet\n\n# enabled: false\n", "---\n"])
def test_no_settings_means_every_default(text: str | None) -> None:
    config = load_repo_config(text)
    assert config == RepoConfig()
    assert config.enabled and config.auto_run and not config.drafts
    assert config.paths.include == ["**/*.py"] and config.paths.exclude == []
    assert config.generators is None and config.samples is None and config.min_speedup is None
    assert config.dtypes is None  # as each module is built
    assert config.tolerance == {} and config.tolerance_table() == TOLERANCES
    assert config.max_modules == 10 and config.modules == {}
    assert (config.comment.mode, config.comment.when_nothing_found) == ("suggestions", "silent")
    assert config.trust.associations == ["OWNER", "MEMBER", "COLLABORATOR"] and config.trust.label is None


def test_a_key_with_no_value_keeps_its_default() -> None:
    config = load_repo_config("paths:\n  exclude:\n    # - tests/**\ncomment:\nmax_modules:\n")
    assert config == RepoConfig()


# ---------------------------------------------------------------------------
# Every key, valid


@pytest.mark.parametrize(
    ("text", "attribute", "expected"),
    [
        ("enabled: false", "enabled", False),
        ("auto_run: false", "auto_run", False),
        ("drafts: true", "drafts", True),
        ("paths: {include: ['models/**'], exclude: ['*_test.py']}", "paths.include", ["models/**"]),
        ("paths: {exclude: ['*_test.py']}", "paths.exclude", ["*_test.py"]),
        ("generators: [openai, kernelllm]", "generators", ["openai", "kernelllm"]),
        ("generators: [inductor, template, files]", "generators", ["inductor", "template", "files"]),
        ("samples: 1", "samples", 1),
        ("samples: 16", "samples", 16),
        ("dtypes: [bfloat16, float16, float32]", "dtypes", ["bfloat16", "float16", "float32"]),
        ("min_speedup: 1", "min_speedup", 1.0),
        ("min_speedup: 1.25", "min_speedup", 1.25),
        ("max_modules: 1", "max_modules", 1),
        ("max_modules: 50", "max_modules", 50),
        (f"modules: {{'models/a.py::Net': {ENTRY}}}", "modules", {"models/a.py::Net": yaml.safe_load(ENTRY)}),
        ("comment: {mode: summary-only}", "comment.mode", "summary-only"),
        ("comment: {when_nothing_found: summary}", "comment.when_nothing_found", "summary"),
        (
            "trust: {associations: [OWNER, CONTRIBUTOR, NONE]}",
            "trust.associations",
            ["OWNER", "CONTRIBUTOR", "NONE"],
        ),
        ("trust: {associations: []}", "trust.associations", []),
        ("trust: {label: run-kernelize}", "trust.label", "run-kernelize"),
    ],
)
def test_valid_values(text: str, attribute: str, expected: Any) -> None:
    value: Any = load_repo_config(text + "\n")
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


def test_module_entries_are_kept_as_written() -> None:
    text = (
        "modules:\n  models/norm.py::RMSNorm:\n    init: {args: [4096], kwargs: {eps: 1.0e-6}}\n    inputs:\n"
    )
    text += "      - {shape: [2, 8, 4096], dtype: bfloat16}\n"
    text += "      - {shape: [2, 8], dtype: int64, range: [0, 9]}\n"
    config = load_repo_config(text)
    assert config.modules == yaml.safe_load(text)["modules"]  # shipped to the workers unchanged


# ---------------------------------------------------------------------------
# Every key, invalid: the key and the message


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("enabled: 'no'", "enabled", "expected true or false, got 'no'"),
        ("enabled: 1", "enabled", "expected true or false, got 1"),
        ("auto_run: yes please", "auto_run", "expected true or false, got 'yes please'"),
        ("drafts: [true]", "drafts", "expected true or false, got a list"),
        ("paths: models/**", "paths", "expected a mapping, got 'models/**'"),
        ("paths: {include: '**/*.py'}", "paths.include", "expected a list, got '**/*.py'"),
        ("paths: {include: []}", "paths.include", "must list at least one pattern (to turn Kernelize off"),
        ("paths: {include: ['models/**', '']}", "paths.include[1]", "empty pattern ''"),
        ("paths: {exclude: ['./']}", "paths.exclude[0]", "empty pattern './'"),
        (
            "paths: {exclude: ['!models/**']}",
            "paths.exclude[0]",
            "'!models/**': negated patterns are not supported (use",
        ),
        ("paths: {exclude: [3]}", "paths.exclude[0]", "expected a string, got 3"),
        (
            "generators: [openai, cuda]",
            "generators[1]",
            "'cuda' is not a generator (available: files, inductor, kernelllm, openai, template)",
        ),
        ("generators: [openai, openai]", "generators[1]", "'openai' is listed twice"),
        ("generators: []", "generators", "must name at least one generator (leave the key out"),
        ("generators: openai", "generators", "expected a list, got 'openai'"),
        ("samples: 0", "samples", "must be between 1 and 16, got 0"),
        ("samples: 17", "samples", "must be between 1 and 16, got 17"),
        ("samples: 2.5", "samples", "expected a whole number, got 2.5"),
        ("samples: '4'", "samples", "expected a whole number, got '4'"),
        (
            "dtypes: [float64]",
            "dtypes[0]",
            "'float64' is not allowed (expected 'float32', 'float16' or 'bfloat16')",
        ),
        ("dtypes: [float16, float16]", "dtypes[1]", "'float16' is listed twice"),
        ("dtypes: []", "dtypes", "must name at least one dtype (float32, float16, bfloat16)"),
        ("dtypes: float32", "dtypes", "expected a list, got 'float32'"),
        ("min_speedup: 0.9", "min_speedup", "must be at least 1, got 0.9"),
        ("min_speedup: .inf", "min_speedup", "must be a finite number, got inf"),
        ("min_speedup: .nan", "min_speedup", "must be a finite number, got nan"),
        ("min_speedup: fast", "min_speedup", "expected a number, got 'fast'"),
        ("max_modules: 0", "max_modules", "must be between 1 and 50, got 0"),
        ("max_modules: 51", "max_modules", "must be between 1 and 50, got 51"),
        ("modules: []", "modules", "expected a mapping, got a list"),
        (
            "comment: {mode: inline}",
            "comment.mode",
            "'inline' is not allowed (expected 'suggestions' or 'summary-only')",
        ),
        ("comment: {when_nothing_found: loud}", "comment.when_nothing_found", "'loud' is not allowed"),
        (
            "trust: {associations: [owner]}",
            "trust.associations[0]",
            "'owner' is not allowed (expected 'OWNER'",
        ),
        ("trust: {associations: [OWNER, OWNER]}", "trust.associations[1]", "'OWNER' is listed twice"),
        ("trust: {label: '  '}", "trust.label", "must not be empty (leave the key out for no trust label)"),
        ("trust: {label: 7}", "trust.label", "expected a string, got 7"),
    ],
)
def test_invalid_values(text: str, key: str, message: str) -> None:
    err = _error(text + "\n")
    assert (err.path, err.key) == (CONFIG_PATH, key)
    assert err.message.startswith(message), err.message
    assert str(err) == f"{CONFIG_PATH}: {key}: {err.message}"
    assert "\n" not in str(err)


def test_the_documented_message_is_the_real_one() -> None:
    assert str(_error("samples: 99\n")) == ".github/kernelize.yml: samples: must be between 1 and 16, got 99"
    assert ".github/kernelize.yml: samples: must be between 1 and 16, got 99" in DOC_FILE.read_text("utf-8")


def test_several_problems_show_the_first_and_a_count() -> None:
    err = _error("samples: 0\nmax_modules: 99\ncomment: {mode: inline}\n")
    assert err.key == "samples"
    assert err.message == "must be between 1 and 16, got 0 (and 2 more)"


# ---------------------------------------------------------------------------
# Unknown keys, the file's shape, YAML


def test_an_unknown_top_level_key_is_named_with_the_allowed_ones() -> None:
    err = _error("generatorz: [openai]\n")
    assert err.key == "generatorz"
    assert err.message.startswith("unknown key 'generatorz'; did you mean 'generators'? (allowed: enabled, ")
    assert "max_modules" in err.message and "trust" in err.message


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ("paths: {includes: ['a/**']}", "paths.includes", "(allowed: include, exclude)"),
        ("comment: {style: x}", "comment.style", "(allowed: mode, when_nothing_found)"),
        ("trust: {users: [me]}", "trust.users", "(allowed: associations, label)"),
        ("tolerance: {float32: {eps: 1.0e-5}}", "tolerance.float32.eps", "(allowed: atol, rtol, l2)"),
    ],
)
def test_an_unknown_nested_key_is_named_with_the_allowed_ones(text: str, key: str, allowed: str) -> None:
    err = _error(text + "\n")
    assert err.key == key
    assert err.message.startswith(f"unknown key {key.rsplit('.', 1)[1]!r}") and err.message.endswith(allowed)


def test_a_yaml_syntax_error_names_the_line() -> None:
    err = _error("enabled: true\nsamples: 4\npaths:\n  include: [a\n  exclude: b: c\n")
    assert err.key == "" and err.line is not None
    assert str(err) == f"{CONFIG_PATH}:{err.line}: {err.message}"
    assert err.message.startswith("not valid YAML: ")
    assert _error("samples: 4\ndtypes: x: y\n").line == 2


def test_a_key_given_twice_is_an_error_with_both_lines() -> None:
    err = _error("samples: 2\ndrafts: true\nsamples: 3\n")
    assert str(err) == f"{CONFIG_PATH}:3: not valid YAML: key 'samples' is given twice (first on line 1)"


def test_a_merge_key_may_be_overridden() -> None:
    config = load_repo_config(
        "comment:\n  <<: {mode: summary-only, when_nothing_found: summary}\n  mode: suggestions\n"
    )
    assert (config.comment.mode, config.comment.when_nothing_found) == ("suggestions", "summary")


def test_python_tags_are_refused() -> None:
    err = _error("enabled: !!python/object/apply:os.system ['true']\n")
    assert err.line == 1 and "not valid YAML" in err.message


@pytest.mark.parametrize(
    ("text", "shown"), [("- enabled\n- samples\n", "a list"), ("kernelize\n", "'kernelize'")]
)
def test_the_top_level_must_be_a_mapping(text: str, shown: str) -> None:
    err = _error(text)
    assert err.key == ""
    assert (
        str(err)
        == f"{CONFIG_PATH}: expected a mapping of settings at the top level, got {shown} (see docs/config.md)"
    )


def test_the_path_is_the_callers() -> None:
    with pytest.raises(RepoConfigError) as caught:
        load_repo_config("samples: 0\n", "ci/kernelize.yml")
    assert str(caught.value).startswith("ci/kernelize.yml: samples: ")


def test_the_error_survives_pickling() -> None:  # it crosses Celery's result backend
    err = _error("samples: 0\n")
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.key, again.message, str(again)) == (err.path, err.key, err.message, str(err))


# ---------------------------------------------------------------------------
# Paths


@pytest.mark.parametrize(
    ("include", "exclude", "path", "selected"),
    [
        (["**/*.py"], [], "net.py", True),
        (["**/*.py"], [], "models/deep/net.py", True),
        (["**/*.py"], [], "models/net.pyi", False),
        (["**/*.py"], [], "README.md", False),
        (["models/**"], [], "models/net.py", True),
        (["models/**"], [], "models/a/b/net.py", True),
        (["models/**"], [], "src/models/net.py", False),
        (["models/**"], [], "models.py", False),
        (["models"], [], "models/a/net.py", True),  # a folder matches what is inside it
        (["models/"], [], "src/models/net.py", True),  # no inner slash: at any depth
        (["/models"], [], "src/models/net.py", False),  # a leading slash anchors
        (["*_test.py"], [], "layer_test.py", True),
        (["*_test.py"], [], "a/b/c/layer_test.py", True),
        (["*_test.py"], [], "a/layer_test.py/x.py", True),
        (["**/*.py"], ["*_test.py"], "a/b/layer_test.py", False),  # exclude wins
        (["**/*.py"], ["*_test.py"], "a/b/layer.py", True),
        (["models/**"], ["models/legacy/**"], "models/legacy/old.py", False),
        (["models/**"], ["models/legacy/**"], "models/new.py", True),
        (["**/*.py"], ["tests"], "tests/bot/test_x.py", False),
        (["**/*.py"], ["tests"], "src/tests_helper.py", True),
        (["./models/**"], [], "models/net.py", True),
        (["models/**"], [], "./models/net.py", True),
        (["models/**"], [], "/models/net.py", True),
        (["./setup.py"], [], "setup.py", True),
        (["./setup.py"], [], "pkg/setup.py", False),
        (["layer?.py"], [], "nn/layer1.py", True),
        (["layer?.py"], [], "nn/layer12.py", False),
        (["a?b.py"], [], "a/b.py", False),  # ? never matches a slash
        (["net_[ab].py"], [], "net_a.py", True),
        (["net_[ab].py"], [], "net_c.py", False),
        (["net_[!ab].py"], [], "net_c.py", True),
        (["net_[a-c].py"], [], "net_b.py", True),
        (["**/net.py"], [], "net.py", True),  # ** is zero folders too
        (["a/**/b.py"], [], "a/b.py", True),
        (["a/**/b.py"], [], "a/x/b.py", True),
        (["a/**/b.py"], [], "a/x/y/z/b.py", True),
        (["a/**/b.py"], [], "c/a/b.py", False),
        (["a/**/b.py"], [], "a/xb.py", False),
        (["src/*.py"], [], "src/net.py", True),
        (["src/*.py"], [], "src/sub/net.py", False),  # * stays within one folder
        (["net[.py"], [], "net[.py", True),  # an unclosed [ is itself
        (["**"], [], "any/thing.txt", True),
    ],
)
def test_path_selection(include: list[str], exclude: list[str], path: str, selected: bool) -> None:
    config = load_repo_config(yaml.safe_dump({"paths": {"include": include, "exclude": exclude}}))
    assert config.selects(path) is selected


# ---------------------------------------------------------------------------
# Tolerances


def test_a_config_may_tighten_the_tolerance_table() -> None:
    config = load_repo_config(
        "tolerance:\n  float32: {atol: 1e-5, l2: 5.0e-5}\n  'float32 (tf32)': {rtol: 1.0e-3}\n"
    )
    table = config.tolerance_table()
    assert table["float32"] == (1e-5, TOLERANCES["float32"][1], 5e-5)
    assert table["float32 (tf32)"] == (TOLERANCES["float32 (tf32)"][0], 1e-3, TOLERANCES["float32 (tf32)"][2])
    assert {k: v for k, v in table.items() if k not in ("float32", "float32 (tf32)")} == {
        k: v for k, v in TOLERANCES.items() if k not in ("float32", "float32 (tf32)")
    }


def test_the_built_in_value_itself_is_allowed() -> None:
    atol, rtol, l2 = TOLERANCES["bfloat16"]
    config = load_repo_config(f"tolerance: {{bfloat16: {{atol: {atol}, rtol: {rtol}, l2: {l2}}}}}\n")
    assert config.tolerance_table() == TOLERANCES


def test_loosening_a_tolerance_is_refused_showing_the_built_in_value() -> None:
    err = _error("tolerance: {float16: {rtol: 0.1}}\n")
    assert err.key == "tolerance.float16.rtol"
    assert err.message == (
        "0.1 is looser than the built-in 0.01; a config may only tighten tolerances (0 < rtol <= 0.01)"
    )


def test_an_unknown_tolerance_dtype_is_refused() -> None:
    err = _error("tolerance: {float8: {atol: 1.0e-3}}\n")
    assert err.key == "tolerance.float8"
    assert err.message == (
        "'float8' is not a dtype of the tolerance table "
        "(expected float64, float32, float32 (tf32), float16, bfloat16)"
    )


@pytest.mark.parametrize("value", ["0", "-1.0e-5", "0.0"])
def test_a_tolerance_must_be_positive(value: str) -> None:
    err = _error(f"tolerance: {{float32: {{l2: {value}}}}}\n")
    assert err.key == "tolerance.float32.l2"
    assert err.message.startswith("must be greater than 0, got ")


def test_a_tolerance_must_be_a_number() -> None:
    err = _error("tolerance: {float32: {atol: tight}}\n")
    assert (err.key, err.message) == ("tolerance.float32.atol", "expected a number, got 'tight'")


# ---------------------------------------------------------------------------
# Module entries


@pytest.mark.parametrize(
    ("entry", "key", "message"),
    [
        (
            "{inputs: [{shape: [2]}]}",
            "modules.models/a.py",
            "key 'models/a.py' must look like 'path/to/file.py::Class'",
        ),
        ("3", "modules.models/a.py::Net", "expected a mapping with init and inputs"),
        ("{init: [64]}", "modules.models/a.py::Net.inputs", "expected a non-empty list of input specs"),
        ("{inputs: []}", "modules.models/a.py::Net.inputs", "expected a non-empty list of input specs"),
        (
            "{inputs: [{shape: [0, 4]}]}",
            "modules.models/a.py::Net.inputs[0].shape",
            "expected a list of positive",
        ),
        (
            "{inputs: [{shape: [4], dtype: int64}]}",
            "modules.models/a.py::Net.inputs[0].range",
            "integer inputs need",
        ),
        (
            "{inputs: [{shape: [4]}], init: 3}",
            "modules.models/a.py::Net.init",
            "expected a list of arguments or",
        ),
        (
            "{inputs: [{shape: [4]}], extra: 1}",
            "modules.models/a.py::Net",
            "unknown key 'extra' (expected init, inputs)",
        ),
    ],
)
def test_module_entry_errors_name_the_entry(entry: str, key: str, message: str) -> None:
    name = key.removeprefix("modules.").split(".inputs")[0].split(".init")[0]
    err = _error(f"modules:\n  '{name}': {entry}\n")
    assert err.key == key
    assert err.message.startswith(message), err.message
    assert err.message.count("modules.") == 0  # the location is in the key, not repeated in the message


def test_a_module_key_needs_a_class_name() -> None:
    assert _error(f"modules:\n  'models/a.py::': {ENTRY}\n").key == "modules.models/a.py::"


# ---------------------------------------------------------------------------
# Command overrides


def test_overrides_make_a_validated_copy() -> None:
    config = load_repo_config("samples: 8\ntrust: {label: go}\n")
    changed = config.with_overrides(samples=2, dtypes=("float16",), generators=["openai"], min_speedup=1.5)
    assert (changed.samples, changed.dtypes, changed.generators, changed.min_speedup) == (
        2,
        ["float16"],
        ["openai"],
        1.5,
    )
    assert changed.trust.label == "go" and config.samples == 8  # the rest kept, the original untouched


def test_options_not_given_change_nothing() -> None:
    config = load_repo_config("samples: 8\n")
    assert config.with_overrides() is config
    assert config.with_overrides(samples=None, generators=None) == config


@pytest.mark.parametrize(
    ("options", "key", "message"),
    [
        ({"samples": 99}, "samples", "must be between 1 and 16, got 99"),
        ({"dtypes": ["float64"]}, "dtypes[0]", "'float64' is not allowed"),
        ({"generators": ["nope"]}, "generators[0]", "'nope' is not a generator"),
        ({"min_speedup": 0.5}, "min_speedup", "must be at least 1, got 0.5"),
    ],
)
def test_overrides_are_validated_like_the_file(options: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        RepoConfig().with_overrides(**options)
    assert (caught.value.path, caught.value.key) == ("/kernelize", key)
    assert caught.value.message.startswith(message)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("trust", {"associations": ["NONE"]}),
        ("max_modules", 50),
        ("paths", {"include": ["**"]}),
        ("enabled", True),
        ("tolerance", {}),
        ("modules", {}),
    ],
)
def test_only_four_keys_may_be_overridden(option: str, value: Any) -> None:
    with pytest.raises(RepoConfigError) as caught:
        RepoConfig().with_overrides(**{option: value})
    assert caught.value.key == option
    assert str(caught.value) == (
        f"/kernelize: {option}: can only be set in .github/kernelize.yml on the default branch "
        "(commands may set generators, samples, dtypes, min_speedup)"
    )


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(RepoConfigError) as caught:
        RepoConfig().with_overrides(speed=2)
    assert (
        caught.value.message == "unknown option (commands may set generators, samples, dtypes, min_speedup)"
    )


# ---------------------------------------------------------------------------
# Summary


def test_the_summary_lists_the_effective_settings() -> None:
    text = RepoConfig().summary()
    assert "`OWNER`, `MEMBER`, `COLLABORATOR` (not drafts)" in text
    assert "- **Files:** `**/*.py`" in text
    assert "- **Generators:** the server default" in text
    assert "- **Modules per pull request:** at most 10" in text
    config = load_repo_config(_example_yaml())
    text = config.summary()
    assert "`openai`, `kernelllm`" in text and "except `*_test.py`, `models/legacy/**`" in text
    assert "float32 atol 2e-05" in text and "1.1x" in text and "the `kernelize` label" in text
    assert all(line.startswith("- ") for line in text.splitlines())


def test_the_summary_says_when_kernelize_is_off() -> None:
    assert "**disabled**" in load_repo_config("enabled: false\n").summary()
    assert "on `/kernelize` only" in load_repo_config("auto_run: false\n").summary()


# ---------------------------------------------------------------------------
# Schema and documentation


def test_the_checked_in_schema_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == SCHEMA_FILE.read_text(encoding="utf-8"), "run: python -m bot.repo_config --schema"
    assert json.loads(printed) == json_schema()


def test_every_key_is_documented() -> None:
    schema = json_schema()
    doc = DOC_FILE.read_text(encoding="utf-8")
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["title"]
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
        assert f"`{name}" in doc, name
    for definition in schema["$defs"].values():
        for name, prop in definition["properties"].items():
            assert prop.get("description"), name


def test_the_documented_example_loads() -> None:
    config = load_repo_config(_example_yaml())
    assert config.generators == ["openai", "kernelllm"] and config.trust.label == "kernelize"
    assert set(yaml.safe_load(_example_yaml())) == set(RepoConfig.model_fields)  # it shows every key


def test_the_schema_accepts_the_example_and_refuses_mistakes() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    validator.check_schema(validator.schema)
    example: dict[str, Any] = yaml.safe_load(_example_yaml())
    validator.validate(example)
    validator.validate({})
    mistakes: list[dict[str, Any]] = [
        {**example, "generatorz": ["openai"]},
        {"paths": {"includes": ["a"]}},
        {"samples": 99},
        {"dtypes": ["float16", "float16"]},
        {"tolerance": {"float32": {"atol": 1e-3}}},  # looser than the table
        {"tolerance": {"float8": {}}},
        {"modules": {"models/a.py": {"inputs": [1]}}},
        {"trust": {"associations": ["owner"]}},
    ]
    for mistake in mistakes:
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(mistake)
        with pytest.raises(RepoConfigError):
            load_repo_config(yaml.safe_dump(mistake))


def test_check_validates_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yml", tmp_path / "bad.yml"
    good.write_text(_example_yaml(), encoding="utf-8")
    bad.write_text("samples: 0\n", encoding="utf-8")
    assert main(["--check", str(good)]) == 0
    assert main(["--check", str(bad)]) == 1
    assert capsys.readouterr().err == f"{bad}: samples: must be between 1 and 16, got 0\n"
    assert main(["--check", str(tmp_path / "missing.yml")]) == 1


def test_the_module_imports_without_torch() -> None:
    code = "import sys, bot.repo_config; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
