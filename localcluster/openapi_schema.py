"""A CRD version's `openAPIV3Schema` applied to custom objects: prune, default, validate.

kube-apiserver does three things with a structural schema before it stores a custom object,
in this order, and clients can tell each apart, so the local API server does them too:

1. *pruning*: fields the schema does not declare are dropped without an error (unless
   `x-kubernetes-preserve-unknown-fields` keeps them); so are `null` values of fields that are
   not `nullable`, as upstream does before defaulting;
2. *defaulting*: a missing property with a `default` gets a copy of it;
3. *validation*: every value validation the schema holds, each problem reported as a Status
   cause naming its field path (`spec.guaranteed.gpu`) with the reason kube-apiserver uses.

CEL rules (`x-kubernetes-validations`) are evaluated separately (`cel_rules.py`). Not checked:
`format` (upstream checks only a handful of formats) and `uniqueItems` (structural schemas
forbid it). The root's `apiVersion`, `kind` and `metadata` are never pruned: ObjectMeta has its
own rules, which this harness does not re-implement for custom resources.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from localcluster.errors import StatusCause
from localcluster.json_copy import copy_json

Schema = Mapping[str, Any]

_ROOT_KEPT = ("apiVersion", "kind", "metadata")
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"


# ---- field paths and value rendering --------------------------------------------------------


def child(path: str, name: str) -> str:
    """`spec` + `weight` -> `spec.weight`; the root has the empty path."""
    return f"{path}.{name}" if path else name


def index(path: str, position: int | str) -> str:
    return f"{path}[{position}]"


def shown(value: Any) -> str:
    """A value as it appears in upstream messages: scalars as JSON, containers by their kind."""
    if isinstance(value, Mapping):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def json_type(value: Any) -> str:
    """The JSON type name upstream messages use for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# ---- pruning and defaulting -----------------------------------------------------------------


def _nullable(schema: Schema) -> bool:
    return bool(schema.get("nullable"))


def prune(schema: Schema, value: Any, *, root: bool = False) -> Any:
    """A copy of `value` without what `schema` does not declare (see the module docstring)."""
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [prune(items, v) for v in value]
        return copy_json(value)
    if not isinstance(value, dict):
        return copy_json(value)
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if root and key in _ROOT_KEPT:
            out[key] = copy_json(item)
            continue
        sub: Schema | None = None
        if isinstance(properties, Mapping) and key in properties:
            sub = properties[key]
        elif isinstance(additional, Mapping):
            sub = additional
        elif additional is True or schema.get(PRESERVE):
            out[key] = copy_json(item)
            continue
        if sub is None:
            continue  # unknown: dropped silently, as kube-apiserver prunes
        if item is None and not _nullable(sub):
            continue
        out[key] = prune(sub, item)
    return out


def apply_defaults(schema: Schema, value: Any) -> Any:
    """`value` with every missing defaulted property filled in, recursively (in place)."""
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                apply_defaults(items, item)
        return value
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for key, sub in properties.items():
            if key not in value and isinstance(sub, Mapping) and "default" in sub:
                value[key] = copy_json(sub["default"])
            if key in value:
                apply_defaults(sub, value[key])
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        for item in value.values():
            apply_defaults(additional, item)
    return value


# ---- validation -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def validate(schema: Schema, value: Any, path: str = "") -> list[StatusCause]:
    """Every problem `value` has against `schema` (value validations only, no CEL)."""
    problems: list[StatusCause] = []
    _check(schema, value, path, problems)
    return problems


def _invalid(path: str, value: Any, text: str) -> StatusCause:
    where = path or "<nil>"
    return StatusCause(f"Invalid value: {shown(value)}: {where} in body {text}", path)


def _check(schema: Schema, value: Any, path: str, out: list[StatusCause]) -> None:
    if value is None:
        if not _nullable(schema) and (schema.get("type") or schema.get(INT_OR_STRING)):
            expected = schema.get("type") or "integer or string"
            out.append(
                StatusCause(
                    f'Invalid value: "null": {path} in body must be of type {expected}: "null"',
                    path,
                    "FieldValueTypeInvalid",
                )
            )
        return
    if schema.get(INT_OR_STRING) and (not isinstance(value, int | str) or isinstance(value, bool)):
        out.append(
            StatusCause(
                f'Invalid value: "{json_type(value)}": {path} in body must be of type '
                f'integer or string: "{json_type(value)}"',
                path,
                "FieldValueTypeInvalid",
            )
        )
        return
    expected = schema.get("type")
    if isinstance(expected, str) and not _type_ok(expected, value):
        out.append(
            StatusCause(
                f'Invalid value: "{json_type(value)}": {path} in body must be of type '
                f'{expected}: "{json_type(value)}"',
                path,
                "FieldValueTypeInvalid",
            )
        )
        return
    _check_scalar(schema, value, path, out)
    _check_combinators(schema, value, path, out)
    if isinstance(value, dict):
        _check_object(schema, value, path, out)
    elif isinstance(value, list):
        _check_array(schema, value, path, out)


