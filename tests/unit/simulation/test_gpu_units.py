"""GPUs counted once however they are published; what devices hold and claims ask, in GPUs."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot, Placer, Usage
from dra_driver.backends.fake import FakeBackend
from dra_driver.queues.amounts import device_amounts
from dra_driver.simulation.gpu_units import GpuUnits
from dra_driver.simulation.pods import key_of, pod_claims
from dra_driver.simulation.replay import Cluster, PodPolicy
from dra_driver.slices import SliceSettings, build_resource_slices
from tests.bench.cluster import (
    cluster_slices,
    device_classes,
    fractional,
    mig,
    timeslice,
    whole_gpus,
)
from tests.bench.traces import TracePod, cluster, pod_objects


def h100s() -> ClusterSnapshot:
    """Two nodes with two H100s each, every shape published (31 devices per GPU)."""
    return ClusterSnapshot.build(cluster_slices(2, 2), device_classes())


def test_each_physical_gpu_is_counted_once_whatever_is_published() -> None:
    every_shape = h100s()
    assert len(every_shape.devices) == 4 * 31
    assert GpuUnits(every_shape).capacity == 4
    backend = FakeBackend.from_spec("H100-SXM5-80GB:3", "n")
    whole_only = build_resource_slices(
        backend.inventory(), SliceSettings(shapes=frozenset({DeviceType.GPU}))
    )
    assert GpuUnits(ClusterSnapshot.build(whole_only, device_classes())).capacity == 3
    nodes, slices, classes = cluster([_row("t", 2)])
    trace = ClusterSnapshot.build(slices, classes, nodes)
    assert len(trace.devices) == 4  # a whole and a shared device per GPU
    assert GpuUnits(trace).capacity == 2


def test_a_device_takes_what_the_queues_count_as_gpu_equivalents() -> None:
    snapshot = h100s()
    units = GpuUnits(snapshot)
    seen = set()
    for device in snapshot.devices:
        if device.allow_multiple:
            continue  # a share counts what its allocations consume, below
        result = {
            "driver": DEFAULT_DRIVER_NAME,
            "pool": snapshot.pool_of(device).name,
            "device": device.name,
        }
        expected = device_amounts(snapshot, DEFAULT_DRIVER_NAME, result).gpu
        assert units.share(device) == pytest.approx(expected), device.name
        seen.add(round(expected, 3))
    assert seen == {0.125, 0.25, 0.5, 1.0}  # 1g, 2g / time-slice, 3g / 4g, whole and 7g


@pytest.mark.parametrize(
    ("claim", "asked"),
    [
        (mig("a", "1g.10gb"), 0.125),
        (mig("b", "3g.40gb"), 0.5),
        (timeslice("c"), 0.25),
        (whole_gpus("d", 2), 2.0),
        (fractional("e", memory="4Gi", compute="20"), 0.2),  # compute: 20 of 100
        (fractional("f", memory="40Gi", compute="10"), 40 * 2**30 / 85520809984),  # memory
    ],
)
def test_a_claim_asks_what_its_devices_would_take(claim: dict[str, Any], asked: float) -> None:
    assert GpuUnits(h100s()).asked([claim]) == pytest.approx(asked)


def test_requests_that_take_nothing_ask_nothing() -> None:
    units = GpuUnits(h100s())
    admin = whole_gpus("admin")
    admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    nowhere = mig("nowhere", "9g.999gb")
    missing_class = whole_gpus("missing")
    missing_class["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "absent"
    assert units.asked([admin]) == 0
    assert units.asked([nowhere]) == 0
    assert units.asked([missing_class]) == 0
    assert units.asked([admin, mig("m", "3g.40gb"), nowhere]) == 0.5


def test_what_is_held_adds_up_and_never_exceeds_the_gpus() -> None:
    snapshot = h100s()
    units = GpuUnits(snapshot)
    usage = Usage()
    placer = Placer(snapshot, usage)
    rng = random.Random(3)
    makers: list[Callable[[str], dict[str, Any]]] = [
        lambda n: mig(n, rng.choice(["1g.10gb", "2g.20gb", "3g.40gb"])),
        timeslice,
        whole_gpus,
    ]
    expected = 0.0
    for i in range(40):
        claim = rng.choice(makers)(f"c{i}")
        if placer.place([claim]).node is not None:
            expected += units.asked([claim])
        assert units.held(usage) == pytest.approx(expected)
        assert units.held(usage) <= units.capacity
    assert expected > 3  # the cluster filled up


def test_shares_of_one_device_hold_their_largest_capacity_together() -> None:
    snapshot = h100s()
    units = GpuUnits(snapshot)
    usage = Usage()
    placer = Placer(snapshot, usage)
    # Both land on the first node's first shared device: compute 10 + 60 of 100, memory
    # 40Gi + 4Gi: the compute they consume together (0.7) is what the GPU holds.
    assert placer.place([fractional("a", memory="40Gi", compute="10")]).node is not None
    assert placer.place([fractional("b", memory="4Gi", compute="60")]).node is not None
    shared = [d for d in snapshot.devices if d.id in usage.shares]
    assert len(shared) == 1
    assert units.held(usage) == pytest.approx(0.7)


def _row(name: str, gpus: int) -> dict[str, str]:
    return {
        "sn": name,
        "cpu_milli": "16000",
        "memory_mib": "65536",
        "gpu": str(gpus),
        "model": "V100",
    }


def test_trace_pods_ask_and_hold_their_trace_demand() -> None:
    """The trace benchmark's figures: a pod asks num_gpu x gpu_milli / 1000, and what is held
    is the demand of the pods placed."""
    nodes, slices, classes = cluster([_row(f"n{i}", 4) for i in range(3)])
    snapshot = ClusterSnapshot.build(slices, classes, nodes)
    sim = Cluster(snapshot, nodes, PodPolicy.FIRST_FIT)
    units = GpuUnits(snapshot)
    rng = random.Random(5)
    placed = 0.0
    for i in range(60):
        gpus = rng.choice([0, 1, 1, 2])
        milli = rng.choice([100, 250, 500, 1000]) if gpus == 1 else 1000
        trace_pod = TracePod(f"p{i}", 500, 1024, gpus, milli if gpus else 0, ())
        pod, templates = pod_objects(trace_pod, i)
        claims = pod_claims(pod, {}, {key_of(t): t for t in templates})
        assert units.asked(claims) == pytest.approx(trace_pod.gpu_demand)
        if sim.place_pod(pod, claims).node is not None:
            placed += trace_pod.gpu_demand
        assert units.held(sim.usage) == pytest.approx(placed)
    assert 0 < placed <= units.capacity == 12


def test_the_fragmentation_index_weighs_a_mig_slice_as_its_part_of_the_gpu() -> None:
    """A 1g slice in use leaves its GPU partly free: the index's room for that GPU drops below
    one whole GPU but stays above the half that the largest free placement still offers."""
    snapshot = h100s()
    usage = Usage()
    placer = Placer(snapshot, usage)
    assert placer.place([mig("a", "1g.10gb")]).node is not None
    sim = Cluster(snapshot, [], PodPolicy.SCORED, usage=usage)
    weights = {d.name: sim.index.rooms.weight(d) for d in snapshot.view("node-000").devices}
    assert {round(w, 3) for w in weights.values()} == {0.125, 0.25, 0.5, 1.0}
    rooms = []
    for node in ("node-000", "node-001"):
        units = sim.index.rooms.node(node)
        avail = sim.index.rooms.availability(usage, node)
        rooms += [max(avail[i] for i in unit) for unit in units.units]
    assert sorted(rooms) == [0.5, 1.0, 1.0, 1.0]
