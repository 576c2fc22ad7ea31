"""`decide` from its own inputs: a view filled by watch events, and the pods to decide."""

from __future__ import annotations

from controller.decide import Decision, NotYet, Unallocatable, decide
from controller.informer import key_of
from dra_driver.allocator.result import allocation_node
from tests.unit.controller.viewkit import claim, cluster, devices, pod, put

ONE_NODE = {"node-a": "H100-SXM5-80GB:2"}


async def test_a_pod_whose_claim_is_not_created_yet_waits_quietly() -> None:
    view = cluster(ONE_NODE)
    outcome = decide(view, [pod("p", ["missing"])])
    assert isinstance(outcome, NotYet)
    assert "waiting for its ResourceClaims" in outcome.reason


async def test_a_claim_being_deleted_is_unallocatable() -> None:
    view = cluster(ONE_NODE)
    going = claim("going")
    going["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    put(view, "resourceclaims", going)
    outcome = decide(view, [pod("p", ["going"])])
    assert isinstance(outcome, Unallocatable) and "is being deleted" in outcome.reason


async def test_decision_assumes_its_devices_so_the_next_one_takes_others() -> None:
    view = cluster(ONE_NODE)
    for name in ("one", "two", "three"):
        put(view, "resourceclaims", claim(name))
    first = decide(view, [pod("p1", ["one"])])
    second = decide(view, [pod("p2", ["two"])])
    assert isinstance(first, Decision) and isinstance(second, Decision)
    taken = devices(first.allocations[("default", "one")])
    assert taken != devices(second.allocations[("default", "two")])
    assert set(view.assumed) == {("default", "one"), ("default", "two")}
    assert first.nodes == {("default", "p1"): "node-a"}
    # Both GPUs are assumed: a third pod does not fit, and is told why.
    third = decide(view, [pod("p3", ["three"])])
    assert isinstance(third, Unallocatable) and "node-a" in third.reason
    # Forgetting one assumption frees its GPU for the next decision.
    view.forget(("default", "one"))
    again = decide(view, [pod("p3", ["three"])])
    assert isinstance(again, Decision)
    assert devices(again.allocations[("default", "three")]) == taken


async def test_a_pod_with_a_claim_allocated_already_is_pinned_to_that_node() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:4"})
    put(view, "resourceclaims", claim("new"))
    decided = decide(view, [pod("seed", ["new"])])
    assert isinstance(decided, Decision)
    written = decided.allocations[("default", "new")]
    assert allocation_node(written) == "node-a"
    # The claim is written; a pod using it and a fresh claim must land on the same node.
    put(view, "resourceclaims", claim("new", allocation=written))
    put(view, "resourceclaims", claim("extra"))
    both = decide(view, [pod("user", ["new", "extra"])])
    assert isinstance(both, Decision)
    assert list(both.allocations) == [("default", "extra")]  # the written one is not redone
    assert allocation_node(both.allocations[("default", "extra")]) == "node-a"
    assert both.nodes[("default", "user")] == "node-a"
    assert [p["metadata"]["name"] for p in both.claims[("default", "new")]] == ["user"]
    view.forget(("default", "extra"))
    # Two more GPUs fit only on node-b, where the pod may not go: its claim is on node-a.
    put(view, "resourceclaims", claim("pair", count=2))
    pinned = decide(view, [pod("user2", ["new", "pair"])])
    assert isinstance(pinned, Unallocatable)
    assert "node-a" in pinned.reason and "node-b" not in pinned.reason


async def test_claims_already_on_two_nodes_are_unallocatable() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1", "node-b": "H100-SXM5-80GB:1"})
    written = {}
    for name in ("x", "y"):
        put(view, "resourceclaims", claim(name))
        made = decide(view, [pod(f"p-{name}", [name])])
        assert isinstance(made, Decision)
        written[name] = made.allocations[("default", name)]
        put(view, "resourceclaims", claim(name, allocation=written[name]))
    assert {allocation_node(a) for a in written.values()} == {"node-a", "node-b"}
    outcome = decide(view, [pod("both", ["x", "y"])])
    assert isinstance(outcome, Unallocatable)
    assert "already allocated on different nodes (node-a, node-b)" in outcome.reason


async def test_a_gang_that_does_not_fit_whole_assumes_nothing() -> None:
    view = cluster(ONE_NODE)
    put(view, "resourceclaims", claim("small"))
    put(view, "resourceclaims", claim("big", count=2))
    gang = [pod("m1", ["small"]), pod("m2", ["big"])]
    outcome = decide(view, gang)
    assert isinstance(outcome, Unallocatable)
    assert "gang member default/m2" in outcome.reason
    assert view.assumed == {}
    # Nothing is held back: a claim for both GPUs fits right after.
    put(view, "resourceclaims", claim("all", count=2))
    assert isinstance(decide(view, [pod("probe", ["all"])]), Decision)


async def test_a_gang_is_decided_together_on_one_node() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:4", "node-b": "H100-SXM5-80GB:4"})
    put(view, "resourceclaims", claim("g1", count=2))
    put(view, "resourceclaims", claim("g2", count=2))
    outcome = decide(view, [pod("m1", ["g1"]), pod("m2", ["g2"])])
    assert isinstance(outcome, Decision)
    nodes = {allocation_node(a) for a in outcome.allocations.values()}
    assert len(nodes) == 1
    assert set(outcome.nodes.values()) == nodes
    assert {key_of(p) for p in outcome.pods} == {("default", "m1"), ("default", "m2")}


async def test_a_claim_shared_by_two_gang_members_is_allocated_once() -> None:
    view = cluster(ONE_NODE)
    put(view, "resourceclaims", claim("common"))
    outcome = decide(view, [pod("m1", ["common"]), pod("m2", ["common"])])
    assert isinstance(outcome, Decision)
    assert list(outcome.allocations) == [("default", "common")]
    assert [p["metadata"]["name"] for p in outcome.claims[("default", "common")]] == ["m1", "m2"]
