"""The queue state the controller keeps between passes, over a view filled as the informers fill
it: which running pods reclaim may evict, what the queues hold, holds and their expiry, and the
texts a waiting pod is shown."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.decide import Decision, Unallocatable
from controller.informer import Key
from controller.queueing import (
    Hold,
    QueueKeeper,
    QueuePass,
    QueueSettings,
    Reclaim,
    _gang_name,
    _standing,
    unexplained,
)
from controller.view import ClusterView
from dra_driver.allocator.result import allocation_node
from dra_driver.device_status import idle_condition, with_condition
from dra_driver.queues import Amounts, QueueSpec, parse_queue
from tests.support import objects
from tests.unit.controller.viewkit import DRIVER, cluster, delete, put

FINALIZER = f"{DRIVER}/allocation"
SETTINGS = QueueSettings(
    driver_name=DRIVER,
    finalizer=FINALIZER,
    gang_label=f"{DRIVER}/gang",
    gang_size_label=f"{DRIVER}/gang-size",
    default_queue="fallback",
    hold_s=60.0,
)
GI = 2**30


def gpu_queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def allocated(name: str, namespace: str, *devices: str, node: str | None = "n1") -> dict[str, Any]:
    """A claim allocated `devices` of node n1's pool, with our finalizer."""
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "req", "driver": DRIVER, "pool": "n1", "device": d} for d in devices
                ]
            }
        }
    }
    if node is not None:
        status["allocation"]["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    made = objects.claim(
        name, objects.request("req", "gpu", len(devices)), namespace=namespace, status=status
    )
    made["metadata"]["finalizers"] = [FINALIZER]
    return made


def running_pod(name: str, namespace: str, claims: list[str], **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", None)
    made = objects.pod(name, claims, namespace=namespace, uid=f"uid-{name}", labels=labels)
    made["metadata"]["creationTimestamp"] = extra.pop("created", "2025-01-01T00:00:00Z")
    made["status"] = {"phase": extra.pop("phase", "Running")}
    made["metadata"].update(extra.pop("meta", {}))
    made["spec"].update(extra)
    return made


@pytest.fixture
def view() -> ClusterView:
    made = cluster({"n1": "H100-SXM5-80GB:4"})
    put(made, "gpuqueues", gpu_queue("a", namespaces=["qa"], guaranteed={"gpu": "1"}))
    put(made, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "2"}))
    return made


def one_gpu(view: ClusterView) -> Amounts:
    device = view.snapshot.device(DRIVER, "n1", "gpu-0")
    assert device is not None
    return Amounts(1.0, float(device.capacity[f"{DRIVER}/memory"].value))


async def test_a_running_pod_is_read_with_its_queue_nodes_priority_age_and_amounts(
    view: ClusterView,
) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    put(view, "resourceclaims", allocated("c2", "qa", "gpu-1", "gpu-2"))
    put(
        view,
        "pods",
        running_pod("p", "qa", ["c1", "c2"], priority=7, created="2025-03-04T05:06:07Z"),
    )
    keeper = QueueKeeper(SETTINGS, view)
    (found,) = keeper.running()
    assert found.key == ("qa", "p") and found.queue == "a"
    assert found.nodes == {"n1"} and found.priority == 7
    assert found.created == "2025-03-04T05:06:07Z" and found.gang is None
    whole = one_gpu(view)
    assert found.amounts == Amounts(3.0, 3 * whole.memory)


async def test_a_gang_members_unit_is_named_by_namespace_and_gang(view: ClusterView) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    put(view, "resourceclaims", allocated("c2", "qa", "gpu-1"))
    gang = {SETTINGS.gang_label: "g", SETTINGS.gang_size_label: "2"}
    put(view, "pods", running_pod("p", "qa", ["c1"], labels=gang))
    bad = {SETTINGS.gang_label: "h", SETTINGS.gang_size_label: "many"}
    put(view, "pods", running_pod("q", "qa", ["c2"], labels=bad))
    found = {r.key[1]: r.gang for r in QueueKeeper(SETTINGS, view).running()}
    assert found == {"p": "qa/g", "q": None}  # a bad gang label: the pod goes alone


@pytest.mark.parametrize(
    "change",
    [
        {"meta": {"deletionTimestamp": "2025-01-01T00:00:00Z"}},
        {"phase": "Succeeded"},
        {"phase": "Failed"},
        {"schedulingGates": [{"name": "x"}]},
    ],
)
async def test_pods_going_finished_or_gated_are_not_running(
    view: ClusterView, change: dict[str, Any]
) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    put(view, "resourceclaims", allocated("c2", "qa", "gpu-1"))
    put(view, "pods", running_pod("p", "qa", ["c1"], **change))
    put(view, "pods", running_pod("ok", "qa", ["c2"], phase="Pending"))
    assert [r.key for r in QueueKeeper(SETTINGS, view).running()] == [("qa", "ok")]


async def test_pods_that_hold_nothing_we_allocated_on_a_node_are_not_running(
    view: ClusterView,
) -> None:
    unallocated = objects.claim("none", objects.request("req", "gpu", 1), namespace="qa")
    foreign = allocated("foreign", "qa", "gpu-1")
    foreign["metadata"]["finalizers"] = ["someone.else/finalizer"]
    for claim in (unallocated, foreign, allocated("nowhere", "qa", "gpu-2", node=None)):
        put(view, "resourceclaims", claim)
    put(view, "resourceclaims", allocated("mine", "qa", "gpu-0"))
    put(view, "pods", running_pod("no-claims", "qa", []))
    put(view, "pods", running_pod("missing-claim", "qa", ["ghost"]))
    put(view, "pods", running_pod("unallocated", "qa", ["mine", "none"]))
    put(view, "pods", running_pod("foreign", "qa", ["foreign"]))
    put(view, "pods", running_pod("nowhere", "qa", ["nowhere"]))
    assert QueueKeeper(SETTINGS, view).running() == []
    # One claim of ours is enough, beside one of another allocator's.
    other = allocated("other", "qa", "gpu-3")
    other["metadata"]["finalizers"] = []
    put(view, "resourceclaims", other)
    delete(view, "pods", running_pod("unallocated", "qa", []))
    put(view, "pods", running_pod("both", "qa", ["other", "mine"]))
    assert [r.key for r in QueueKeeper(SETTINGS, view).running()] == [("qa", "both")]


