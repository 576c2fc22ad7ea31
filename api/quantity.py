"""Kubernetes resource quantities ("4Gi", "1.5e9", "500m") parsed exactly.

Memory limits in device configuration are written the way users write them
everywhere else in Kubernetes, so we accept the same notation. Values are
kept as exact fractions: "1.5Gi" is exactly 1610612736 bytes and "0.1" is
not silently rounded, which lets callers insist on whole bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fractions import Fraction

from api.errors import ConfigError, describe_json_value

BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}

DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}

# Far beyond any real quantity, and small enough that 10**exponent stays
# cheap: an exponent such as e999999999 would otherwise stall the parser.
MAX_EXPONENT = 100

# Again far beyond real values; it also keeps int() clear of Python's limit
# on converting very long digit strings.
MAX_DIGITS = 100

# ASCII digits only: Python's \d would also accept e.g. Arabic-Indic digits.
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)

_QUANTITY = re.compile(
    r"""
    (?P<sign>[+-])?
    (?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?
    (?:
        (?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)
      | [eE](?P<exponent>[+-]?[0-9]+)
    )?
    """,
    re.VERBOSE,
)

_SYNTAX_HINT = (
    "write digits with an optional sign and fraction, then optionally one suffix "
    "(Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E) or an exponent such as e6"
)


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: the text as written and its exact value."""

    text: str
    value: Fraction


@dataclass(frozen=True)
class ByteQuantity:
    """A non-negative whole number of bytes, remembering how it was written.

    The original text is kept so configuration can be written back exactly
    as the user gave it; ``num_bytes`` is what the driver acts on.
    """

    text: str
    num_bytes: int

    @classmethod
    def of(cls, num_bytes: int) -> ByteQuantity:
        """A quantity for a plain byte count, written as decimal digits."""
        return parse_byte_quantity(num_bytes)


def parse_quantity(text: str, field: str = "quantity") -> Quantity:
    """Parse Kubernetes quantity notation; raise ConfigError naming ``field``."""
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["whole"] or match["fraction"]):
        raise ConfigError.at(field, f"{json.dumps(text)} is not a quantity; {_SYNTAX_HINT}")
    fraction = (match["fraction"] or "").rstrip("0")
    digits = ((match["whole"] or "") + fraction).lstrip("0")
    if len(digits) > MAX_DIGITS:
        raise ConfigError.at(
            field,
            f"{json.dumps(_shorten(text))} has more than {MAX_DIGITS} significant digits",
        )
    value = Fraction(int(digits or "0"), 10 ** len(fraction))
    if match["suffix"] in BINARY_SUFFIXES:
        value *= BINARY_SUFFIXES[match["suffix"]]
    elif match["suffix"] in DECIMAL_SUFFIXES:
        value *= DECIMAL_SUFFIXES[match["suffix"]]
    elif match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > MAX_EXPONENT:
            raise ConfigError.at(
                field,
                f"the exponent in {json.dumps(text)} is out of range; "
                f"use an exponent between -{MAX_EXPONENT} and {MAX_EXPONENT}",
            )
        value *= Fraction(10) ** exponent
    if match["sign"] == "-":
        value = -value
    return Quantity(text=text, value=value)


def parse_byte_quantity(value: str | int, field: str = "quantity") -> ByteQuantity:
    """Accept a quantity string or a plain integer count of bytes.

    Booleans and floats are refused even though Python would treat them as
    numbers: in JSON they are a different type, and a float such as 1.5 has
    no exact byte count.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError.at(
            field,
            'must be a quantity string such as "4Gi" or an integer number of bytes, '
            f"got {describe_json_value(value)}",
        )
    if isinstance(value, int):
        if value < 0:
            raise ConfigError.at(field, f"must not be negative, got {value}")
        return ByteQuantity(text=str(value), num_bytes=value)
    amount = parse_quantity(value, field).value
    if amount < 0:
        raise ConfigError.at(field, f"must not be negative, got {json.dumps(value)}")
    if amount.denominator != 1:
        raise ConfigError.at(
            field,
            f"must be a whole number of bytes, got {json.dumps(value)} "
            f"(= {_fraction_text(amount)} bytes)",
        )
    return ByteQuantity(text=value, num_bytes=amount.numerator)


def _shorten(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:37]}..."


def _fraction_text(amount: Fraction) -> str:
    """Show a fractional byte count as an exact decimal when one exists."""
    twos = fives = 0
    rest = amount.denominator
    while rest % 2 == 0:
        rest //= 2
        twos += 1
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    if rest != 1:
        return f"{amount.numerator}/{amount.denominator}"
    places = max(twos, fives)
    scaled = abs(amount.numerator) * 10**places // amount.denominator
    whole, frac = divmod(scaled, 10**places)
    sign = "-" if amount < 0 else ""
    return f"{sign}{whole}.{frac:0{places}d}"
