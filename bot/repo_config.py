"""The per-repository config, ``.github/kernelize.yml``: parsed, validated, explained.

Pure: no network, no GitHub, no torch. The caller reads the file from the
default branch (a pull request cannot change its own rules) and hands the text
to :func:`load_repo_config`. Every problem becomes one :class:`RepoConfigError`
naming the file, the key and what is allowed, for the check run to show.

``python -m bot.repo_config --schema`` prints the JSON Schema that
``docs/kernelize.schema.json`` holds (editors use it to check the file as it
is typed).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from runners.generators import AVAILABLE
from runners.inputs import ConfigError, parse_module_entry
from runners.results import DEFAULT_MIN_SPEEDUP  # what the server uses unless its settings say otherwise
from runners.tolerances import TOLERANCES

CONFIG_PATH = ".github/kernelize.yml"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Where override errors point: the options come from a `/kernelize ...` comment, not from the file.
COMMAND_SOURCE = "/kernelize"
GENERATORS: tuple[str, ...] = AVAILABLE
OVERRIDABLE = ("generators", "samples", "dtypes", "min_speedup")
TOLERANCE_FIELDS = ("atol", "rtol", "l2")

Dtype = Literal["float32", "float16", "bfloat16"]
Association = Literal[
    "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE"
]

# The type of the custom errors below; their context carries the message and the path below the field.
_ERROR_TYPE = "kernelize_config"


class RepoConfigError(ValueError):
    """The config cannot be used: ``path``, the dotted ``key`` (``""`` for the whole file), ``message``."""

    def __init__(self, path: str, key: str, message: str, line: int | None = None) -> None:
        super().__init__(path, key, message, line)
        self.path = path
        self.key = key
        self.message = message
        self.line = line  # 1-based, for YAML syntax errors

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


def _fail(message: str, *at: str | int) -> PydanticCustomError:
    """An error for pydantic to report; ``at`` extends the field's location (a list index, a dict key)."""
    return PydanticCustomError(_ERROR_TYPE, "{message}", {"message": message, "at": at})


# ---------------------------------------------------------------------------
# Path patterns (gitignore-style)


def _clean_path(path: str) -> str:
    """``path`` without a leading ``./`` or ``/`` and without doubled slashes."""
    path = re.sub(r"/{2,}", "/", path)
    while path.startswith(("./", "/")):
        path = path[2:] if path.startswith("./") else path[1:]
    return path


