"""ResourceClaims, ResourceClaimTemplates and DeviceClasses of resource.k8s.io/v1:
`ValidateResourceClaim`, `ValidateResourceClaimTemplate` and `ValidateDeviceClass` of
`pkg/apis/resource/validation/validation.go`, with what they call: `validateDeviceRequest`
(exactly one of `exactly`/`firstAvailable`), `validateDeviceAllocationMode` (counts),
`validateSelectorSlice`, `validateDeviceConstraint`, `validateDeviceClaimConfiguration` and the
size limits of `pkg/apis/resource/types.go`.

CEL expressions are checked for presence and length, and type-checked as `validateCELSelector`
does (`dra_driver.cel.environment.validation_problem`); their cost is the allocator's to bound
(it compiles every selector once, with the same environment).
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Sequence
from typing import Any

from dra_driver.cel.environment import validation_problem
from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import (
    FieldError,
    duplicate,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from dra_driver.validation.meta import validate_meta
from dra_driver.validation.names import dns1123_label, dns1123_subdomain
from dra_driver.validation.quantities import decode_quantity, nonnegative
from dra_driver.validation.resources import is_extended

DEVICE_REQUESTS_MAX = 32
FIRST_AVAILABLE_MAX = 8
SELECTORS_MAX = 32
CONSTRAINTS_MAX = 32
CONFIG_MAX = 32
ALLOCATION_RESULTS_MAX = 32
CEL_EXPRESSION_MAX = 10 * 1024
OPAQUE_PARAMETERS_MAX = 10 * 1024
DRIVER_NAME_MAX = 63
ATTRIBUTE_DOMAIN_MAX = 63
ATTRIBUTE_ID_MAX = 32
MODES = ("All", "ExactCount")

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_claim(claim: Obj, old: Obj | None = None) -> list[FieldError]:
    errors = validate_meta(claim, True, dns1123_subdomain)
    spec = decoding.mapping(claim, "spec", "spec")
    if old is not None and spec != decoding.mapping(old, "spec", "spec"):
        # ValidateResourceClaimUpdate: the spec is immutable, and only that is reported.
        return [*errors, invalid("spec", "", "field is immutable")]
    return errors + claim_spec(spec, "spec")


def validate_template(template: Obj, old: Obj | None = None) -> list[FieldError]:
    errors = validate_meta(template, True, dns1123_subdomain)
    spec = decoding.mapping(template, "spec", "spec")
    if old is not None and spec != decoding.mapping(old, "spec", "spec"):
        return [*errors, invalid("spec", "", "field is immutable")]
    return errors + claim_spec(decoding.mapping(spec, "spec", "spec.spec"), "spec.spec")


def validate_device_class(device_class: Obj, old: Obj | None = None) -> list[FieldError]:
    del old  # a class's spec may change
    errors = validate_meta(device_class, False, dns1123_subdomain)
    spec = decoding.mapping(device_class, "spec", "spec")
    errors += _selectors(spec, "spec.selectors")
    config = decoding.items(spec, "config", "spec.config")
    errors += _size(config, CONFIG_MAX, "spec.config")
    for index, raw in enumerate(config):
        where = f"spec.config[{index}]"
        errors += _opaque(decoding.item_mapping(raw, where), where)
    extended = decoding.string(spec, "extendedResourceName", "spec.extendedResourceName")
    if extended and not is_extended(extended):
        errors.append(
            invalid(
                "spec.extendedResourceName",
                extended,
                "must be a valid extended resource name",
            )
        )
    return errors


def claim_spec(spec: Obj, field: str) -> list[FieldError]:
    devices = decoding.mapping(spec, "devices", f"{field}.devices")
    field = f"{field}.devices"
    errors: list[FieldError] = []
    requests = decoding.items(devices, "requests", f"{field}.requests")
    errors += _size(requests, DEVICE_REQUESTS_MAX, f"{field}.requests")
    names: dict[str, set[str]] = {}
    for index, raw in enumerate(requests):
        where = f"{field}.requests[{index}]"
        request, name, problems = _named_item(raw, where, names)
        errors += problems
        subs, problems = _request(request, where)
        names[name] = subs
        errors += problems
    constraints = decoding.items(devices, "constraints", f"{field}.constraints")
    errors += _size(constraints, CONSTRAINTS_MAX, f"{field}.constraints")
    for index, raw in enumerate(constraints):
        where = f"{field}.constraints[{index}]"
        errors += _constraint(decoding.item_mapping(raw, where), names, where)
    config = decoding.items(devices, "config", f"{field}.config")
    errors += _size(config, CONFIG_MAX, f"{field}.config")
    for index, raw in enumerate(config):
        where = f"{field}.config[{index}]"
        entry = decoding.item_mapping(raw, where)
        errors += _request_refs(entry, names, f"{where}.requests")
        errors += _opaque(entry, where)
    return errors


def _request(request: Obj, field: str) -> tuple[set[str], list[FieldError]]:
    """`validateDeviceRequest`: the subrequest names, and the problems."""
    exactly = request.get("exactly")
    first = decoding.items(request, "firstAvailable", f"{field}.firstAvailable")
    if exactly is not None and first:
        return set(), [
            invalid(
                field,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields "
                "are set",
            )
        ]
    if exactly is None and not first:
        return set(), [required(field, "exactly one of `exactly` or `firstAvailable` is required")]
    if exactly is not None:
        where = f"{field}.exactly"
        return set(), _exact(decoding.item_mapping(exactly, where), where)
    errors = _size(first, FIRST_AVAILABLE_MAX, f"{field}.firstAvailable")
    subs: set[str] = set()
    for index, raw in enumerate(first):
        where = f"{field}.firstAvailable[{index}]"
        sub, name, problems = _named_item(raw, where, subs)
        errors += problems
        subs.add(name)
        errors += _exact(sub, where)
    return subs, errors


def _named_item(raw: object, where: str, seen: Container[str]) -> tuple[Obj, str, list[FieldError]]:
    """A request or subrequest: the object, its DNS-label name, and what is wrong with the name
    (invalid, or already used by an earlier item of the same list)."""
    item = decoding.item_mapping(raw, where)
    name = decoding.string(item, "name", f"{where}.name")
    errors = _name(name, f"{where}.name", dns1123_label)
    if name in seen:
        errors.append(duplicate(where, name))
    return item, name, errors


def _exact(request: Obj, field: str) -> list[FieldError]:
    """`validateExactDeviceRequest` / `validateDeviceSubRequest` and the allocation mode."""
    class_name = decoding.string(request, "deviceClassName", f"{field}.deviceClassName")
    errors = _name(class_name, f"{field}.deviceClassName", dns1123_subdomain)
    errors += _selectors(request, f"{field}.selectors")
    mode = decoding.string(request, "allocationMode", f"{field}.allocationMode") or "ExactCount"
    count = decoding.integer(request, "count", f"{field}.count")
    if mode == "All":
        if count:
            errors.append(
                invalid(
                    f"{field}.count", count, "must not be specified when allocationMode is 'All'"
                )
            )
    elif mode == "ExactCount":
        if count is not None and count <= 0:
            errors.append(invalid(f"{field}.count", count, "must be greater than zero"))
    else:
        errors.append(not_supported(f"{field}.allocationMode", mode, MODES))
    decoding.boolean(request, "adminAccess", f"{field}.adminAccess")
    capacity = decoding.mapping(request, "capacity", f"{field}.capacity")
    requests = decoding.mapping(capacity, "requests", f"{field}.capacity.requests")
    for name, raw in requests.items():
        where = f"{field}.capacity.requests[{name}]"
        errors += nonnegative(raw, decode_quantity(raw, where), where)
    return errors


def _selectors(parent: Obj, field: str) -> list[FieldError]:
    selectors = decoding.items(parent, "selectors", field)
    errors = _size(selectors, SELECTORS_MAX, field)
    for index, raw in enumerate(selectors):
        where = f"{field}[{index}]"
        selector = decoding.item_mapping(raw, where)
        if selector.get("cel") is None:
            errors.append(required(f"{where}.cel"))
            continue
        cel = decoding.mapping(selector, "cel", f"{where}.cel")
        expression = decoding.string(cel, "expression", f"{where}.cel.expression")
        if not expression.strip():
            errors.append(required(f"{where}.cel.expression"))
        elif len(expression) > CEL_EXPRESSION_MAX:
            errors.append(too_long(f"{where}.cel.expression", CEL_EXPRESSION_MAX))
        else:
            problem = validation_problem(expression)
            if problem is not None:
                errors.append(invalid(f"{where}.cel.expression", expression, problem))
    return errors


def _constraint(constraint: Obj, names: dict[str, set[str]], field: str) -> list[FieldError]:
    errors = _request_refs(constraint, names, f"{field}.requests")
    match = decoding.string(constraint, "matchAttribute", f"{field}.matchAttribute")
    distinct = decoding.string(constraint, "distinctAttribute", f"{field}.distinctAttribute")
    if match and distinct:
        errors.append(
            invalid(
                field,
                None,
                "exactly one of `matchAttribute` or `distinctAttribute` is required, but "
                "multiple fields are set",
            )
        )
    elif match:
        errors += _attribute(match, f"{field}.matchAttribute")
    elif distinct:
        errors += _attribute(distinct, f"{field}.distinctAttribute")
    else:
        errors.append(
            required(field, "exactly one of `matchAttribute` or `distinctAttribute` is required")
        )
    return errors


def _request_refs(entry: Obj, names: dict[str, set[str]], field: str) -> list[FieldError]:
    """A list of request names (or `request/subrequest`) that must exist in the claim."""
    refs = decoding.items(entry, "requests", field)
    errors = _size(refs, DEVICE_REQUESTS_MAX, field)
    seen: set[str] = set()
    for index, raw in enumerate(refs):
        where = f"{field}[{index}]"
        ref = decoding.string_item(raw, where)
        if ref in seen:
            errors.append(duplicate(where, ref))
        seen.add(ref)
        request, _, sub = ref.partition("/")
        known = request in names and (not sub or sub in names[request]) and ref.count("/") < 2
        if not known:
            errors.append(
                invalid(
                    where,
                    ref,
                    "must be the name of a request in the claim or the name of a request and a "
                    "subrequest separated by '/'",
                )
            )
    return errors


def _attribute(name: str, field: str) -> list[FieldError]:
    """`validateFullyQualifiedName`: a DNS-subdomain domain, '/', and a C identifier."""
    domain, slash, ident = name.partition("/")
    if not slash:
        return [
            required(
                field, "a fully qualified name must be a domain and a name separated by a slash"
            )
        ]
    errors: list[FieldError] = []
    if len(domain) > ATTRIBUTE_DOMAIN_MAX:
        errors.append(too_long(field, ATTRIBUTE_DOMAIN_MAX))
    errors += [invalid(field, domain, p) for p in dns1123_subdomain(domain)]
    if len(ident) > ATTRIBUTE_ID_MAX:
        errors.append(too_long(field, ATTRIBUTE_ID_MAX))
    if not _C_IDENTIFIER.fullmatch(ident):
        errors.append(
            invalid(
                field,
                ident,
                "a valid C identifier must start with alphabetic character or '_', followed by "
                "a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or "
                "'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')",
            )
        )
    return errors


def _opaque(entry: Obj, field: str) -> list[FieldError]:
    """`validateDeviceConfiguration`: an opaque entry with a driver and JSON parameters."""
    if entry.get("opaque") is None:
        return [required(f"{field}.opaque")]
    where = f"{field}.opaque"
    opaque = decoding.mapping(entry, "opaque", where)
    driver = decoding.string(opaque, "driver", f"{where}.driver")
    errors = _name(driver, f"{where}.driver", driver_name)
    parameters = opaque.get("parameters")
    if parameters is None:
        errors.append(required(f"{where}.parameters"))
    elif not isinstance(parameters, dict):
        errors.append(
            invalid(
                f"{where}.parameters", "<value omitted>", "parameters must be a valid JSON object"
            )
        )
    elif len(json.dumps(parameters, separators=(",", ":"))) > OPAQUE_PARAMETERS_MAX:
        errors.append(too_long(f"{where}.parameters", OPAQUE_PARAMETERS_MAX))
    return errors


def driver_name(name: str) -> list[str]:
    """`ValidateCSIDriverName`: a lowercase DNS subdomain of at most 63 characters."""
    problems = []
    if len(name) > DRIVER_NAME_MAX:
        problems.append(f"must be no more than {DRIVER_NAME_MAX} characters")
    return problems + dns1123_subdomain(name.lower())


def _name(value: str, field: str, check: Any) -> list[FieldError]:
    if not value:
        return [required(field)]
    return [invalid(field, value, p) for p in check(value)]


def _size(values: Sequence[Any], limit: int, field: str) -> list[FieldError]:
    return [too_many(field, len(values), limit)] if len(values) > limit else []
