from __future__ import annotations

from typing import Any

import pytest

from dra_driver.cel import CelEnvironment, DeviceVariable, device_variable

DRIVER = "gpu.dra-driver.dev"


def h100_device() -> dict[str, Any]:
    """A whole GPU as the slice builder publishes it (resource.k8s.io/v1, camelCase)."""
    return {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "architecture": {"string": "Hopper"},
            "driverVersion": {"version": "580.95.5"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "numaNode": {"int": 0},
            "migCapable": {"bool": True},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:08:00.0"},
        },
        "capacity": {
            "memory": {"value": "80Gi"},
            "multiprocessors": {"value": "132"},
            "compute": {"value": "100", "requestPolicy": {"default": "10"}},
        },
        "allowMultipleAllocations": True,
    }


def mig_device() -> dict[str, Any]:
    return {
        "name": "gpu-0-mig-1g10gb-0",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": "1g.10gb"},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            "driverVersion": {"version": "550.54.15"},
            "cudaComputeCapability": {"version": "8.0.0"},
        },
        "capacity": {"memory": {"value": "9728Mi"}},
    }


@pytest.fixture
def env() -> CelEnvironment:
    return CelEnvironment()


@pytest.fixture(scope="session")
def h100() -> DeviceVariable:
    return device_variable(DRIVER, h100_device())


@pytest.fixture(scope="session")
def mig() -> DeviceVariable:
    return device_variable(DRIVER, mig_device())