def _segment_regex(segment: str) -> str:
    """One path segment of a pattern as a regex: ``*``, ``?``, ``[...]``, ``\\`` escapes; never ``/``."""
    out: list[str] = []
    i, n = 0, len(segment)
    while i < n:
        c = segment[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(segment[i + 1]))
            i += 2
        elif c == "*":
            while i < n and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and segment[j] in "!^":
                j += 1
            if j < n and segment[j] == "]":  # a leading ] is a member, as in fnmatch
                j += 1
            while j < n and segment[j] != "]":
                j += 2 if segment[j] == "\\" else 1
            if j >= n:  # never closed: a literal [
                out.append(re.escape(c))
                i += 1
                continue
            body = segment[i + 1 : j]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            members: list[str] = []
            k = 0
            while k < len(body):
                if body[k] == "\\" and k + 1 < len(body):
                    members.append(re.escape(body[k + 1]))
                    k += 2
                else:
                    members.append("-" if body[k] == "-" else re.escape(body[k]))
                    k += 1
            # A range such as [!-0] spans "/": the lookahead keeps every class inside one segment.
            out.append("(?!/)[" + ("^" if negate else "") + "".join(members) + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    """A pattern as a regex over a whole repository-relative path.

    A pattern with a slash (other than a trailing one) or a leading ``./`` or
    ``/`` is relative to the repository root; one without matches at any depth.
    A trailing slash matches a folder (and so everything in it).
    """
    anchored = pattern.startswith(("./", "/"))
    body = _clean_path(pattern)
    folder = body.endswith("/")
    body = body.rstrip("/")
    segments = [s for s in body.split("/") if s]
    if not anchored and len(segments) == 1:
        segments.insert(0, "**")
    if folder:
        segments.append("**")
    parts: list[str] = []
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
        else:
            parts.append(_segment_regex(seg) + ("" if last else "/"))
    return re.compile("".join(parts))


def matches(pattern: str, path: str) -> bool:
    """Whether ``pattern`` matches ``path`` or one of its folders (``tests`` matches ``tests/a.py``)."""
    rx = _compile(pattern)
    parts = _clean_path(path).split("/")
    return any(rx.fullmatch("/".join(parts[:k])) for k in range(len(parts), 0, -1))


def _check_pattern(pattern: str) -> str:
    if not _clean_path(pattern).strip("/ "):
        raise _fail(f"empty pattern {pattern!r} (write a glob such as 'models/**' or '*_test.py')")
    if pattern.startswith("!"):
        raise _fail(f"{pattern!r}: negated patterns are not supported (use paths.include and paths.exclude)")
    return pattern


def _check_generator(name: str) -> str:
    if name not in GENERATORS:
        raise _fail(f"{name!r} is not a generator (available: {', '.join(GENERATORS)})")
    return name


Pattern = Annotated[str, AfterValidator(_check_pattern)]
GeneratorName = Annotated[
    str, AfterValidator(_check_generator), WithJsonSchema({"type": "string", "enum": list(GENERATORS)})
]


def _no_duplicates(values: Sequence[Any]) -> None:
    seen: set[Any] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise _fail(f"{value!r} is listed twice", i)
        seen.add(value)


# ---------------------------------------------------------------------------
# The schema


class _Section(BaseModel):
    # strict: YAML already gives real booleans and numbers, so a quoted "false" or "3" is a mistake.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _bare_keys_keep_defaults(cls, data: Any) -> Any:
        """``exclude:`` with every item commented out is null in YAML: it means the default."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: v for k, v in data.items() if v is not None or k not in fields or fields[k].default is None
        }


class PathsConfig(_Section):
    """Which changed files are searched for modules."""

    include: list[Pattern] = Field(
        default=["**/*.py"],
        description=(
            "Gitignore-style globs over repository-relative paths: `*` and `?` stay within one folder, "
            "`**` spans any number of folders (including none), `[...]` is a character class. A pattern "
            "without a slash matches the file name at any depth; a pattern that matches a folder selects "
            "everything in it."
        ),
        json_schema_extra={"minItems": 1},
    )
    exclude: list[Pattern] = Field(
        default=[],
        description="Globs (as for include) of files never searched, even when an include pattern matches.",
    )

    @field_validator("include")
    @classmethod
    def _some_include(cls, value: list[str]) -> list[str]:
        if not value:
            raise _fail("must list at least one pattern (to turn Kernelize off, set enabled: false)")
        return value


class ToleranceOverride(_Section):
    """Tighter bounds for one dtype of the built-in tolerance table."""

    atol: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Absolute tolerance; at most the built-in value."
    )
    rtol: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Relative tolerance; at most the built-in value."
    )
    l2: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Bound on the relative L2 error of the whole output; at most the built-in value.",
    )


class CommentConfig(_Section):
    """What Kernelize posts on the pull request."""

    mode: Literal["suggestions", "summary-only"] = Field(
        default="suggestions",
        description=(
            "`suggestions`: a review with a suggested change per module that got a verified, faster "
            "kernel, plus the summary comment; `summary-only`: the summary comment alone."
        ),
    )
    when_nothing_found: Literal["silent", "summary"] = Field(
        default="silent",
        description=(
            "When no module got a faster kernel: `silent` posts no comment (the check run still reports); "
            "`summary` posts the summary comment anyway."
        ),
    )


class TrustConfig(_Section):
    """Whose pull requests run on the repository's GPUs without a maintainer asking."""

    associations: list[Association] = Field(
        default=["OWNER", "MEMBER", "COLLABORATOR"],
        description=(
            "Pull requests whose author's `author_association` is listed run automatically; the others "
            "wait for `/kernelize` (or the label) from someone with write access."
        ),
        json_schema_extra={"uniqueItems": True},
    )
    label: str | None = Field(
        default=None,
        description=(
            "A label that starts a run when someone with write access adds it to a pull request "
            "(unset: no label)."
        ),
    )

    @field_validator("associations")
    @classmethod
    def _unique_associations(cls, value: list[str]) -> list[str]:
        _no_duplicates(value)
        return value

    @field_validator("label")
    @classmethod
    def _label_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise _fail("must not be empty (leave the key out for no trust label)")
        return value


def _tolerance_schema(schema: dict[str, Any]) -> None:
    """Each dtype key, with the built-in values as maxima: the schema knows a config may only tighten."""
    override = schema["additionalProperties"]  # pydantic's reference to ToleranceOverride
    schema["propertyNames"] = {"enum": list(TOLERANCES)}
    schema["additionalProperties"] = False
    schema["properties"] = {
        key: {
            **override,
            "properties": {name: {"maximum": v} for name, v in zip(TOLERANCE_FIELDS, values, strict=True)},
        }
        for key, values in TOLERANCES.items()
    }


# The shape runners.inputs.parse_module_entry accepts, for editors; the parser has the last word.
_VALUE_SPEC: dict[str, Any] = {
    "description": (
        "A tensor `{shape: [...], dtype, range: [low, high]}`, a config object "
        "`{class: ClassInTheFile, kwargs: {...}}` or any other value."
    ),
}
_MODULE_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["inputs"],
    "properties": {
        "init": {
            "description": "Constructor arguments: a list, or `{args: [...], kwargs: {...}}`.",
            "anyOf": [
                {"type": "array", "items": _VALUE_SPEC},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "args": {"type": "array", "items": _VALUE_SPEC},
                        "kwargs": {"type": "object", "additionalProperties": _VALUE_SPEC},
                    },
                },
            ],
        },
        "inputs": {
            "description": "The forward arguments, in order.",
            "type": "array",
            "minItems": 1,
            "items": _VALUE_SPEC,
        },
    },
}


