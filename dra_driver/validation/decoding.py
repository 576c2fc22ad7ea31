"""Reading an object's fields with the types kube-apiserver decodes them into.

A value of the wrong JSON type never reaches upstream's validation: decoding the body fails and
the answer is 400 BadRequest. These readers raise `UndecodableError` naming the field for the
same cases, and treat an absent field or `null` as the type's empty value, as decoding does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.validation.field_errors import UndecodableError

Obj = Mapping[str, Any]

_JSON_TYPES = ((bool, "bool"), (str, "string"), (int, "number"), (float, "number"))


def json_type(value: object) -> str:
    for python_type, name in _JSON_TYPES:
        if isinstance(value, python_type):
            return name
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return "null" if value is None else type(value).__name__


def _wrong(field: str, value: object, wanted: str) -> UndecodableError:
    return UndecodableError(
        field, value, f"cannot unmarshal {json_type(value)} into {field} of type {wanted}"
    )


def mapping(parent: Obj, key: str, field: str) -> Obj:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _wrong(field, value, "object")
    return value


def items(parent: Obj, key: str, field: str) -> Sequence[Any]:
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _wrong(field, value, "array")
    return value


def item_mapping(value: object, field: str) -> Obj:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _wrong(field, value, "object")
    return value


def string(parent: Obj, key: str, field: str) -> str:
    value = parent.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _wrong(field, value, "string")
    return value


def string_item(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise _wrong(field, value, "string")
    return value


def integer(parent: Obj, key: str, field: str) -> int | None:
    """An integer field, None when absent; a whole float (JSON `2.0`) reads as 2, as upstream."""
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(field, value, "integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise UndecodableError(
                field, value, f"cannot unmarshal number {value} into {field} of type integer"
            )
        return int(value)
    return value


def boolean(parent: Obj, key: str, field: str) -> bool:
    value = parent.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _wrong(field, value, "bool")
    return value
