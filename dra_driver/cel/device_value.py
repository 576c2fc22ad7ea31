"""The ``device`` variable: one ResourceSlice device turned into CEL values once.

A scheduler-like caller evaluates many selectors against the same device, so
the conversion (parsing quantities and versions, splitting qualified names)
happens here once and the result is reused, including the runtime's own
converted copy (the activation), which is cached per runtime and thread.

Inputs are checked against the limits the Kubernetes API server enforces on
ResourceSlices (at most 32 attributes and capacities together, strings of at
most 64 characters, ...). Besides catching malformed slices early, this keeps
the static cost bound in ``cost.py`` honest: it assumes exactly these limits.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from api.errors import ConfigError
from dra_driver.cel.quantity_lib import parse_value, quantity_message
from dra_driver.cel.semver_lib import parse_semver, semver_message
from dra_driver.cel.value_types import QUANTITY_TYPE

DRIVER_VAR: Final = "device.driver"
ATTRIBUTES_VAR: Final = "device.attributes"
CAPACITY_VAR: Final = "device.capacity"
MULTI_ALLOCATION_VAR: Final = "device.allowMultipleAllocations"

# Declared as separate qualified variables so that the type checker knows each
# field's type, as it does in Kubernetes where ``device`` is an object type.
VARIABLE_TYPES: Final[dict[str, str]] = {
    DRIVER_VAR: "string",
    MULTI_ALLOCATION_VAR: "bool",
    ATTRIBUTES_VAR: "map(string, map(string, dyn))",
    CAPACITY_VAR: f"map(string, map(string, {QUANTITY_TYPE}))",
}

# resource.k8s.io/v1 validation limits.
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_DOMAIN_LENGTH: Final = 63
MAX_ID_LENGTH: Final = 32
MAX_DRIVER_NAME_LENGTH: Final = 63
MAX_VALUE_LENGTH: Final = 64

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_FIELDS: Final = ("int", "bool", "string", "version")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


@dataclass(eq=False)
class DeviceVariable:
    """A prepared ``device`` value; build it once per device and evaluate many selectors.

    Safe to share between threads. The runtime's converted copy (its
    "activation") is tied to the thread that made it: used from another
    thread, calls into Python functions fail inside the runtime ("No
    PyCelArena found"), so each thread gets its own, made on first use.
    """

    driver: str
    data: Mapping[str, object]
    _per_thread: threading.local = field(default_factory=threading.local, repr=False)

    def activation_for(self, runtime: object, build: Callable[[Mapping[str, object]], Any]) -> Any:
        """This thread's runtime copy of the device for ``runtime``, built by ``build``."""
        activations: dict[object, Any] | None = getattr(self._per_thread, "activations", None)
        if activations is None:
            activations = {}
            self._per_thread.activations = activations
        activation = activations.get(runtime)
        if activation is None:
            activation = build(self.data)
            activations[runtime] = activation
        return activation


def _check_dns_subdomain(text: str, what: str, limit: int) -> None:
    if not text or len(text) > limit or not _DNS_SUBDOMAIN.fullmatch(text):
        raise ValueError(
            f"{what} {text!r} must be a DNS subdomain of at most {limit} characters "
            "(lower-case letters, digits, '-' and '.')"
        )


_CONVERTED_KEPT: Final = 65_536
_converted: dict[tuple[str, str, str], object] = {}
"""(kind, name, repr of the JSON value) → converted value. A cluster publishes a few hundred
distinct attribute and capacity values over 100,000 devices; quantities and versions are
parsed once rather than once per device. Only successful conversions are kept (a failure is
raised again, in its own words, each time); the values are never mutated, so sharing is safe."""


def _convert(kind: str, convert: Callable[[str, object], object], name: str, raw: object) -> object:
    key = (kind, name, repr(raw))
    found = _converted.get(key)
    if found is None:
        found = convert(name, raw)
        if len(_converted) >= _CONVERTED_KEPT:
            _converted.clear()
        _converted[key] = found
    return found


_split_seen: dict[tuple[str, str, str], tuple[str, str]] = {}


def _split_name(name: object, driver: str, kind: str) -> tuple[str, str]:
    """Domain and id of a qualified name; a bare id belongs to the driver's domain."""
    if isinstance(name, str):
        found = _split_seen.get((name, driver, kind))
        if found is not None:
            return found
        found = _split_checked(name, driver, kind)
        if len(_split_seen) >= _CONVERTED_KEPT:
            _split_seen.clear()
        _split_seen[(name, driver, kind)] = found
        return found
    return _split_checked(name, driver, kind)


def _split_checked(name: object, driver: str, kind: str) -> tuple[str, str]:
    if not isinstance(name, str):
        raise ValueError(f"{kind} name {name!r} must be a string")
    domain, slash, identifier = name.rpartition("/")
    if not slash:
        domain = driver
    else:
        _check_dns_subdomain(domain, f"{kind} {name!r}: domain", MAX_DOMAIN_LENGTH)
    if len(identifier) > MAX_ID_LENGTH or not _C_IDENTIFIER.fullmatch(identifier):
        raise ValueError(
            f"{kind} {name!r}: the name must be a C identifier of at most "
            f"{MAX_ID_LENGTH} characters, optionally after a domain and '/'"
        )
    return domain, identifier


def _attribute_value(name: str, attribute: object) -> object:
    if not isinstance(attribute, Mapping):
        raise ValueError(f"attribute {name!r} must be an object with one value field")
    present = [key for key in attribute if attribute[key] is not None]
    unknown = [key for key in present if key not in _VALUE_FIELDS]
    if unknown:
        raise ValueError(
            f"attribute {name!r} has unsupported field {unknown[0]!r}; "
            f"expected exactly one of {', '.join(_VALUE_FIELDS)}"
        )
    if len(present) != 1:
        found = ", ".join(present) if present else "none"
        raise ValueError(
            f"attribute {name!r} must have exactly one of {', '.join(_VALUE_FIELDS)} "
            f"(found {found})"
        )
    kind = present[0]
    value = attribute[kind]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"attribute {name!r}: bool value must be true or false")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"attribute {name!r}: int value must be an integer")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"attribute {name!r}: int value {value} does not fit in 64 bits")
        return value
    if not isinstance(value, str):
        raise ValueError(f"attribute {name!r}: {kind} value must be a string")
    if len(value) > MAX_VALUE_LENGTH:
        raise ValueError(
            f"attribute {name!r}: {kind} value is longer than {MAX_VALUE_LENGTH} characters"
        )
    if kind == "string":
        return value
    try:
        return semver_message(parse_semver(value))
    except ValueError as failure:
        raise ValueError(f"attribute {name!r}: {failure}") from None


