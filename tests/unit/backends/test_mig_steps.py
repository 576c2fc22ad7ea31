"""Whole-MIG-device operations (`dra_driver.backends.mig`) on the fake backend: the steps a
crash-safe caller records between, the clean-up of a half-made device, and teardown that
converges."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dra_driver.backends.errors import NotFoundError, UnknownBackendError
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.mig import (
    add_compute_instance,
    create_mig_device,
    created_device,
    destroy_mig_device,
)
from dra_driver.inventory.model import MigPlacement

MakeBackend = Callable[..., FakeBackend]
SPEC = "A100-SXM4-80GB:1"
HALF = MigPlacement(4, 4)


def test_a_failed_compute_instance_takes_its_gpu_instance_with_it(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    backend.fail_next_creates(0, error="Unknown", compute_instance=True)
    with pytest.raises(UnknownBackendError):
        create_mig_device(backend, 0, "3g.40gb", HALF)
    assert backend.gpu_instances(0) == ()
    made = create_mig_device(backend, 0, "3g.40gb", HALF)
    assert backend.mig_devices(0) == (made,)


def test_the_second_step_runs_its_hook_once_the_compute_instance_exists(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    gi_id = backend.create_gpu_instance(0, "3g.40gb", HALF)
    seen: list[tuple[int, ...]] = []

    def made() -> None:
        (instance,) = backend.gpu_instances(0)
        seen.append(instance.ci_ids)
        assert backend.mig_devices(0) != ()

    device = add_compute_instance(backend, 0, gi_id, "0 (GPU-x)", "3g.40gb", HALF, made=made)
    assert seen == [(device.ci_id,)]
    assert (device.gi_id, device.parent_minor) == (gi_id, 0)
    assert backend.mig_devices(0) == (device,)


def test_a_failed_second_step_leaves_the_gpu_instance_to_the_caller(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    gi_id = backend.create_gpu_instance(0, "3g.40gb", HALF)
    backend.fail_next_creates(0, error="Unknown", compute_instance=True)
    with pytest.raises(UnknownBackendError):
        add_compute_instance(backend, 0, gi_id, "0 (GPU-x)", "3g.40gb", HALF)
    assert [i.gi_id for i in backend.gpu_instances(0)] == [gi_id]


def test_a_device_gone_right_after_creation_is_not_found_naming_the_gpu_as_told(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    backend.tear_down_next_mig_devices(0)
    gi_id = backend.create_gpu_instance(0, "3g.40gb", HALF)
    with pytest.raises(NotFoundError) as caught:
        add_compute_instance(backend, 0, gi_id, "0 (GPU-abc)", "3g.40gb", HALF)
    assert str(caught.value) == (
        f"GPU 0 (GPU-abc): create MIG device 3g.40gb at 4: GPU instance {gi_id} / compute "
        "instance 0 vanished right after creation"
    )
    with pytest.raises(NotFoundError, match=r"^GPU minor 0: "):
        created_device(backend, 0, gi_id, 0, "minor 0", "3g.40gb", HALF)


def test_teardown_without_a_recorded_compute_instance_finds_it(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    made = create_mig_device(backend, 0, "3g.40gb", HALF)
    other = create_mig_device(backend, 0, "3g.40gb", MigPlacement(0, 4))
    gone: list[tuple[int, ...]] = []

    def compute_instance_gone() -> None:
        live = {i.gi_id: i.ci_ids for i in backend.gpu_instances(0)}
        gone.append(live[made.gi_id])

    destroy_mig_device(backend, 0, made.gi_id, None, compute_instance_gone=compute_instance_gone)
    # The hook runs with the compute instance gone and the GPU instance still there.
    assert gone == [()]
    assert backend.mig_devices(0) == (other,)


def test_teardown_of_what_is_gone_already_counts_as_done(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    made = create_mig_device(backend, 0, "3g.40gb", HALF)
    destroy_mig_device(backend, 0, made.gi_id, made.ci_id)
    calls: list[None] = []
    destroy_mig_device(backend, 0, made.gi_id, made.ci_id, compute_instance_gone=lambda: None)
    destroy_mig_device(
        backend, 0, made.gi_id, None, compute_instance_gone=lambda: calls.append(None)
    )
    assert backend.gpu_instances(0) == () and calls == []
