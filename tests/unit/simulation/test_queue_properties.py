"""Property test: a queued replay keeps guarantees, limits and the devices' books straight.

Over random queue trees (two or three organisations, most with teams, one to three levels,
guarantees that fit their parents and the cluster, limits on inner queues as well as on leaves)
and random arrivals and departures of pods asking for one GPU, two GPUs or a MIG slice, on two
nodes with two H100s each, after every step of the replay:

(a) no waiting pod of a queue short of its guarantee, with `reclaim: Borrowed`, could be placed
    by evicting borrowed pods, or the lenders' surplus where borrowed pods do not make room (the
    replay's own `choose_victims` and `fits` on that state);
(b) every pod evicted held borrowed capacity, judged at the level the requester sees: between
    two organisations the victim's organisation (a team past its own guarantee but inside its
    organisation's lends nothing to another organisation), between sibling teams the team. That
    queue and its descendants held more than its guarantee, and either their pods ranked before
    the victim (priority, then age) already filled it, or, taken from the surplus, what that
    queue held less every victim taken from it for the same pod still covers its guarantee;
(c) the independent checker accepts every allocation held at that moment (no double booking);
(d) no queue holds more than its limit.

Examples are derandomized; fewer than 80 % non-trivial ones (some pod waited or was evicted)
fails the test, since a property that holds on idle clusters tests nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot
from dra_driver.backends.fake import FakeBackend
from dra_driver.checker.rules import check_allocations
from dra_driver.queues import (
    RECLAIM_BORROWED,
    Ledger,
    QueueTree,
    Running,
    choose_victims,
)
from dra_driver.queues.reclaim import BorrowedUnits
from dra_driver.simulation.pods import key_of, pod_claims
from dra_driver.simulation.queued import Eviction, QueuedReplay
from dra_driver.simulation.replay import Cluster, PodPolicy
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = DEFAULT_DRIVER_NAME
CLUSTER_GPUS = 4
MIN_NON_TRIVIAL = 0.8


def _device_class(kind: str) -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
    return {
        "metadata": {"name": kind},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _slices() -> list[dict[str, Any]]:
    settings = SliceSettings(shapes=frozenset({DeviceType.GPU, DeviceType.MIG}))
    out: list[dict[str, Any]] = []
    for node in ("n1", "n2"):
        backend = FakeBackend.from_spec("H100-SXM5-80GB:2", node)
        out += build_resource_slices(backend.inventory(), settings)
    return out


SLICES = _slices()
CLASSES = [_device_class("gpu"), _device_class("mig")]
SNAPSHOT = ClusterSnapshot.build(SLICES, CLASSES)
PROFILE = f'device.attributes["{DRIVER}"].profile'
REQUESTS: dict[str, dict[str, Any]] = {
    "one-gpu": {"deviceClassName": "gpu"},
    "two-gpus": {"deviceClassName": "gpu", "count": 2},
    "mig-1g": {
        "deviceClassName": "mig",
        "selectors": [{"cel": {"expression": f'{PROFILE} == "1g.10gb"'}}],
    },
    "mig-half": {
        "deviceClassName": "mig",
        "selectors": [{"cel": {"expression": f'{PROFILE} == "3g.40gb"'}}],
    },
}


def _template(namespace: str, name: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": REQUESTS[name]}
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


@dataclass(frozen=True)
class Plan:
    queues: list[dict[str, Any]]
    namespaces: list[str]
    pods: list[tuple[str, str, int, int | None, int]]
    """(namespace, claim template, arrival, run time or None, priority)."""
    policy: PodPolicy


@st.composite
def _children(
    draw: st.DrawFn, parent: str | None, budget: int, depth: int, out: list[dict[str, Any]]
) -> None:
    # At least two roots, so that reclaim across organisations (judged at their level) happens.
    count = draw(st.integers(2 if parent is None else 0, 3 if parent is None else 2))
    left = budget
    for index in range(count):
        name = f"{parent or 'q'}-{index}" if parent else f"q{index}"
        guarantee = draw(st.integers(0, left))
        left -= guarantee
        spec: dict[str, Any] = {"reclaim": draw(st.sampled_from(["Borrowed"] * 3 + ["Never"]))}
        if guarantee:
            spec["guaranteed"] = {"gpu": guarantee}
        if parent is not None:
            spec["parent"] = parent
        spec["weight"] = draw(st.sampled_from([1, 1, 2]))
        if draw(st.integers(0, 3)) == 0:
            spec["limit"] = {"gpu": draw(st.integers(max(guarantee, 1), CLUSTER_GPUS))}
        out.append({"kind": "GpuQueue", "metadata": {"name": name}, "spec": spec})
        # Organisations mostly have teams (3 in 4), teams sometimes sub-teams (1 in 2).
        if depth < 3 and draw(st.integers(0, 3)) > (0 if depth == 1 else 1):
            draw(_children(name, guarantee, depth + 1, out))


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    queues: list[dict[str, Any]] = []
    draw(_children(None, CLUSTER_GPUS, 1, queues))
    parents = {q["spec"].get("parent") for q in queues}
    leaves = [q for q in queues if q["metadata"]["name"] not in parents]
    namespaces = []
    for leaf in leaves:
        namespace = f"ns-{leaf['metadata']['name']}"
        leaf["spec"]["namespaces"] = [namespace]
        namespaces.append(namespace)
    namespaces.append("elsewhere")  # the default queue's
    pod = st.tuples(
        st.sampled_from(namespaces),
        st.sampled_from(["one-gpu"] * 6 + ["two-gpus", "mig-1g", "mig-1g"]),
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(2, 10)),
        st.integers(0, 2),
    )
    pods = draw(st.lists(pod, min_size=6, max_size=10))
    policy = draw(st.sampled_from([PodPolicy.FIRST_FIT, PodPolicy.FIRST_FIT, PodPolicy.SCORED]))
    return Plan(queues, namespaces, pods, policy)


def _replay(plan: Plan) -> QueuedReplay:
    tree = QueueTree.build(plan.queues)
    assert tree.problems == {}, tree.problems
    replay = QueuedReplay(Cluster(SNAPSHOT, [], plan.policy), tree)
    templates = {key_of(t): t for t in (_template(n, r) for n in plan.namespaces for r in REQUESTS)}
    order = sorted(range(len(plan.pods)), key=lambda i: plan.pods[i][2])
    for i in order:
        namespace, request, arrival, run, priority = plan.pods[i]
        pod = {
            "kind": "Pod",
            "metadata": {"namespace": namespace, "name": f"p{i}"},
            "spec": {
                "priority": priority,
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": request}],
            },
        }
        departure = None if run is None else arrival + run
        replay.add_pod(pod, pod_claims(pod, {}, templates), key_of(pod), arrival, departure)
    return replay


def _lender(tree: QueueTree, victim: str, requester: str) -> str:
    """(b)'s reading of whose guarantee protects `victim`'s pods from `requester`: walking down
    from the victim's root, the first queue that is not also above (or equal to) the requester."""
    above_requester: set[str] = set()
    current: str | None = requester
    while current is not None:
        above_requester.add(current)
        current = tree.queues[current].parent
    chain: list[str] = []
    current = victim
    while current is not None:
        chain.insert(0, current)
        current = tree.queues[current].parent
    return next(name for name in chain if name not in above_requester)