def _check_scalar(schema: Schema, value: Any, path: str, out: list[StatusCause]) -> None:
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        supported = ", ".join(json.dumps(e) for e in enum)
        out.append(
            StatusCause(
                f"Unsupported value: {shown(value)}: supported values: {supported}",
                path,
                "FieldValueNotSupported",
            )
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, path, out)
    if isinstance(value, str):
        length = len(value)
        if "maxLength" in schema and length > int(schema["maxLength"]):
            out.append(
                StatusCause(
                    f"Too long: may not be more than {schema['maxLength']} bytes",
                    path,
                    "FieldValueTooLong",
                )
            )
        if "minLength" in schema and length < int(schema["minLength"]):
            out.append(
                _invalid(path, value, f"should be at least {schema['minLength']} chars long")
            )
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not _regex(pattern).search(value):
            out.append(_invalid(path, value, f"should match '{pattern}'"))


def _check_number(schema: Schema, value: float, path: str, out: list[StatusCause]) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") is True:
            if value <= low:
                out.append(_invalid(path, value, f"should be greater than {low}"))
        elif value < low:
            out.append(_invalid(path, value, f"should be greater than or equal to {low}"))
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") is True:
            if value >= high:
                out.append(_invalid(path, value, f"should be less than {high}"))
        elif value > high:
            out.append(_invalid(path, value, f"should be less than or equal to {high}"))
    factor = schema.get("multipleOf")
    if isinstance(factor, int | float) and factor and (value / factor) % 1:
        out.append(_invalid(path, value, f"should be a multiple of {factor}"))


def _check_combinators(schema: Schema, value: Any, path: str, out: list[StatusCause]) -> None:
    """anyOf/allOf/oneOf/not: value validations only, as in a structural schema."""
    for sub in schema.get("allOf") or ():
        _check(sub, value, path, out)
    any_of = schema.get("anyOf")
    if any_of and not any(not validate(sub, value, path) for sub in any_of):
        out.append(_invalid(path, value, "should match at least one schema in anyOf"))
    one_of = schema.get("oneOf")
    if one_of and sum(1 for sub in one_of if not validate(sub, value, path)) != 1:
        out.append(_invalid(path, value, "must validate one and only one schema (oneOf)"))
    negated = schema.get("not")
    if isinstance(negated, Mapping) and not validate(negated, value, path):
        out.append(_invalid(path, value, "must not validate the schema (not)"))


def _check_object(schema: Schema, value: dict[str, Any], path: str, out: list[StatusCause]) -> None:
    for name in schema.get("required") or ():
        if name not in value:
            out.append(StatusCause("Required value", child(path, name), "FieldValueRequired"))
    count = len(value)
    if "maxProperties" in schema and count > int(schema["maxProperties"]):
        out.append(
            StatusCause(
                f"Too many: {count}: must have at most {schema['maxProperties']} items",
                path,
                "FieldValueTooMany",
            )
        )
    if "minProperties" in schema and count < int(schema["minProperties"]):
        out.append(
            _invalid(path, value, f"should have at least {schema['minProperties']} properties")
        )
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if not path and key in _ROOT_KEPT:
            continue
        if key in properties:
            _check(properties[key], item, child(path, key), out)
        elif isinstance(additional, Mapping):
            _check(additional, item, child(path, key), out)


def _check_array(schema: Schema, value: list[Any], path: str, out: list[StatusCause]) -> None:
    count = len(value)
    if "maxItems" in schema and count > int(schema["maxItems"]):
        out.append(
            StatusCause(
                f"Too many: {count}: must have at most {schema['maxItems']} items",
                path,
                "FieldValueTooMany",
            )
        )
    if "minItems" in schema and count < int(schema["minItems"]):
        out.append(_invalid(path, value, f"should have at least {schema['minItems']} items"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for position, item in enumerate(value):
            _check(items, item, index(path, position), out)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: list[Any] = []
        for position, item in enumerate(value):
            if item in seen:
                out.append(
                    StatusCause(
                        f"Duplicate value: {json.dumps(item)}",
                        index(path, position),
                        "FieldValueDuplicate",
                    )
                )
            else:
                seen.append(item)
    elif list_type == "map":
        keys = list(schema.get("x-kubernetes-list-map-keys") or ())
        found: set[str] = set()
        for position, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            identity = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
            if identity in found:
                out.append(
                    StatusCause(
                        f"Duplicate value: {identity}",
                        index(path, position),
                        "FieldValueDuplicate",
                    )
                )
            found.add(identity)


def admit_value(schema: Schema, obj: dict[str, Any]) -> tuple[dict[str, Any], list[StatusCause]]:
    """Prune, default, then validate a whole custom object against its version's schema."""
    pruned = prune(schema, obj, root=True)
    defaulted = apply_defaults(schema, pruned)
    assert isinstance(defaulted, dict)
    return defaulted, validate(schema, defaulted)
