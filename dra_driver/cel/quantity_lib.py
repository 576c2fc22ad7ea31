"""Kubernetes' CEL quantity library over the project's own quantity grammar.

Capacities in a ResourceSlice are quantities ("80Gi"), and selectors compare
them with ``compareTo``/``isGreaterThan``/``isLessThan``. Parsing goes through
``api.quantity.parse_quantity`` so selectors, configuration and slices agree on
what a quantity is. Values are exact fractions, stored reduced in the message
so that the runtime's field-wise ``==`` is equality by value.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Final

from api.errors import ConfigError
from api.quantity import parse_quantity
from dra_driver.cel.library import CelFunctionError, Function, Library, Overload
from dra_driver.cel.value_types import QUANTITY_TYPE, QuantityMessage

_Q: Final = QUANTITY_TYPE
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


# Exponents are offset by this so that they print as fixed-width non-negative numbers.
_EXPONENT_BIAS: Final = 500_000


def order_key(value: Fraction) -> str:
    """A string whose byte order is the numeric order of quantities.

    Every quantity is a finite decimal (suffixes and exponents only multiply by
    powers of 2 and 10), so ``|value| = 0.DIGITS x 10^E`` with no trailing
    zeros in DIGITS. Positives sort by E, then digits; negatives reverse both,
    digits complemented and closed by a "~" so that a shorter magnitude sorts
    higher; zero sits between.
    """
    if value == 0:
        return "1"
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        raise ValueError(f"{value} is not a finite decimal")
    scale = max(twos, fives)
    digits = str(abs(value.numerator) * 10**scale // value.denominator)
    exponent = len(digits) - scale
    mantissa = digits.rstrip("0")
    if value > 0:
        return f"2{exponent + _EXPONENT_BIAS:06d}{mantissa}"
    complement = "".join(str(9 - int(d)) for d in mantissa)
    return f"0{_EXPONENT_BIAS - exponent:06d}{complement}~"


def quantity_message(value: Fraction) -> Any:
    """The canonical message for an exact value."""
    return QuantityMessage(
        numerator=str(value.numerator), denominator=str(value.denominator), key=order_key(value)
    )


@functools.lru_cache(maxsize=4096)
def _fraction(numerator: str, denominator: str) -> Fraction:
    return Fraction(int(numerator), int(denominator))


def fraction_of(message: Any) -> Fraction:
    return _fraction(message.numerator, message.denominator)


def parse_value(text: str, field: str = "quantity") -> Fraction:
    """Exact value of quantity text; raises ``api.errors.ConfigError`` naming ``field``."""
    return parse_quantity(text, field).value


def _quantity(text: str) -> Any:
    try:
        return quantity_message(parse_value(text))
    except ConfigError as failure:
        raise CelFunctionError(f"quantity: {failure.problems[0].reason}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_value(text)
    except ConfigError:
        return False
    return True


def _sign(q: Any) -> int:
    value = fraction_of(q)
    return (value > 0) - (value < 0)


def _fits_int64(value: Fraction) -> bool:
    return value.denominator == 1 and _INT64_MIN <= value.numerator <= _INT64_MAX


def _is_integer(q: Any) -> bool:
    return _fits_int64(fraction_of(q))


def _as_integer(q: Any) -> int:
    value = fraction_of(q)
    if not _fits_int64(value):
        raise CelFunctionError("cannot convert value to integer")
    return value.numerator


def _as_approximate_float(q: Any) -> float:
    try:
        return float(fraction_of(q))
    except OverflowError:
        raise CelFunctionError("quantity is too large for a double") from None


def _add(q: Any, other: Any) -> Any:
    addend = Fraction(other) if isinstance(other, int) else fraction_of(other)
    return quantity_message(fraction_of(q) + addend)


def _sub(q: Any, other: Any) -> Any:
    subtrahend = Fraction(other) if isinstance(other, int) else fraction_of(other)
    return quantity_message(fraction_of(q) - subtrahend)


def compare(a: Any, b: Any) -> int:
    left: str = a.key
    right: str = b.key
    return (left > right) - (left < right)


def _member(name: str, result: str, impl: Any, *params: str) -> Function:
    overload_id = f"quantity_{name}" + "".join(f"_{p.rsplit('.', 1)[-1].lower()}" for p in params)
    return Function(name, (Overload(overload_id, (_Q, *params), result, impl, member=True),))


QUANTITY_LIBRARY: Final = Library(
    name="quantity",
    functions=(
        Function("quantity", (Overload("string_to_quantity", ("string",), _Q, _quantity),)),
        Function(
            "isQuantity", (Overload("is_quantity_string", ("string",), "bool", _is_quantity),)
        ),
        _member("sign", "int", _sign),
        _member("isInteger", "bool", _is_integer),
        _member("asInteger", "int", _as_integer),
        _member("asApproximateFloat", "double", _as_approximate_float),
        Function(
            "add",
            (
                Overload("quantity_add_quantity", (_Q, _Q), _Q, _add, member=True),
                Overload("quantity_add_int", (_Q, "int"), _Q, _add, member=True),
            ),
        ),
        Function(
            "sub",
            (
                Overload("quantity_sub_quantity", (_Q, _Q), _Q, _sub, member=True),
                Overload("quantity_sub_int", (_Q, "int"), _Q, _sub, member=True),
            ),
        ),
        _member("compareTo", "int", compare, _Q),
        _member("isGreaterThan", "bool", lambda a, b: compare(a, b) > 0, _Q),
        _member("isLessThan", "bool", lambda a, b: compare(a, b) < 0, _Q),
    ),
)