def _under(tree: QueueTree, queue: str, ancestor: str) -> bool:
    current: str | None = queue
    while current is not None and current != ancestor:
        current = tree.queues[current].parent
    return current == ancestor


class EvictionCheck:
    """(b), counted independently of `BorrowedUnits`. A replay's victims for one pod come one
    after another over the same running pods: what each lender gave for that pod adds up."""

    def __init__(self) -> None:
        self.taken: dict[tuple[float, str, str], tuple[float, bool]] = {}
        """(time, for whom, lender) -> (GPUs taken from it, whether any was protected)."""

    def __call__(self, eviction: Eviction, running: Sequence[Running], ledger: Ledger) -> None:
        _check_eviction(eviction, running, ledger, self.taken)


def _check_eviction(
    eviction: Eviction,
    running: Sequence[Running],
    ledger: Ledger,
    taken: dict[tuple[float, str, str], tuple[float, bool]],
) -> None:
    tree = ledger.tree
    lender = _lender(tree, eviction.queue, eviction.by_queue)
    spec = tree.queues[lender]
    pods = [r for r in running if _under(tree, r.queue, lender)]
    held = sum(r.amounts.gpu for r in pods)
    guarantee = spec.guaranteed.gpu or 0.0
    assert held > guarantee + 1e-9, f"{eviction}: {lender} held {held}, within {guarantee}"
    victim = next(r for r in pods if f"{r.key[0]}/{r.key[1]}" == eviction.pod)
    ahead = sum(
        r.amounts.gpu
        for r in pods
        if (-r.priority, r.created, r.key) <= (-victim.priority, victim.created, victim.key)
    )
    key = (eviction.time, eviction.by_pod, lender)
    gone, protected = taken.get(key, (0.0, False))
    gone += victim.amounts.gpu
    protected = protected or ahead <= guarantee + 1e-9
    taken[key] = (gone, protected)
    if protected:  # the surplus: the lender keeps its guarantee
        assert held - gone >= guarantee - 1e-9, f"{eviction}: takes {lender} below its guarantee"
    assert eviction.queue != eviction.by_queue


