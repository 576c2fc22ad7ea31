"""`metav1.Condition` lists: `ValidateConditions` and `ValidateCondition` of
`k8s.io/apimachinery/pkg/apis/meta/v1/validation`.

A kubelet plugin writes its device conditions (`Idle`, `Ready`) into a claim's
`status.devices[].conditions`; kube-apiserver holds each to these rules, so a condition our
writer gets wrong (a reason with a space, no `lastTransitionTime`) must fail here as it would
there. A `lastTransitionTime` that is not RFC 3339 does not even decode (400 BadRequest).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dra_driver.validation import decoding
from dra_driver.validation.field_errors import (
    FieldError,
    UndecodableError,
    duplicate,
    invalid,
    not_supported,
    required,
    too_long,
)
from dra_driver.validation.names import qualified_name

STATUSES = ("False", "True", "Unknown")  # sorted, as upstream lists them in the message
REASON_MAX = 1024
MESSAGE_MAX = 32 * 1024

_REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_REASON_RE = re.compile(_REASON_FMT)
_REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' "
    "(e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or "
    f"'ReasonA:ReasonB', regex used for validation is '{_REASON_FMT}')"
)
#: `metav1.Time`'s zero value, which `IsZero` reports as unset like an absent time.
_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def validate_conditions(conditions: Sequence[Any], field: str) -> list[FieldError]:
    """Every condition's own rules, and no condition type twice (`ValidateConditions`)."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, raw in enumerate(conditions):
        where = f"{field}[{index}]"
        condition = decoding.item_mapping(raw, where)
        kind = decoding.string(condition, "type", f"{where}.type")
        if kind in seen:
            errors.append(duplicate(where, kind))
        seen.add(kind)
        errors += _condition(condition, kind, where)
    return errors


def _condition(condition: decoding.Obj, kind: str, field: str) -> list[FieldError]:
    """`ValidateCondition`: type, status, observedGeneration, lastTransitionTime, reason,
    message, in upstream's order."""
    errors = [invalid(f"{field}.type", kind, p) for p in qualified_name(kind)]
    status = decoding.string(condition, "status", f"{field}.status")
    if status not in STATUSES:
        errors.append(not_supported(f"{field}.status", status, STATUSES))
    generation = decoding.integer(condition, "observedGeneration", f"{field}.observedGeneration")
    if generation is not None and generation < 0:
        errors.append(
            invalid(
                f"{field}.observedGeneration", generation, "must be greater than or equal to zero"
            )
        )
    if not _transition_time(condition, f"{field}.lastTransitionTime"):
        errors.append(required(f"{field}.lastTransitionTime"))
    reason = decoding.string(condition, "reason", f"{field}.reason")
    if not reason:
        errors.append(required(f"{field}.reason"))
    else:
        if not _REASON_RE.fullmatch(reason):
            errors.append(invalid(f"{field}.reason", reason, _REASON_MSG))
        if len(reason) > REASON_MAX:
            errors.append(too_long(f"{field}.reason", REASON_MAX))
    message = decoding.string(condition, "message", f"{field}.message")
    if len(message.encode()) > MESSAGE_MAX:
        errors.append(too_long(f"{field}.message", MESSAGE_MAX))
    return errors


def _transition_time(condition: decoding.Obj, field: str) -> bool:
    """Whether the condition has a time at all (absent and null decode to the zero time, which
    counts as unset). One that is not RFC 3339 fails to decode, as `metav1.Time` does."""
    value = condition.get("lastTransitionTime")
    if value is None:
        return False
    text = decoding.string(condition, "lastTransitionTime", field)
    if _RFC3339.fullmatch(text):
        try:
            moment = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return moment != _ZERO_TIME
    raise UndecodableError(
        field, value, f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse'
    )