async def test_a_pod_sharing_its_claim_with_a_live_pod_is_not_running(view: ClusterView) -> None:
    put(view, "resourceclaims", allocated("shared", "qa", "gpu-0"))
    put(view, "pods", running_pod("p", "qa", ["shared"]))
    put(view, "pods", running_pod("mate", "qa", ["shared"]))
    assert QueueKeeper(SETTINGS, view).running() == []
    # Once the mate finishes, is being deleted, or is gone, evicting p frees the claim.
    for mate in (
        running_pod("mate", "qa", ["shared"], phase="Succeeded"),
        running_pod("mate", "qa", ["shared"], meta={"deletionTimestamp": "2025-01-01T00:00:00Z"}),
    ):
        put(view, "pods", mate, kind="MODIFIED")
        assert [r.key for r in QueueKeeper(SETTINGS, view).running()] == [("qa", "p")]
    delete(view, "pods", running_pod("mate", "qa", ["shared"]))
    view.users[("qa", "shared")].add(("qa", "mate"))  # named still, as a stale user
    assert [r.key for r in QueueKeeper(SETTINGS, view).running()] == [("qa", "p")]


async def test_one_keeper_sees_every_change_to_a_running_pod_between_passes(
    view: ClusterView,
) -> None:
    """The keeper reuses a pod's entry while its objects are the same: each kind of change
    to the pod, its claims, the queues or a mate sharing its claim must show in the next
    call, as a fresh keeper would read it."""
    keeper = QueueKeeper(SETTINGS, view)

    def seen() -> list[tuple[str, str, float, bool]]:
        return [
            (r.key[1], r.queue, r.amounts.gpu, r.idle_since is not None) for r in keeper.running()
        ]

    def fresh() -> list[tuple[str, str, float, bool]]:
        return [
            (r.key[1], r.queue, r.amounts.gpu, r.idle_since is not None)
            for r in QueueKeeper(SETTINGS, view).running()
        ]

    put(view, "resourceclaims", allocated("c", "qa", "gpu-0"))
    put(view, "pods", running_pod("p", "qa", ["c"]))
    assert seen() == fresh() == [("p", "a", 1.0, False)]
    assert seen() == [("p", "a", 1.0, False)]  # asked again with nothing changed
    # Its claim reallocated to two devices, then its devices idle.
    put(view, "resourceclaims", allocated("c", "qa", "gpu-0", "gpu-1"), kind="MODIFIED")
    assert seen() == fresh() == [("p", "a", 2.0, False)]
    idle = allocated("c", "qa", "gpu-0", "gpu-1")
    entries: list[dict[str, Any]] = []
    since = datetime.now(UTC) - timedelta(minutes=5)
    for device in ("gpu-0", "gpu-1"):
        entries = with_condition(
            entries, (DRIVER, "n1", device), idle_condition(True, since, "test")
        )
    idle["status"]["devices"] = entries
    put(view, "resourceclaims", idle, kind="MODIFIED")
    assert seen() == fresh() == [("p", "a", 2.0, True)]
    # Its namespace moved to another queue.
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb", "qa"]), kind="MODIFIED")
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qx"]), kind="MODIFIED")
    assert seen() == fresh() == [("p", "b", 2.0, True)]
    # A live mate shares its claim (evicting p frees nothing), then the pod finishes.
    put(view, "pods", running_pod("mate", "qa", ["c"]))
    assert seen() == fresh() == []
    delete(view, "pods", running_pod("mate", "qa", ["c"]))
    assert seen() == fresh() == [("p", "b", 2.0, True)]
    put(view, "pods", running_pod("p", "qa", ["c"], phase="Succeeded"), kind="MODIFIED")
    assert seen() == fresh() == []


async def test_pods_being_evicted_or_spared_are_left_out_until_that_ends(view: ClusterView) -> None:
    for name, device in (("p", "gpu-0"), ("q", "gpu-1"), ("r", "gpu-2")):
        put(view, "resourceclaims", allocated(name, "qa", device))
        put(view, "pods", running_pod(name, "qa", [name]))
    keeper = QueueKeeper(SETTINGS, view)
    gone: Key = ("qa", "gone")
    keeper.evicting = {("qa", "p"): "b", gone: "b"}
    keeper.spared = {("qa", "q"): time.monotonic() + 60, ("qa", "r"): time.monotonic() - 1}
    assert [r.key for r in keeper.running()] == [("qa", "r")]
    assert keeper.evicting == {("qa", "p"): "b"}  # a pod no longer there is forgotten
    assert set(keeper.spared) == {("qa", "q")}  # a spare that ended is forgotten


async def test_the_tree_is_built_again_only_when_a_queue_changes(view: ClusterView) -> None:
    keeper = QueueKeeper(SETTINGS, view)
    tree = keeper.tree()
    assert keeper.tree() is tree
    assert tree.default == "fallback" and tree.queues["fallback"].last
    assert keeper.queue_of({"metadata": {"namespace": "qb"}}) == "b"
    assert keeper.queue_of({"metadata": {}}) == "fallback"
    # Our own status writes change nothing it is made of: the tree, and what a waiting pod
    # was decided against, stay.
    generation = view.generation
    with_status = gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "2"})
    with_status["status"] = {"used": {"gpu": "1"}}
    put(view, "gpuqueues", with_status, kind="MODIFIED")
    assert keeper.tree() is tree and view.generation == generation
    put(view, "gpuqueues", gpu_queue("c", namespaces=["qc"]))
    assert keeper.tree() is not tree and "c" in keeper.tree().queues
    assert view.generation > generation
    tree = keeper.tree()
    put(
        view,
        "gpuqueues",
        gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "1"}),
        kind="MODIFIED",
    )
    assert keeper.tree() is not tree and keeper.tree().queues["b"].guaranteed.get("gpu") == 1
    assert keeper.pending_by_queue(
        [{"metadata": {"namespace": n}} for n in ("qa", "qc", "qa", "other")]
    ) == {"a": 2, "c": 1, "fallback": 1}


