"""The view's per-node account of what pods request, kept from Pod and claim events."""

from __future__ import annotations

from typing import Any

from controller.informer import Event, key_of
from controller.node_load import NodeLoad, counted_node
from controller.view import ClusterView
from dra_driver.allocator import AllocationMode
from dra_driver.noderesources import NodeUsage, Resources
from tests.support import objects

GI = 2**30


def pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    *,
    node: str | None = None,
    claims: list[str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    placed = {"nodeName": node} if node else {}
    return objects.pod(
        name, claims or (), namespace="ns", containers=[container], status=status, **placed
    )


def node(name: str, cpu: str = "8", memory: str = "16Gi", pods: str = "110") -> dict[str, Any]:
    return objects.node(name, allocatable={"cpu": cpu, "memory": memory, "pods": pods})


def claim(name: str, on: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}
    if on is not None:
        body["status"] = {"allocation": allocation(on)}
    return body


def allocation(node_name: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    return {"devices": {"results": []}, "nodeSelector": {"nodeSelectorTerms": [term]}}


def apply(view: ClusterView, resource: str, obj: dict[str, Any], kind: str = "MODIFIED") -> None:
    view.apply(Event(kind, resource, key_of(obj), obj, None))


def view_with(*objs: tuple[str, dict[str, Any]]) -> ClusterView:
    view = ClusterView(AllocationMode.SCORED)
    for resource, obj in objs:
        apply(view, resource, obj, "ADDED")
    return view


def test_bound_pods_add_up_on_their_node() -> None:
    view = view_with(("pods", pod("a", node="n1")), ("pods", pod("b", "500m", node="n1")))
    assert view.load.on("n1") == NodeUsage(Resources({"cpu": 1500, "memory": 2 * GI}), 2)
    assert view.load.on("n2") == NodeUsage()


def test_unbound_pods_count_nowhere_until_bound() -> None:
    view = view_with(("pods", pod("a")))
    assert view.load.on("n1") == NodeUsage()
    apply(view, "pods", pod("a", node="n1"))
    assert view.load.on("n1").pods == 1


def test_a_nominated_pod_counts_on_its_nominated_node() -> None:
    view = view_with(("pods", pod("a", nominatedNodeName="n2")))
    assert view.load.on("n2").requested == Resources({"cpu": 1000, "memory": GI})


def test_update_moves_the_requests() -> None:
    view = view_with(("pods", pod("a", node="n1")))
    apply(view, "pods", pod("a", "3", node="n1"))  # resized
    assert view.load.on("n1") == NodeUsage(Resources({"cpu": 3000, "memory": GI}), 1)


def test_delete_frees_the_room_and_bumps_the_generation() -> None:
    view = view_with(("pods", pod("a", node="n1")), ("pods", pod("b", node="n1")))
    before = view.generation
    apply(view, "pods", pod("a", node="n1"), "DELETED")
    assert view.load.on("n1") == NodeUsage(Resources({"cpu": 1000, "memory": GI}), 1)
    assert view.generation > before


def test_finished_pods_stop_counting_terminating_ones_do_not() -> None:
    terminating = pod("b", node="n1")
    terminating["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    view = view_with(("pods", pod("a", node="n1")), ("pods", terminating))
    before = view.generation
    apply(view, "pods", pod("a", node="n1", phase="Succeeded"))
    assert view.load.on("n1").pods == 1  # only the terminating pod
    assert view.generation > before
    apply(view, "pods", pod("b", node="n1", phase="Failed"))
    assert view.load.on("n1") == NodeUsage()


async def test_a_gated_pod_counts_where_its_claims_are_allocated() -> None:
    view = view_with(("resourceclaims", claim("c1")), ("pods", pod("a", claims=["c1"])))
    assert view.load.on("n1") == NodeUsage()
    view.assume(("ns", "c1"), allocation("n1"))
    assert view.load.on("n1").pods == 1
    view.forget(("ns", "c1"))
    assert view.load.on("n1") == NodeUsage()
    allocated = claim("c1", on="n2")
    allocated["metadata"]["resourceVersion"] = "2"
    apply(view, "resourceclaims", allocated)
    assert view.load.on("n2").pods == 1
    # Once bound it counts on its node, once.
    apply(view, "pods", pod("a", node="n2", claims=["c1"]))
    assert view.load.on("n2").pods == 1


def test_lacking_names_what_the_node_has_no_room_for() -> None:
    view = view_with(
        ("nodes", node("n1", cpu="8")),
        ("nodes", node("n2", cpu="16")),
        ("nodes", {"metadata": {"name": "bare"}}),
        ("pods", pod("busy", "6", node="n1")),
    )
    lacking = view.lacking([pod("new", "4")], ["n1", "n2", "bare"])
    assert list(lacking) == ["n1"]
    assert [str(s) for s in lacking["n1"]] == ["insufficient cpu (asks 4, 2 free)"]


def test_lacking_leaves_out_the_pod_itself_and_sums_a_gang() -> None:
    view = view_with(("nodes", node("n1", cpu="4", pods="2")), ("pods", pod("a", "3", node="n1")))
    assert view.lacking([pod("a", "3", node="n1")], ["n1"]) == {}
    gang = [pod("x", "500m"), pod("y", "500m")]
    lack = view.lacking(gang, ["n1"])["n1"]
    assert [s.resource for s in lack] == ["pods"]
    # The members' requests are checked as one: 0.5 + 0.5 fits in 1 free cpu, 1 + 1 does not.
    view = view_with(("nodes", node("n1", cpu="4")), ("pods", pod("a", "3", node="n1")))
    assert view.lacking(gang, ["n1"]) == {}
    lack = view.lacking([pod("x"), pod("y")], ["n1"])["n1"]
    assert [str(s) for s in lack] == ["insufficient cpu (asks 2, 1 free)"]


# --- the ledger and its rules, without a view --------------------------------------------------


def test_which_node_a_pod_counts_against() -> None:
    nowhere: dict[str, str] = {}
    claims = {"c1": "n3", "c2": "n4"}
    assert counted_node(pod("a", node="n1", nominatedNodeName="n2"), nowhere.get) == "n1"
    assert counted_node(pod("a", nominatedNodeName="n2", claims=["c1"]), claims.get) == "n2"
    assert counted_node(pod("a", claims=["c0", "c1", "c2"]), claims.get) == "n3"
    assert counted_node(pod("a", claims=["c0"]), claims.get) is None
    assert counted_node(pod("a"), claims.get) is None
    for phase in ("Succeeded", "Failed"):
        assert counted_node(pod("a", node="n1", phase=phase), claims.get) is None
        assert counted_node(pod("a", claims=["c1"], phase=phase), claims.get) is None
    assert counted_node(pod("a", node="n1", phase="Running"), claims.get) == "n1"
    assert counted_node({"metadata": {"name": "bare"}}, claims.get) is None


def test_set_moves_a_pod_between_nodes_and_says_when_room_was_freed() -> None:
    load = NodeLoad()
    one = Resources({"cpu": 1000})
    two = Resources({"cpu": 2000})
    assert load.set(("ns", "a"), ("n1", one)) is False  # nothing was freed
    assert load.set(("ns", "b"), ("n1", two)) is False
    assert load.of(("ns", "a")) == ("n1", one)
    assert load.on("n1") == NodeUsage(Resources({"cpu": 3000}), 2)
    assert load.set(("ns", "a"), ("n1", one)) is False  # unchanged
    assert load.on("n1") == NodeUsage(Resources({"cpu": 3000}), 2)

    assert load.set(("ns", "a"), ("n2", one)) is True
    assert load.on("n1") == NodeUsage(two, 1)
    assert load.on("n2") == NodeUsage(one, 1)
    assert load.set(("ns", "b"), None) is True
    assert load.on("n1") == NodeUsage() and load.of(("ns", "b")) is None
    assert load.set(("ns", "b"), None) is False
    # The last pod of a node takes the node's entry with it, even one that requests nothing.
    assert load.set(("ns", "c"), ("n2", Resources())) is False
    assert load.on("n2") == NodeUsage(one, 2)
    assert load.set(("ns", "a"), None) is True
    assert load.set(("ns", "c"), None) is True
    assert load.on("n2") == NodeUsage()
    assert load._nodes == {} and load._pods == {}


def test_count_takes_the_requests_from_the_pod_and_forgets_it_without_one() -> None:
    load = NodeLoad()
    body = pod("a", "2", "1Gi")
    assert load.count(("ns", "a"), body, "n1") is False
    assert load.of(("ns", "a")) == ("n1", Resources({"cpu": 2000, "memory": GI}))
    assert load.count(("ns", "a"), body, None) is True
    assert load.of(("ns", "a")) is None
    assert load.count(("ns", "a"), body, "n1") is False
    assert load.count(("ns", "a"), None, "n1") is True
    assert load.on("n1") == NodeUsage()
