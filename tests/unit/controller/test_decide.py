"""`decide` from its own inputs: a view filled by watch events, and the pods to decide."""

from __future__ import annotations

from typing import Any

import pytest

from controller.decide import Decision, NoRoom, NotYet, Unallocatable, decide
from controller.informer import key_of
from controller.pod_placer import PodPlacer
from controller.view import ClusterView
from dra_driver.allocator import AllocationMode
from dra_driver.allocator.result import allocation_node
from tests.unit.controller.viewkit import claim, cluster, delete, devices, node, pod, put

ONE_NODE = {"node-a": "H100-SXM5-80GB:2"}


def only_on(body: dict[str, Any], node_name: str) -> dict[str, Any]:
    """The pod with a nodeSelector that lets it run on `node_name` only."""
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return body


def asking_cpu(body: dict[str, Any], cpu: int, memory: str | None = None) -> dict[str, Any]:
    requests = {"cpu": str(cpu)} | ({"memory": memory} if memory else {})
    body["spec"]["containers"][0]["resources"] = {"requests": requests}
    return body


def with_cpu(view: ClusterView, node_name: str, cpu: int) -> None:
    """The node publishes its allocatable, `cpu` CPUs among it."""
    body = node(node_name)
    body["status"]["allocatable"] = {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}
    put(view, "nodes", body, "MODIFIED")