async def test_the_ledger_counts_allocated_and_assumed_claims_once_each(view: ClusterView) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    put(view, "resourceclaims", allocated("c2", "qb", "gpu-1", "gpu-2"))
    pending = objects.claim("c3", objects.request("req", "gpu", 1), namespace="qb")
    put(view, "resourceclaims", pending)
    keeper = QueueKeeper(SETTINGS, view)
    whole = one_gpu(view)
    assert keeper.capacity() == Amounts(4.0, 4 * whole.memory)
    decided = allocated("c3", "qb", "gpu-3")["status"]["allocation"]
    view.assume(("qb", "c3"), decided)
    view.assumed[("qb", "c4")] = allocated("c4", "qb", "gpu-2", "gpu-3")["status"]["allocation"]
    ledger = keeper.ledger(waiting=[{"metadata": {"namespace": "qa"}}])
    assert ledger.used("a") == Amounts(1.0, whole.memory)
    assert ledger.used("b") == Amounts(5.0, 5 * whole.memory)  # c2, c3 assumed, c4 assumed (2)
    assert ledger.waiting == {"a"}
    # What a claim counts is kept while its allocation and the snapshot are the same...
    first = keeper.claim_amounts(("qb", "c2"), view.claims[("qb", "c2")]["status"]["allocation"])
    again = keeper.claim_amounts(("qb", "c2"), view.claims[("qb", "c2")]["status"]["allocation"])
    assert first == again == Amounts(2.0, 2 * whole.memory)
    # ... and forgotten for a claim that is gone.
    delete(view, "resourceclaims", view.claims[("qa", "c1")])
    view.assumed.pop(("qb", "c4"))
    assert keeper.ledger().used("a") == Amounts()
    assert set(keeper._amounts) == {("qb", "c2"), ("qb", "c3")}


async def test_a_claim_allocated_again_is_counted_again(view: ClusterView) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    keeper = QueueKeeper(SETTINGS, view)
    assert keeper.ledger().used("a").gpu == 1.0
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0", "gpu-1"), kind="MODIFIED")
    assert keeper.ledger().used("a").gpu == 2.0


async def test_capacity_follows_the_slices(view: ClusterView) -> None:
    keeper = QueueKeeper(SETTINGS, view)
    assert keeper.capacity().gpu == 4.0
    for body in list(view.objects["resourceslices"].values()):
        delete(view, "resourceslices", body)
    assert keeper.capacity() == Amounts()


def hold(until: float) -> Hold:
    return Hold(pod=("qb", "b1"), queue="b", node="n1", claims={}, victims=set(), until=until)


async def test_holds_end_when_their_time_is_up_or_their_pod_no_longer_waits(
    view: ClusterView,
) -> None:
    keeper = QueueKeeper(SETTINGS, view)
    now = time.monotonic()
    keeper.holds = {
        ("qb", "waits"): hold(now + 60),
        ("qb", "expired"): hold(now - 1),
        ("qb", "placed"): hold(now + 60),
    }
    keeper.explained = {("qb", "waits"): (now, "r", "e"), ("qb", "placed"): (now, "r", "e")}
    keeper.expire_holds({("qb", "waits"), ("qb", "expired")})
    assert set(keeper.holds) == {("qb", "waits")}
    assert set(keeper.explained) == {("qb", "waits")}


async def test_a_reclaim_names_the_pod_or_the_gang_it_is_for() -> None:
    requester = {"metadata": {"namespace": "qb", "name": "b1"}}
    assert Reclaim(requester, "b", "n1", []).asker == "pod qb/b1"
    assert Reclaim(requester, "b", "n1", [], gang="qb/g").asker == "gang qb/g"
    pod = {"metadata": {"namespace": "qb", "name": "t0", "labels": {SETTINGS.gang_label: "g"}}}
    assert _gang_name(pod, SETTINGS) == "qb/g"
    assert _gang_name({"metadata": {"namespace": "qb", "name": "t0"}}, SETTINGS) == "qb/t0"


async def test_the_standing_says_gpus_held_of_those_guaranteed() -> None:
    spec = parse_queue(gpu_queue("q", guaranteed={"gpu": "2", "memory": "80Gi"}))
    assert _standing(Amounts(0.5, 0), spec) == "holds 0.50 of 2 guaranteed GPUs"
    memory_only = parse_queue(gpu_queue("q", guaranteed={"memory": "80Gi"}))
    assert _standing(Amounts(0.5, 0), memory_only) == "memory"
    assert _standing(Amounts(), QueueSpec(name="q")) == "memory"


async def test_unexplained_turns_explanations_off_inside_only(view: ClusterView) -> None:
    placer = view.placer()
    placer.explain_failures = True
    with unexplained(view):
        assert placer.explain_failures is False
    assert placer.explain_failures is True
    with pytest.raises(RuntimeError), unexplained(view):
        raise RuntimeError
    assert placer.explain_failures is True


def gated_pod(name: str, namespace: str, claims: list[str], **spec: Any) -> dict[str, Any]:
    created = spec.pop("created", "2025-01-01T00:00:00Z")
    labels = spec.pop("labels", None)
    made = objects.pod(
        name,
        claims,
        namespace=namespace,
        uid=f"uid-{name}",
        labels=labels,
        gates=[f"{DRIVER}/allocation"],
        **spec,
    )
    made["metadata"]["creationTimestamp"] = created
    return made


