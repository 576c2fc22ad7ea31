"""What an allocated device takes from a queue, from the counters of the real slices."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot
from dra_driver.allocator.errors import InputError
from dra_driver.backends.fake import FakeBackend
from dra_driver.queues import Amounts
from dra_driver.queues.amounts import allocation_amounts, capacity, device_amounts
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = DEFAULT_DRIVER_NAME
NODE = "n1"


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    backend = FakeBackend.from_spec("H100-SXM5-80GB:2", NODE)
    return ClusterSnapshot.build(build_resource_slices(backend.inventory(), SliceSettings()), [])


def result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": DRIVER, "pool": NODE, "device": device, **extra}


def memory_of(snapshot: ClusterSnapshot, device: str) -> float:
    found = snapshot.device(DRIVER, NODE, device)
    assert found is not None
    return float(found.capacity[f"{DRIVER}/memory"].value)


def test_a_whole_gpu_is_one_with_its_memory(snapshot: ClusterSnapshot) -> None:
    amounts = device_amounts(snapshot, DRIVER, result("gpu-1"))
    assert amounts == Amounts(1.0, memory_of(snapshot, "gpu-1"))


@pytest.mark.parametrize(
    ("device", "eighths"),
    [("gpu-0-mig-1g10gb-6", 1), ("gpu-0-mig-3g40gb-4", 4), ("gpu-0-mig-7g80gb-0", 8)],
)
def test_a_mig_device_is_its_share_of_the_memory_slices(
    snapshot: ClusterSnapshot, device: str, eighths: int
) -> None:
    amounts = device_amounts(snapshot, DRIVER, result(device))
    assert amounts.gpu == pytest.approx(eighths / 8)
    assert amounts.memory == pytest.approx(memory_of(snapshot, device), rel=0.01)


def test_a_time_slice_share_is_one_over_the_shares_per_gpu() -> None:
    for shares in (2, 4):
        backend = FakeBackend.from_spec("H100-SXM5-80GB:1", NODE)
        slices = build_resource_slices(backend.inventory(), SliceSettings(timeslice_shares=shares))
        snap = ClusterSnapshot.build(slices, [])
        amounts = device_amounts(snap, DRIVER, result("gpu-0-ts-1"))
        assert amounts.gpu == pytest.approx(1 / shares)
        # Its memory is its share of the GPU's memory counter.
        whole = device_amounts(snap, DRIVER, result("gpu-0"))
        assert amounts.memory == pytest.approx(whole.memory / shares)


def test_a_fractional_share_is_the_compute_it_got_and_the_memory_it_consumed(
    snapshot: ClusterSnapshot,
) -> None:
    share = result(
        "gpu-0-shared", shareID="s1", consumedCapacity={"compute": "30", "memory": "3Gi"}
    )
    assert device_amounts(snapshot, DRIVER, share) == Amounts(0.3, 3 * 2**30)


def test_other_drivers_admin_access_and_gone_devices_count_nothing(
    snapshot: ClusterSnapshot,
) -> None:
    assert device_amounts(snapshot, DRIVER, {**result("gpu-0"), "driver": "x.example.com"}) == (
        Amounts()
    )
    assert device_amounts(snapshot, DRIVER, result("gpu-0", adminAccess=True)) == Amounts()
    assert device_amounts(snapshot, DRIVER, result("gpu-9")) == Amounts()


def test_an_allocation_is_the_sum_of_its_results(snapshot: ClusterSnapshot) -> None:
    allocation = {
        "devices": {
            "results": [result("gpu-1"), result("gpu-0-mig-1g10gb-6"), result("gpu-0-mig-1g10gb-5")]
        }
    }
    total = allocation_amounts(snapshot, DRIVER, allocation)
    assert total.gpu == pytest.approx(1.25)
    assert allocation_amounts(snapshot, DRIVER, None) == Amounts()


def test_capacity_counts_whole_gpus_per_node(snapshot: ClusterSnapshot) -> None:
    total = capacity(snapshot, DRIVER)
    assert total.gpu == 2.0
    assert total.memory == pytest.approx(2 * memory_of(snapshot, "gpu-0"))
    assert capacity(snapshot, DRIVER, {"elsewhere"}) == Amounts()


def test_a_share_without_compute_or_memory_counts_none_of_it(snapshot: ClusterSnapshot) -> None:
    memory_only = result("gpu-0-shared", shareID="m", consumedCapacity={"memory": "2Gi"})
    assert device_amounts(snapshot, DRIVER, memory_only) == Amounts(0.0, 2 * 2**30)
    compute_only = result("gpu-0-shared", shareID="c", consumedCapacity={"compute": "50"})
    assert device_amounts(snapshot, DRIVER, compute_only) == Amounts(0.5, 0.0)


@pytest.mark.parametrize("resource", ["compute", "memory"])
def test_a_bad_consumed_amount_is_named_with_the_device(
    snapshot: ClusterSnapshot, resource: str
) -> None:
    share = result("gpu-0-shared", shareID="s", consumedCapacity={resource: "a lot"})
    with pytest.raises(InputError) as err:
        device_amounts(snapshot, DRIVER, share)
    where = snapshot.device(DRIVER, NODE, "gpu-0-shared")
    assert where is not None
    assert str(err.value).startswith(f"{where.where}.consumedCapacity.{resource}: ")


def test_the_cache_keeps_whole_devices_but_never_shares_or_admin_access(
    snapshot: ClusterSnapshot,
) -> None:
    cache: dict[tuple[str, str], Amounts] = {}

    def counted(*results: dict[str, Any]) -> Amounts:
        return allocation_amounts(snapshot, DRIVER, {"devices": {"results": list(results)}}, cache)

    # Two claims sharing one device count what each consumed, not what the first did.
    small = {"compute": "10", "memory": "1Gi"}
    large = {"compute": "40", "memory": "8Gi"}
    assert counted(result("gpu-0-shared", shareID="a", consumedCapacity=small)) == Amounts(
        0.1, 2**30
    )
    assert counted(result("gpu-0-shared", shareID="b", consumedCapacity=large)) == Amounts(
        0.4, 8 * 2**30
    )
    # An admin-access claim counts nothing, and a later ordinary claim of the same device
    # still counts all of it.
    assert counted(result("gpu-1", adminAccess=True)) == Amounts()
    whole = Amounts(1.0, memory_of(snapshot, "gpu-1"))
    assert counted(result("gpu-1")) == whole
    assert cache == {(NODE, "gpu-1"): whole}
    assert counted(result("gpu-1")) == whole  # from the cache now


def gpu_slice(
    pool: str, devices: list[tuple[str, str | None]], node: str | None = None, slices: int = 1
) -> dict[str, Any]:
    """A hand-written slice of whole GPUs: (name, memory or None) each, on `node`, or on the
    node of the same name as the device's second word when `node` is None."""
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": slices},
        "devices": [
            {
                "name": name,
                "attributes": {"type": {"string": "gpu"}},
                "capacity": {} if memory is None else {"memory": {"value": memory}},
                **({} if node else {"nodeName": name.split("-")[1]}),
            }
            for name, memory in devices
        ],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["perDeviceNodeSelection"] = True
    return {"metadata": {"name": f"{pool}-slice"}, "spec": spec}


