"""Placer: which nodes it tries, in which order, what it remembers, and how it says no."""

from __future__ import annotations

from dra_driver.allocator import (
    AllocationMode,
    ClusterSnapshot,
    Placer,
    ScoringPolicy,
    Usage,
    allocate_on_node,
)
from dra_driver.allocator.placement import warm_class_verdicts
from tests.unit.allocator.objects import (
    GPU_CLASS,
    Obj,
    claim,
    dev,
    device_class,
    exactly,
    picked,
    request,
    slice_,
)

NODES = ("node-a", "node-b", "node-c", "node-d", "node-e")


def cluster(nodes: tuple[str, ...] = NODES, gpus: int = 1) -> ClusterSnapshot:
    slices = [slice_(f"s-{n}", [dev(f"g{i}") for i in range(gpus)], node=n) for n in nodes]
    return ClusterSnapshot.build(slices, [GPU_CLASS])


def gpus(name: str, count: int = 1) -> Obj:
    return claim(name, request("r", exactly(count=count)))


def test_a_placer_tries_only_its_nodes_or_those_a_placement_names() -> None:
    snapshot = cluster()
    placer = Placer(snapshot, Usage(), nodes=["node-c", "node-b"])
    assert placer.place([gpus("c1")]).node == "node-c"
    assert placer.place([gpus("c2")], nodes=["node-e"]).node == "node-e"
    assert placer.place([gpus("c3")]).node == "node-b"


def test_a_node_that_did_not_fit_is_skipped_until_its_usage_changes() -> None:
    snapshot = cluster(("node-a", "node-b"))
    placer = Placer(snapshot, Usage())
    first = placer.place([gpus("c1")])
    assert (first.node, first.nodes_searched) == ("node-a", 1)
    assert placer.place([gpus("c2")]).nodes_searched == 2
    # Neither node fits now; node-a did not fit this shape at its current usage already.
    assert placer.place([gpus("c3")]).nodes_searched == 1
    full = placer.place([gpus("c3")])
    assert (full.node, full.nodes_searched) == (None, 0)
    # Another shape is searched on both.
    assert placer.place([gpus("c4", 2)]).nodes_searched == 2
    assert first.allocations is not None
    placer.release(first.allocations[0], "node-a")
    again = placer.place([gpus("c5")])
    assert (again.node, again.nodes_searched) == ("node-a", 1)


def test_a_full_node_is_skipped_without_ending_the_search() -> None:
    snapshot = cluster(("node-a", "node-b", "node-c"))
    placer = Placer(snapshot, Usage())
    assert placer.place([gpus("c1")]).node == "node-a"
    assert placer.place([gpus("c2", 2)]).node is None  # remembered on every node
    assert placer.place([gpus("c3")]).node == "node-b"
    placed = placer.place([gpus("c4")])
    assert (placed.node, placed.nodes_searched) == ("node-c", 2)


def test_scored_placement_stops_after_enough_nodes_fit() -> None:
    snapshot = cluster(("node-a", "node-b", "node-c"))
    for limit in (1, 2):
        placer = Placer(
            snapshot, Usage(), AllocationMode.SCORED, policy=ScoringPolicy(max_fitting_nodes=limit)
        )
        assert placer.place([gpus("c")]).nodes_searched == limit
    placer = Placer(snapshot, Usage(), AllocationMode.SCORED)
    assert placer.place([gpus("c")]).nodes_searched == 3


def test_scored_placement_goes_to_a_preferred_node_first() -> None:
    snapshot = cluster()
    placer = Placer(snapshot, Usage(), AllocationMode.SCORED)
    # More nodes fit than are compared: only trying node-e first finds it.
    assert len(NODES) > placer.policy.max_fitting_nodes
    placed = placer.place([gpus("c")], prefer=["node-e"])
    assert (placed.node, placed.nodes_searched) == ("node-e", 4)
    # Preferred over a busier node, too.
    assert placer.place([gpus("d")], prefer=["node-c"]).node == "node-c"


def test_the_load_of_a_node_follows_what_is_recorded_and_released() -> None:
    snapshot = cluster(("node-a",), gpus=4)
    placer = Placer(snapshot, Usage(), AllocationMode.SCORED)
    one = placer.place([gpus("c1")])
    two = placer.place([gpus("c2", 2)])
    assert placer.node_load == {"node-a": 3}
    assert one.allocations is not None and two.allocations is not None
    placer.release(two.allocations[0], "node-a")
    assert placer.node_load == {"node-a": 1}
    # Released where nothing was recorded, then recorded: back to nothing.
    other = Placer(snapshot, Usage(), AllocationMode.SCORED)
    other.release(one.allocations[0], "node-a")
    other.record(one.allocations[0], "node-a")
    assert other.node_load == {"node-a": 0}


def test_the_reason_names_at_most_three_nodes() -> None:
    why = "claim ns/c request r (class gpu) needs 2 device(s), 1 usable"
    for count, tail in ((3, ""), (4, "; and 1 more node(s)"), (5, "; and 2 more node(s)")):
        placed = Placer(cluster(NODES[:count]), Usage()).place([gpus("c", 2)])
        named = "; ".join(f"{n}: {why}" for n in NODES[:3])
        assert placed.reason == f"no node fits ({count} tried): {named}{tail}"


def test_a_node_that_does_not_fit_says_why() -> None:
    result = allocate_on_node(cluster(("node-a",)), Usage(), [gpus("c", 2)], "node-b")
    assert (result.node, result.allocations) == ("node-b", None)
    assert result.reason == "no devices are published for this node"
    result = allocate_on_node(cluster(("node-a",)), Usage(), [gpus("c", 2)], "node-a")
    assert (result.node, result.allocations) == ("node-a", None)
    assert result.reason == "claim ns/c request r (class gpu) needs 2 device(s), 1 usable"


def test_the_reason_without_explanations_or_nodes() -> None:
    snapshot = cluster(("node-a",))
    quiet = Placer(snapshot, Usage(), explain_failures=False)
    assert quiet.place([gpus("c", 2)]).reason == "no node fits"
    nowhere = Placer(snapshot, Usage(), nodes=[])
    assert (
        nowhere.place([gpus("c")]).reason
        == "no node to try: none is known, or all are unschedulable"
    )


def test_warming_evaluates_class_selectors_ahead_of_claims() -> None:
    by_type = device_class("gpu", 'device.attributes["gpu.example.com"].type == "gpu"')
    broken = device_class("broken", "device.attributes[")
    slices = [
        slice_("sa", [dev("a0"), dev("a1", kind="mig")], node="node-a"),
        slice_("sb", [dev("b0", kind="vf")], node="node-b"),
    ]
    snapshot = ClusterSnapshot.build(slices, [broken, by_type])
    warm_class_verdicts(snapshot, ["node-a"])
    warmed = snapshot.evaluator.evaluations
    assert warmed == 2  # one verdict per distinct (type) on node-a; the broken class is skipped
    placer = Placer(snapshot, Usage(), nodes=["node-a"])
    assert picked(placer.place([gpus("c")]).allocations[0]) == ["a0"]  # type: ignore[index]
    assert snapshot.evaluator.evaluations == warmed
    warm_class_verdicts(snapshot)
    assert snapshot.evaluator.evaluations == warmed + 1  # node-b, not warmed before