def names(units: Any) -> list[str]:
    return [",".join(p["metadata"]["name"] for p in unit) for unit in units]


async def test_a_pass_serves_a_queue_below_its_guarantee_then_by_priority_age_and_name(
    view: ClusterView,
) -> None:
    put(view, "gpuqueues", gpu_queue("free", namespaces=["qf"]))
    pods = [
        gated_pod("low", "qf", [], created="2025-01-01T00:00:00Z"),
        gated_pod("tie", "qf", [], created="2025-01-01T00:00:00Z"),
        gated_pod("high", "qf", [], priority=5, created="2025-02-01T00:00:00Z"),
        gated_pod("old", "qf", [], created="2024-01-01T00:00:00Z"),
        gated_pod("b1", "qb", []),
    ]
    gang = [
        gated_pod("g1", "qf", [], priority=1, created="2025-03-01T00:00:00Z"),
        gated_pod("g0", "qf", [], priority=3, created="2025-04-01T00:00:00Z"),
    ]
    units = [[p] for p in pods[::-1]] + [gang]
    this = QueuePass.start(QueueKeeper(SETTINGS, view), units, [*pods, *gang])
    # b is below its guarantee; free's units by their highest priority, then their oldest
    # member, then name.
    assert names(this) == ["b1", "high", "g1,g0", "old", "low", "tie"]
    assert this.ledger.waiting == {"free", "b"}


async def test_admitting_counts_the_decision_or_says_which_limit_it_would_pass(
    view: ClusterView,
) -> None:
    put(view, "gpuqueues", gpu_queue("c", namespaces=["qc"], limit={"gpu": "1"}))
    put(view, "resourceclaims", allocated("held", "qc", "gpu-0"))
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [], [])
    two = Decision([], {("qc", "more"): allocated("more", "qc", "gpu-1")["status"]["allocation"]})
    assert this.admit([gated_pod("c2", "qc", ["more"])], two) == (
        "queue c would pass its gpu limit (1): it holds 1 and the pod asks 1"
    )
    whole = one_gpu(view)
    keeper.holds[("qb", "b1")] = hold(time.monotonic() + 60)
    keeper.holds[("qb", "b2")] = hold(time.monotonic() + 60)
    decided = Decision(
        [],
        {
            ("qb", "x"): allocated("x", "qb", "gpu-1")["status"]["allocation"],
            ("qb", "y"): allocated("y", "qb", "gpu-2")["status"]["allocation"],
        },
    )
    assert this.admit([gated_pod("b1", "qb", ["x", "y"])], decided) is None
    assert this.ledger.used("b") == Amounts(2.0, 2 * whole.memory)
    assert set(keeper.holds) == {("qb", "b2")}  # b1's hold ends with its admission


async def test_why_a_pod_waits_as_its_queue_stands(view: ClusterView) -> None:
    put(view, "gpuqueues", gpu_queue("free", namespaces=["qf"]))
    put(
        view,
        "gpuqueues",
        gpu_queue("n", namespaces=["qn"], guaranteed={"gpu": "1"}, reclaim="Never"),
    )
    for namespace in ("qf", "qb", "qn"):
        put(
            view,
            "resourceclaims",
            objects.claim("c", objects.request("req", "gpu", 1), namespace=namespace),
        )
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [], [])
    none = Unallocatable("no room")
    # At its guarantee (free has none): just the reason.
    assert this.failed([gated_pod("f1", "qf", ["c"])], none) == "no room"
    assert this.failed([gated_pod("n1", "qn", ["c"])], none) == (
        "no room; queue n is below its guarantee (holds 0 of 1 guaranteed GPUs) but its reclaim "
        "policy is Never: waiting for devices to be freed"
    )
    assert this.failed([gated_pod("b1", "qb", ["c"])], none) == (
        "no room; queue b is below its guarantee (holds 0 of 2 guaranteed GPUs) but no pod on "
        "borrowed capacity would make room"
    )
    waiting = hold(time.monotonic() + 60)
    waiting.victims = {("qa", "v1"), ("qa", "v2")}
    keeper.holds[("qb", "b1")] = waiting
    assert this.failed([gated_pod("b1", "qb", ["c"])], none) == (
        "queue b is below its guarantee (holds 0 of 2 guaranteed GPUs): waiting for the devices "
        "of 2 evicted pod(s) on node n1"
    )
    gang = {SETTINGS.gang_label: "g", SETTINGS.gang_size_label: "2"}
    members = [gated_pod(f"t{i}", "qb", [], labels=gang) for i in range(2)]
    other = hold(time.monotonic() + 60)
    other.node, other.victims = "n2", {("qa", "v3")}
    keeper.holds = {("qb", "t0"): waiting, ("qb", "t1"): other}
    assert this.failed(members, none) == (
        "gang qb/g: queue b is below its guarantee (holds 0 of 2 guaranteed GPUs): waiting for "
        "the devices of 3 evicted pod(s) on node(s) n1, n2"
    )
    assert this.ledger.waiting == {"free", "b", "n"}


async def test_a_failure_is_explained_unless_reclaim_may_still_help(view: ClusterView) -> None:
    put(view, "gpuqueues", gpu_queue("free", namespaces=["qf"]))
    for namespace in ("qf", "qb"):
        too_many = objects.claim("big", objects.request("req", "gpu", 8), namespace=namespace)
        put(view, "resourceclaims", too_many)
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [], [])
    plain = this.decide([gated_pod("b1", "qb", ["big"])])
    assert isinstance(plain, Unallocatable) and "n1:" not in plain.reason
    explained = this.decide([gated_pod("f1", "qf", ["big"])])
    assert isinstance(explained, Unallocatable) and "n1:" in explained.reason
    assert keeper.explained[("qf", "f1")][2] == explained.reason
    # Failing the same way again soon, the pod keeps its explanation without a new search.
    keeper.explained[("qf", "f1")] = (time.monotonic(), keeper.explained[("qf", "f1")][1], "kept")
    again = this.decide([gated_pod("f1", "qf", ["big"])])
    assert isinstance(again, Unallocatable) and again.reason == "kept"
    # b's pod, once reclaim could not help, is explained too.
    assert "n1:" in this.failed([gated_pod("b1", "qb", ["big"])], plain)


