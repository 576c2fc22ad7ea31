"""Resource quantities as kube-apiserver decodes and checks them.

Decoding is `resource.ParseQuantity` of `k8s.io/apimachinery/pkg/api/resource` (through the
project's exact parser, `api.quantity`): text that is no quantity fails decoding, so the answer
is 400 with upstream's message. A decoded quantity is then checked by
`ValidateNonnegativeQuantity` and, for integer resources, the whole-number rule of
`ValidateResourceQuantityValue` (`pkg/apis/core/validation`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from api.errors import ConfigError
from api.quantity import parse_quantity
from dra_driver.validation.decoding import json_type
from dra_driver.validation.field_errors import FieldError, UndecodableError, invalid

#: Upstream's decoding error for every quantity text it cannot parse.
QUANTITY_FORMAT_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


#: A quantity without digits (`Gi`, `-`, `.`, `e3`): `parseQuantityString` reads its missing
#: number as zero, so kube-apiserver stores `0` where `api.quantity` refuses the text...
_NO_DIGITS = re.compile(r"[+-]?\.?(?P<suffix>(?:[eEinumkKMGTP]+[-+]?[0-9]*)?)")
#: ...except where the suffix sends it down the slow path, which needs a number (`Pi`, `Ei`).
_UNREADABLE_WITHOUT_DIGITS = frozenset({"Pi", "Ei"})


def decode_quantity(raw: object, field: str) -> Fraction:
    """The exact value of a quantity written as text or a JSON number."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise UndecodableError(
            field, raw, f"cannot unmarshal {json_type(raw)} into {field} of type Quantity"
        )
    text = raw.strip() if isinstance(raw, str) else repr(raw)
    try:
        return parse_quantity(text, field).value
    except ConfigError:
        pass
    bare = _NO_DIGITS.fullmatch(text)
    if text and bare is not None and bare["suffix"] not in _UNREADABLE_WITHOUT_DIGITS:
        try:
            parse_quantity(f"0{bare['suffix']}", field)
        except ConfigError:
            pass
        else:
            return Fraction(0)
    raise UndecodableError(field, raw, QUANTITY_FORMAT_MESSAGE) from None


def shown(raw: object) -> str:
    """A quantity as messages show it: the text given (upstream shows its canonical form)."""
    return raw.strip() if isinstance(raw, str) else str(raw)


def nonnegative(raw: object, value: Fraction, field: str) -> list[FieldError]:
    if value < 0:
        return [invalid(field, shown(raw), "must be greater than or equal to 0")]
    return []


def whole(raw: object, value: Fraction, field: str) -> list[FieldError]:
    if value.denominator != 1:
        return [invalid(field, shown(raw), "must be an integer")]
    return []
