"""Device attributes and capacities in the resource.k8s.io/v1 wire shape.

Attribute names follow NVIDIA's driver so that a claim moves between the two drivers by changing
the domain only. Unqualified names live in the driver's domain; the PCI facts use the standard
`resource.kubernetes.io` names that other drivers and schedulers also understand.
"""

from __future__ import annotations

import re
from typing import Any

from api.device_type import DeviceType
from dra_driver.inventory.model import GpuInfo, MigProfile
from dra_driver.slices.quantity import format_quantity

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"

Attributes = dict[str, dict[str, Any]]
Capacities = dict[str, dict[str, Any]]

_NUMERIC = re.compile(r"^\d+$")


def to_semver(text: str, what: str) -> str:
    """Turn NVIDIA's dotted versions ("9.0", "580.65.06") into semver 2.0.0 ("580.65.6").

    The API server rejects a version attribute that is not strict semver, and a rejected field
    fails the whole slice write, so normalisation happens here rather than hoping for the best.
    """
    parts = text.strip().split(".")
    if not all(_NUMERIC.match(p) for p in parts):
        raise ValueError(f"{what}: {text!r} is not a dotted numeric version")
    numbers = [str(int(p)) for p in parts[:3]]
    numbers += ["0"] * (3 - len(numbers))
    version = ".".join(numbers)
    if len(parts) > 3:
        version += "+" + ".".join(str(int(p)) for p in parts[3:])
    return version


def string(value: str) -> dict[str, Any]:
    return {"string": value}


def integer(value: int) -> dict[str, Any]:
    return {"int": value}


def boolean(value: bool) -> dict[str, Any]:
    return {"bool": value}


def version(value: str) -> dict[str, Any]:
    return {"version": value}


def quantity(value: int) -> dict[str, Any]:
    return {"value": format_quantity(value)}


def parent_attributes(gpu: GpuInfo) -> Attributes:
    """What every device carved from `gpu` inherits, so selectors on product facts work for
    MIG devices and shares exactly as for whole GPUs."""
    attrs: Attributes = {
        "productName": string(gpu.product_name),
        "brand": string(gpu.brand),
        "architecture": string(gpu.architecture),
        "cudaComputeCapability": version(
            to_semver(gpu.cuda_compute_capability, f"GPU {gpu.minor} cudaComputeCapability")
        ),
        "driverVersion": version(to_semver(gpu.driver_version, f"GPU {gpu.minor} driverVersion")),
        "cudaDriverVersion": version(
            to_semver(gpu.cuda_driver_version, f"GPU {gpu.minor} cudaDriverVersion")
        ),
        PCI_BUS_ID: string(gpu.pci_bus_id),
        PCIE_ROOT: string(gpu.pcie_root),
    }
    if gpu.numa_node is not None:
        attrs["numaNode"] = integer(gpu.numa_node)
    return attrs


def whole_gpu_attributes(gpu: GpuInfo) -> Attributes:
    return {
        "type": string(DeviceType.GPU.value),
        "uuid": string(gpu.uuid),
        "migCapable": boolean(gpu.mig_capable),
        "nvlinkDomain": string(gpu.nvlink_domain),
        **parent_attributes(gpu),
    }


def whole_gpu_capacity(gpu: GpuInfo) -> Capacities:
    return {"memory": quantity(gpu.memory_bytes), "multiprocessors": quantity(gpu.multiprocessors)}


def mig_attributes(
    gpu: GpuInfo, profile: MigProfile, start: int, size: int, uuid: str | None
) -> Attributes:
    attrs: Attributes = {
        "type": string(DeviceType.MIG.value),
        "profile": string(profile.name),
        "parentUUID": string(gpu.uuid),
        "placementStart": integer(start),
        "placementSize": integer(size),
    }
    if uuid is not None:
        attrs["uuid"] = string(uuid)
    attrs.update(parent_attributes(gpu))
    return attrs


def mig_capacity(profile: MigProfile) -> Capacities:
    return {
        "memory": quantity(profile.memory_bytes),
        "multiprocessors": quantity(profile.multiprocessors),
        "copyEngines": quantity(profile.copy_engines),
        "decoders": quantity(profile.decoders),
        "encoders": quantity(profile.encoders),
        "jpegEngines": quantity(profile.jpeg_engines),
        "ofaEngines": quantity(profile.ofa_engines),
    }


def timeslice_attributes(gpu: GpuInfo, index: int) -> Attributes:
    return {
        "type": string(DeviceType.TIMESLICE.value),
        "parentUUID": string(gpu.uuid),
        "shareIndex": integer(index),
        **parent_attributes(gpu),
    }


def lent_attributes(gpu: GpuInfo) -> Attributes:
    return {
        "type": string(DeviceType.OPPORTUNISTIC.value),
        "parentUUID": string(gpu.uuid),
        **parent_attributes(gpu),
    }


def fractional_attributes(gpu: GpuInfo) -> Attributes:
    return {
        "type": string(DeviceType.SHARED.value),
        "parentUUID": string(gpu.uuid),
        **parent_attributes(gpu),
    }