async def test_a_hold_keeps_freed_devices_for_its_pod_until_its_turn() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:1"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "1"}))
    freed = allocated("victim", "qa", "gpu-0")["status"]["allocation"]
    put(
        view,
        "resourceclaims",
        objects.claim("victim", objects.request("req", "gpu", 1), namespace="qa"),
    )
    for namespace, name in (("qa", "a1"), ("qb", "b1")):
        put(
            view,
            "resourceclaims",
            objects.claim(name, objects.request("req", "gpu", 1), namespace=namespace),
        )
    keeper = QueueKeeper(SETTINGS, view)
    waiting = hold(time.monotonic() + 60)
    waiting.claims = {("qa", "victim"): freed}
    keeper.holds[("qb", "b1")] = waiting
    a1, b1 = gated_pod("a1", "qa", ["a1"]), gated_pod("b1", "qb", ["b1"])
    this = QueuePass.start(keeper, [[a1], [b1]], [a1, b1])
    # The freed GPU counts as taken for everyone else while the hold lasts.
    assert isinstance(this.decide([a1]), Unallocatable)
    assert names(this) == ["b1", "a1"]  # b1's turn released it (b is below its guarantee)
    view.forget(("qa", "a1"))
    decided = this.decide([b1])
    assert isinstance(decided, Decision)
    view.forget(("qb", "b1"))

    # A hold whose devices the victim still holds takes nothing more; at the end of a pass
    # every hold not released yet gives its devices back.
    put(view, "resourceclaims", allocated("victim", "qa", "gpu-0"), kind="MODIFIED")
    keeper.holds[("qb", "b1")] = waiting
    again = QueuePass.start(keeper, [[a1]], [a1, b1])
    assert again._applied == {("qb", "b1"): []}
    put(
        view,
        "resourceclaims",
        objects.claim("victim", objects.request("req", "gpu", 1), namespace="qa"),
        kind="MODIFIED",
    )
    keeper.holds[("qb", "b1")] = waiting
    last = QueuePass.start(keeper, [[a1]], [a1, b1])
    assert isinstance(last.decide([a1]), Unallocatable)
    last.finish()
    assert isinstance(last.decide([a1]), Decision)


async def test_a_hold_takes_each_freed_device_on_its_node_past_those_still_held() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:2"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "1"}))
    still = allocated("v1", "qa", "gpu-0")
    gone = allocated("v2", "qa", "gpu-1")["status"]["allocation"]
    put(view, "resourceclaims", still)
    put(
        view,
        "resourceclaims",
        objects.claim("v2", objects.request("req", "gpu", 1), namespace="qa"),
    )
    put(
        view,
        "resourceclaims",
        objects.claim("a1", objects.request("req", "gpu", 1), namespace="qa"),
    )
    keeper = QueueKeeper(SETTINGS, view)
    waiting = hold(time.monotonic() + 60)
    # The first victim still holds its GPU; the second's is free, and kept all the same.
    waiting.claims = {("qa", "v1"): still["status"]["allocation"], ("qa", "v2"): gone}
    keeper.holds[("qb", "b1")] = waiting
    a1, b1 = gated_pod("a1", "qa", ["a1"]), gated_pod("b1", "qb", ["b1"])
    placer = view.placer()
    assert placer.node_load.get("n1") == 1
    this = QueuePass.start(keeper, [[a1]], [a1, b1])
    assert this._applied == {("qb", "b1"): [(gone, "n1")]}
    assert placer.node_load.get("n1") == 2  # the held GPU counts on its node
    assert isinstance(this.decide([a1]), Unallocatable)
    this.finish()
    assert placer.node_load.get("n1") == 1
    assert isinstance(this.decide([a1]), Decision)


async def test_reclaim_evicts_the_newest_borrowed_pod_and_holds_its_devices() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:2"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"], guaranteed={"gpu": "1"}))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "1"}))
    for name, device, created in (("a1", "gpu-0", "2025-01-01"), ("a2", "gpu-1", "2025-01-02")):
        put(view, "resourceclaims", allocated(name, "qa", device))
        put(view, "pods", running_pod(name, "qa", [name], created=f"{created}T00:00:00Z"))
    put(
        view,
        "resourceclaims",
        objects.claim("b1", objects.request("req", "gpu", 1), namespace="qb"),
    )
    b1 = gated_pod("b1", "qb", ["b1"])
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    start = time.monotonic()
    assert this.failed([b1], outcome) == (
        "queue b is below its guarantee (holds 0 of 1 guaranteed GPUs): evicting qa/a2 "
        "(borrowed capacity) to make room on node n1"
    )
    assert keeper.evicting == {("qa", "a2"): "b"}
    kept = keeper.holds[("qb", "b1")]
    assert (kept.pod, kept.queue, kept.node, kept.victims) == (
        ("qb", "b1"),
        "b",
        "n1",
        {("qa", "a2")},
    )
    assert kept.claims == {("qa", "a2"): view.claims[("qa", "a2")]["status"]["allocation"]}
    assert start + 60 <= kept.until <= time.monotonic() + 60
    (reclaim,) = this.reclaims
    assert (reclaim.requester, reclaim.queue, reclaim.node) == (b1, "b", "n1")
    assert reclaim.victims == [(view.pods[("qa", "a2")], "a")]
    assert this.ledger.used("a") == one_gpu(view)  # a2 no longer counts
    # Asked again while a2 goes, b1 waits for it.
    assert this.failed([b1], outcome) == (
        "queue b is below its guarantee (holds 0 of 1 guaranteed GPUs): waiting for the devices "
        "of 1 evicted pod(s) on node n1"
    )
    this.finish()
    # Until a2's claim is released, nothing was freed for b1: it is not decided again.
    assert keeper.nothing_freed_yet(("qb", "b1"))
    assert not keeper.nothing_freed_yet(("qa", "a1"))  # no hold
    # The queue's standing in the reason stays the one the victims were chosen at, though b's
    # usage moved meanwhile (a claim of b counted as allocated; its device does not matter here).
    put(view, "resourceclaims", allocated("b0", "qb", "gpu-0"), kind="ADDED")
    again = QueuePass.start(keeper, [[b1]], [b1])
    assert again.failed([b1], outcome).startswith(
        "queue b is below its guarantee (holds 0 of 1 guaranteed GPUs): waiting for"
    )
    again.finish()
    put(
        view,
        "resourceclaims",
        objects.claim("a2", objects.request("req", "gpu", 1), namespace="qa"),
        kind="MODIFIED",
    )
    assert not keeper.nothing_freed_yet(("qb", "b1"))


