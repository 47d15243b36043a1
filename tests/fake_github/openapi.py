"""GitHub's REST OpenAPI description, as a request (and response) checker for the fake GitHub.

``load_spec()`` reads ``tests/fixtures/github-openapi/api.github.com.json.gz`` once per process
and gives an :class:`OpenAPISpec`:

* ``spec.match(method, path)`` finds the operation whose path template matches (templates are
  turned into regexes; literal segments win over ``{params}``: ``/issues/comments/{id}`` beats
  ``/issues/{number}/comments``), with the path parameters percent-decoded;
* ``spec.check_request(match, query, body)`` checks path parameters, query parameters (strings
  coerced to the schema's type first: ``per_page=abc`` is not an integer) and the JSON body
  against the operation's ``requestBody`` schema, with jsonschema;
* ``spec.check_response(operation, status, body)`` checks what the fake answers, so that its
  bodies stay as complete as GitHub's own.

Schemas are OpenAPI 3.0 ("an extended subset of JSON Schema"); :func:`to_json_schema` turns one
into JSON Schema draft 7: ``nullable: true`` becomes a type list with "null" (or an ``anyOf``
with ``{"type": "null"}`` where there is no ``type``), boolean ``exclusiveMinimum``/
``exclusiveMaximum`` become numbers, ``$ref`` siblings are dropped (3.0 ignores them) and
OpenAPI-only keywords (``discriminator``, ``example``, ``readOnly``, ``x-*``...) are removed.
``$ref``s are rewritten to ``urn:github-openapi#/components/...`` and resolved through a
``referencing.Registry`` holding the converted ``components``.
"""

from __future__ import annotations

import datetime as dt
import functools
import gzip
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema

SPEC_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "github-openapi" / "api.github.com.json.gz"
BASE_URI = "urn:github-openapi"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# OpenAPI keywords with no JSON Schema meaning (or none worth keeping for validation).
_DROP = {
    "nullable",
    "discriminator",
    "xml",
    "externalDocs",
    "example",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "description",
    "title",
}
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_ONE = ("items", "not", "additionalProperties", "additionalItems")

NO_BODY = object()  # the request had no body at all


def to_json_schema(schema: Any, *, ref_base: str = BASE_URI) -> Any:
    """Convert one OpenAPI 3.0 schema (and its subschemas) to JSON Schema draft 7."""
    if isinstance(schema, bool) or not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        ref = schema["$ref"]
        out: dict[str, Any] = {"$ref": ref_base + ref if ref.startswith("#") else ref}
        if schema.get("nullable") is True:
            return {"anyOf": [out, {"type": "null"}]}
        return out
    out = {}
    for key, value in schema.items():
        if key in _DROP or key.startswith("x-"):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub, ref_base=ref_base) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [to_json_schema(sub, ref_base=ref_base) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = to_json_schema(value, ref_base=ref_base)
        else:
            out[key] = value
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), bool):
            if out[bound] and limit in out:
                out[bound] = out.pop(limit)
            else:
                del out[bound]
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        elif isinstance(kind, list):
            if "null" not in kind:
                out["type"] = [*kind, "null"]
        else:
            return {"anyOf": [out, {"type": "null"}]}
    return out


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

FORMAT_CHECKER = jsonschema.FormatChecker(formats=())


@FORMAT_CHECKER.checks("date-time")
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _DATE_TIME.match(value):
        return False
    try:
        dt.datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("date")
def _is_date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _DATE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Parameter:
    name: str
    location: str  # "path" | "query" | "header" | "cookie"
    required: bool
    schema: Any  # converted


@dataclass(frozen=True)
class Operation:
    method: str  # upper case
    template: str
    operation_id: str
    doc_url: str
    parameters: tuple[Parameter, ...]
    body_schema: Any  # converted, None when the operation takes no JSON body
    body_required: bool
    body_content_types: tuple[str, ...]
    responses: dict[str, Any]  # status ("200", "default"...) -> converted schema or None (no JSON)


@dataclass(frozen=True)
class Match:
    operation: Operation
    path_params: dict[str, str]


@dataclass(frozen=True)
class Problem:
    """Something wrong with a request. ``fatal``: GitHub would refuse it (the fake answers 422/404);
    otherwise GitHub would ignore it (an unknown query parameter or body field) and the fake
    only records it."""

    kind: str
    message: str
    fatal: bool = True


