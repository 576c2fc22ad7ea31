"""Node kinds and GPU availability as the pod placer reads them."""

from __future__ import annotations

from typing import Any

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.backends.fake import FakeBackend
from dra_driver.simulation.rooms import Rooms
from dra_driver.slices import SliceSettings, build_resource_slices
from tests.support import objects
from tests.unit.controller.viewkit import DRIVER


def _slices(specs: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, gpus in specs.items():
        out += build_resource_slices(FakeBackend.from_spec(gpus, name).inventory(), SliceSettings())
    return out


def _snapshot(specs: dict[str, str]) -> ClusterSnapshot:
    classes = [objects.device_class(k, driver=DRIVER) for k in ("gpu", "mig")]
    nodes = [objects.node(n, ready=True) for n in specs]
    return ClusterSnapshot.build(_slices(specs), classes, nodes)


def test_nodes_of_equal_gpus_are_one_kind_whatever_their_uuids() -> None:
    snapshot = _snapshot(
        {"a": "H100-SXM5-80GB:2", "b": "H100-SXM5-80GB:2", "c": "A100-SXM4-40GB:2"}
    )
    rooms = Rooms(snapshot)
    a, b, c = (rooms.node(n) for n in "abc")
    assert a.signature != b.signature  # the devices themselves differ (UUIDs)
    assert a.kind == b.kind
    assert c.kind != a.kind  # another model is another kind


def test_availability_is_read_again_for_the_gpu_that_changed() -> None:
    snapshot = _snapshot({"a": "H100-SXM5-80GB:2"})
    rooms = Rooms(snapshot)
    usage = Usage()
    before = rooms.availability(usage, "a")
    units = rooms.node("a")
    first_gpu = units.devices[units.units[0][0]]
    allocation = {
        "devices": {
            "results": [
                {
                    "request": "r",
                    "driver": first_gpu.driver,
                    "pool": snapshot.pools[first_gpu.pool_index].name,
                    "device": first_gpu.name,
                }
            ]
        }
    }
    usage.record(snapshot, allocation)
    after = rooms.availability(usage, "a")
    fresh = Rooms(snapshot).availability(usage, "a")
    assert after == fresh != before
    # Device by device, in the node's device order, as `available` reads each one.
    assert after == tuple(rooms.available(usage, d) for d in units.devices)
    usage.release(snapshot, allocation)
    assert rooms.availability(usage, "a") == before