async def test_reclaim_never_takes_a_queue_past_its_guarantee() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:2"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "1"}))
    for name, device in (("a1", "gpu-0"), ("a2", "gpu-1")):
        put(view, "resourceclaims", allocated(name, "qa", device))
        put(view, "pods", running_pod(name, "qa", [name]))
    put(
        view,
        "resourceclaims",
        objects.claim("b1", objects.request("req", "gpu", 2), namespace="qb"),
    )
    b1 = gated_pod("b1", "qb", ["b1"])
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    # Two GPUs would fit once both of a's pods go, but b is guaranteed one.
    reason = this.failed([b1], outcome)
    assert reason.endswith("but no pod on borrowed capacity would make room")
    assert keeper.evicting == {} and this.reclaims == []


def gang_lent(guaranteed: str = "4", org: bool = False) -> tuple[QueueKeeper, list[dict[str, Any]]]:
    """Two nodes of two GPUs, each GPU held by a pod of queue a (no guarantee); queue b's gang
    of two members, each asking two GPUs. With `org`, a and b are teams of one organisation
    that guarantees four GPUs."""
    view = cluster({"n1": "H100-SXM5-80GB:2", "n2": "H100-SXM5-80GB:2"})
    parent = {"parent": "org"} if org else {}
    if org:
        put(view, "gpuqueues", gpu_queue("org", guaranteed={"gpu": "4"}))
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"], **parent))
    put(
        view,
        "gpuqueues",
        gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": guaranteed}, **parent),
    )
    for index, (node, device) in enumerate(
        (("n1", "gpu-0"), ("n1", "gpu-1"), ("n2", "gpu-0"), ("n2", "gpu-1"))
    ):
        name = f"a{index}"
        claim = allocated(name, "qa", device, node=node)
        claim["status"]["allocation"]["devices"]["results"][0]["pool"] = node
        put(view, "resourceclaims", claim)
        put(view, "pods", running_pod(name, "qa", [name]))
    gang = {SETTINGS.gang_label: "g", SETTINGS.gang_size_label: "2"}
    members = []
    for name in ("t0", "t1"):
        put(
            view,
            "resourceclaims",
            objects.claim(name, objects.request("req", "gpu", 2), namespace="qb"),
        )
        members.append(gated_pod(name, "qb", [name], labels=gang))
    return QueueKeeper(SETTINGS, view), members


@pytest.mark.parametrize("org", [False, True])
async def test_a_gang_reclaims_on_every_node_it_needs_and_each_member_holds_its_node(
    org: bool,
) -> None:
    # In one organisation, the sibling team a lends what it holds past its own guarantee.
    keeper, members = gang_lent(org=org)
    this = QueuePass.start(keeper, [members], members)
    outcome = this.decide(members)
    assert isinstance(outcome, Unallocatable)
    reason = this.failed(members, outcome)
    assert reason == (
        "gang qb/g: queue b is below its guarantee (holds 0 of 4 guaranteed GPUs): evicting "
        "qa/a0, qa/a1, qa/a2, qa/a3 (borrowed capacity) to make room for its 2 members on "
        "node(s) n1, n2"
    )
    victims = {("qa", f"a{i}") for i in range(4)}
    assert keeper.evicting == dict.fromkeys(victims, "b")
    first, second = keeper.holds[("qb", "t0")], keeper.holds[("qb", "t1")]
    assert {first.node, second.node} == {"n1", "n2"}
    for held in (first, second):
        assert held.victims == victims and held.gang == "qb/g" and held.queue == "b"
        # Each member holds the two claims freed on its own node.
        assert len(held.claims) == 2
        assert {allocation_node(a) for a in held.claims.values()} == {held.node}
    assert first.until == second.until
    (reclaim,) = this.reclaims
    assert reclaim.gang == "qb/g" and reclaim.holders == (("qb", "t0"), ("qb", "t1"))
    assert reclaim.node == "n1, n2" and reclaim.requester is members[0]
    assert sorted(p["metadata"]["name"] for p, _ in reclaim.victims) == ["a0", "a1", "a2", "a3"]
    assert this.ledger.used("a") == Amounts()
    assert this.failed(members, outcome) == (
        "gang qb/g: queue b is below its guarantee (holds 0 of 4 guaranteed GPUs): waiting for "
        "the devices of 4 evicted pod(s) on node(s) n1, n2"
    )