class RepoConfig(_Section):
    """The settings of one repository; every key is optional."""

    enabled: bool = Field(default=True, description="false: Kernelize does nothing for this repository.")
    auto_run: bool = Field(
        default=True,
        description=(
            "Run when a pull request is opened or pushed to; false: only on the `/kernelize` command "
            "(or the trust label)."
        ),
    )
    drafts: bool = Field(default=False, description="Whether draft pull requests run automatically.")
    paths: PathsConfig = Field(
        default=PathsConfig(),
        description="Which files are searched: a file must match an include and no exclude.",
    )
    generators: list[GeneratorName] | None = Field(
        default=None,
        description="Kernel generators to ask, in order (unset: the server's default).",
        json_schema_extra={"minItems": 1, "uniqueItems": True},
    )
    samples: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="Candidates asked of each generator per module (unset: the server's).",
    )
    dtypes: list[Dtype] | None = Field(
        default=None,
        description=(
            "Dtypes to check and time candidates in, most important first; today the first one is used "
            "(floating-point parameters and inputs are cast to it). Unset: as the module is built."
        ),
        json_schema_extra={"minItems": 1, "uniqueItems": True},
    )
    tolerance: dict[str, ToleranceOverride] = Field(
        default={},
        description=(
            "Tighter correctness bounds by dtype key of the built-in table ("
            + "; ".join(f"{k}: atol {a:g}, rtol {r:g}, l2 {l2:g}" for k, (a, r, l2) in TOLERANCES.items())
            + "). A config may only tighten them."
        ),
        json_schema_extra=_tolerance_schema,
    )
    min_speedup: float | None = Field(
        default=None,
        ge=1.0,
        allow_inf_nan=False,
        description=(
            f"A candidate counts as faster only at this speedup over eager PyTorch or more "
            f"(unset: the server's, {DEFAULT_MIN_SPEEDUP} by default)."
        ),
    )
    min_speedup_vs_compile: float | None = Field(
        default=None,
        gt=0.0,
        le=100.0,
        allow_inf_nan=False,
        description=(
            "Suggest a kernel only when it also runs at this speedup over torch.compile of the "
            "original or more (1.0: at least as fast as compile), by median time on the GPU. A "
            "kernel that misses it is reported, with torch.compile named as the faster choice, "
            "and not suggested; so is one that was not timed (a run without a GPU). Where "
            "torch.compile fails on the module, a kernel faster than eager is still suggested. "
            "Unset: compile is reported beside every kernel but not required."
        ),
    )
    max_modules: int = Field(
        default=10,
        ge=1,
        le=50,
        description="At most this many modules per pull request; the rest are listed as skipped.",
    )
    modules: dict[str, Any] = Field(
        default={},
        description=(
            "How to build a module and its inputs, keyed by `path/to/file.py::Class` (for modules "
            "without `get_init_inputs()`/`get_inputs()` whose constructor cannot be guessed)."
        ),
        json_schema_extra={"propertyNames": {"pattern": "::"}, "additionalProperties": _MODULE_ENTRY_SCHEMA},
    )
    comment: CommentConfig = Field(default=CommentConfig(), description="What is posted on the pull request.")
    trust: TrustConfig = Field(
        default=TrustConfig(), description="Whose pull requests run without a maintainer asking."
    )

    @field_validator("generators")
    @classmethod
    def _generators_listed_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise _fail("must name at least one generator (leave the key out for the server's default)")
        _no_duplicates(value or [])
        return value

    @field_validator("dtypes")
    @classmethod
    def _dtypes_listed_once(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise _fail(f"must name at least one dtype ({', '.join(get_args(Dtype))})")
        _no_duplicates(value)
        return value

    @field_validator("tolerance")
    @classmethod
    def _only_tighter(cls, value: dict[str, ToleranceOverride]) -> dict[str, ToleranceOverride]:
        for key, override in value.items():
            if key not in TOLERANCES:
                raise _fail(
                    f"{key!r} is not a dtype of the tolerance table (expected {', '.join(TOLERANCES)})", key
                )
            for name, builtin in zip(TOLERANCE_FIELDS, TOLERANCES[key], strict=True):
                given = getattr(override, name)
                if given is not None and given > builtin:
                    raise _fail(
                        f"{given:g} is looser than the built-in {builtin:g}; a config may only tighten "
                        f"tolerances (0 < {name} <= {builtin:g})",
                        key,
                        name,
                    )
        return value

    @field_validator("modules")
    @classmethod
    def _entries_parse(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, raw in value.items():
            path, sep, class_name = key.rpartition("::")
            if not sep or not path.strip() or not class_name.isidentifier():
                raise _fail(f"key {key!r} must look like 'path/to/file.py::Class'", key)
            where = f"modules.{key}"
            try:
                parse_module_entry(raw, where)
            except ConfigError as exc:
                below, message = _split_location(str(exc), where)
                raise _fail(message, key + below) from None
        return value

    # -- use

    def selects(self, path: str) -> bool:
        """Whether the repository-relative ``path`` matches an include pattern and no exclude pattern."""
        return any(matches(p, path) for p in self.paths.include) and not any(
            matches(p, path) for p in self.paths.exclude
        )

    def tolerance_table(self) -> dict[str, tuple[float, float, float]]:
        """The built-in tolerance table with this config's tighter values applied."""
        table = dict(TOLERANCES)
        for key, override in self.tolerance.items():
            atol, rtol, l2 = table[key]
            table[key] = (
                atol if override.atol is None else override.atol,
                rtol if override.rtol is None else override.rtol,
                l2 if override.l2 is None else override.l2,
            )
        return table

    def with_overrides(self, **options: Any) -> RepoConfig:
        """A copy with a command's options applied, validated like the file.

        Only generators, samples, dtypes and min_speedup can be set from a
        command; anyone who may comment could otherwise widen trust or limits.
        A ``None`` option was not given.
        """
        updates: dict[str, Any] = {}
        for name, value in options.items():
            key = name.replace("-", "_")
            if key not in OVERRIDABLE:
                allowed = f"commands may set {', '.join(OVERRIDABLE)}"
                if key in type(self).model_fields:
                    message = f"can only be set in {CONFIG_PATH} on the default branch ({allowed})"
                else:
                    message = f"unknown option ({allowed})"
                raise RepoConfigError(COMMAND_SOURCE, name, message)
            if value is not None:
                updates[key] = list(value) if isinstance(value, tuple) else value
        if not updates:
            return self
        try:
            return type(self).model_validate({**self.model_dump(), **updates})
        except ValidationError as exc:
            raise _config_error(exc, COMMAND_SOURCE) from None

    def summary(self) -> str:
        """The effective settings as a short markdown list."""

        def codes(values: Sequence[str]) -> str:
            return ", ".join(f"`{v}`" for v in values)

        if not self.enabled:
            return f"- Kernelize is **disabled** for this repository (`enabled: false` in `{CONFIG_PATH}`)."
        who = codes(self.trust.associations) or "nobody"
        when = "on `/kernelize`" + (f" or the `{self.trust.label}` label" if self.trust.label else "")
        if self.auto_run:
            drafts = "including drafts" if self.drafts else "not drafts"
            runs = f"automatically for pull requests by {who} ({drafts}); otherwise {when}"
        else:
            runs = f"{when} only"
        files = codes(self.paths.include) + (
            f", except {codes(self.paths.exclude)}" if self.paths.exclude else ""
        )
        tighter = [
            f"{key} {name} {getattr(o, name):g}"
            for key, o in self.tolerance.items()
            for name in TOLERANCE_FIELDS
            if getattr(o, name) is not None
        ]
        speedup = f"{self.min_speedup:g}x" if self.min_speedup else "the server default"
        vs_compile = (
            f"{self.min_speedup_vs_compile:g}x (nothing slower is suggested)"
            if self.min_speedup_vs_compile
            else "none required (reported beside every kernel)"
        )
        lines = [
            f"- **Runs:** {runs}",
            f"- **Files:** {files}",
            f"- **Generators:** {codes(self.generators) if self.generators else 'the server default'}",
            f"- **Samples per generator:** {self.samples or 'the server default'}",
            f"- **Dtypes:** {codes(self.dtypes) if self.dtypes else 'as each module is built'}",
            f"- **Tolerances:** {'built-in, tightened: ' + ', '.join(tighter) if tighter else 'built-in'}",
            f"- **Minimum speedup:** {speedup}",
            f"- **Minimum speedup over torch.compile:** {vs_compile}",
            f"- **Modules per pull request:** at most {self.max_modules}",
            f"- **Module entries:** {codes(list(self.modules)) if self.modules else 'none'}",
            f"- **Comments:** {self.comment.mode}; when nothing is faster: {self.comment.when_nothing_found}",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# Loading


class _Loader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = key in first_line
        except TypeError:  # unhashable: construct_mapping reports it with its line
            continue
        if seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} is given twice (first on line {first_line[key]})",
                key_node.start_mark,
            )
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# YAML 1.1 reads 1e-5 (no dot) as a string; YAML 1.2, and so the editors checking against the schema,
# read a number. Tolerances are written that way, so read them as numbers too.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_repo_config(text: str | None, path: str = CONFIG_PATH) -> RepoConfig:
    """The config in ``text`` (the file's content; ``None`` when there is no file), validated.

    Raises :class:`RepoConfigError` naming ``path``, the key and the problem.
    """
    if text is None or not text.strip():
        return RepoConfig()
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader: no Python objects from the file
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark is not None else None
        raise RepoConfigError(path, "", f"not valid YAML: {problem}", line=line) from None
    if data is None:  # only comments
        return RepoConfig()
    if not isinstance(data, dict):
        raise RepoConfigError(
            path,
            "",
            f"expected a mapping of settings at the top level, got {_shown(data)} (see docs/config.md)",
        )
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, path) from None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the file (``docs/kernelize.schema.json``)."""
    schema = RepoConfig.model_json_schema()
    schema["$schema"] = SCHEMA_DIALECT
    schema["title"] = f"Kernelize repository config ({CONFIG_PATH})"
    schema["description"] = (
        "Settings for Kernelize in one repository, read from the default branch. Every key is optional. "
        "Command options may override only generators, samples, dtypes and min_speedup."
    )
    return schema


# ---------------------------------------------------------------------------
# Errors, from pydantic's to one line for a maintainer


def _split_location(text: str, where: str) -> tuple[str, str]:
    """``"modules.K.inputs: expected ..."`` → ``(".inputs", "expected ...")`` for ``where="modules.K"``."""
    if text.startswith(where):
        rest = text[len(where) :]
        if rest.startswith(": "):
            return "", rest[2:]
        below, sep, message = rest.partition(": ")
        if sep and below[:1] in (".", "["):
            return below, message
    return "", text


def _shown(value: Any) -> str:
    """A value as the YAML author wrote it, briefly."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        key_of_dict = i + 1 < len(loc) and loc[i + 1] == "[key]"
        if isinstance(part, int) and not key_of_dict:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The section model that ``loc`` (field names and dict keys) leads to from the top."""
    model: type[BaseModel] = RepoConfig
    i = 0
    while i < len(loc):
        info = model.model_fields.get(str(loc[i]))
        if info is None:
            return None
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model, i = annotation, i + 1
        elif get_origin(annotation) is dict and isinstance(get_args(annotation)[1], type):
            value = get_args(annotation)[1]
            if not issubclass(value, BaseModel):
                return None
            model, i = value, i + 2
        else:
            return None
    return model


def _field_at(loc: Sequence[str | int]) -> FieldInfo | None:
    model = _model_at([p for p in loc[:-1] if p != "[key]"]) if loc else None
    return model.model_fields.get(str(loc[-1])) if model is not None else None


def _bounds(loc: Sequence[str | int]) -> str | None:
    """``"between 1 and 16"`` for a field with both bounds, else None."""
    info = _field_at(loc)
    if info is None:
        return None
    low = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
    return f"between {low} and {high}" if low is not None and high is not None else None


def _unknown_key(loc: Sequence[str | int]) -> str:
    name = str(loc[-1])
    model = _model_at(loc[:-1])
    allowed = list(model.model_fields) if model is not None else []
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {name!r}{hint} (allowed: {', '.join(allowed)})"


_EXPECTED: dict[str, str] = {
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "list_type": "a list",
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
}


def _describe(error: Any) -> tuple[str, str]:
    """(dotted key, message) for one of pydantic's errors."""
    loc: list[str | int] = list(error["loc"])
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    got = _shown(error.get("input"))
    if kind == _ERROR_TYPE:
        return _dotted([*loc, *ctx["at"]]), str(ctx["message"])
    if kind == "extra_forbidden":
        return _dotted(loc), _unknown_key(loc)
    if kind == "invalid_key":
        return _dotted(loc[:-1]), f"keys must be strings, got {got}"
    if kind in _EXPECTED:
        return _dotted(loc), f"expected {_EXPECTED[kind]}, got {got}"
    if kind == "literal_error":
        return _dotted(loc), f"{got} is not allowed (expected {ctx['expected']})"
    if kind in ("greater_than_equal", "less_than_equal"):
        bounds = _bounds(loc)
        limit = f"at least {ctx['ge']:g}" if kind == "greater_than_equal" else f"at most {ctx['le']:g}"
        return _dotted(loc), f"must be {bounds or limit}, got {got}"
    if kind == "greater_than":
        return _dotted(loc), f"must be greater than {ctx['gt']:g}, got {got}"
    if kind == "finite_number":
        return _dotted(loc), f"must be a finite number, got {got}"
    message: str = error["msg"]
    return _dotted(loc), f"{message[:1].lower()}{message[1:]}, got {got}"


def _config_error(exc: ValidationError, path: str) -> RepoConfigError:
    errors = exc.errors(include_url=False)
    key, message = _describe(errors[0])
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return RepoConfigError(path, key, message)


# ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bot.repo_config", description=f"The {CONFIG_PATH} schema and checker."
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--schema", action="store_true", help="print the JSON Schema")
    group.add_argument("--check", metavar="FILE", help="validate a config file; exit 1 with the error")
    args = parser.parse_args(argv)
    if args.schema:
        sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
        return 0
    try:
        with open(args.check, encoding="utf-8") as fh:
            text = fh.read()
        load_repo_config(text, args.check)
    except OSError as exc:
        print(f"{args.check}: cannot read: {exc.strerror}", file=sys.stderr)
        return 1
    except RepoConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    sys.stdout.write(f"{args.check}: valid\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