def test_capacity_skips_incomplete_pools_and_counts_the_rest() -> None:
    snap = ClusterSnapshot.build(
        [
            gpu_slice("a-incomplete", [("gpu-0", "80Gi")], node="a", slices=2),
            gpu_slice("b-good", [("gpu-0", "80Gi"), ("gpu-1", None)], node="b"),
        ],
        [],
    )
    # A GPU that publishes no memory counts as one GPU and no memory.
    assert capacity(snap, DRIVER) == Amounts(2.0, 80 * 2**30)


def test_capacity_on_some_nodes_of_a_pool_that_spans_nodes() -> None:
    snap = ClusterSnapshot.build(
        [gpu_slice("shared", [("gpu-x-0", "40Gi"), ("gpu-y-0", "80Gi"), ("gpu-x-1", "40Gi")])],
        [],
    )
    assert capacity(snap, DRIVER) == Amounts(3.0, 160 * 2**30)
    assert capacity(snap, DRIVER, {"y"}) == Amounts(1.0, 80 * 2**30)
    assert capacity(snap, DRIVER, {"x"}) == Amounts(2.0, 80 * 2**30)


def two_pools() -> ClusterSnapshot:
    return ClusterSnapshot.build(
        [
            gpu_slice("p1", [("gpu-0", "16Gi")], node="a"),
            gpu_slice("p2", [("gpu-0", "80Gi"), ("gpu-1", None)], node="b"),
        ],
        [],
    )


def on(pool: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": DRIVER, "pool": pool, "device": device, **extra}


def test_a_gpu_without_counters_is_one_gpu_with_the_memory_it_publishes() -> None:
    snap = two_pools()
    assert device_amounts(snap, DRIVER, on("p2", "gpu-0")) == Amounts(1.0, 80 * 2**30)
    assert device_amounts(snap, DRIVER, on("p2", "gpu-1")) == Amounts(1.0, 0.0)
    # What a result says it consumed counts only for a device that is shared.
    taken = on("p2", "gpu-0", consumedCapacity={"compute": "30", "memory": "1Gi"})
    assert device_amounts(snap, DRIVER, taken) == Amounts(1.0, 80 * 2**30)


def test_the_cache_tells_devices_apart_by_pool_and_name() -> None:
    snap = two_pools()
    cache: dict[tuple[str, str], Amounts] = {}
    allocation = {"devices": {"results": [on("p1", "gpu-0"), on("p2", "gpu-0"), on("p2", "gpu-1")]}}
    expected = Amounts(3.0, 96 * 2**30)
    assert allocation_amounts(snap, DRIVER, allocation, cache) == expected
    assert allocation_amounts(snap, DRIVER, allocation, cache) == expected
    assert allocation_amounts(snap, DRIVER, allocation) == expected