def _check_step(replay: QueuedReplay) -> None:
    ledger = replay.ledger()
    # (d) limits
    for name, spec in replay.tree.queues.items():
        assert not spec.limit.exceeded(ledger.used(name)), f"{name} is over its limit"
    # (c) the independent checker, on every allocation held now
    claims = []
    for job in replay.running.values():
        assert job.placement is not None and job.placement.allocations is not None
        for claim, allocation in zip(job.claims, job.placement.allocations, strict=True):
            claims.append({**claim, "status": {"allocation": allocation}})
    assert check_allocations(SLICES, CLASSES, claims) == []
    # (a) nobody owed capacity waits while evictions would make room
    running = replay.running_pods()
    for job in replay.waiting:
        spec = replay.tree.queues[job.queue]
        if (
            job.failed
            or spec.reclaim != RECLAIM_BORROWED
            or not ledger.short_of_guarantee(job.queue)
        ):
            continue
        lenders = BorrowedUnits(ledger, running)
        units = lenders.units(job.queue)
        fits = replay.fits(job, ledger)
        found = choose_victims(units, fits) if units else None
        assert found is None, f"{job.key} of {job.queue} waits, yet evicting {found} makes room"
        spare, allowed = lenders.surplus(job.queue)
        found = choose_victims(spare, fits, allowed) if units and spare else None
        assert found is None, f"{job.key} of {job.queue} waits, yet the surplus {found} makes room"


def _queue(
    name: str, parent: str | None = None, gpus: int = 0, leaf: bool = True
) -> dict[str, Any]:
    spec: dict[str, Any] = {"guaranteed": {"gpu": gpus}} if gpus else {}
    if parent is not None:
        spec["parent"] = parent
    if leaf:
        spec["namespaces"] = [f"ns-{name}"]
    return {"kind": "GpuQueue", "metadata": {"name": name}, "spec": spec}


