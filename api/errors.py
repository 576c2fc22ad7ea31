"""The single exception type raised for bad opaque configuration.

Callers (the kubelet plugin preparing a claim, the controller checking one)
only need to catch one thing and can show its text to the user verbatim, so
every failure in this package, whatever layer found it, ends up here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration, located by a dotted field path.

    The path uses wire (camelCase) names so users can find the spot in their
    YAML; map entries are written as ``name["key"]``. ``message`` is the full
    sentence shown to users; it defaults to ``"<field>: <reason>"`` and is
    given explicitly only where another lead-in reads better.
    """

    field: str
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if not self.message:
            # Frozen dataclass: computing a default from other fields needs this.
            object.__setattr__(self, "message", f"{self.field}: {self.reason}")

    def __str__(self) -> str:
        return self.message


class ConfigError(ValueError):
    """Every problem found in one go, so users fix them all in one edit.

    ``field`` is the location of the first problem; ``problems`` holds all of
    them in the order they were found. The text joins their messages with
    ``"; "`` to stay on one line in Kubernetes events and log records.
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        found = tuple(problems)
        if not found:
            raise ValueError("ConfigError needs at least one problem")
        self.problems: tuple[Problem, ...] = found
        self.field: str = found[0].field
        super().__init__("; ".join(p.message for p in found))

    @classmethod
    def at(cls, field: str, reason: str) -> ConfigError:
        """Shorthand for the common case of a single problem."""
        return cls([Problem(field, reason)])

    @property
    def message(self) -> str:
        """The full text, the same as ``str(error)``."""
        return str(self)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[tuple[Problem, ...]]]:
        # The default would rebuild from the joined text and lose the problems.
        return (type(self), (self.problems,))


_JSON_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: bool is a subclass of int
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (Mapping, "object"),
    (list, "array"),
    (tuple, "array"),
)

_SHOWN_VALUE_LIMIT = 60


def describe_json_value(value: object) -> str:
    """Name a value's JSON type and show it, for "got ..." clauses.

    Users wrote YAML or JSON, so they think in JSON types ("string", not
    "str"), and the value itself (cut short if long) tells them which of
    their lines we mean.
    """
    if value is None:
        return "null"
    for py_type, name in _JSON_TYPE_NAMES:
        if isinstance(value, py_type):
            if name in ("object", "array"):
                return f"an {name}"
            shown = json.dumps(value) if name == "string" else _scalar_text(value)
            if len(shown) > _SHOWN_VALUE_LIMIT:
                shown = shown[: _SHOWN_VALUE_LIMIT - 3] + "..."
            return f"{name} {shown}"
    return f"a value of Python type {type(value).__name__}"


def _scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
