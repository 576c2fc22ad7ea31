"""What a node has: GPUs, their MIG profiles and placements, and live MIG devices."""

from dra_driver.inventory.model import (
    GpuInfo,
    GpuInstance,
    Inventory,
    MigDevice,
    MigPlacement,
    MigProfile,
)

__all__ = ["GpuInfo", "GpuInstance", "Inventory", "MigDevice", "MigPlacement", "MigProfile"]
