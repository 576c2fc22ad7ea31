"""The replay's node ranking against a straightforward evaluation of the same formula.

`NodeTable.ranked` ranks every node for a pod from cached per-GPU-state pieces and arrays
(ranking.py, fragindex.py). Here each pod's ranking is computed again the slow way, node by node,
straight from the definitions: the expected fragmentation of a node is the sum over the kept
shapes of `p * total room` where its free CPU or memory cannot take the shape, else `p` times
the room the shape cannot use; the increase is taken for each placement option, and groups of
nodes in equal states are ranked by FGD's points for the increase (the best option of a node is
the one with the most points, then the least free room after it), then the free room after, then
node order (best fit: the rounded room after, then the CPU share left). The two
must agree exactly, float for float, on random small clusters, so that a faster ranking cannot
change an answer unnoticed.
"""

from __future__ import annotations

import copy
import math
import random
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from dra_driver.allocator import AllocationMode, ClusterSnapshot
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.placement import search_node
from dra_driver.noderesources import CPU, Resources, pod_requests
from dra_driver.simulation.fragindex import EPS, Choice, FragmentationIndex, Objective
from dra_driver.simulation.ledger import asked
from dra_driver.simulation.pods import key_of, pod_claims
from dra_driver.simulation.ranking import round9
from dra_driver.simulation.replay import Cluster, PodPolicy
from dra_driver.simulation.rooms import unit_rooms
from dra_driver.simulation.tie_order import Ties
from dra_driver.simulation.workload import PodShape, shape_of
from tests.bench.traces import TracePod, cluster, pod_objects

MODELS = ("T4", "V100", "A100")
FRAGMENTATION = Objective.FRAGMENTATION


def _nodes(rng: random.Random, count: int) -> list[dict[str, str]]:
    """Few node kinds (so nodes share GPU states) and tight CPU and memory (so the
    CPU/memory part of the formula decides often)."""
    kinds = [
        (rng.choice([0, 1, 2, 4]), rng.choice(MODELS), rng.choice([4000, 8000])) for _ in range(3)
    ]
    rows = []
    for i in range(count):
        gpus, model, cpu = rng.choice(kinds)
        memory = rng.choice([8192, 16384])
        rows.append(
            {"sn": f"n{i}", "cpu_milli": str(cpu), "memory_mib": str(memory), "gpu": str(gpus)}
            | {"model": model if gpus else ""}
        )
    return rows


def _pods(rng: random.Random, count: int) -> list[TracePod]:
    out = []
    for i in range(count):
        gpus = rng.choice([0, 1, 1, 1, 2])
        milli = rng.choice([200, 250, 500, 810, 1000]) if gpus == 1 else 1000
        spec = (rng.choice(MODELS),) if rng.random() < 0.2 else ()
        cpu = rng.choice([500, 1000, 2000, 3000])
        memory = rng.choice([512, 1024, 4096, 6000])
        out.append(TracePod(f"p{i}", cpu, memory, gpus, milli if gpus else 0, spec))
    return out


def _fragmentation(
    index: FragmentationIndex,
    node: str,
    avail: Sequence[float],
    free: Sequence[int],
    weighted: Sequence[tuple[PodShape, float]],
) -> float:
    """The expected fragmentation of `node`, one shape at a time, from the definition."""
    units = index.rooms.node(node)
    rooms = unit_rooms(units, avail)
    total = sum(rooms)
    if total <= EPS:
        return 0.0
    where = {name: i for i, name in enumerate(index.names)}
    expected = 0.0
    for shape, p in weighted:
        if shape.demand is None or any(
            free[where[n]] < amount for n, amount in shape.requests if n in where
        ):
            expected += p * total  # no device for it, or not its CPU or memory
            continue
        usable, lost = 0, 0.0
        for u, matched in enumerate(index.matching(node, shape.demand)):
            if any(avail[i] >= size - EPS for i, size in matched):
                usable += 1
            else:
                lost += rooms[u]
        expected += p * (total if usable < shape.demand.count else lost)
    return expected


