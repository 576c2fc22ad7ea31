"""Quantities as exact numbers, parsed once per distinct text.

A 500-node cluster publishes a few million counter and capacity values but only a few dozen
distinct texts ("1", "4", "80Gi"), so parsing goes through a cache; values stay exact so counter
sums never drift.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from api.errors import ConfigError
from api.quantity import parse_quantity
from dra_driver.allocator.errors import InputError
from dra_driver.slices.quantity import format_quantity

Number = int | Fraction


@lru_cache(maxsize=4096)
def _parse(text: str) -> Number:
    value = parse_quantity(text, "quantity").value
    return value.numerator if value.denominator == 1 else value


def quantity_value(raw: object, where: str) -> Number:
    """Value of a quantity given as text (or a plain number); an InputError names `where`."""
    if type(raw) is str:
        try:
            return _parse(raw)
        except ConfigError as err:
            problem = err.problems[0].message
            raise InputError(f"{where}: {raw!r} is not a quantity ({problem})") from None
    if isinstance(raw, bool):
        raise InputError(f"{where}: expected a quantity, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if not isinstance(raw, str):
        raise InputError(f"{where}: expected a quantity, got {raw!r}")
    try:
        return _parse(raw)
    except ConfigError as err:
        raise InputError(
            f"{where}: {raw!r} is not a quantity ({err.problems[0].message})"
        ) from None


def format_amount(value: Number) -> str:
    """Canonical text of a consumed amount: binary suffixes for whole numbers, milli-units else."""
    if isinstance(value, int):
        return format_quantity(value) if value >= 0 else str(value)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    # Not representable exactly in Kubernetes notation: round up, never under-report.
    return f"{-(-milli.numerator // milli.denominator)}m"