def watched(view: ClusterView, *pods: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods as the controller has them: in the view too, where they count against nodes."""
    for body in pods:
        put(view, "pods", body)
    return list(pods)


def written(view: ClusterView, name: str, pod_name: str, *, on: str) -> dict[str, Any]:
    """Claim `name` decided on node `on` for pod `pod_name`, and written: allocated in the view."""
    put(view, "resourceclaims", claim(name))
    made = decide(view, [only_on(pod(pod_name, [name]), on)])
    assert isinstance(made, Decision)
    allocation = made.allocations[("default", name)]
    view.forget(("default", name))
    put(view, "resourceclaims", claim(name, allocation=allocation))
    return allocation


def nodes_of(decision: Decision) -> dict[str, str | None]:
    return {claim_key[1]: allocation_node(a) for claim_key, a in decision.allocations.items()}


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


async def test_a_pod_whose_claims_are_on_a_node_it_may_not_run_on_is_told_why() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1", "node-b": "H100-SXM5-80GB:1"})
    written(view, "x", "seed", on="node-a")
    outcome = decide(view, [only_on(pod("p", ["x"]), "node-b")])
    assert outcome == Unallocatable(
        "pod default/p: its claims are allocated on node node-a, where it may not run: "
        "nodeSelector kubernetes.io/hostname=node-b does not match"
    )
    delete(view, "nodes", node("node-a"))
    outcome = decide(view, [pod("q", ["x"])])
    assert outcome == Unallocatable(
        "pod default/q: its claims are allocated on node node-a, where it may not run: "
        "it is not a known node"
    )


async def test_a_pod_no_node_may_take_is_told_why_each_refuses() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1"})
    put(view, "resourceclaims", claim("c"))
    outcome = decide(view, [only_on(pod("p", ["c"]), "node-z")])
    assert outcome == Unallocatable(
        "pod default/p: no node is eligible for the pod "
        "(node-a: nodeSelector kubernetes.io/hostname=node-z does not match)"
    )


async def test_a_pod_without_room_on_any_node_is_told_what_the_first_three_lack() -> None:
    view = cluster({f"node-{x}": "H100-SXM5-80GB:1" for x in "abcd"})
    for x in "abcd":
        with_cpu(view, f"node-{x}", 1)
    put(view, "resourceclaims", claim("c"))
    outcome = decide(view, [asking_cpu(pod("p", ["c"]), 2, "100Gi")])
    lack = "insufficient cpu (asks 2, 1 free), insufficient memory (asks 100Gi, 64Gi free)"
    assert outcome == Unallocatable(
        f"pod default/p: no eligible node has room for the pod (node node-a: {lack}; "
        f"node node-b: {lack}; node node-c: {lack}; and 1 more)"
    )
    assert view.assumed == {}


async def test_a_pod_without_room_on_any_node_counts_once_in_the_learned_workload() -> None:
    """Turned away before any search, it is still a pod of the workload: counted as a searched
    one is (and as `simulate --workload learned` counts it), once however often it waits."""
    view = cluster({"node-a": "H100-SXM5-80GB:1"})
    with_cpu(view, "node-a", 1)
    put(view, "resourceclaims", claim("c"))
    seen = view.pod_placer().workload.seen
    for _ in range(2):
        outcome = decide(view, watched(view, asking_cpu(pod("p", ["c"]), 2)))
        assert isinstance(outcome, Unallocatable) and "no eligible node has room" in outcome.reason
    assert view.pod_placer().workload.seen == seen + 1
    assert view.profile.counted == {("default", "p")} and view.profile.pods() == 1


async def test_first_fit_counts_no_pod_turned_away_and_makes_no_pod_placer() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1"}, AllocationMode.FIRST_FIT)
    with_cpu(view, "node-a", 1)
    put(view, "resourceclaims", claim("c"))
    assert isinstance(decide(view, [asking_cpu(pod("p", ["c"]), 2)]), Unallocatable)
    assert view.profile.counted == set() and view._pod_placer is None


async def test_nodes_left_out_for_lack_of_room_are_named_after_the_allocators_reason() -> None:
    # node-a has the GPUs but not the CPU; node-b has the CPU but one GPU only.
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:1"})
    with_cpu(view, "node-a", 1)
    with_cpu(view, "node-b", 4)
    put(view, "resourceclaims", claim("c", count=2))
    outcome = decide(view, [asking_cpu(pod("p", ["c"]), 2)])
    assert isinstance(outcome, Unallocatable)
    assert outcome.reason.startswith("no node fits (1 tried): node-b: ")
    assert outcome.reason.endswith(
        "; left out for lack of room: node node-a: insufficient cpu (asks 2, 1 free)"
    )


async def test_a_pod_with_every_claim_allocated_goes_to_their_node() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1", "node-b": "H100-SXM5-80GB:1"})
    written(view, "x", "seed", on="node-b")
    outcome = decide(view, [pod("user", ["x"])])
    assert isinstance(outcome, Decision)
    assert outcome.allocations == {}
    assert outcome.nodes == {("default", "user"): "node-b"}


async def test_gang_members_that_share_no_node_are_decided_one_by_one() -> None:
    # m1's claim is on node-a already; m2 may run on node-b only.
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    written(view, "x", "seed", on="node-a")
    put(view, "resourceclaims", claim("y"))
    outcome = decide(view, [pod("m1", ["x"]), only_on(pod("m2", ["y"]), "node-b")])
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"y": "node-b"}
    assert outcome.nodes == {("default", "m1"): "node-a", ("default", "m2"): "node-b"}


async def test_a_gang_goes_where_all_of_it_fits_not_where_its_first_member_would() -> None:
    # First-fit takes node-a for one member alone; both members fit on node-b only.
    view = cluster(
        {"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:4"}, AllocationMode.FIRST_FIT
    )
    for name in ("alone", "g1", "g2"):
        put(view, "resourceclaims", claim(name, count=2))
    alone = decide(view, [pod("alone", ["alone"])])
    assert isinstance(alone, Decision) and nodes_of(alone) == {"alone": "node-a"}
    view.forget(("default", "alone"))
    outcome = decide(view, watched(view, pod("m1", ["g1"]), pod("m2", ["g2"])))
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"g1": "node-b", "g2": "node-b"}
    assert set(outcome.nodes.values()) == {"node-b"}


@pytest.mark.parametrize("restricted", [0, 1])
async def test_a_gang_goes_only_where_every_member_may_run(restricted: int) -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:4", "node-b": "H100-SXM5-80GB:4"})
    for name in ("g1", "g2"):
        put(view, "resourceclaims", claim(name))
    gang = [pod("m1", ["g1"]), pod("m2", ["g2"])]
    only_on(gang[restricted], "node-b")
    outcome = decide(view, watched(view, *gang))
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"g1": "node-b", "g2": "node-b"}


async def test_gang_members_without_room_together_are_spread_over_nodes() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    for name in ("node-a", "node-b"):
        with_cpu(view, name, 4)
    for name in ("g1", "g2"):
        put(view, "resourceclaims", claim(name))
    gang = [asking_cpu(pod("m1", ["g1"]), 3), asking_cpu(pod("m2", ["g2"]), 3)]
    outcome = decide(view, watched(view, *gang))
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"g1": "node-a", "g2": "node-b"}
    assert outcome.nodes == {("default", "m1"): "node-a", ("default", "m2"): "node-b"}


async def test_a_gang_member_without_room_beside_the_others_fails_the_whole_gang() -> None:
    view = cluster(ONE_NODE)
    with_cpu(view, "node-a", 4)
    for name in ("g1", "g2"):
        put(view, "resourceclaims", claim(name))
    gang = [asking_cpu(pod("m1", ["g1"]), 3), asking_cpu(pod("m2", ["g2"]), 3)]
    outcome = decide(view, watched(view, *gang))
    assert outcome == Unallocatable(
        "gang member default/m2: no eligible node has room for the pod "
        "(node node-a: insufficient cpu (asks 3, 1 free))"
    )
    assert view.assumed == {}


async def test_a_gang_member_with_a_wrong_claim_fails_the_gang_and_frees_what_others_took() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    put(view, "resourceclaims", claim("fine"))
    put(view, "resourceclaims", claim("wrong", kind="tpu"))
    gang = [only_on(pod("m1", ["fine"]), "node-a"), only_on(pod("m2", ["wrong"]), "node-b")]
    outcome = decide(view, gang)
    assert outcome == Unallocatable(
        "claim default/wrong: spec.devices.requests[0].exactly: DeviceClass tpu does not exist"
    )
    assert view.assumed == {}


async def test_a_gang_member_free_to_go_anywhere_joins_the_others() -> None:
    # m1 and m3 may not share a node, so the gang is decided member by member; m2 could take
    # the busiest node, node-c, but goes where m1 went.
    view = cluster(
        {"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2", "node-c": "H100-SXM5-80GB:4"}
    )
    put(view, "resourceclaims", claim("busy", count=2))
    assert isinstance(decide(view, [only_on(pod("busy", ["busy"]), "node-c")]), Decision)
    for name in ("g1", "g2", "g3"):
        put(view, "resourceclaims", claim(name))
    gang = [
        only_on(pod("m1", ["g1"]), "node-a"),
        pod("m2", ["g2"]),
        only_on(pod("m3", ["g3"]), "node-b"),
    ]
    outcome = decide(view, gang)
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"g1": "node-a", "g2": "node-a", "g3": "node-b"}


async def test_a_claim_shared_by_two_gang_members_on_a_one_gpu_node_is_allocated_once() -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:1"})
    put(view, "resourceclaims", claim("common"))
    outcome = decide(view, [pod("m1", ["common"]), pod("m2", ["common"])])
    assert isinstance(outcome, Decision)
    assert nodes_of(outcome) == {"common": "node-a"}


async def test_a_forgotten_decision_leaves_no_load_on_its_node() -> None:
    # Scored mode tries the busiest node first; once node-b's only decision is forgotten, the
    # two nodes are equally idle again and the name decides.
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    for name in ("first", "second"):
        put(view, "resourceclaims", claim(name))
    first = decide(view, [only_on(pod("p1", ["first"]), "node-b")])
    assert isinstance(first, Decision) and nodes_of(first) == {"first": "node-b"}
    view.forget(("default", "first"))
    second = decide(view, [pod("p2", ["second"])])
    assert isinstance(second, Decision) and nodes_of(second) == {"second": "node-a"}


async def test_the_pod_placer_is_made_afresh_past_its_limit_of_gpu_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long-running controller must not keep every GPU state it ever saw: past the limit a
    fresh pod placer takes over, over the same usage and with the same workload (the limit
    refreshes no learned weights: `simulate --workload learned` could not replay it), and
    decisions go on unchanged."""
    from controller import view as view_module

    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    monkeypatch.setattr(view_module, "MAX_GPU_STATES", 1)
    placers: list[PodPlacer] = []  # held, so that no two can share an id
    taken: list[str] = []
    for i in range(4):
        put(view, "resourceclaims", claim(f"c{i}"))
        made = decide(view, watched(view, pod(f"p{i}", [f"c{i}"])))
        assert isinstance(made, Decision)
        allocation = made.allocations[("default", f"c{i}")]
        taken += [f"{allocation_node(allocation)}/{d}" for d in devices(allocation)]
        placers.append(view.pod_placer())
    assert len({id(p) for p in placers}) > 1
    assert len(set(taken)) == 4  # no device twice across the fresh placers
    workloads = {id(p.workload) for p in placers}
    assert len(workloads) == 1 and view.pod_placer().workload.seen == 4


async def test_pods_like_one_that_found_no_room_search_only_where_room_was_freed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = cluster({"node-a": "H100-SXM5-80GB:2", "node-b": "H100-SXM5-80GB:2"})
    names = ["one", "two", "three", "four", "w1", "w2", "w3", "w4", "w5", "w6", "pair"]
    for name in names:
        put(view, "resourceclaims", claim(name, count=2 if name == "pair" else 1))
    placed = {}
    for name in ("one", "two", "three", "four"):
        made = decide(view, [pod(f"p-{name}", [name])])
        assert isinstance(made, Decision)
        placed[name] = allocation_node(made.allocations[("default", name)])
    searches: list[tuple[str, list[str]]] = []
    place_pod = view.place_pod

    def counted(body: dict[str, Any], claims: Any, nodes: Any) -> Any:
        searches.append((body["metadata"]["name"], sorted(nodes)))
        return place_pod(body, claims, nodes)

    monkeypatch.setattr(view, "place_pod", counted)
    # As a pass decides: failures unexplained (an explained one is searched for its reasons).
    monkeypatch.setattr(view.placer(), "explain_failures", False)
    nowhere = NoRoom()
    first = decide(view, [pod("w1", ["w1"])], nowhere)
    seen = view.pod_placer().workload.seen
    second = decide(view, [pod("w2", ["w2"])], nowhere)
    assert isinstance(first, Unallocatable) and isinstance(second, Unallocatable)
    assert second.reason == first.reason
    both = ["node-a", "node-b"]
    assert searches == [("w1", both)]  # the second pod is like the first: no second search
    # Yet it counts in the placer's workload and the learned profile, as a searched one does.
    assert view.pod_placer().workload.seen == seen + 1
    assert ("default", "w2") in view.profile.counted
    # Another spec (two GPUs) is searched for: it is not known to fit nowhere.
    assert isinstance(decide(view, [pod("w4", ["pair"])], nowhere), Unallocatable)
    assert searches[-1] == ("w4", both)
    # Room given back on one node: the next pod like them is searched for there alone, and
    # placed there.
    freed = next(name for name in placed if placed[name] == "node-b")
    view.forget(("default", freed))
    nowhere.freed(["node-b"])
    there = decide(view, [pod("w3", ["w3"])], nowhere)
    assert isinstance(there, Decision)
    assert nodes_of(there) == {"w3": "node-b"}
    assert searches[-1] == ("w3", ["node-b"])
    # Said to be freed where nothing was: one search of the nodes freed since the failure
    # (node-b's room went to w3 meanwhile), then none again.
    nowhere.freed(["node-a"])
    assert isinstance(decide(view, [pod("w5", ["w5"])], nowhere), Unallocatable)
    assert searches[-1] == ("w5", both)
    again = decide(view, [pod("w6", ["w6"])], nowhere)
    assert isinstance(again, Unallocatable) and again.reason == first.reason
    assert searches[-1] == ("w5", both)


async def test_a_search_of_the_freed_nodes_alone_finds_what_a_search_of_all_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = cluster(
        {"node-a": "H100-SXM5-80GB:4", "node-b": "H100-SXM5-80GB:2", "node-c": "H100-SXM5-80GB:4"}
    )
    monkeypatch.setattr(view.placer(), "explain_failures", False)
    on: dict[str, list[str]] = {}
    for index in range(10):
        name = f"c{index}"
        put(view, "resourceclaims", claim(name))
        made = decide(view, [pod(f"p{index}", [name])])
        assert isinstance(made, Decision)
        on.setdefault(str(allocation_node(made.allocations[("default", name)])), []).append(name)
    for name in ("w", "x"):
        put(view, "resourceclaims", claim(name))
    nowhere = NoRoom()
    assert isinstance(decide(view, [pod("w", ["w"])], nowhere), Unallocatable)
    # Two GPUs come free on node-a and one on node-c: nodes left as differently full.
    for name in [*on["node-a"][:2], on["node-c"][0]]:
        view.forget(("default", name))
    nowhere.freed(["node-a", "node-a", "node-c"])
    narrow = decide(view, [pod("x", ["x"])], nowhere)
    assert isinstance(narrow, Decision)
    view.forget(("default", "x"))
    full = decide(view, [pod("x", ["x"])])
    assert isinstance(full, Decision)
    assert narrow.allocations == full.allocations
