"""Runtime-neutral declarations of the functions our CEL libraries add.

Libraries describe their functions here with plain strings for types, so that
only the adapter in ``runtime.py`` knows how the CEL runtime spells them. Type
strings are ``bool``, ``int``, ``uint``, ``double``, ``string``, ``bytes``,
``dyn``, ``null``, ``timestamp``, ``duration``, ``list(T)``, ``map(K, V)`` or
the full name of one of our protobuf value types.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

Impl = Callable[..., object]


@dataclass(frozen=True)
class Overload:
    """One signature of a function; for a member function the receiver is ``params[0]``."""

    id: str
    params: tuple[str, ...]
    result: str
    impl: Impl
    member: bool = False


@dataclass(frozen=True)
class Function:
    """A named function; ``dynamic`` serves calls whose overload is only known at run time.

    The type checker picks the overload when argument types are known. When an
    argument is ``dyn`` (say, a device attribute) the runtime picks by the kind
    of value it sees, and it cannot tell ``list(int)`` from ``list(double)`` or
    one message type from another, so overloads sharing such a shape need one
    implementation that inspects its arguments itself.
    """

    name: str
    overloads: tuple[Overload, ...]
    dynamic: Impl | None = None


@dataclass(frozen=True)
class Library:
    """Functions visible to selector authors, plus helpers only our rewrites may call.

    ``internal`` functions have names starting with ``@``, which the CEL parser
    refuses in source text, so a selector cannot reach them directly.
    """

    name: str
    functions: tuple[Function, ...]
    internal: tuple[Function, ...] = ()


class CelFunctionError(ValueError):
    """Raised by a library function; the runtime turns it into a CEL error value."""


def parse_type_expr(text: str) -> tuple[str, tuple[str, ...]]:
    """Split ``list(int)`` into ``("list", ("int",))``; a plain name has no parameters."""
    text = text.strip()
    open_at = text.find("(")
    if open_at < 0:
        return text, ()
    if not text.endswith(")"):
        raise ValueError(f"malformed type expression {text!r}")
    head = text[:open_at].strip()
    inner = text[open_at + 1 : -1]
    params: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            params.append(inner[start:index].strip())
            start = index + 1
    params.append(inner[start:].strip())
    return head, tuple(params)


@functools.lru_cache(maxsize=256)
def _parsed(type_expr: str) -> tuple[str, tuple[str, ...]]:
    return parse_type_expr(type_expr)


_PYTHON_CLASS_OF: dict[str, type | tuple[type, ...]] = {
    "double": float,
    "string": str,
    "bytes": bytes,
    "timestamp": datetime.datetime,
    "duration": datetime.timedelta,
}


def value_matches(value: object, type_expr: str) -> bool:
    """Whether a value the runtime handed to Python could have the given CEL type."""
    head, params = _parsed(type_expr)
    if head == "dyn":
        return True
    if head == "bool":
        return isinstance(value, bool)
    if head in ("int", "uint"):
        return isinstance(value, int) and not isinstance(value, bool)
    if head == "null":
        return value is None
    if head == "list":
        return isinstance(value, list) and all(value_matches(v, params[0]) for v in value)
    if head == "map":
        return isinstance(value, dict) and all(
            value_matches(k, params[0]) and value_matches(v, params[1]) for k, v in value.items()
        )
    python_class = _PYTHON_CLASS_OF.get(head)
    if python_class is not None:
        return isinstance(value, python_class)
    descriptor = getattr(value, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) == head


def dispatcher(name: str, overloads: Sequence[Overload]) -> Impl:
    """Pick the first overload whose parameter types fit the actual arguments."""

    def dispatch(*args: object) -> object:
        for overload in overloads:
            if len(overload.params) == len(args) and all(
                value_matches(a, p) for a, p in zip(args, overload.params, strict=True)
            ):
                return overload.impl(*args)
        raise CelFunctionError(f"no matching overload for {name!r}")

    return dispatch


def merge_functions(functions: Iterable[Function]) -> tuple[Function, ...]:
    """One Function per name, as the runtime wants, keeping every library's overloads."""
    merged: dict[str, Function] = {}
    for function in functions:
        known = merged.get(function.name)
        if known is None:
            merged[function.name] = function
            continue
        if known.dynamic is not None or function.dynamic is not None:
            raise ValueError(f"cannot merge {function.name!r}: it has a dynamic implementation")
        merged[function.name] = Function(function.name, (*known.overloads, *function.overloads))
    return tuple(merged.values())