def _expected(
    sim: Cluster,
    shape: PodShape,
    requests: Resources,
    weighted: Sequence[tuple[PodShape, float]],
    among: set[str] | None = None,
) -> list[Choice]:
    """The ranking, node by node: one entry per group of nodes in equal states, its first node
    (of those in `among`, when given) standing for it."""
    index = sim.index
    scored = sim.policy is PodPolicy.SCORED
    groups: dict[tuple[int, tuple[float, ...], tuple[int, ...]], str] = {}
    for node in sim.nodes:
        if among is not None and node not in among:
            continue
        resources = sim.ledger.free(node)
        signature = index.rooms.node(node).signature
        key = (
            signature,
            index.rooms.availability(sim.usage, node),
            tuple(resources.get(n, 0) for n in index.names),
        )
        groups.setdefault(key, node)
    ranked: list[tuple[float, float, int, Choice]] = []
    asks = asked(requests)
    for (_, avail, free), node in groups.items():
        if not sim.ledger.fits(node, asks):
            continue
        left = list(free)
        for i, name in enumerate(index.names):
            left[i] -= dict(shape.requests).get(name, 0)
        if any(v < 0 for v in left):
            continue
        units = index.rooms.node(node)
        options: list[tuple[int, ...]] = [()]
        if shape.demand is not None:
            options = index._pick(node, avail, shape.demand)
            if not options:
                continue
        before = _fragmentation(index, node, avail, free, weighted) if scored else 0.0
        choice: Choice | None = None
        best_key: tuple[float, float] | None = None
        for picked in options:
            after_avail = index._after(units, avail, picked, shape.demand, node)
            room = sum(unit_rooms(units, after_avail))
            ids = tuple(units.devices[i].id for i in picked)
            if scored:
                after = _fragmentation(index, node, after_avail, tuple(left), weighted)
                value = after - before
                points = _points(value)
                key = (-points, room if sim.fuller_first else 0.0)
                if best_key is None or key < best_key:
                    best_key = key
                    choice = Choice(node, value, ids, before, after, room, points)
            elif choice is None or room < choice.value - EPS:
                choice = Choice(node, room, ids, 0.0, room, room)
        assert choice is not None
        if scored:
            order: tuple[float, ...] = (-choice.points, choice.room if sim.fuller_first else 0.0)
        else:
            allocatable = sim.ledger.allocatable[node]
            cpu_left = sim.ledger.free(node).get(CPU, 0) - requests.get(CPU, 0)
            order = (round(choice.value, 9), cpu_left / allocatable.amount(CPU))
        ranked.append((*order, sim.nodes.index(node), choice))
    ranked.sort(key=lambda r: r[:3])
    return [r[3] for r in ranked]


def _points(increase: float) -> int:
    """FGD's score: 100 times the logistic function of the decrease, truncated."""
    if increase > 700:
        return 0  # exp would overflow; the score is 0 long before
    return int(100 / (1 + math.exp(increase)))


def _replay_and_compare(
    policy: PodPolicy,
    seed: int,
    ties: Ties = Ties.SPREAD,
    huge_memory: bool = False,
    subsets: bool = False,
    outside: bool = False,
) -> int:
    """Replays random pods on a random cluster; every pod's ranking must equal the slow one.
    `subsets`: each pod may use only some nodes, as the controller offers them. `outside`:
    every third pod's claims are allocated on a random node and recorded in the usage alone,
    as the controller's watch brings allocations the placer did not make.
    Returns how many rankings had a node whose CPU or memory failed a kept shape."""
    rng = random.Random(seed)
    rows = _nodes(rng, 12)
    if huge_memory:
        rows[3]["memory_mib"] = str(10**13)  # more bytes than a 64-bit integer holds
    nodes, slices, classes = cluster(rows)
    sim = Cluster(
        ClusterSnapshot.build(slices, classes, nodes),
        nodes,
        policy,
        keep_candidates=True,
        ties=ties,
    )
    pods = _pods(rng, 60)
    starved = 0
    for i, trace_pod in enumerate(pods):
        pod, templates = pod_objects(trace_pod, i)
        claims = pod_claims(pod, {}, {key_of(t): t for t in templates})
        requests = pod_requests(pod)
        plans = [plan_claim(sim.snapshot, c) for c in claims]
        if outside and i % 3 == 2 and plans:
            node = rng.choice(sim.nodes)
            made = search_node(
                sim.snapshot, sim.usage, plans, node, AllocationMode.FIRST_FIT, sim.scoring
            )
            for allocation in made.allocations or []:
                sim.placer.record(allocation, node)
            continue
        shape = shape_of(requests, plans)
        workload = copy.copy(sim.workload)
        workload.counts, workload.shapes = Counter(workload.counts), dict(workload.shapes)
        workload.observe(shape)  # what place_pod learns before it ranks
        weighted = sim.index.weighted(workload.distribution())
        among = set(rng.sample(sim.nodes, rng.randint(1, len(sim.nodes)))) if subsets else None
        expected = _expected(sim, shape, requests, weighted, among)
        starved += _any_shape_failed(sim, weighted)
        placement = sim.place_pod(pod, claims, among=among)
        assert placement.candidates == expected, f"pod {i}"
        assert among is None or placement.node is None or placement.node in among
        if expected:
            assert placement.choice in expected
    return starved


