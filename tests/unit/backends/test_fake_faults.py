"""Fault injection: health events, failing creates and busy MIG devices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dra_driver.backends.base import DeviceHealth, HealthEvent, TimeSliceInterval
from dra_driver.backends.errors import (
    BackendError,
    GpuLostError,
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
    PermissionDeniedError,
    UnknownBackendError,
)
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.faults import FAULT_ERRORS
from dra_driver.backends.mig import create_mig_device, destroy_mig_device
from dra_driver.inventory.model import MigPlacement

MakeBackend = Callable[..., FakeBackend]
SPEC = "A100-SXM4-80GB:2"
SLICE0 = MigPlacement(0, 1)


def test_unhealthy_event_once_then_gpu_lost(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    assert backend.health_events() == ()
    backend.inject_unhealthy(1, xid=48, reason="double bit ECC error")
    assert backend.health_events() == (
        HealthEvent(1, DeviceHealth.UNHEALTHY, "double bit ECC error", 48),
    )
    assert backend.health_events() == ()
    assert backend.healthy(1) is False
    assert backend.healthy(0) is True
    with pytest.raises(GpuLostError, match="XID 48") as caught:
        backend.create_gpu_instance(1, "1g.10gb", SLICE0)
    assert caught.value.code == 15
    with pytest.raises(GpuLostError):
        backend.set_timeslice(1, TimeSliceInterval.SHORT)
    # The healthy GPU is untouched.
    backend.create_gpu_instance(0, "1g.10gb", SLICE0)


def test_clear_gives_healthy_event_and_restores_operations(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.inject_unhealthy(0)
    backend.health_events()
    backend.clear_unhealthy(0)
    (event,) = backend.health_events()
    assert (event.minor, event.health, event.xid) == (0, DeviceHealth.HEALTHY, None)
    assert backend.health_events() == ()
    assert backend.healthy(0) is True
    backend.create_gpu_instance(0, "1g.10gb", SLICE0)
    backend.set_timeslice(0, TimeSliceInterval.LONG)
    # Clearing a healthy GPU changes nothing, so it announces nothing.
    backend.clear_unhealthy(0)
    assert backend.health_events() == ()


def test_unhealthy_gpu_can_still_be_torn_down(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    device = create_mig_device(backend, 0, "3g.40gb", MigPlacement(4, 4))
    backend.inject_unhealthy(0)
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)
    assert backend.gpu_instances(0) == ()
    with pytest.raises(GpuLostError):
        backend.create_compute_instance(0, 1)


def test_events_reach_another_object_on_the_same_state(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    plugin = make_backend(SPEC, state_dir=state_dir)
    injector = make_backend(SPEC, state_dir=state_dir)
    injector.inject_unhealthy(1, xid=79)
    # Every reader gets every event once, like separate NVML event sets.
    assert [(e.minor, e.health) for e in plugin.health_events()] == [(1, DeviceHealth.UNHEALTHY)]
    assert [(e.minor, e.health) for e in injector.health_events()] == [(1, DeviceHealth.UNHEALTHY)]
    assert plugin.health_events() == ()
    with pytest.raises(GpuLostError):
        plugin.create_gpu_instance(1, "1g.10gb", SLICE0)
    injector.clear_unhealthy(1)
    assert [e.health for e in plugin.health_events()] == [DeviceHealth.HEALTHY]
    plugin.create_gpu_instance(1, "1g.10gb", SLICE0)


def test_new_reader_learns_of_gpus_already_unhealthy(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    injector = make_backend(SPEC, state_dir=state_dir)
    injector.inject_unhealthy(0, xid=79, reason="fell off the bus")
    injector.inject_unhealthy(1, xid=79)
    injector.clear_unhealthy(1)
    restarted = make_backend(SPEC, state_dir=state_dir)
    assert restarted.health_events() == (
        HealthEvent(0, DeviceHealth.UNHEALTHY, "fell off the bus", 79),
    )
    assert restarted.health_events() == ()


def test_every_injection_is_an_event(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.inject_unhealthy(0, xid=13)
    backend.inject_unhealthy(0, xid=79)
    assert [e.xid for e in backend.health_events()] == [13, 79]


def test_fail_next_creates_count_is_honoured(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.fail_next_creates(0, count=2)
    for _ in range(2):
        with pytest.raises(InsufficientResourcesError, match="injected fault") as caught:
            backend.create_gpu_instance(0, "1g.10gb", SLICE0)
        assert caught.value.code == 23
    assert backend.create_gpu_instance(0, "1g.10gb", SLICE0) == 1
    # Only GPU 0 was affected, and only GPU-instance creates.
    assert backend.create_gpu_instance(1, "1g.10gb", SLICE0) == 1
    assert backend.create_compute_instance(0, 1) == 0


def test_injected_fault_wins_over_real_errors(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.inject_unhealthy(0)
    backend.fail_next_creates(0, error="NoPermission")
    with pytest.raises(PermissionDeniedError) as caught:
        backend.create_gpu_instance(0, "not-a-profile", MigPlacement(9, 9))
    assert caught.value.code == 4
    with pytest.raises(GpuLostError):
        backend.create_gpu_instance(0, "1g.10gb", SLICE0)


# What real NVML returns for each injectable failure, and the error type callers branch on.
EXPECTED_FAULTS: dict[str, tuple[type[BackendError], int]] = {
    "InsufficientResources": (InsufficientResourcesError, 23),
    "InUse": (InUseError, 19),
    "InvalidArgument": (InvalidArgumentError, 2),
    "NotFound": (NotFoundError, 6),
    "NotSupported": (NotSupportedError, 3),
    "NoPermission": (PermissionDeniedError, 4),
    "GpuIsLost": (GpuLostError, 15),
    "Uninitialized": (NvmlUnavailableError, 1),
    "Unknown": (UnknownBackendError, 999),
}


def test_every_fault_name_is_covered() -> None:
    assert set(FAULT_ERRORS) == set(EXPECTED_FAULTS)


@pytest.mark.parametrize("name", sorted(EXPECTED_FAULTS))
def test_each_fault_name_raises_its_type_and_code(make_backend: MakeBackend, name: str) -> None:
    backend = make_backend(SPEC)
    error_type, code = EXPECTED_FAULTS[name]
    backend.fail_next_creates(0, error=name)
    with pytest.raises(BackendError) as caught:
        backend.create_gpu_instance(0, "1g.10gb", SLICE0)
    assert type(caught.value) is error_type
    assert caught.value.code == code
    assert caught.value.gpu == f"0 ({backend.gpus[0].uuid})"


def test_unknown_fault_name_and_negative_count_are_rejected(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    with pytest.raises(ValueError, match="unknown fault error 'Boom'; expected one of: GpuIsLost"):
        backend.fail_next_creates(0, error="Boom")
    with pytest.raises(ValueError, match="must not be negative"):
        backend.fail_next_creates(0, count=-1)


def test_count_zero_cancels_pending_fault(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.fail_next_creates(0, count=5, error="Unknown")
    backend.fail_next_creates(0, count=0)
    assert backend.create_gpu_instance(0, "1g.10gb", SLICE0) == 1


def test_create_fault_persists_across_processes(make_backend: MakeBackend, state_dir: Path) -> None:
    plugin = make_backend(SPEC, state_dir=state_dir)
    make_backend(SPEC, state_dir=state_dir).fail_next_creates(1, count=2, error="Unknown")
    with pytest.raises(UnknownBackendError):
        plugin.create_gpu_instance(1, "1g.10gb", SLICE0)
    # The countdown is shared: a third object sees one failure left.
    with pytest.raises(UnknownBackendError) as caught:
        make_backend(SPEC, state_dir=state_dir).create_gpu_instance(1, "1g.10gb", SLICE0)
    assert caught.value.code == 999
    assert plugin.create_gpu_instance(1, "1g.10gb", SLICE0) == 1


def test_compute_instance_fault_is_separate(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    backend.fail_next_creates(0, error="Unknown", compute_instance=True)
    gi_id = backend.create_gpu_instance(0, "2g.20gb", MigPlacement(0, 2))
    with pytest.raises(UnknownBackendError):
        backend.create_compute_instance(0, gi_id)
    assert backend.create_compute_instance(0, gi_id) == 0


def test_busy_compute_instance_cannot_be_destroyed(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    device = create_mig_device(backend, 0, "4g.40gb", MigPlacement(0, 4))
    backend.mark_busy(0, device.gi_id)
    with pytest.raises(InUseError, match="processes are running") as caught:
        backend.destroy_compute_instance(0, device.gi_id, device.ci_id)
    assert caught.value.code == 19
    with pytest.raises(InUseError):
        destroy_mig_device(backend, 0, device.gi_id, device.ci_id)
    assert backend.mig_devices(0) == (device,)
    backend.clear_busy(0, device.gi_id)
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)
    assert backend.gpu_instances(0) == ()


def test_busy_mark_needs_a_live_gpu_instance(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    with pytest.raises(NotFoundError, match="no GPU instance 3"):
        backend.mark_busy(0, 3)
    with pytest.raises(NotFoundError):
        backend.clear_busy(0, 3)


def test_busy_mark_dies_with_its_instance(make_backend: MakeBackend) -> None:
    backend = make_backend(SPEC)
    gi_id = backend.create_gpu_instance(0, "1g.10gb", SLICE0)
    backend.mark_busy(0, gi_id)
    backend.destroy_gpu_instance(0, gi_id)
    again = create_mig_device(backend, 0, "1g.10gb", SLICE0)
    assert again.gi_id == gi_id
    destroy_mig_device(backend, 0, again.gi_id, again.ci_id)
    assert backend.gpu_instances(0) == ()


def test_a_torn_down_mig_device_is_made_then_gone_and_the_fault_counts_down(
    make_backend: MakeBackend,
) -> None:
    backend = make_backend(SPEC)
    backend.tear_down_next_mig_devices(0, count=2)
    for start in (0, 1):
        gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(start, 1))
        assert backend.create_compute_instance(0, gi_id) == 0  # the call itself succeeds
        assert backend.mig_devices(0) == ()
        assert backend.gpu_instances(0) == ()
        with pytest.raises(NotFoundError):
            backend.destroy_gpu_instance(0, gi_id)
    # Used up: the next MIG device stays; the other GPU was never affected.
    made = create_mig_device(backend, 0, "1g.10gb", SLICE0)
    assert [d.uuid for d in backend.mig_devices(0)] == [made.uuid]
    backend.tear_down_next_mig_devices(1)
    backend.tear_down_next_mig_devices(1, count=0)  # cancelled
    create_mig_device(backend, 1, "1g.10gb", SLICE0)
    assert len(backend.mig_devices(1)) == 1
    with pytest.raises(ValueError, match="negative"):
        backend.tear_down_next_mig_devices(0, count=-1)
