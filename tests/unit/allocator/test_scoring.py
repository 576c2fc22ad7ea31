"""Scored mode: same validity as first-fit, better placement (topology, then fragmentation)."""

from __future__ import annotations

from dra_driver.allocator import AllocationMode, ClusterSnapshot, Placer, Usage, allocate_on_node
from tests.bench.cluster import cluster_slices, device_classes, mig, whole_gpus
from tests.unit.allocator.objects import (
    DRV,
    GPU_CLASS,
    claim,
    dev,
    device_class,
    exactly,
    first_available,
    picked,
    request,
    slice_,
)


def h100_node(gpus: int = 2) -> tuple[ClusterSnapshot, Placer]:
    snapshot = ClusterSnapshot.build(cluster_slices(1, gpus), device_classes())
    return snapshot, Placer(snapshot, Usage(), AllocationMode.FIRST_FIT)


def test_scored_fills_a_partly_used_gpu_where_first_fit_breaks_a_fresh_one() -> None:
    snapshot, placer = h100_node()
    whole = placer.place([whole_gpus("w")])
    assert whole.allocations is not None and picked(whole.allocations[0]) == ["gpu-0"]
    placer.place([mig("a", "4g.40gb")])  # lands on gpu-1, slices 0-3
    assert whole.node is not None
    placer.release(whole.allocations[0], whole.node)  # gpu-0 is whole and free again
    first = allocate_on_node(snapshot, placer.usage, [mig("x", "3g.40gb")], "node-000")
    scored = allocate_on_node(
        snapshot, placer.usage, [mig("x", "3g.40gb")], "node-000", AllocationMode.SCORED
    )
    assert picked(first.allocations[0] if first.allocations else None) == ["gpu-0-mig-3g40gb-0"]
    assert picked(scored.allocations[0] if scored.allocations else None) == ["gpu-1-mig-3g40gb-4"]
    # The whole GPU is still available after the scored choice.
    placer.usage.record(snapshot, scored.allocations[0])  # type: ignore[index]
    after = allocate_on_node(snapshot, placer.usage, [whole_gpus("w2")], "node-000")
    assert picked(after.allocations[0] if after.allocations else None) == ["gpu-0"]


def test_scored_keeps_a_claims_gpus_on_one_nvlink_domain() -> None:
    def gpu(name: str, domain: str) -> dict[str, object]:
        return dev(name, attributes={"nvlinkDomain": {"string": domain}})

    slices = [slice_("s", [gpu("g0", "A"), gpu("g1", "B"), gpu("g2", "B")])]
    snapshot = ClusterSnapshot.build(slices, [GPU_CLASS])
    two = [claim("c", request("r", exactly("gpu", 2)))]
    first = allocate_on_node(snapshot, Usage(), two, "node-a")
    scored = allocate_on_node(snapshot, Usage(), two, "node-a", AllocationMode.SCORED)
    assert first.allocations is not None and picked(first.allocations[0]) == ["g0", "g1"]
    assert scored.allocations is not None and picked(scored.allocations[0]) == ["g1", "g2"]
    assert scored.score is not None and scored.score.topology[0] == 0


def test_scored_respects_first_available_order_before_fragmentation() -> None:
    slices = [slice_("s", [dev("m", kind="mig"), dev("g", kind="gpu")])]
    classes = [
        device_class("mig", f'device.attributes["{DRV}"].type == "mig"'),
        device_class("whole", f'device.attributes["{DRV}"].type == "gpu"'),
    ]
    c = claim("c", first_available("r", ("gpu", exactly("whole")), ("mig", exactly("mig"))))
    snapshot = ClusterSnapshot.build(slices, classes)
    scored = allocate_on_node(snapshot, Usage(), [c], "node-a", AllocationMode.SCORED)
    assert scored.allocations is not None
    assert scored.allocations[0]["devices"]["results"][0]["request"] == "r/gpu"


def test_scored_placer_prefers_the_busier_node_on_equal_score() -> None:
    slices = cluster_slices(2, 1)
    snapshot = ClusterSnapshot.build(slices, device_classes())
    placer = Placer(snapshot, Usage(), AllocationMode.SCORED)
    # Put a claim on node-001 by hand, then a scored placement joins it there.
    seeded = allocate_on_node(snapshot, placer.usage, [mig("a", "1g.10gb")], "node-001")
    assert seeded.allocations is not None
    placer.record(seeded.allocations[0], "node-001")
    placed = placer.place([mig("b", "1g.10gb")])
    assert placed.node == "node-001"


def test_scored_and_first_fit_agree_on_feasibility_when_full() -> None:
    snapshot, placer = h100_node(1)
    assert placer.place([whole_gpus("w")]).node == "node-000"
    scored = Placer(snapshot, placer.usage, AllocationMode.SCORED).place([mig("m", "1g.10gb")])
    assert scored.node is None
    assert scored.reason is not None and "shared counters" in scored.reason


def test_scored_placer_breaks_an_exact_tie_by_the_busier_node() -> None:
    # Whole GPUs on identical nodes: every node offers the same score (no topology, the same
    # fragmentation loss for a fresh GPU), so only the load can decide. The busy node is the
    # last by name and more nodes fit than the placer compares, so neither the name nor the
    # search order can pick it by accident.
    snapshot = ClusterSnapshot.build(cluster_slices(6, 2), device_classes())
    placer = Placer(snapshot, Usage(), AllocationMode.SCORED)
    assert len(snapshot.node_names()) > placer.policy.max_fitting_nodes
    seeded = allocate_on_node(snapshot, placer.usage, [whole_gpus("a")], "node-005")
    assert seeded.allocations is not None
    placer.record(seeded.allocations[0], "node-005")
    on_busy = allocate_on_node(
        snapshot, placer.usage, [whole_gpus("probe")], "node-005", AllocationMode.SCORED
    )
    on_free = allocate_on_node(
        snapshot, placer.usage, [whole_gpus("probe")], "node-000", AllocationMode.SCORED
    )
    assert on_busy.score is not None and on_free.score is not None
    assert on_busy.score.topology == on_free.score.topology
    assert on_busy.score.loss == on_free.score.loss  # a real tie
    placed = placer.place([whole_gpus("b")])
    assert placed.node == "node-005"
