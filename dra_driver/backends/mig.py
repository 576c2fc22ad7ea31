"""Whole-MIG-device operations built from a backend's primitives.

A MIG device is two NVML objects. Creating it is not atomic, so a failed compute-instance
creation must destroy the GPU instance it left behind; tearing it down must go compute instance
first, and treat "already gone" as done so a retry after a crash converges.
"""

from __future__ import annotations

import contextlib

from dra_driver.backends.base import GpuBackend
from dra_driver.backends.errors import BackendError, NotFoundError
from dra_driver.inventory.model import MigDevice, MigPlacement


def create_mig_device(
    backend: GpuBackend, minor: int, profile: str, placement: MigPlacement
) -> MigDevice:
    """Create a GPU instance at `placement` and its full-size compute instance."""
    gi_id = backend.create_gpu_instance(minor, profile, placement)
    try:
        ci_id = backend.create_compute_instance(minor, gi_id)
    except BackendError:
        with contextlib.suppress(NotFoundError):
            backend.destroy_gpu_instance(minor, gi_id)
        raise
    for device in backend.mig_devices(minor):
        if device.gi_id == gi_id and device.ci_id == ci_id:
            return device
    raise NotFoundError(
        f"minor {minor}",
        f"create MIG device {profile} at {placement.start}",
        f"GPU instance {gi_id} / compute instance {ci_id} vanished right after creation",
    )


def destroy_mig_device(backend: GpuBackend, minor: int, gi_id: int, ci_id: int) -> None:
    """Destroy compute instance then GPU instance; either being gone already counts as done."""
    with contextlib.suppress(NotFoundError):
        backend.destroy_compute_instance(minor, gi_id, ci_id)
    with contextlib.suppress(NotFoundError):
        backend.destroy_gpu_instance(minor, gi_id)
