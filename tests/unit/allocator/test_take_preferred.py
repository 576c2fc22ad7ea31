"""The shared pod placer's shortcut for single-device pods (`take_preferred`) against the
scored search it stands for: on random usage of real H100 nodes, every device it may be
steered to gives the same allocation as `search_node(..., SCORED, prefer=...)`, and where the
search would not take the device (in use, past the candidates it looks at, a second device
asked for) the shortcut steps aside."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.allocator import AllocationMode, ClusterSnapshot, ScoringPolicy, Usage
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.placement import search_node, take_preferred
from tests.bench.cluster import (
    DOMAIN,
    cluster_slices,
    device_classes,
    fractional,
    mig,
    mig_by_capacity,
    node_name,
    pinned_gpu,
    timeslice,
    whole_gpus,
)

NODE = node_name(0)


def any_mig(name: str) -> dict[str, Any]:
    """Every MIG placement of the node (200 devices): more than the search looks at."""
    claim = mig(name, "1g.10gb")
    claim["spec"]["devices"]["requests"] = [
        {"name": "mig", "exactly": {"deviceClassName": f"mig.{DOMAIN}"}}
    ]
    return claim


KINDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "gpu": whole_gpus,
    "mig-1g": lambda n: mig(n, "1g.10gb"),
    "mig-3g": lambda n: mig(n, "3g.40gb"),
    "mig-any": any_mig,
    "mig-capacity": mig_by_capacity,
    "pinned-gpu": pinned_gpu,
    "timeslice": timeslice,
    "fractional": lambda n: fractional(n, "20Gi", "30"),
}


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot.build(cluster_slices(1), device_classes())


def _busy(snapshot: ClusterSnapshot, seed: int) -> Usage:
    """A node part used by first fit: up to nine random claims of every kind."""
    rng = random.Random(seed)
    usage = Usage()
    policy = ScoringPolicy()
    for i in range(rng.randrange(0, 10)):
        kind = rng.choice(list(KINDS))
        plans = [plan_claim(snapshot, KINDS[kind](f"used-{i}"))]
        result = search_node(snapshot, usage, plans, NODE, AllocationMode.FIRST_FIT, policy)
        for allocation in result.allocations or []:
            usage.record(snapshot, allocation)
    return usage


@pytest.mark.parametrize("seed", range(6))
def test_same_allocation_as_the_steered_scored_search(snapshot: ClusterSnapshot, seed: int) -> None:
    usage = _busy(snapshot, seed)
    policy = ScoringPolicy()
    taken = stepped_aside = 0
    for kind, make in KINDS.items():
        plans = [plan_claim(snapshot, make(f"new-{kind}"))]
        for device in snapshot.view(NODE).devices:
            prefer = frozenset({device.id})
            quick = take_preferred(snapshot, usage, plans, NODE, prefer, policy)
            searched = search_node(
                snapshot, usage, plans, NODE, AllocationMode.SCORED, policy, prefer=prefer
            )
            if quick is None:
                stepped_aside += 1
                continue
            taken += 1
            assert quick == searched.allocations, (kind, device.name)
    # Both ways are exercised: a shortcut that never applies would pass the loop above.
    assert taken > 20
    assert stepped_aside > 50


def test_steps_aside_past_the_candidates_the_search_looks_at(snapshot: ClusterSnapshot) -> None:
    plans = [plan_claim(snapshot, any_mig("late"))]
    policy = ScoringPolicy()
    migs = [d for d in snapshot.view(NODE).devices if "mig" in d.name]
    assert len(migs) > policy.max_candidates_per_slot
    late = frozenset({migs[-1].id})
    searched = search_node(
        snapshot, Usage(), plans, NODE, AllocationMode.SCORED, policy, prefer=late
    )
    assert searched.score is not None and searched.score.steer == 1  # the search never saw it
    assert take_preferred(snapshot, Usage(), plans, NODE, late, policy) is None
    early = frozenset({migs[1].id})
    assert take_preferred(snapshot, Usage(), plans, NODE, early, policy) is not None


def test_steps_aside_for_more_than_one_device(snapshot: ClusterSnapshot) -> None:
    plans = [plan_claim(snapshot, whole_gpus("pair", 2))]
    gpus = [d.id for d in snapshot.view(NODE).devices if d.name.startswith("gpu-")][:2]
    policy = ScoringPolicy()
    assert take_preferred(snapshot, Usage(), plans, NODE, frozenset(gpus), policy) is None
    assert take_preferred(snapshot, Usage(), plans, NODE, frozenset(gpus[:1]), policy) is None
