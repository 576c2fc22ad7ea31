"""Kubernetes' CEL lists library: isSorted, sum, min, max, indexOf, lastIndexOf.

Overloads are declared per element type, as Kubernetes does, so that
``["a"].sum()`` is a compile error and ``[1.5].sum()`` is a double. Element
comparison follows CEL rather than Python: a bool is never equal to a number.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, Final

from dra_driver.cel.library import CelFunctionError, Function, Library, Overload

# Element types whose values have an order.
_COMPARABLE: Final = ("int", "uint", "double", "bool", "string", "bytes", "duration", "timestamp")
_SUMMABLE: Final = ("int", "uint", "double", "duration")

_ZERO: Final[dict[str, object]] = {
    "int": 0,
    "uint": 0,
    "double": 0.0,
    "duration": datetime.timedelta(0),
}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def cel_equal(a: object, b: object) -> bool:
    """CEL equality: numbers compare across int/uint/double; bools only equal bools."""
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(cel_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _less(a: Any, b: Any) -> bool:
    try:
        return bool(a < b)
    except TypeError:
        raise CelFunctionError("list elements cannot be compared with each other") from None


def _is_sorted(items: list[Any]) -> bool:
    return all(not _less(items[i + 1], items[i]) for i in range(len(items) - 1))


def _sum_of(zero: object) -> Callable[[list[Any]], object]:
    def total(items: list[Any]) -> object:
        result: Any = zero
        for item in items:
            result = result + item
        return result

    return total


def _extreme(name: str, better: Callable[[Any, Any], bool]) -> Callable[[list[Any]], object]:
    def pick(items: list[Any]) -> object:
        if not items:
            raise CelFunctionError(f"{name} called on an empty list")
        best = items[0]
        for item in items[1:]:
            if better(item, best):
                best = item
        return best

    return pick


def _index_of(items: list[Any], wanted: object) -> int:
    for index, item in enumerate(items):
        if cel_equal(item, wanted):
            return index
    return -1


def _last_index_of(items: list[Any], wanted: object) -> int:
    for index in range(len(items) - 1, -1, -1):
        if cel_equal(items[index], wanted):
            return index
    return -1


def _per_type(
    name: str, element_types: tuple[str, ...], result: Callable[[str], str], impl: Any, *extra: str
) -> Function:
    """One overload per element type; ``"T"`` in ``extra`` stands for the element type."""
    overloads = tuple(
        Overload(
            f"list_{t}_{name}",
            (f"list({t})", *(t if p == "T" else p for p in extra)),
            result(t),
            impl,
            member=True,
        )
        for t in element_types
    )
    return Function(name, overloads)


_min = _extreme("min", _less)
_max = _extreme("max", lambda a, b: _less(b, a))

LISTS_LIBRARY: Final = Library(
    name="lists",
    functions=(
        _per_type("isSorted", _COMPARABLE, lambda t: "bool", _is_sorted),
        Function(
            "sum",
            tuple(
                Overload(f"list_{t}_sum", (f"list({t})",), t, _sum_of(_ZERO[t]), member=True)
                for t in _SUMMABLE
            ),
        ),
        _per_type("min", _COMPARABLE, lambda t: t, _min),
        _per_type("max", _COMPARABLE, lambda t: t, _max),
        _per_type("indexOf", _COMPARABLE, lambda t: "int", _index_of, "T"),
        _per_type("lastIndexOf", _COMPARABLE, lambda t: "int", _last_index_of, "T"),
    ),
)
