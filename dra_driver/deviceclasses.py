"""The DeviceClasses that make each device shape requestable, for any driver name.

The Helm chart installs these classes and the embedded local cluster applies them before its
demo; both must agree to the byte, so this module is the one place that says what they are, and a
test renders the chart and compares its classes with :func:`device_classes`.

Naming rule: a class is ``<shape>.<domain>``, where the domain is the driver name without a
leading ``gpu.`` label. The default driver ``gpu.dra-driver.dev`` therefore gets
``gpu.dra-driver.dev`` (whole GPUs), ``mig.dra-driver.dev``, ``timeslice.dra-driver.dev`` and
``shared.dra-driver.dev``; a driver named ``gpu.example.com`` gets ``gpu.example.com``,
``mig.example.com``, ...; a driver named ``acme.example.com`` (no ``gpu.`` label to drop) gets
``gpu.acme.example.com``, ``mig.acme.example.com``, ... Two drivers with different names never
share a class name unless one is the other with ``gpu.`` in front.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME

API_VERSION: Final = "resource.k8s.io/v1"
SHAPES: Final = tuple(shape.value for shape in DeviceType)
"""Class order: the order the chart renders them in."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def class_domain(driver_name: str) -> str:
    """The part of every class name after ``<shape>.``; see the module docstring."""
    return driver_name.removeprefix("gpu.") or driver_name


def class_name(shape: str, driver_name: str = DEFAULT_DRIVER_NAME) -> str:
    """Name of the class that selects ``shape`` devices of ``driver_name``."""
    if shape not in SHAPES:
        raise ValueError(f"unknown device shape {shape!r}; choose from {', '.join(SHAPES)}")
    return f"{shape}.{class_domain(driver_name)}"


def selector(shape: str, driver_name: str) -> str:
    """The CEL selector of a shape's class: this driver's devices of that ``type`` attribute."""
    return (
        f'device.driver == "{driver_name}" && device.attributes["{driver_name}"].type == "{shape}"'
    )


def device_classes(
    driver_name: str = DEFAULT_DRIVER_NAME,
    shapes: Iterable[str] = SHAPES,
    extended_resource_names: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One DeviceClass per shape, in :data:`SHAPES` order.

    ``extended_resource_names`` maps a shape to an extended resource name (e.g. ``gpu`` to
    ``nvidia.com/gpu``): on clusters with the DRAExtendedResource feature, a container that asks
    for that resource in ``resources.limits`` is then served a device of the class.
    """
    if len(driver_name) > 63 or not _DNS_SUBDOMAIN.match(driver_name):
        raise ValueError(
            f"driver name {driver_name!r}: must be a DNS subdomain of at most 63 characters"
        )
    wanted = list(shapes)
    unknown = [s for s in wanted if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown device shape(s) {unknown}; choose from {', '.join(SHAPES)}")
    extended = dict(extended_resource_names or {})
    for shape, name in extended.items():
        if shape not in SHAPES:
            raise ValueError(f"extendedResourceNames: unknown device shape {shape!r}")
        if not _QUALIFIED_NAME.match(name):
            raise ValueError(f"extendedResourceNames.{shape}: {name!r} is not a resource name")
    classes: list[dict[str, Any]] = []
    for shape in SHAPES:
        if shape not in wanted:
            continue
        spec: dict[str, Any] = {
            "selectors": [{"cel": {"expression": selector(shape, driver_name)}}]
        }
        if extended.get(shape):
            spec["extendedResourceName"] = extended[shape]
        classes.append(
            {
                "apiVersion": API_VERSION,
                "kind": "DeviceClass",
                "metadata": {"name": class_name(shape, driver_name)},
                "spec": spec,
            }
        )
    return classes


__all__ = ["SHAPES", "class_domain", "class_name", "device_classes", "selector"]