def test_reclaim_across_organisations_spares_a_team_inside_its_organisations_guarantee() -> None:
    """The case (b) exists for, pinned: team x1 is a GPU past its own guarantee but org-x holds
    no more than its own, so when team y1 of org-y reclaims, x1's pods are not borrowed (though
    cheaper to evict than the default queue's): a default-queue pod goes."""
    queues = [
        _queue("org-x", gpus=2, leaf=False),
        _queue("x1", "org-x", gpus=1),
        _queue("org-y", gpus=2, leaf=False),
        _queue("y1", "org-y", gpus=2),
    ]
    pods: list[tuple[str, str, int, int | None, int]] = [
        ("ns-x1", "one-gpu", 0, None, 0),
        ("ns-x1", "one-gpu", 0, None, 0),
        ("elsewhere", "one-gpu", 0, None, 2),
        ("elsewhere", "one-gpu", 0, None, 2),
        ("ns-y1", "one-gpu", 1, None, 0),
    ]
    plan = Plan(queues, ["ns-x1", "ns-y1", "elsewhere"], pods, PodPolicy.FIRST_FIT)
    replay = _replay(plan)
    replay.on_evict = EvictionCheck()
    for _ in replay.steps():
        _check_step(replay)
    assert [(e.queue, e.by_queue) for e in replay.evictions] == [("default", "y1")]


def test_reclaim_takes_the_lenders_surplus_when_borrowed_halves_free_no_whole_gpu() -> None:
    """The case the surplus exists for, pinned: queues a and b each hold one and a half GPUs
    as MIG halves, half a GPU over their guarantee of one. They arrive two at a time, b b, a b,
    a a, and first fit packs them two to a GPU in that order (n1/gpu-0, n1/gpu-1, n2/gpu-0), so
    b's borrowed half (its newest) shares n1/gpu-1 with a's protected oldest, and a's borrowed
    half shares n2/gpu-0 with a's own. Queue c, owed two GPUs, takes the one free GPU and then
    waits for a whole one: the borrowed halves alone would free halves of two GPUs, so a's
    oldest half goes with b's newest, and both lenders still hold their guarantee."""
    queues = [_queue("a", gpus=1), _queue("b", gpus=1), _queue("c", gpus=2)]
    halves = [(f"ns-{q}", "mig-half", i // 2, None, 0) for i, q in enumerate("bbabaa")]
    owed = [("ns-c", "one-gpu", 3, None, 0)] * 2
    plan = Plan(queues, ["ns-a", "ns-b", "ns-c"], [*halves, *owed], PodPolicy.FIRST_FIT)
    replay = _replay(plan)
    replay.on_evict = EvictionCheck()
    for _ in replay.steps():
        _check_step(replay)
    assert sorted((e.pod, e.queue, e.by_queue) for e in replay.evictions) == [
        ("ns-a/p2", "a", "c"),
        ("ns-b/p3", "b", "c"),
    ]
    used = replay.ledger()
    assert [used.used(q).gpu for q in ("a", "b", "c")] == [1.0, 1.0, 2.0]


@settings(
    max_examples=45,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plan=plans())
def _queued_replay_keeps_its_promises(plan: Plan, tally: list[int]) -> None:
    replay = _replay(plan)
    replay.on_evict = EvictionCheck()
    waited = False
    for _ in replay.steps():
        _check_step(replay)
        waited = waited or bool(replay.waiting)
    non_trivial = waited or bool(replay.evictions)
    event("non-trivial" if non_trivial else "trivial: every pod placed on arrival")
    if replay.evictions:
        event("some reclaim")
    assert sum(r.amounts.gpu for r in replay.running_pods()) <= CLUSTER_GPUS + 1e-9
    tally[0] += 1
    tally[1] += non_trivial
    tally[2] += bool(replay.evictions)


def test_queued_replay_keeps_its_promises() -> None:
    tally = [0, 0, 0]
    _queued_replay_keeps_its_promises(tally=tally)
    total, non_trivial, reclaimed = tally
    assert total > 0
    share = non_trivial / total
    print(f"queued replay: {non_trivial}/{total} non-trivial ({share:.0%}), {reclaimed} reclaimed")
    assert reclaimed > 0, "no example evicted anybody: reclaim went untested"
    assert share >= MIN_NON_TRIVIAL, f"only {non_trivial} of {total} examples were non-trivial"