def _capacity_value(name: str, capacity: object) -> object:
    if not isinstance(capacity, Mapping) or "value" not in capacity:
        raise ValueError(f"capacity {name!r} must be an object with a quantity in 'value'")
    raw = capacity["value"]
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str):
        raise ValueError(f'capacity {name!r}: value must be a quantity string such as "80Gi"')
    try:
        return quantity_message(parse_value(raw, f"capacity {name!r}"))
    except ConfigError as failure:
        raise ValueError(str(failure)) from None


def _group(
    entries: object, driver: str, kind: str, convert: Any
) -> tuple[dict[str, dict[str, object]], int]:
    if entries is None:
        return {}, 0
    if not isinstance(entries, Mapping):
        raise ValueError(f"device {kind}s must be an object keyed by name")
    grouped: dict[str, dict[str, object]] = {}
    for name, raw in entries.items():
        domain, identifier = _split_name(name, driver, kind)
        values = grouped.setdefault(domain, {})
        if identifier in values:
            raise ValueError(
                f"{kind} {name!r} repeats {domain}/{identifier}, which is already set "
                f"(a name without a domain belongs to the driver's domain {driver!r})"
            )
        values[identifier] = _convert(kind, convert, name, raw)
    return grouped, len(entries)


def device_variable(driver: str, device: Mapping[str, Any]) -> DeviceVariable:
    """Prepare one ``spec.devices[i]`` entry (camelCase JSON form) of a driver's ResourceSlice.

    Raises ValueError, naming the offending attribute or capacity, when the
    device would not pass Kubernetes' validation.
    """
    if not isinstance(driver, str):
        raise ValueError(f"driver name must be a string, got {type(driver).__name__}")
    _check_dns_subdomain(driver, "driver name", MAX_DRIVER_NAME_LENGTH)
    if not isinstance(device, Mapping):
        raise ValueError(f"device must be an object, got {type(device).__name__}")
    attributes, attribute_count = _group(
        device.get("attributes"), driver, "attribute", _attribute_value
    )
    capacity, capacity_count = _group(device.get("capacity"), driver, "capacity", _capacity_value)
    if attribute_count + capacity_count > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ValueError(
            f"device has {attribute_count} attributes and {capacity_count} capacities; "
            f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} together are allowed"
        )
    multi = device.get("allowMultipleAllocations")
    if multi is None:
        multi = False
    if not isinstance(multi, bool):
        raise ValueError("allowMultipleAllocations must be true or false")
    return DeviceVariable(
        driver=driver,
        data={
            DRIVER_VAR: driver,
            MULTI_ALLOCATION_VAR: multi,
            ATTRIBUTES_VAR: attributes,
            CAPACITY_VAR: capacity,
        },
    )
