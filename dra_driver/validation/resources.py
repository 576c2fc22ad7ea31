"""Container resource requirements: `ValidateResourceRequirements`, `validateContainerResourceName`,
`ValidateResourceQuantityValue` and `validateResourceClaimNames` of
`pkg/apis/core/validation/validation.go`, and the resource-name classes of
`pkg/apis/core/helper` (`IsNativeResource`, `IsExtendedResourceName`, `IsOvercommitAllowed`)."""

from __future__ import annotations

from collections.abc import Set
from fractions import Fraction

from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_found,
    required,
)
from dra_driver.validation.names import dns1123_label, qualified_name
from dra_driver.validation.quantities import decode_quantity, nonnegative, shown, whole

_STANDARD_CONTAINER = frozenset({"cpu", "memory", "ephemeral-storage"})
HUGEPAGES_PREFIX = "hugepages-"


def is_native(name: str) -> bool:
    """No domain, or the `kubernetes.io` one."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """A domain-qualified name outside `kubernetes.io` (e.g. `nvidia.com/gpu`)."""
    if is_native(name) or name.startswith("requests."):
        return False
    return not qualified_name("requests." + name)


def overcommit_allowed(name: str) -> bool:
    return is_native(name) and not name.startswith(HUGEPAGES_PREFIX)


def is_integer_resource(name: str) -> bool:
    return is_extended(name)


def resource_name(name: str, field: str) -> list[FieldError]:
    errors = [invalid(field, name, p) for p in qualified_name(name)]
    if "/" not in name:
        if name not in _STANDARD_CONTAINER and not name.startswith(HUGEPAGES_PREFIX):
            errors.append(invalid(field, name, "must be a standard resource for containers"))
    elif not is_native(name) and not is_extended(name):
        errors.append(invalid(field, name, "doesn't follow extended resource name standard"))
    return errors


def quantity_value(name: str, raw: object, field: str) -> tuple[Fraction, list[FieldError]]:
    value = decode_quantity(raw, field)
    errors = nonnegative(raw, value, field)
    if is_integer_resource(name):
        errors += whole(raw, value, field)
    return value, errors


def resource_list(items: Obj, field: str) -> dict[str, tuple[object, Fraction, list[FieldError]]]:
    """Each entry decoded and checked: name → (as written, value, problems)."""
    out: dict[str, tuple[object, Fraction, list[FieldError]]] = {}
    for name, raw in items.items():
        where = f"{field}[{name}]"
        value, errors = quantity_value(str(name), raw, where)
        out[str(name)] = (raw, value, resource_name(str(name), where) + errors)
    return out


def requirements(resources: Obj, claim_names: Set[str], field: str) -> list[FieldError]:
    limits_field, requests_field = f"{field}.limits", f"{field}.requests"
    limits = resource_list(decoding.mapping(resources, "limits", limits_field), limits_field)
    requests = resource_list(
        decoding.mapping(resources, "requests", requests_field), requests_field
    )
    errors: list[FieldError] = []
    for _, _, problems in limits.values():
        errors += problems
    for name, (raw, value, problems) in requests.items():
        errors += problems
        if name in limits:
            limit_raw, limit, _ = limits[name]
            if value != limit and not overcommit_allowed(name):
                errors.append(
                    invalid(
                        requests_field,
                        shown(raw),
                        f"must be equal to {name} limit of {shown(limit_raw)}",
                    )
                )
            elif value > limit:
                errors.append(
                    invalid(
                        requests_field,
                        shown(raw),
                        f"must be less than or equal to {name} limit of {shown(limit_raw)}",
                    )
                )
        elif not overcommit_allowed(name):
            errors.append(
                required(limits_field, "Limit must be set for non overcommitable resources")
            )
    named = set(limits) | set(requests)
    if any(n.startswith(HUGEPAGES_PREFIX) for n in named) and not named & {"cpu", "memory"}:
        errors.append(forbidden(field, "HugePages require cpu or memory"))
    errors += claim_references(resources, claim_names, f"{field}.claims")
    return errors


def claim_references(resources: Obj, claim_names: Set[str], field: str) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, raw in enumerate(decoding.items(resources, "claims", field)):
        where = f"{field}[{index}]"
        claim = decoding.item_mapping(raw, where)
        name = decoding.string(claim, "name", f"{where}.name")
        if not name:
            errors.append(required(where))
            continue
        key = name
        request = decoding.string(claim, "request", f"{where}.request")
        if request:
            errors += [invalid(f"{where}.request", request, p) for p in dns1123_label(request)]
            key = f"{name}/{request}"
        if key in seen:
            errors.append(duplicate(where, key))
        seen.add(key)
        if name not in claim_names:
            listed = ": " + ", ".join(sorted(claim_names)) if claim_names else " which is empty"
            errors.append(
                not_found(
                    where, name, f"must be one of the names in pod.spec.resourceClaims{listed}"
                )
            )
    return errors