def _any_shape_failed(sim: Cluster, weighted: Sequence[tuple[PodShape, float]]) -> bool:
    for node in sim.nodes:
        free = sim.ledger.free(node)
        for shape, _ in weighted:
            if any(free.get(n, 0) < amount for n, amount in shape.requests):
                return True
    return False


@pytest.mark.parametrize("seed", range(6))
def test_scored_ranking_equals_the_formula_node_by_node(seed: int) -> None:
    starved = _replay_and_compare(PodPolicy.SCORED, seed)
    assert starved > 10  # the CPU/memory part of the formula was exercised


@pytest.mark.parametrize("seed", range(6))
def test_ranking_among_some_nodes_equals_the_formula_over_them(seed: int) -> None:
    """The controller offers only the nodes a pod may use: each group is then stood for by its
    first node among those, and no other node is chosen."""
    _replay_and_compare(PodPolicy.SCORED, seed, subsets=True)


@pytest.mark.parametrize("seed", range(4))
def test_ranking_after_usage_changed_outside_the_replay_equals_the_formula(seed: int) -> None:
    """Allocations recorded in the usage alone (the controller's watch) move their nodes to the
    groups of their new states before the next ranking."""
    _replay_and_compare(PodPolicy.SCORED, seed, outside=True)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("ties", [Ties.FULLER, Ties.NAME])
def test_other_tie_rules_equal_the_formula_node_by_node(seed: int, ties: Ties) -> None:
    _replay_and_compare(PodPolicy.SCORED, seed, ties=ties)


@pytest.mark.parametrize("seed", range(3))
def test_best_fit_ranking_equals_the_formula_node_by_node(seed: int) -> None:
    _replay_and_compare(PodPolicy.BEST_FIT, seed)


@pytest.mark.parametrize("policy", [PodPolicy.SCORED, PodPolicy.BEST_FIT])
def test_quantities_past_64_bits_compare_exactly(policy: PodPolicy) -> None:
    _replay_and_compare(policy, 1, huge_memory=True)


def test_the_choice_of_one_node_equals_the_ranking() -> None:
    """`FragmentationIndex.choose` (one node at a time) gives each ranked group's choice: the
    nodes the pod did not go to are as they were when it was ranked."""
    rng = random.Random(7)
    nodes, slices, classes = cluster(_nodes(rng, 8))
    sim = Cluster(
        ClusterSnapshot.build(slices, classes, nodes), nodes, PodPolicy.SCORED, keep_candidates=True
    )
    compared = 0
    for i, trace_pod in enumerate(_pods(rng, 30)):
        pod, templates = pod_objects(trace_pod, i)
        placement = sim.place_pod(pod, pod_claims(pod, {}, {key_of(t): t for t in templates}))
        for choice in placement.candidates:
            if choice.node != placement.node:
                free = sim.ledger.free(choice.node)
                assert sim.index.choose(choice.node, free, placement.shape, FRAGMENTATION) == choice
                compared += 1
    assert compared > 50


def test_rounding_to_9_places_is_pythons() -> None:
    """The ranking rounds all values at once; it must round exactly as `round(v, 9)`, halves
    (exact and within float error) and huge values included."""
    rng = random.Random(3)
    values = [rng.uniform(-10, 10) for _ in range(20_000)]
    values += [
        rng.randint(-(10**6), 10**6) / 1e9 + rng.choice([0.0, 5e-10, -5e-10, 1e-16, -1e-16])
        for _ in range(20_000)
    ]
    values += [1 / 1024, -1 / 1024, 0.0, -0.0, 2.5e-9, 1e7 + 0.1234567895, 1e300, float("inf")]
    assert round9(np.array(values)).tolist() == [round(v, 9) for v in values]