@dataclass
class _Template:
    template: str
    regex: re.Pattern[str]
    specificity: tuple[int, ...]
    operations: dict[str, Operation] = field(default_factory=dict)


def _template_regex(template: str) -> tuple[re.Pattern[str], tuple[int, ...]]:
    segments = template.strip("/").split("/")
    parts: list[str] = []
    rank: list[int] = []
    for i, segment in enumerate(segments):
        if re.fullmatch(r"\{[^}]+\}", segment):
            name = segment[1:-1]
            group = re.sub(r"\W", "_", name)
            last = i == len(segments) - 1
            if last and name in ("path", "ref", "file_path"):
                parts.append(f"(?P<{group}>.+)")  # file paths and refs may contain slashes
                rank.append(2)
            else:
                parts.append(f"(?P<{group}>[^/]+)")
                rank.append(1)
        elif "{" in segment:  # e.g. "{owner}.keys" style mixed segments
            pattern = re.sub(
                r"\\\{([^}]+)\\\}",
                lambda m: f"(?P<{re.sub(r'[^0-9A-Za-z_]', '_', m.group(1))}>[^/]+)",
                re.escape(segment),
            )
            parts.append(pattern)
            rank.append(1)
        else:
            parts.append(re.escape(segment))
            rank.append(0)
    regex = re.compile("^/" + "/".join(parts) + "$") if segments != [""] else re.compile("^/$")
    return regex, tuple(rank)


