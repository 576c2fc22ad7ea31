"""Validation failures worded as kube-apiserver words them (`k8s.io/apimachinery`'s
`util/validation/field`): a field path, a type ("Invalid value", "Required value", ...), the
offending value and a detail. The embedded API server turns them into a `Status`'s causes and
the offline tools into one line each, so both name the same field with the same words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum


class ErrorType(Enum):
    """The error types of `field.ErrorType`: (the words in messages, the Status cause reason)."""

    NOT_FOUND = ("Not found", "FieldValueNotFound")
    REQUIRED = ("Required value", "FieldValueRequired")
    DUPLICATE = ("Duplicate value", "FieldValueDuplicate")
    INVALID = ("Invalid value", "FieldValueInvalid")
    NOT_SUPPORTED = ("Unsupported value", "FieldValueNotSupported")
    FORBIDDEN = ("Forbidden", "FieldValueForbidden")
    TOO_LONG = ("Too long", "FieldValueTooLong")
    TOO_MANY = ("Too many", "FieldValueTooMany")

    @property
    def words(self) -> str:
        return self.value[0]

    @property
    def reason(self) -> str:
        return self.value[1]


#: Types whose message leaves the value out (upstream prints only the type and the detail).
_NO_VALUE = frozenset({ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG})


def show_value(value: object) -> str:
    """A value as upstream prints it in a message: strings quoted, numbers bare, nil as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of an object."""

    type: ErrorType
    field: str
    value: object = None
    detail: str = ""
    text: str = ""
    """When set, the whole message: for rules whose wording lives with other code."""

    @property
    def message(self) -> str:
        """The text after the field path (upstream's `ErrorBody`)."""
        if self.text:
            return self.text
        text = self.type.words
        if self.type not in _NO_VALUE:
            text = f"{text}: {show_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def invalid(field: str, value: object, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, field, value, detail)


def worded(field: str, text: str) -> FieldError:
    """An "Invalid value" error with a message of its own."""
    return FieldError(ErrorType.INVALID, field, None, "", text)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, field, None, detail)


def duplicate(field: str, value: object) -> FieldError:
    return FieldError(ErrorType.DUPLICATE, field, value)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, field, None, detail)


def not_found(field: str, value: object, detail: str = "") -> FieldError:
    return FieldError(ErrorType.NOT_FOUND, field, value, detail)


def not_supported(field: str, value: object, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(json.dumps(s) for s in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, field, value, f"supported values: {listed}")


def too_long(field: str, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_LONG, field, None, f"may not be more than {limit} bytes")


def too_many(field: str, count: int, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_MANY, field, count, f"must have at most {limit} items")


class UndecodableError(ValueError):
    """A value that kube-apiserver could not even decode into its type (a quantity that does not
    parse, a string where a number belongs): it answers 400 BadRequest, not 422 Invalid."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.value = value
        self.problem = problem