async def test_a_gang_that_reclaim_cannot_make_room_for_evicts_nothing() -> None:
    keeper, members = gang_lent()
    for index in range(4):
        keeper.evicting[("qa", f"a{index}")] = "other"  # going already: nothing left to take
    this = QueuePass.start(keeper, [members], members)
    outcome = this.decide(members)
    assert isinstance(outcome, Unallocatable)
    reason = this.failed(members, outcome)
    explained = keeper.explained[("qb", "t0")][2]
    assert "n1:" in explained and reason.startswith(f"{explained}; queue b is below")
    assert reason.endswith(
        "; queue b is below its guarantee (holds 0 of 4 guaranteed GPUs) but evicting pods on "
        "borrowed capacity would not make room for the whole gang qb/g (no pod runs on "
        "borrowed capacity): nothing is evicted"
    )
    assert this.reclaims == [] and keeper.holds == {}


async def test_a_gang_asking_more_than_its_queues_guarantee_evicts_nothing() -> None:
    keeper, members = gang_lent(guaranteed="3")
    this = QueuePass.start(keeper, [members], members)
    outcome = this.decide(members)
    assert isinstance(outcome, Unallocatable)
    reason = this.failed(members, outcome)
    assert (
        "(even with every pod on borrowed capacity evicted: the gang asks 4 GPUs, more than "
        "queue b's guarantee leaves it): nothing is evicted"
    ) in reason
    assert this.reclaims == [] and keeper.evicting == {}


async def test_each_member_holds_what_was_freed_on_its_node_and_the_last_the_rest() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:2", "n3": "H100-SXM5-80GB:1"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "3"}))
    for name, device in (("a0", "gpu-0"), ("a1", "gpu-1")):
        put(view, "resourceclaims", allocated(name, "qa", device))
    # a0 also holds a claim tied to no node.
    put(view, "resourceclaims", allocated("anywhere", "qa", "elsewhere", node=None))
    put(view, "pods", running_pod("a0", "qa", ["a0", "anywhere"]))
    put(view, "pods", running_pod("a1", "qa", ["a1"]))
    gang = {SETTINGS.gang_label: "g", SETTINGS.gang_size_label: "3"}
    members = []
    for name in ("t0", "t1", "t2"):
        put(
            view,
            "resourceclaims",
            objects.claim(name, objects.request("req", "gpu", 1), namespace="qb"),
        )
        members.append(gated_pod(name, "qb", [name], labels=gang))
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [members], members)
    outcome = this.decide(members)
    assert isinstance(outcome, Unallocatable)
    assert "evicting qa/a0, qa/a1" in this.failed(members, outcome)
    held = {
        key[1]: (h.pod, h.node, sorted(c[1] for c in h.claims)) for key, h in keeper.holds.items()
    }
    # The first member on n1 holds what was freed there; t2, on n3's free GPU, is the last
    # member and holds what was freed on no member's node.
    assert held == {
        "t0": (("qb", "t0"), "n1", ["a0", "a1"]),
        "t1": (("qb", "t1"), "n1", []),
        "t2": (("qb", "t2"), "n3", ["anywhere"]),
    }


async def test_reclaim_makes_room_for_the_claims_not_allocated_yet_only() -> None:
    view = cluster({"n1": "H100-SXM5-80GB:2"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "2"}))
    put(view, "resourceclaims", allocated("a1", "qa", "gpu-1"))
    put(view, "pods", running_pod("a1", "qa", ["a1"]))
    # b1's first claim is allocated already (it holds gpu-0); its second waits.
    put(view, "resourceclaims", allocated("done", "qb", "gpu-0"))
    put(
        view,
        "resourceclaims",
        objects.claim("b1", objects.request("req", "gpu", 1), namespace="qb"),
    )
    b1 = gated_pod("b1", "qb", ["done", "b1"])
    keeper = QueueKeeper(SETTINGS, view)
    this = QueuePass.start(keeper, [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    assert this.failed([b1], outcome) == (
        "queue b is below its guarantee (holds 1 of 2 guaranteed GPUs): evicting qa/a1 "
        "(borrowed capacity) to make room on node n1"
    )


def lent_node(gpus: int, *pods: tuple[str, str, str]) -> ClusterView:
    """Node n1 with `gpus` GPUs; queue a (no guarantee) runs (name, device, created) pods,
    one GPU each; queue b is guaranteed two GPUs."""
    view = cluster({"n1": f"H100-SXM5-80GB:{gpus}"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "2"}))
    for name, device, created in pods:
        put(view, "resourceclaims", allocated(name, "qa", device))
        put(view, "pods", running_pod(name, "qa", [name], created=created))
    return view


def waiting(view: ClusterView, name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    put(
        view,
        "resourceclaims",
        objects.claim(name, objects.request("req", "gpu", gpus), namespace="qb"),
    )
    return gated_pod(name, "qb", [name], **spec)


async def test_what_the_queue_holds_already_counts_against_its_guarantee() -> None:
    view = lent_node(
        3, ("a1", "gpu-0", "2025-01-01T00:00:00Z"), ("a2", "gpu-1", "2025-01-02T00:00:00Z")
    )
    put(view, "resourceclaims", allocated("b0", "qb", "gpu-2"))
    put(view, "pods", running_pod("b0", "qb", ["b0"]))
    b1 = waiting(view, "b1", 2)
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    # b holds one of its two: two more would fit once a's pods go, but pass its guarantee.
    assert this.failed([b1], outcome).endswith("but no pod on borrowed capacity would make room")


async def test_a_trial_that_found_no_room_is_not_held_against_a_pod_of_another_shape() -> None:
    view = lent_node(
        2, ("a1", "gpu-0", "2025-01-01T00:00:00Z"), ("a2", "gpu-1", "2025-01-02T00:00:00Z")
    )
    big, small = waiting(view, "big", 3), waiting(view, "small", 1)
    also_big = waiting(view, "also-big", 3)
    pods = [big, also_big, small]
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[p] for p in pods], pods)
    for pod in pods:
        assert isinstance(this.decide([pod]), Unallocatable)
    assert this.failed([big], Unallocatable("no room")).endswith("would make room")
    # A pod of the same shape finds no room the same way, without trying again.
    assert this.failed([also_big], Unallocatable("no room")).endswith("would make room")
    assert this.failed([small], Unallocatable("no room")).endswith(
        "evicting qa/a2 (borrowed capacity) to make room on node n1"
    )


