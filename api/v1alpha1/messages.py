"""Turn pydantic validation errors into messages written for cluster users.

Pydantic's own wording ("Input should be a valid integer") names neither the
field in the user's terms nor what would have been accepted. Here each error
is located with a camelCase dotted path, and the model it came from is
consulted so the message can list the allowed fields, enum values or bounds.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from api.errors import Problem, describe_json_value
from api.v1alpha1.memory import DEVICE_KEY_ERROR, QUANTITY_ERROR
from api.v1alpha1.types import CONFLICT_ERROR, NOT_FOR_MIG_ERROR, MigDeviceConfig, MigSharing

ROOT_FIELD = "parameters"

_PASS_THROUGH = frozenset({QUANTITY_ERROR, DEVICE_KEY_ERROR, NOT_FOR_MIG_ERROR, CONFLICT_ERROR})

_TYPE_ERRORS = {
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "a boolean",
    "float_type": "a number",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
}

_BOUND_ERRORS = frozenset({"less_than_equal", "greater_than_equal", "less_than", "greater_than"})

_EXTRA_FIELD_HINTS: dict[tuple[type[BaseModel], str], str] = {
    (MigSharing, "timeSlicingConfig"): (
        "time-slicing does not apply to MIG devices, so timeSlicingConfig is not allowed; "
        "MIG devices can only be shared with strategy MPS"
    ),
    (MigDeviceConfig, "lending"): (
        "MIG devices cannot be lent (a GPU in MIG mode lends nothing), so lending is not "
        "allowed in MigDeviceConfig; remove it"
    ),
}


@dataclass(frozen=True)
class _Location:
    """Where an error points: the printable path, plus what the schema says
    about that spot (the model holding the field and the field's type)."""

    path: str
    parent: type[BaseModel] | None
    annotation: Any


def translate_errors(model: type[BaseModel], errors: Sequence[ErrorDetails]) -> list[Problem]:
    """One Problem per pydantic error, in pydantic's order."""
    return [_translate(model, error) for error in errors]


def _translate(model: type[BaseModel], error: ErrorDetails) -> Problem:
    where = _locate(model, error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = describe_json_value(error.get("input"))
    if kind in _PASS_THROUGH:
        path = where.path
        if kind == CONFLICT_ERROR:
            path = _join(path, str(ctx["field"]))
        return Problem(path, str(ctx["reason"]))
    if kind == "extra_forbidden":
        return Problem(where.path, _unknown_field_reason(where, str(error["loc"][-1])))
    if kind == "missing":
        return Problem(where.path, "required field is missing")
    if kind in _TYPE_ERRORS:
        return Problem(where.path, f"must be {_TYPE_ERRORS[kind]}, got {got}")
    if kind in ("enum", "literal_error"):
        allowed = _allowed_values(where.annotation)
        if allowed:
            return Problem(where.path, f"must be one of {allowed}, got {got}")
        return Problem(where.path, f"must be {ctx.get('expected', 'another value')}, got {got}")
    if kind in _BOUND_ERRORS:
        shown = json.dumps(error.get("input"))
        return Problem(where.path, f"{_bounds_text(where.annotation, ctx)}, got {shown}")
    message = str(error.get("msg", "is not valid"))
    return Problem(where.path, f"{message[:1].lower()}{message[1:]}, got {got}")


def _unknown_field_reason(where: _Location, name: str) -> str:
    if where.parent is None:
        return "unknown field"
    hint = _EXTRA_FIELD_HINTS.get((where.parent, name))
    if hint is not None:
        return hint
    allowed = ", ".join(_wire_names(where.parent))
    return f"unknown field; the fields allowed here are {allowed}"


def _allowed_values(annotation: Any) -> str:
    for constraint in _constraints(annotation):
        # A field may advertise fewer values than its Python type holds
        # (MIG sharing takes only MPS); the published schema is the truth.
        published = getattr(constraint, "json_schema", None)
        if isinstance(published, dict) and "enum" in published:
            return ", ".join(json.dumps(value) for value in published["enum"])
    for inner in _flatten(annotation):
        if isinstance(inner, type) and issubclass(inner, Enum):
            return ", ".join(json.dumps(member.value) for member in inner)
        if get_origin(inner) is Literal:
            return ", ".join(json.dumps(value) for value in get_args(inner))
    return ""


def _bounds_text(annotation: Any, ctx: dict[str, Any]) -> str:
    low = high = None
    for constraint in _constraints(annotation):
        low = _first_set(getattr(constraint, "ge", None), low)
        high = _first_set(getattr(constraint, "le", None), high)
    if low is not None and high is not None:
        return f"must be between {low} and {high}"
    if "le" in ctx:
        return f"must be at most {ctx['le']}"
    if "ge" in ctx:
        return f"must be at least {ctx['ge']}"
    if "lt" in ctx:
        return f"must be less than {ctx['lt']}"
    return f"must be greater than {ctx.get('gt')}"


def _first_set(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _locate(model: type[BaseModel], loc: tuple[int | str, ...]) -> _Location:
    """Follow ``loc`` through the model tree, rendering map keys as ``["key"]``."""
    path = ""
    parent: type[BaseModel] | None = None
    current: Any = model
    for step in loc:
        if step == "[key]":
            # The key itself was refused; the path already ends at it.
            continue
        model_type = _model_in(current)
        map_value = _map_value_in(current)
        if model_type is not None and isinstance(step, str):
            parent = model_type
            path = _join(path, step)
            current = _field_annotation(model_type, step)
        elif map_value is not None:
            parent = None
            path = f"{path or ROOT_FIELD}[{json.dumps(str(step))}]"
            current = map_value
        else:
            parent = None
            path = f"{path or ROOT_FIELD}[{json.dumps(step)}]"
            current = None
    return _Location(path or ROOT_FIELD, parent, current)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _wire_names(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _field_annotation(model: type[BaseModel], wire_name: str) -> Any:
    for name, info in model.model_fields.items():
        if (info.alias or name) == wire_name:
            # Constraints declared on the field itself sit in ``metadata``;
            # keep them visible to _constraints by re-wrapping.
            if info.metadata:
                return Annotated[(info.annotation, *info.metadata)]
            return info.annotation
    return None


def _flatten(annotation: Any) -> Iterator[Any]:
    """Yield the annotation and everything inside Optional/Union/Annotated."""
    yield annotation
    origin = get_origin(annotation)
    if origin is Annotated:
        yield from _flatten(get_args(annotation)[0])
    elif origin is Union or origin is types.UnionType:
        for member in get_args(annotation):
            yield from _flatten(member)


def _constraints(annotation: Any) -> Iterator[Any]:
    for inner in _flatten(annotation):
        if get_origin(inner) is Annotated:
            for item in get_args(inner)[1:]:
                yield item
                yield from getattr(item, "metadata", ())


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for inner in _flatten(annotation):
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return None


def _map_value_in(annotation: Any) -> Any:
    for inner in _flatten(annotation):
        if get_origin(inner) is dict:
            return get_args(inner)[1]
    return None
