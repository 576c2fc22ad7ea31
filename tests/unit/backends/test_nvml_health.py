"""Critical XID events drained through NvmlBackend.health_events."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from dra_driver.backends.base import DeviceHealth, HealthEvent
from dra_driver.backends.nvml.health import APPLICATION_XIDS
from tests.unit.backends.nvml_standin import StandInNvml, build_backend


def test_critical_xid_makes_the_gpu_unhealthy(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    assert backend.health_events() == ()
    machine.emit(2, 79)
    assert backend.health_events() == (
        HealthEvent(2, DeviceHealth.UNHEALTHY, "critical XID 79", xid=79),
    )
    assert backend.health_events() == ()  # drained on read


def test_registration_starts_with_the_first_inventory(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    machine.emit(0, 48)
    assert [e.xid for e in backend.health_events()] == [48]


def test_registers_once_and_never_blocks(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    for _ in range(3):
        backend.inventory()
        backend.health_events()
    assert len(machine.called("nvmlEventSetCreate")) == 1
    registered = machine.called("nvmlDeviceRegisterEvents")
    assert len(registered) == 2  # the two H100s; the L40S does not support events
    assert {args[1] for args in registered} == {pynvml.nvmlEventTypeXidCriticalError}
    assert machine.wait_timeouts and set(machine.wait_timeouts) == {0}


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_application_xids_are_ignored(tmp_path: Path, xid: int) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    machine.emit(0, xid)
    assert backend.health_events() == ()


def test_ignored_list_is_the_documented_one() -> None:
    assert frozenset({13, 31, 43, 45, 68, 109}) == APPLICATION_XIDS


def test_several_events_in_order(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    machine.emit(0, 79)
    machine.emit(2, 13)
    machine.emit(2, 94)
    assert [(e.minor, e.xid) for e in backend.health_events()] == [(0, 79), (2, 94)]


def test_other_event_types_are_ignored(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    machine.emit(0, 0, event_type=pynvml.nvmlEventTypeDoubleBitEccError)
    assert backend.health_events() == ()


def test_gpu_without_event_support_gives_no_events(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    machine.emit(1, 79)  # L40S: registration was refused
    assert backend.health_events() == ()


def test_no_event_support_at_all(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.event_sets_supported = False
    _, backend = build_backend(tmp_path, machine)
    assert backend.health_events() == ()
    machine.emit(0, 79)
    assert backend.health_events() == ()


def test_no_gpu_supports_events(tmp_path: Path) -> None:
    machine = StandInNvml()
    for gpu in machine.gpus:
        gpu.events_supported = False
    _, backend = build_backend(tmp_path, machine)
    assert backend.health_events() == ()
    assert machine.called("nvmlEventSetFree")  # the unused set is given back
    assert not machine.called("nvmlEventSetWait")


def test_broken_event_channel_reports_every_watched_gpu(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    machine.fail("nvmlEventSetWait", pynvml.NVML_ERROR_UNKNOWN)
    events = backend.health_events()
    assert [(e.minor, e.health) for e in events] == [
        (0, DeviceHealth.UNHEALTHY),
        (2, DeviceHealth.UNHEALTHY),
    ]
    assert all(e.xid is None and "waiting for NVML events failed" in e.reason for e in events)


def test_close_frees_the_event_set(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.health_events()
    backend.close()
    assert len(machine.called("nvmlEventSetFree")) == 1