class OpenAPISpec:
    """The loaded description: operations by path template, and validators for their schemas."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.version = document.get("info", {}).get("version", "")
        components = document.get("components", {})
        schemas = {name: to_json_schema(schema) for name, schema in components.get("schemas", {}).items()}
        self._raw_components = components
        resource = referencing.jsonschema.DRAFT7.create_resource({"components": {"schemas": schemas}})
        self.registry: referencing.Registry[Any] = referencing.Registry().with_resource(BASE_URI, resource)
        self._templates: list[_Template] = []
        for template, item in document.get("paths", {}).items():
            regex, rank = _template_regex(template)
            entry = _Template(template, regex, rank)
            shared = item.get("parameters", [])
            for method in METHODS:
                op = item.get(method)
                if op is not None:
                    entry.operations[method.upper()] = self._operation(template, method, op, shared)
            self._templates.append(entry)
        self._validators: dict[int, jsonschema.protocols.Validator] = {}
        self._by_first: dict[str, list[_Template]] = {}
        for entry in self._templates:
            first = entry.template.strip("/").split("/", 1)[0]
            self._by_first.setdefault("" if "{" in first else first, []).append(entry)

    # -- building ---------------------------------------------------------------------------

    def _deref(self, obj: Any, section: str) -> Any:
        while isinstance(obj, dict) and "$ref" in obj:
            name = obj["$ref"].rsplit("/", 1)[-1]
            obj = self._raw_components.get(section, {})[name]
        return obj

    def _operation(self, template: str, method: str, op: dict[str, Any], shared: list[Any]) -> Operation:
        params: dict[tuple[str, str], Parameter] = {}
        for raw in [*shared, *op.get("parameters", [])]:
            p = self._deref(raw, "parameters")
            params[(p["name"], p["in"])] = Parameter(
                name=p["name"],
                location=p["in"],
                required=bool(p.get("required")) or p["in"] == "path",
                schema=to_json_schema(p.get("schema", {})),
            )
        body_schema = None
        body_required = False
        content_types: tuple[str, ...] = ()
        body = self._deref(op.get("requestBody"), "requestBodies")
        if body:
            content = body.get("content", {})
            content_types = tuple(content)
            body_required = bool(body.get("required"))
            json_body = content.get("application/json")
            if json_body is not None:
                body_schema = to_json_schema(json_body.get("schema", {}))
        responses: dict[str, Any] = {}
        for status, raw in op.get("responses", {}).items():
            response = self._deref(raw, "responses")
            json_content = (response.get("content") or {}).get("application/json")
            responses[str(status)] = to_json_schema(json_content["schema"]) if json_content else None
        return Operation(
            method=method.upper(),
            template=template,
            operation_id=op.get("operationId", f"{method} {template}"),
            doc_url=(op.get("externalDocs") or {}).get("url", "https://docs.github.com/rest"),
            parameters=tuple(params.values()),
            body_schema=body_schema,
            body_required=body_required,
            body_content_types=content_types,
            responses=responses,
        )

    def validator(self, schema: Any) -> jsonschema.protocols.Validator:
        key = id(schema)
        found = self._validators.get(key)
        if found is None:
            found = jsonschema.Draft7Validator(schema, registry=self.registry, format_checker=FORMAT_CHECKER)
            self._validators[key] = found
        return found

    # -- matching ---------------------------------------------------------------------------

    def templates_matching(self, path: str) -> list[tuple[_Template, dict[str, str]]]:
        first = path.strip("/").split("/", 1)[0]
        found = []
        for entry in self._by_first.get(first, []) + self._by_first.get("", []):
            m = entry.regex.match(path)
            if m:
                found.append((entry, m.groupdict()))
        found.sort(key=lambda pair: pair[0].specificity)
        return found

    def match(self, method: str, path: str) -> Match | None:
        """The operation for ``method`` on ``path`` (no query string, no ``/api/v3`` prefix)."""
        for entry, groups in self.templates_matching(path):
            op = entry.operations.get(method.upper())
            if op is None:
                continue
            names = re.findall(r"\{([^}]+)\}", entry.template)
            values = {
                name: urllib.parse.unquote(groups[re.sub(r"\W", "_", name)])
                for name in names
                if re.sub(r"\W", "_", name) in groups
            }
            return Match(op, values)
        return None

    def operation(self, method: str, template: str) -> Operation | None:
        for entry in self._templates:
            if entry.template == template:
                return entry.operations.get(method.upper())
        return None

    # -- checking ---------------------------------------------------------------------------

    def _resolve(self, schema: Any) -> Any:
        while isinstance(schema, dict) and set(schema) == {"$ref"}:
            schema = self.registry.resolver().lookup(schema["$ref"]).contents
        return schema

    def _coerce(self, values: list[str], schema: Any) -> Any:
        """Turn query/path strings into the JSON value the schema expects (best effort)."""
        schema = self._resolve(schema)
        if not isinstance(schema, dict):
            return values[-1]
        for key in ("oneOf", "anyOf"):
            if key in schema:
                for branch in schema[key]:
                    value = self._coerce(values, branch)
                    if self.validator(branch).is_valid(value):
                        return value
                return values[-1]
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        if "array" in kinds:
            items = [v for raw in values for v in raw.split(",")] if len(values) == 1 else values
            return [self._coerce([v], schema.get("items", {})) for v in items]
        raw = values[-1]  # a repeated scalar parameter: the last one counts
        if "integer" in kinds and re.fullmatch(r"[+-]?\d+", raw.strip()):
            return int(raw)
        if "number" in kinds:
            try:
                return float(raw)
            except ValueError:
                pass
        if "boolean" in kinds and raw in ("true", "false"):
            return raw == "true"
        return raw

    def _describe(self, error: jsonschema.ValidationError, where: str) -> str:
        """One jsonschema error in the words GitHub uses for its 422 'Invalid request.' answers."""
        path = "/".join(str(p) for p in error.absolute_path)
        at = f"For '{where}{'/' if where and path else ''}{path}'" if (where or path) else "For the request"
        kind = error.validator
        if kind == "required":
            missing = [r for r in error.validator_value if r not in (error.instance or {})]
            return " ".join(f'"{name}" wasn\'t supplied.' for name in missing) or error.message
        if kind == "type":
            wanted = error.validator_value
            wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
            return (
                f"{at}, {json.dumps(error.instance)} is not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}."
            )
        if kind == "enum":
            return (
                f"{at}, {json.dumps(error.instance)} is not a member of {json.dumps(error.validator_value)}."
            )
        if kind == "maxLength":
            return (
                f"Only {error.validator_value} characters are allowed; {len(error.instance)} were supplied."
            )
        if kind == "maxItems":
            return (
                f"{at}, only {error.validator_value} items are allowed; {len(error.instance)} were supplied."
            )
        if kind in ("anyOf", "oneOf"):
            inner = sorted({self._describe(sub, where) for sub in error.context or []})
            return f'{at}, no subschema in "{kind}" matched. ' + " ".join(inner)
        return f"{at}, {error.message}."

    def check_request(self, match: Match, query: dict[str, list[str]], body: Any) -> list[Problem]:
        """Problems with one request: path/query parameters, then the JSON body."""
        op = match.operation
        problems: list[Problem] = []
        known_query = set()
        for param in op.parameters:
            if param.location == "path":
                value = match.path_params.get(param.name)
                if value is None:
                    problems.append(Problem("path", f'Path parameter "{param.name}" is missing.'))
                    continue
                coerced = self._coerce([value], param.schema)
                for error in self.validator(param.schema).iter_errors(coerced):
                    problems.append(Problem("path", self._describe(error, param.name)))
            elif param.location == "query":
                known_query.add(param.name)
                raw = query.get(param.name)
                if raw is None:
                    if param.required:
                        problems.append(Problem("query", f'"{param.name}" wasn\'t supplied.'))
                    continue
                coerced = self._coerce(raw, param.schema)
                for error in self.validator(param.schema).iter_errors(coerced):
                    problems.append(Problem("query", self._describe(error, param.name)))
        for name in query:
            if name not in known_query:
                problems.append(
                    Problem(
                        "unknown-query",
                        f'Query parameter "{name}" is not one of {op.operation_id}\'s parameters '
                        f"{sorted(known_query)} (GitHub ignores it).",
                        fatal=False,
                    )
                )
        if body is NO_BODY:
            if op.body_required:
                problems.append(Problem("body", "The request needs a body and none was sent."))
            return problems
        if op.body_schema is None:
            if op.body_content_types:
                problems.append(
                    Problem("body", f"{op.operation_id} takes {op.body_content_types}, not JSON.")
                )
            return problems
        errors = sorted(self.validator(op.body_schema).iter_errors(body), key=lambda e: list(e.absolute_path))
        problems.extend(Problem("body", self._describe(error, "")) for error in errors)
        if not errors:
            problems.extend(
                Problem("unknown-field", message, fatal=False)
                for message in self.unknown_fields(body, op.body_schema, "")
            )
        return problems

    def unknown_fields(self, instance: Any, schema: Any, where: str) -> list[str]:
        """Object keys no (sub)schema declares, where ``additionalProperties`` is not given.

        GitHub ignores them, so a typo ("start_lines") would pass silently on the real thing.
        """
        schemas = self._flatten(schema)
        found: list[str] = []
        if isinstance(instance, dict):
            if not any(isinstance(s, dict) and "properties" in s for s in schemas):
                return found
            if any(isinstance(s, dict) and "additionalProperties" in s for s in schemas):
                return found
            declared: dict[str, list[Any]] = {}
            for s in schemas:
                if isinstance(s, dict):
                    for name, sub in s.get("properties", {}).items():
                        declared.setdefault(name, []).append(sub)
            for key, value in instance.items():
                path = f"{where}/{key}" if where else key
                if key not in declared:
                    found.append(f'Body field "{path}" is not in the schema (GitHub ignores it).')
                else:
                    for sub in declared[key][:1]:
                        found.extend(self.unknown_fields(value, sub, path))
        elif isinstance(instance, list):
            items = [s["items"] for s in schemas if isinstance(s, dict) and "items" in s]
            for i, value in enumerate(instance):
                for sub in items[:1]:
                    found.extend(self.unknown_fields(value, sub, f"{where}/{i}"))
        return found

    def _flatten(self, schema: Any) -> list[Any]:
        schema = self._resolve(schema)
        if not isinstance(schema, dict):
            return [schema]
        out = [schema]
        for key in _SCHEMA_LISTS:
            for sub in schema.get(key, []):
                out.extend(self._flatten(sub))
        return out

    def check_response(self, op: Operation, status: int, body: Any) -> list[str]:
        """Ways in which a response of the fake differs from what the description promises."""
        if str(status) in op.responses:
            schema = op.responses[str(status)]
        elif "default" in op.responses:
            schema = op.responses["default"]
        else:
            return [f"{op.operation_id} does not document status {status} (only {sorted(op.responses)})"]
        if schema is None:
            return [] if body in (None, b"", "") else [f"{op.operation_id} {status} documents no JSON body"]
        return [
            f"{op.operation_id} {status}: at /{'/'.join(map(str, e.absolute_path))}: {e.message}"[:500]
            for e in self.validator(schema).iter_errors(body)
        ]


@functools.cache
def load_spec(path: Path = SPEC_PATH) -> OpenAPISpec:
    """The description at ``path``, loaded and converted once per process."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        document = json.load(f)
    return OpenAPISpec(document)
