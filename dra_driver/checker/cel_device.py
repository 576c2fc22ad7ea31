"""The checker's own reading of a slice device as the CEL ``device`` variable.

The allocator builds this value in ``dra_driver/cel/device_value.py``. If the checker used that
too, a misreading there (how a bare name is qualified, how a version or a quantity is read)
would make both agree on the wrong answer. So the checker reads the device itself, from the
Kubernetes rules: a name without a domain belongs to the driver's domain; an attribute holds
exactly one of ``int``, ``bool``, ``string`` and ``version``; a version is strict semver 2.0.0;
a capacity's ``value`` is a quantity. Only the carriers the CEL runtime needs (the quantity and
version messages, and the variable type the runtime evaluates) come from ``dra_driver.cel``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from api.errors import ConfigError
from api.quantity import parse_quantity
from dra_driver.cel import DeviceVariable
from dra_driver.cel.quantity_lib import quantity_message
from dra_driver.cel.semver_lib import Version, semver_message

# From semver.org: numbers without leading zeros, dot-separated pre-release identifiers, and
# build metadata (ignored for precedence).
_NUMBER = r"0|[1-9][0-9]*"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


class DeviceValueError(ValueError):
    """The device cannot become a CEL value; the checker reports it as the selector's error."""


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, slash, identifier = name.rpartition("/")
    return (domain, identifier) if slash else (driver, identifier)


def _version(text: str, name: str) -> Any:
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise DeviceValueError(f"attribute {name}: {text!r} is not a semantic version")
    pre = tuple(match["pre"].split(".")) if match["pre"] else ()
    return semver_message(
        Version(int(match["major"]), int(match["minor"]), int(match["patch"]), pre)
    )


def _attribute(name: str, raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        raise DeviceValueError(f"attribute {name} is not an object")
    fields = {k: v for k, v in raw.items() if v is not None}
    if len(fields) != 1 or next(iter(fields)) not in ("int", "bool", "string", "version"):
        raise DeviceValueError(f"attribute {name} must hold exactly one value")
    ((kind, value),) = fields.items()
    expected: type | tuple[type, ...] = {"int": int, "bool": bool}.get(kind, str)
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise DeviceValueError(f"attribute {name}: {kind} value {value!r} has the wrong type")
    return _version(str(value), name) if kind == "version" else value


def _quantity(name: str, raw: Any) -> Any:
    value = raw.get("value") if isinstance(raw, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return quantity_message(Fraction(value))
    if not isinstance(value, str):
        raise DeviceValueError(f"capacity {name} has no quantity value")
    try:
        return quantity_message(parse_quantity(value).value)
    except ConfigError as err:
        raise DeviceValueError(f"capacity {name}: {err}") from None


def _grouped(entries: Any, driver: str, read: Any) -> dict[str, dict[str, Any]]:
    grouped: dict[str, dict[str, Any]] = {}
    for name, raw in (entries or {}).items():
        domain, identifier = _qualified(str(name), driver)
        values = grouped.setdefault(domain, {})
        if identifier in values:
            raise DeviceValueError(f"{name} names {domain}/{identifier} a second time")
        values[identifier] = read(str(name), raw)
    return grouped


def checker_device_variable(driver: str, device: Mapping[str, Any]) -> DeviceVariable:
    """The ``device`` a selector sees for one ``spec.devices[]`` entry of ``driver``'s slice."""
    multiple = device.get("allowMultipleAllocations")
    return DeviceVariable(
        driver=driver,
        data={
            "device.driver": driver,
            "device.allowMultipleAllocations": bool(multiple),
            "device.attributes": _grouped(device.get("attributes"), driver, _attribute),
            "device.capacity": _grouped(device.get("capacity"), driver, _quantity),
        },
    )