async def test_a_victim_must_free_the_cpu_the_pod_needs_too() -> None:
    view = lent_node(2)
    node = view.nodes[("", "n1")]
    node["status"]["allocatable"] = {"cpu": "4", "memory": "64Gi", "pods": "110"}
    put(view, "nodes", node, kind="MODIFIED")
    cpu = {"resources": {"requests": {"cpu": "3"}}}
    for name, device, created, extra in (
        ("a1", "gpu-0", "2025-01-01T00:00:00Z", cpu),
        ("a2", "gpu-1", "2025-01-02T00:00:00Z", {}),
    ):
        put(view, "resourceclaims", allocated(name, "qa", device))
        body = running_pod(name, "qa", [name], created=created)
        body["spec"]["containers"][0].update(extra)
        put(view, "pods", body)
    b1 = waiting(view, "b1", 1)
    b1["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    # a2 is newer, so cheaper, but frees no CPU: a1 goes.
    assert this.failed([b1], outcome).endswith(
        "evicting qa/a1 (borrowed capacity) to make room on node n1"
    )


@pytest.mark.parametrize("pinned_by", ["selector", "claim"])
async def test_reclaim_evicts_only_on_a_node_the_pod_may_run_on(pinned_by: str) -> None:
    # One borrowed pod per node, the one on n2 newer (so cheaper). The waiting pod may only
    # run on n1: its nodeSelector says so, or a claim of it is allocated there already.
    view = cluster({"n1": "H100-SXM5-80GB:2", "n2": "H100-SXM5-80GB:1"})
    put(view, "gpuqueues", gpu_queue("a", namespaces=["qa"]))
    put(view, "gpuqueues", gpu_queue("b", namespaces=["qb"], guaranteed={"gpu": "2"}))
    for name, node, device, created in (
        ("on-n1", "n1", "gpu-1", "2025-01-01T00:00:00Z"),
        ("on-n2", "n2", "gpu-0", "2025-01-02T00:00:00Z"),
    ):
        claim = allocated(name, "qa", device, node=node)
        claim["status"]["allocation"]["devices"]["results"][0]["pool"] = node
        put(view, "resourceclaims", claim)
        put(view, "pods", running_pod(name, "qa", [name], created=created))
    put(view, "resourceclaims", allocated("held", "qa", "gpu-0"))  # n1's other GPU, not ours
    view.claims[("qa", "held")]["metadata"]["finalizers"] = []
    put(
        view,
        "resourceclaims",
        objects.claim("b1", objects.request("req", "gpu", 1), namespace="qb"),
    )
    if pinned_by == "selector":
        b1 = gated_pod("b1", "qb", ["b1"], nodeSelector={"kubernetes.io/hostname": "n1"})
    else:
        # b1 holds n1's other GPU through a claim of its own instead.
        put(view, "resourceclaims", allocated("mine", "qb", "gpu-0"))
        delete(view, "resourceclaims", view.claims[("qa", "held")])
        b1 = gated_pod("b1", "qb", ["mine", "b1"])
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1]], [b1])
    outcome = this.decide([b1])
    assert isinstance(outcome, Unallocatable)
    assert this.failed([b1], outcome).endswith(
        "evicting qa/on-n1 (borrowed capacity) to make room on node n1"
    )


async def test_the_next_waiting_pod_of_a_pass_does_not_pick_a_pod_already_going() -> None:
    view = lent_node(
        2, ("a1", "gpu-0", "2025-01-01T00:00:00Z"), ("a2", "gpu-1", "2025-01-02T00:00:00Z")
    )
    b1, b2 = waiting(view, "b1", 1), waiting(view, "b2", 1)
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1], [b2]], [b1, b2])
    for pod in (b1, b2):
        assert isinstance(this.decide([pod]), Unallocatable)
    assert this.failed([b1], Unallocatable("no room")).endswith(
        "evicting qa/a2 (borrowed capacity) to make room on node n1"
    )
    assert this.failed([b2], Unallocatable("no room")).endswith(
        "evicting qa/a1 (borrowed capacity) to make room on node n1"
    )


async def test_a_failure_that_no_longer_fails_when_explained_changes_nothing() -> None:
    view = lent_node(2)
    b1 = waiting(view, "b1", 1)
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1]], [b1])
    this._unexplained.add(("qb", "b1"))
    this._changes = 5
    # Not expected (nothing changed since it failed): the pod fits when explained. Its reason
    # stays, and the allocation that the explaining search assumed is dropped again.
    assert this._explained([b1], Unallocatable("stale")) == "stale"
    assert view.assumed == {} and this._changes == 6
    assert isinstance(this.decide([b1]), Decision)


async def test_every_victim_is_named() -> None:
    view = lent_node(
        2, ("a1", "gpu-0", "2025-01-01T00:00:00Z"), ("a2", "gpu-1", "2025-01-02T00:00:00Z")
    )
    b1 = waiting(view, "b1", 2)
    this = QueuePass.start(QueueKeeper(SETTINGS, view), [[b1]], [b1])
    assert isinstance(this.decide([b1]), Unallocatable)
    assert this.failed([b1], Unallocatable("no room")).endswith(
        "evicting qa/a2, qa/a1 (borrowed capacity) to make room on node n1"  # cheapest first
    )


async def test_what_a_claim_counts_follows_the_slices(view: ClusterView) -> None:
    put(view, "resourceclaims", allocated("c1", "qa", "gpu-0"))
    keeper = QueueKeeper(SETTINGS, view)
    assert keeper.ledger().used("a").gpu == 1.0
    for body in list(view.objects["resourceslices"].values()):
        delete(view, "resourceslices", body)
    # The same allocation, on a device no slice publishes any more, counts nothing.
    assert keeper.ledger().used("a") == Amounts()
