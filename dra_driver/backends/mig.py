"""Whole-MIG-device operations built from a backend's primitives.

A MIG device is two NVML objects. Creating it is not atomic: the GPU instance exists before its
compute instance, so a caller that must survive a crash in between records the GPU instance
before `add_compute_instance` makes the second half, and a caller that need not
(`create_mig_device`) destroys the GPU instance when its compute instance cannot be made.
Tearing one down goes compute instance first and treats "already gone" as done, so a retry after
a crash converges. The kubelet plugin's prepare flow and `create_mig_device` share these steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

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
    return created_device(backend, minor, gi_id, ci_id, f"minor {minor}", profile, placement)


def add_compute_instance(
    backend: GpuBackend,
    minor: int,
    gi_id: int,
    gpu: str,
    profile: str,
    placement: MigPlacement,
    *,
    made: Callable[[], None] | None = None,
) -> MigDevice:
    """Make the full-size compute instance of an existing GPU instance and return the MIG device
    the two form. `made` runs between creating the compute instance and looking the device up;
    a failure leaves the GPU instance to the caller's clean-up."""
    ci_id = backend.create_compute_instance(minor, gi_id)
    if made is not None:
        made()
    return created_device(backend, minor, gi_id, ci_id, gpu, profile, placement)


def created_device(
    backend: GpuBackend,
    minor: int,
    gi_id: int,
    ci_id: int,
    gpu: str,
    profile: str,
    placement: MigPlacement,
) -> MigDevice:
    """The MIG device of a GPU instance and compute instance just made; `gpu` names the GPU in
    the error when they are gone already."""
    for device in backend.mig_devices(minor):
        if device.gi_id == gi_id and device.ci_id == ci_id:
            return device
    raise NotFoundError(
        gpu,
        f"create MIG device {profile} at {placement.start}",
        f"GPU instance {gi_id} / compute instance {ci_id} vanished right after creation",
    )


def destroy_mig_device(
    backend: GpuBackend,
    minor: int,
    gi_id: int,
    ci_id: int | None,
    *,
    compute_instance_gone: Callable[[], None] | None = None,
) -> None:
    """Destroy compute instance then GPU instance; either being gone already counts as done.

    Without a known CI id (a crash came between creating the compute instance and recording it)
    the GPU instance's live compute instances are looked up and destroyed. `compute_instance_gone`
    runs after each compute instance, before the GPU instance goes.
    """
    if ci_id is not None:
        ci_ids: tuple[int, ...] = (ci_id,)
    else:
        live = backend.gpu_instances(minor)
        ci_ids = next((gi.ci_ids for gi in live if gi.gi_id == gi_id), ())
    for each in ci_ids:
        with contextlib.suppress(NotFoundError):
            backend.destroy_compute_instance(minor, gi_id, each)
        if compute_instance_gone is not None:
            compute_instance_gone()
    with contextlib.suppress(NotFoundError):
        backend.destroy_gpu_instance(minor, gi_id)
