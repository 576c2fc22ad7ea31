"""Typed reading of parsed JSON (or YAML) documents, with the field path in every error.

The files the driver reads back (CDI specs, the plugin's checkpoint) are ones it wrote itself, so
a value of the wrong shape means damage or a mistake, and the useful answer is exactly where:
`claims['u'].devices[0].minor: expected a non-negative integer, found str`. Readers here never
coerce: a JSON `true` is not an integer, `1.0` is not an integer, and null counts as absent only
where a field is optional. Whether unknown fields are refused is each format's own policy, so it
is a separate call (`only`).

Errors are `JsonShapeError`; a codec catches it and re-raises it as its own error type, which keeps
the callers' contracts and lets the codec add the file name in front.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class JsonShapeError(ValueError):
    """A value does not have the expected shape; `path` is where, `problem` is what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


def _type_name(value: object) -> str:
    """What a value is, for messages; null gets its JSON name since `NoneType` means nothing to
    someone reading a file."""
    return "null" if value is None else type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _expected(path: str, what: str, value: object) -> JsonShapeError:
    return JsonShapeError(path, f"expected {what}, found {_type_name(value)}")


class JsonObject:
    """One object of a document, remembering its path so that every error can name the field.

    Required accessors refuse a missing key ("is required") and a null or wrongly typed value
    ("expected ..., found ..."). `optional_*` accessors return None for a missing key or a null,
    and refuse any other wrong type just the same.
    """

    def __init__(self, value: object, path: str = "") -> None:
        if not isinstance(value, Mapping):
            raise _expected(path, "an object", value)
        self._data: Mapping[object, object] = value
        self.path = path

    def only(self, known: Iterable[str]) -> JsonObject:
        """Refuse any key not in `known`, for formats where an unknown field means a wrong file."""
        allowed = frozenset(known)
        for key in self._data:
            if key not in allowed:
                raise JsonShapeError(self.path_of(str(key)), "unsupported field")
        return self

    def path_of(self, key: str) -> str:
        """The path of a field, for errors the caller raises about its value."""
        return _join(self.path, key)

    def has(self, key: str) -> bool:
        return key in self._data

    def _present(self, key: str) -> object:
        if key not in self._data:
            raise JsonShapeError(self.path_of(key), "is required")
        return self._data[key]

    def _given(self, key: str) -> bool:
        return self._data.get(key) is not None

    def string(self, key: str) -> str:
        value = self._present(key)
        if not isinstance(value, str):
            raise _expected(self.path_of(key), "a string", value)
        return value

    def optional_string(self, key: str) -> str | None:
        return self.string(key) if self._given(key) else None

    def integer(self, key: str, *, minimum: int | None = None) -> int:
        """An integer, at least `minimum` when one is given (a floor folds into the type so the
        message says what would have been accepted)."""
        value = self._present(key)
        # bool is a subclass of int in Python; JSON keeps them apart, so must we.
        if isinstance(value, bool) or not isinstance(value, int):
            raise _expected(self.path_of(key), _integer_kind(minimum), value)
        if minimum is not None and value < minimum:
            raise _expected(self.path_of(key), _integer_kind(minimum), value)
        return value

    def optional_integer(self, key: str, *, minimum: int | None = None) -> int | None:
        return self.integer(key, minimum=minimum) if self._given(key) else None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._present(key)
        path = self.path_of(key)
        if not isinstance(value, list):
            raise _expected(path, "a list of strings", value)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise _expected(f"{path}[{index}]", "a string", item)
        return tuple(value)

    def optional_strings(self, key: str) -> tuple[str, ...] | None:
        return self.strings(key) if self._given(key) else None

    def nested(self, key: str) -> JsonObject:
        return JsonObject(self._present(key), self.path_of(key))

    def optional_nested(self, key: str) -> JsonObject | None:
        return self.nested(key) if self._given(key) else None

    def nested_list(self, key: str) -> list[JsonObject]:
        """A list whose every item is an object, each reader with its own `[index]` path."""
        value = self._present(key)
        path = self.path_of(key)
        if not isinstance(value, list):
            raise _expected(path, "a list", value)
        return [JsonObject(item, f"{path}[{index}]") for index, item in enumerate(value)]

    def optional_nested_list(self, key: str) -> list[JsonObject] | None:
        return self.nested_list(key) if self._given(key) else None

    def string_members(self) -> dict[str, str]:
        """This object as a map of free-form keys (labels, annotations) to string values."""
        return {key: _member_string(self.path, key, value) for key, value in self._members()}

    def object_members(self) -> dict[str, JsonObject]:
        """This object as a map of free-form keys (IDs) to objects, each at `path['key']`."""
        return {
            key: JsonObject(value, _member_path(self.path, key)) for key, value in self._members()
        }

    def _members(self) -> list[tuple[str, object]]:
        members: list[tuple[str, object]] = []
        for key, value in self._data.items():
            if not isinstance(key, str):
                # JSON keys are always strings; YAML's need not be.
                raise _expected(_member_path(self.path, str(key)), "a string key", key)
            members.append((key, value))
        return members


def _member_path(path: str, key: str) -> str:
    # Free-form keys may hold dots or slashes, so they are quoted rather than joined with a dot.
    return f"{path}[{key!r}]"


def _member_string(path: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise _expected(_member_path(path, key), "a string", value)
    return value


def _integer_kind(minimum: int | None) -> str:
    if minimum is None:
        return "an integer"
    if minimum == 0:
        return "a non-negative integer"
    return f"an integer of at least {minimum}"
