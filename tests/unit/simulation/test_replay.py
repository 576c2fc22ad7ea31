"""Pods placed with their node resources and claims, on a small trace-shaped cluster."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from dra_driver.allocator import ClusterSnapshot
from dra_driver.allocator.claims import plan_claim
from dra_driver.checker.rules import check_allocations
from dra_driver.noderesources import pod_requests
from dra_driver.simulation.fragindex import fgd_points
from dra_driver.simulation.pods import POD_CLAIM_NAME, claim_from_template, key_of, pod_claims
from dra_driver.simulation.replay import Cluster, PodPolicy
from dra_driver.simulation.tie_order import Ties, spread_order
from dra_driver.simulation.workload import PodShape, Workload, shape_of
from tests.bench.traces import TracePod, cluster, paper_arrivals, paper_node_names, pod_objects

NODES = [
    {"sn": f"n{i}", "cpu_milli": "8000", "memory_mib": "32768", "gpu": str(g), "model": m}
    for i, (g, m) in enumerate([(2, "T4"), (4, "V100"), (0, ""), (2, "V100")])
]


def _pods(seed: int, count: int) -> list[TracePod]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        gpus = rng.choice([0, 1, 1, 2])
        milli = rng.choice([250, 500, 1000]) if gpus == 1 else 1000
        spec = ("V100",) if rng.random() < 0.2 else ()
        out.append(
            TracePod(
                f"p{i}",
                rng.choice([500, 2000, 4000]),
                rng.choice([1024, 8192]),
                gpus,
                milli if gpus else 0,
                spec,
            )
        )
    return out


def _replay(
    policy: PodPolicy, pods: list[TracePod], allocated: list[dict[str, Any]] | None = None
) -> tuple[Cluster, list[str | None]]:
    """Each pod placed in turn; `allocated` collects the claims placed, with their allocation."""
    nodes, slices, classes = cluster(NODES)
    sim = Cluster(ClusterSnapshot.build(slices, classes, nodes), nodes, policy)
    placed = []
    for i, trace_pod in enumerate(pods):
        pod, templates = pod_objects(trace_pod, i)
        claims = pod_claims(pod, {}, {key_of(t): t for t in templates})
        placement = sim.place_pod(pod, claims)
        placed.append(placement.node)
        if allocated is not None and placement.allocations:
            for claim, allocation in zip(claims, placement.allocations, strict=True):
                allocated.append({**claim, "status": {"allocation": allocation}})
    return sim, placed


@pytest.mark.parametrize("policy", list(PodPolicy))
@pytest.mark.parametrize("seed", range(6))
def test_no_node_is_over_committed(policy: PodPolicy, seed: int) -> None:
    sim, placed = _replay(policy, _pods(seed, 40))
    assert sim.ledger.over_committed() == []
    assert any(placed) and not all(placed)  # the cluster fills up


@pytest.mark.parametrize("policy", list(PodPolicy))
@pytest.mark.parametrize("seed", range(4))
def test_the_independent_checker_accepts_every_placement(policy: PodPolicy, seed: int) -> None:
    """The score only steers: whatever node and devices it picks, every rule still holds."""
    allocated: list[dict[str, Any]] = []
    _replay(policy, _pods(seed, 40), allocated)
    nodes, slices, classes = cluster(NODES)
    assert len(allocated) >= 5  # several GPU pods placed, sharing and whole
    assert check_allocations(slices, classes, allocated, nodes) == []


@pytest.mark.parametrize("seed", range(6))
def test_scored_places_what_first_fit_would_place_then(seed: int) -> None:
    """Pod by pod on the same state: where first fit finds a node, scored finds one too."""
    pods = _pods(seed, 40)
    sim, placed = _replay(PodPolicy.SCORED, pods)
    for i, node in enumerate(placed):
        if node is None:
            nodes, slices, classes = cluster(NODES)
            check = Cluster(
                ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.FIRST_FIT
            )
            check.usage, check.ledger = sim.usage, sim.ledger
            check.placer.usage = sim.usage
            pod, templates = pod_objects(pods[i], 10_000 + i)
            claims = pod_claims(pod, {}, {key_of(t): t for t in templates})
            # the state is the end state, later than pod i's: a rejected pod must still not fit
            # wherever first fit would look now only if nothing departed (nothing does here)
            assert check.place_pod(pod, claims).node is None


def test_cpu_only_pod_reports_the_resource() -> None:
    pod, _ = pod_objects(TracePod("big", 64000, 1024, 0, 0, ()), 0)
    sim, _ = _replay(PodPolicy.FIRST_FIT, [])
    placement = sim.place_pod(pod, [])
    assert placement.node is None
    assert placement.reason is not None and "insufficient cpu" in placement.reason


def test_claim_from_template_is_named_and_owned_like_the_controller_makes_it() -> None:
    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}}
    template = {"spec": {"spec": {"devices": {"requests": []}}}}
    claim = claim_from_template(pod, "gpu", template)
    meta = claim["metadata"]
    assert meta["name"].startswith("web-gpu-") and len(meta["name"]) == len("web-gpu-") + 5
    assert meta["annotations"][POD_CLAIM_NAME] == "gpu"
    assert meta["ownerReferences"][0]["name"] == "web"
    assert claim_from_template(pod, "gpu", template)["metadata"]["name"] == meta["name"]


@pytest.mark.parametrize(
    ("ties", "expected"), [(Ties.SPREAD, "c"), (Ties.FULLER, "b"), (Ties.NAME, "a")]
)
def test_equal_increases_go_where_the_tie_rule_says(ties: Ties, expected: str) -> None:
    """Three equal nodes, b already holding one GPU: a whole-GPU pod raises no node's expected
    fragmentation, so the tie decides. The spread order of a, b, c starts with c (neither the
    first name nor the fuller node); the fuller node is b; name order starts with a."""
    assert spread_order(["a", "b", "c"])[0] == "c"
    rows = [
        {"sn": name, "cpu_milli": "32000", "memory_mib": "65536", "gpu": "2", "model": "T4"}
        for name in ("a", "b", "c")
    ]
    nodes, slices, classes = cluster(rows)
    snapshot = ClusterSnapshot.build(slices, classes, nodes)
    sim = Cluster(snapshot, nodes, PodPolicy.SCORED, ties=ties)
    held, templates = pod_objects(TracePod("held", 1000, 1024, 1, 1000, ()), 0)
    claims = pod_claims(held, {}, {key_of(t): t for t in templates})
    assert sim.placer.place(claims, nodes=["b"]).node == "b"
    pod, templates = pod_objects(TracePod("p", 1000, 1024, 1, 1000, ()), 1)
    placement = sim.place_pod(pod, pod_claims(pod, {}, {key_of(t): t for t in templates}))
    assert placement.choice is not None and placement.choice.value == 0
    assert placement.node == expected


def _shape(sim: Cluster, trace_pod: TracePod, index: int) -> PodShape:
    pod, templates = pod_objects(trace_pod, index)
    claims = pod_claims(pod, {}, {key_of(t): t for t in templates})
    return shape_of(pod_requests(pod), [plan_claim(sim.snapshot, c) for c in claims])


@pytest.mark.parametrize(("rare_pods", "kept"), [(8, 11), (4, 10)])
def test_the_shapes_weighed_are_the_most_common_up_to_95_percent(rare_pods: int, kept: int) -> None:
    """Ten common shapes of ten pods each and a rarer two-GPU shape: the rare one is weighed
    only when the common ones make up less than 95 % of the pods without it."""
    nodes, slices, classes = cluster(NODES)
    sim = Cluster(ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.SCORED)
    counts = [(_shape(sim, TracePod(f"c{i}", 100 + i, 1024, 1, 250, ()), i), 10) for i in range(10)]
    rare = _shape(sim, TracePod("rare", 100, 1024, 2, 1000, ()), 99)
    counts.append((rare, rare_pods))
    total = sum(n for _, n in counts)
    weighed = sim.index.weighted([(shape, n / total) for shape, n in counts])
    assert len(weighed) == kept
    assert (rare in [shape for shape, _ in weighed]) == (100 / total < 0.95)
    assert sum(p for _, p in weighed) == pytest.approx(1.0)


def test_every_shape_up_to_95_percent_is_weighed_and_the_guard_caps_them() -> None:
    """Sixty equally common shapes: 57 make up 95 % of the pods, and all 57 are weighed, as
    FGD keeps its typical pods; `max_shapes` is only a guard on cost, and caps when set low."""
    nodes, slices, classes = cluster(NODES)
    sim = Cluster(ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.SCORED)
    shapes = [_shape(sim, TracePod(f"c{i}", 100 + i, 1024, 1, 250, ()), i) for i in range(60)]
    distribution = [(shape, 1 / 60) for shape in shapes]
    weighed = sim.index.weighted(distribution)
    assert [shape for shape, _ in weighed] == shapes[:57]
    assert sum(p for _, p in weighed) == pytest.approx(1.0)
    sim.index.max_shapes = 10
    assert [shape for shape, _ in sim.index.weighted(distribution)] == shapes[:10]


@pytest.mark.parametrize("seed", [0, 1])
def test_paper_arrivals_take_every_pod_once_then_draw_up_to_the_target(seed: int) -> None:
    """FGD's simulator replays the whole trace once, shuffled, then appends random pods of it
    while the next still fits under the target; a trace above the target loses random pods
    instead, and none repeats."""
    pods = _pods(seed, 40)
    demand = sum(p.gpu_demand for p in pods)
    grown = paper_arrivals(pods, demand, 1.5, random.Random(seed))
    assert sorted(grown[:40], key=lambda p: p.name) == sorted(pods, key=lambda p: p.name)
    total = sum(p.gpu_demand for p in grown)
    largest = max(p.gpu_demand for p in pods)
    assert 1.5 * demand - largest < total <= 1.5 * demand
    assert len(grown) > 40
    shrunk = paper_arrivals(pods, demand, 0.5, random.Random(seed))
    names = [p.name for p in shrunk]
    assert len(set(names)) == len(names) and set(names) < {p.name for p in pods}
    assert 0.5 * demand - largest < sum(p.gpu_demand for p in shrunk) <= 0.5 * demand


def test_paper_node_names_are_a_random_order_of_the_same_nodes() -> None:
    """Each node keeps its row and gains a distinct four-digit prefix, so name order (the
    order FGD's scheduler breaks ties by) is a random order of the nodes, fixed by the seed."""
    rows = [{"sn": f"node-{i:02d}", "gpu": str(i % 3)} for i in range(30)]
    named = paper_node_names(rows, random.Random(3))
    assert named == paper_node_names(rows, random.Random(3))
    assert [r["sn"][5:] for r in named] == [r["sn"] for r in rows]
    assert [r["gpu"] for r in named] == [r["gpu"] for r in rows]
    prefixes = [r["sn"][:4] for r in named]
    assert len(set(prefixes)) == 30 and all(p.isdigit() for p in prefixes)
    by_name = [r["sn"][5:] for r in sorted(named, key=lambda r: r["sn"])]
    assert by_name != [r["sn"] for r in rows]


def test_pods_without_devices_count_all_free_room_on_every_node() -> None:
    """A CPU-only shape is weighed by its share of the pods, as FGD weighs its typical pods,
    and its term is the node's whole free device room whether or not the node has the CPU for
    it: it shifts every node's value alike and never favours a node for its free CPU."""
    nodes, slices, classes = cluster(NODES)
    probe = Cluster(ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.SCORED)
    gpu = _shape(probe, TracePod("g", 1000, 1024, 1, 500, ()), 0)
    cpu_only = _shape(probe, TracePod("c", 6000, 1024, 0, 0, ()), 1)
    assert probe.index.weighted([(cpu_only, 0.9), (gpu, 0.1)]) == [(cpu_only, 0.9), (gpu, 0.1)]
    workload = Workload.weighted([(cpu_only, 0.9), (gpu, 0.1)])
    sim = Cluster(
        ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.SCORED, workload=workload
    )
    index = sim.index
    index.refresh()
    node = "n1"  # four V100s, all free: the GPU shape can use all of them
    avail = index.rooms.availability(index.usage, node)
    cpu = index.names.index("cpu")
    roomy = [2**40] * len(index.names)  # plenty of memory and the rest
    roomy[cpu] = 8000
    short = list(roomy)
    short[cpu] = 2000  # too little for the CPU-only shape, enough for the GPU one
    for free in (roomy, short):
        assert index.fragmentation(node, avail, tuple(free)) == pytest.approx(0.9 * 4.0)


def test_a_workload_given_whole_is_not_changed_by_arrivals() -> None:
    nodes, slices, classes = cluster(NODES)
    snapshot = ClusterSnapshot.build(slices, classes, nodes)
    probe = Cluster(snapshot, nodes, PodPolicy.SCORED)
    shapes = [_shape(probe, TracePod(f"s{i}", 1000 + i, 1024, 1, 250, ()), i) for i in range(3)]
    workload = Workload.of([shapes[0], shapes[0], shapes[1]])
    assert workload.distribution() == [(shapes[0], 2 / 3), (shapes[1], 1 / 3)]
    sim = Cluster(snapshot, nodes, PodPolicy.SCORED, workload=workload)
    pod, templates = pod_objects(TracePod("new", 1000, 1024, 2, 1000, ()), 9)
    version = workload.version
    assert sim.place_pod(pod, pod_claims(pod, {}, {key_of(t): t for t in templates})).node
    assert workload.version == version
    assert workload.distribution() == [(shapes[0], 2 / 3), (shapes[1], 1 / 3)]


def test_points_are_fgds_truncated_logistic_score() -> None:
    """FGD scores a node 100 x sigmoid(-increase), truncated: increases a few hundredths of a
    GPU apart score the same (ties, which go to the fuller node), and large ones far more."""
    assert fgd_points(np.array([0.0, 0.01, 0.03, 0.05, -0.05, 1.0, 40.0, 1e6])).tolist() == [
        50,
        49,
        49,
        48,
        51,
        26,
        0,
        0,
    ]
