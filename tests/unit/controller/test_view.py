"""`ClusterView`: merging watch events with fresher reads, assumptions, and conflicts."""

from __future__ import annotations

import asyncio

from controller.decide import Decision, decide
from controller.informer import Event
from tests.unit.controller.viewkit import claim, cluster, node, pod, put, stamped

NODE = {"node-a": "H100-SXM5-80GB:1"}


async def test_an_older_event_never_overwrites_a_fresher_read() -> None:
    view = cluster(NODE)
    put(view, "resourceclaims", claim("c"))
    old = dict(view.claims[("default", "c")])
    fresh = stamped(claim("c", reservedFor=[{"resource": "pods", "name": "p", "uid": "u"}]))
    view.refresh_claims_one(fresh)
    view.apply(Event("MODIFIED", "resourceclaims", ("default", "c"), old, None))
    assert view.claims[("default", "c")] is fresh


async def test_conflict_names_a_device_another_claim_holds() -> None:
    view = cluster(NODE)
    put(view, "resourceclaims", claim("ours"))
    decided = decide(view, [pod("p", ["ours"])])
    assert isinstance(decided, Decision)
    ours = decided.allocations[("default", "ours")]
    assert view.conflict(("default", "ours"), ours) is None  # its own assumption is no conflict
    # The kube-scheduler allocates the same GPU to another claim; the watch brings it.
    put(view, "resourceclaims", claim("theirs", allocation=ours))
    assert view.conflict(("default", "ours"), ours) is not None
    # Once theirs is gone, ours is clear again.
    put(view, "resourceclaims", claim("theirs"), kind="MODIFIED")
    assert view.conflict(("default", "ours"), ours) is None


async def test_an_observed_allocation_replaces_the_assumption() -> None:
    view = cluster(NODE)
    put(view, "resourceclaims", claim("c"))
    decided = decide(view, [pod("p", ["c"])])
    assert isinstance(decided, Decision)
    allocation = decided.allocations[("default", "c")]
    assert ("default", "c") in view.assumed
    put(view, "resourceclaims", claim("c", allocation=allocation), kind="MODIFIED")
    assert view.assumed == {}
    before = view.generation
    view.forget(("default", "c"))  # nothing assumed: nothing freed, nothing changed
    assert view.generation == before
    assert view.conflict(("default", "x"), allocation) is not None


async def test_a_decision_is_held_once_and_its_confirmation_changes_no_usage() -> None:
    """The placer records what it chose and the view keeps that record (not a second one);
    the watch bringing the same allocation back leaves the node's usage untouched, so what
    is cached per node state stays valid. A different allocation still replaces it."""
    view = cluster({"node-a": "H100-SXM5-80GB:2"})
    put(view, "resourceclaims", claim("c"))
    decided = decide(view, [pod("p", ["c"])])
    assert isinstance(decided, Decision)
    key = ("default", "c")
    allocation = decided.allocations[key]
    usage = view.usage
    held = {**usage.exclusive, **usage.shares}
    assert held and set(held.values()) == {1}  # each device counted once
    version = usage.node_version("node-a")
    put(view, "resourceclaims", claim("c", allocation=dict(allocation)), kind="MODIFIED")
    assert usage.node_version("node-a") == version
    assert view.assumed == {}
    put(view, "resourceclaims", claim("c"), kind="MODIFIED")  # deallocated: freed
    assert not usage.exclusive and not usage.shares
    assert view.conflict(("default", "x"), allocation) is None


async def test_a_full_list_drops_claims_deleted_meanwhile_but_keeps_assumed_ones() -> None:
    view = cluster(NODE)
    put(view, "resourceclaims", claim("gone"))
    put(view, "resourceclaims", claim("kept"))
    decided = decide(view, [pod("p", ["kept"])])
    assert isinstance(decided, Decision)
    listed_at = max(int(c["metadata"]["resourceVersion"]) for c in view.claims.values())
    view.refresh_claims([], listed_at)
    assert set(view.claims) == {("default", "kept")}


async def test_a_list_older_than_a_claim_the_watch_brought_keeps_it() -> None:
    """The list was taken before the claim was created; the watch delivered the claim before
    the list's answer was merged: the claim stays (no later event would bring it back)."""
    view = cluster(NODE)
    put(view, "resourceclaims", claim("old"))
    listed_at = int(view.claims[("default", "old")]["metadata"]["resourceVersion"])
    put(view, "resourceclaims", claim("new"))
    view.refresh_claims([], listed_at)
    assert set(view.claims) == {("default", "new")}


async def test_claims_caught_up_waits_for_the_watch_or_times_out() -> None:
    view = cluster(NODE)
    target = view.watched_claims_rv + 1
    assert not await view.claims_caught_up(target, 0.01)
    waiting = asyncio.create_task(view.claims_caught_up(target, 5.0))
    put(view, "resourceclaims", claim("late"))
    assert await waiting


async def test_eligibility_is_shared_by_unconstrained_pods_until_a_node_changes() -> None:
    view = cluster({"node-1": "H100-SXM5-80GB:1", "node-2": "H100-SXM5-80GB:1"})
    plain = pod("p", [])
    assert view.eligibility(plain).nodes == ["node-1", "node-2"]
    assert view.eligibility(pod("q", [])) is view.eligibility(plain)
    # A pod that names its node gets its own answer.
    pinned = pod("r", [])
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-2"}
    assert view.eligibility(pinned).nodes == ["node-2"]
    # node-1 is cordoned: the watch brings it, and what every plain pod sees changes with it.
    cordoned = node("node-1")
    cordoned["spec"] = {"unschedulable": True}
    put(view, "nodes", cordoned, kind="MODIFIED")
    assert view.eligibility(plain).nodes == ["node-2"]
    assert view.eligibility(plain).rejected == {"node-1": "cordoned (unschedulable)"}
    tolerant = pod("t", [])
    tolerant["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert view.eligibility(tolerant).nodes == ["node-2"]
