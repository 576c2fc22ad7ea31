"""The caches that make the allocator fast at cluster scale change no answer.

First fit's cursor over full nodes, scored mode's reuse of a node's solution, the ranking kept
by load, and the snapshot's compact devices are each compared with the plain computation.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from dra_driver.allocator import AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.claims import ClaimPlans, plan_claim
from dra_driver.allocator.errors import InputError
from dra_driver.allocator.placement import warm_class_verdicts
from dra_driver.allocator.projection import device_entries
from dra_driver.allocator.scoring import ScoringPolicy
from dra_driver.allocator.search import CandidateIndex
from tests.bench.cluster import (
    EXTENDED_MIX,
    MIX,
    claim_mix,
    cluster_slices,
    device_classes,
    mig,
    whole_gpus,
)
from tests.unit.allocator.objects import DRV, GPU_CLASS, dev, device_class, slice_


def _snapshot(nodes: int = 4) -> ClusterSnapshot:
    snapshot = ClusterSnapshot.build(cluster_slices(nodes), device_classes())
    warm_class_verdicts(snapshot)
    return snapshot


def _run(placer: Placer, seed: int, count: int, plain: bool) -> list[Any]:
    """Place and release claims at random; with `plain`, on a copy of the node list each time
    (no cursor, no kept ranking) and with the placer's solutions, the usage's derived figures
    and the snapshot's claim plans emptied, so no cache is used."""
    rng = random.Random(seed)
    live: list[tuple[dict[str, Any], str]] = []
    out: list[Any] = []
    for claim in claim_mix(count, seed=seed, mix=EXTENDED_MIX):
        if plain:
            placer._fits.clear()
            placer.usage.forget_derived()
            placer.snapshot.caches.of(ClaimPlans).by_signature.clear()
            placement = placer.place([claim], nodes=list(placer.nodes))
        else:
            placement = placer.place([claim])
        out.append((placement.node, placement.allocations))
        if placement.allocations is not None and placement.node is not None:
            live.append((placement.allocations[0], placement.node))
        if live and rng.random() < 0.4:
            allocation, node = live.pop(rng.randrange(len(live)))
            placer.release(allocation, node)
    return out


@pytest.mark.parametrize("mode", list(AllocationMode))
def test_cached_placements_equal_the_plain_ones(mode: AllocationMode) -> None:
    snapshot = _snapshot()
    cached = _run(Placer(snapshot, Usage(), mode, explain_failures=False), 5, 300, plain=False)
    plain = _run(Placer(snapshot, Usage(), mode, explain_failures=False), 5, 300, plain=True)
    assert cached == plain


def _run_ranked(placer: Placer, other: Placer, seed: int, count: int, plain: bool) -> list[Any]:
    """Scored placements with releases (nodes move down the ranking, now and then a busy node
    empties) and, now and then, a claim placed by `other` on the same usage (a node changes
    without moving)."""
    rng = random.Random(seed)
    live: list[tuple[Placer, dict[str, Any], str]] = []
    out: list[Any] = []
    for claim in claim_mix(count, seed=seed, mix=MIX):
        if not plain:
            _check_known_prefixes(placer)
        by = other if rng.random() < 0.15 else placer
        if plain:
            placer._fits.clear()
            placer.usage.forget_derived()
        placement = by.place([claim], nodes=list(by.nodes) if plain else None)
        out.append((by is other, placement.node, placement.allocations))
        if placement.allocations is not None and placement.node is not None:
            live.append((by, placement.allocations[0], placement.node))
        while live and rng.random() < 0.45:
            owner, allocation, node = live.pop(rng.randrange(len(live)))
            owner.release(allocation, node)
        if live and rng.random() < 0.05:  # a busy node empties and drops to the bottom
            emptied = rng.choice(live)[2]
            for owner, allocation, node in [e for e in live if e[2] == emptied]:
                owner.release(allocation, node)
            live = [e for e in live if e[2] != emptied]
    return out


def _check_known_prefixes(placer: Placer) -> None:
    """Every ranked node the cursor would skip is one whose "does not fit" answer is current:
    the invariant itself, so a wrong skip is found even where it would not change a choice."""
    versions = placer.usage.node_versions
    for signature in placer._ranked_cursor:
        known = placer._known_unfit_ranked(signature)
        if not known:
            continue
        everywhere, unfit = placer._unfit[signature]
        assert everywhere == versions["*"]
        for node in placer._ranked_names[:known]:
            assert unfit.get(node) == versions[node]


@pytest.mark.parametrize("fitting", [1, 2, 4])
def test_the_ranked_cursor_skips_only_nodes_that_still_do_not_fit(fitting: int) -> None:
    """Scored mode starts after the ranked nodes known not to fit; a release moves a node down
    and shifts the ones after it up, and another placer changes nodes without moving them.
    With few nodes compared, skipping one that fits changes the answer."""
    snapshot = _snapshot(8)
    policy = ScoringPolicy(max_fitting_nodes=fitting)
    runs = []
    for plain in (False, True):
        usage = Usage()
        placer = Placer(snapshot, usage, AllocationMode.SCORED, policy=policy)
        other = Placer(snapshot, usage, AllocationMode.FIRST_FIT, explain_failures=False)
        runs.append(_run_ranked(placer, other, 11, 700, plain))
    assert runs[0] == runs[1]


def test_a_node_that_empties_moves_down_without_hiding_the_node_it_passes() -> None:
    """node-000 is full and ranked first; node-001 is the first node a 1g slice fits, but
    node-002 wins it (a hole on a partly used GPU) and stays ranked after node-001. Emptying
    node-000 moves it to the bottom and node-001 up into its rank: the known prefix must not
    cover node-001, though node-001 itself did not change."""
    snapshot = _snapshot(3)
    usage = Usage()
    placer = Placer(
        snapshot, usage, AllocationMode.SCORED, policy=ScoringPolicy(max_fitting_nodes=2)
    )
    full = [placer.place([whole_gpus(f"full-{i}")], nodes=["node-000"]) for i in range(8)]
    for i in range(2):
        placer.place([whole_gpus(f"two-{i}")], nodes=["node-001"])
    placer.place([mig("hole", "3g.40gb")], nodes=["node-002"])
    assert placer.place([mig("probe", "1g.10gb")]).node == "node-002"
    assert placer._ranked_names == ["node-000", "node-001", "node-002"]
    for placement in full:
        assert placement.allocations is not None
        placer.release(placement.allocations[0], "node-000")
    assert placer._ranked_names == ["node-001", "node-002", "node-000"]
    _check_known_prefixes(placer)


def test_taking_a_device_of_a_pool_across_nodes_expires_every_node_of_the_pool() -> None:
    counters = [{"name": "set", "counters": {"c": {"value": "1"}}}]
    consumes = [{"counterSet": "set", "counters": {"c": {"value": "1"}}}]
    devices = [
        {**dev("a"), "nodeName": "node-a", "consumesCounters": consumes},
        {**dev("b"), "nodeName": "node-b", "consumesCounters": consumes},
    ]
    shared = slice_("s", devices, node=None, pool="p", perDeviceNodeSelection=True)
    shared["spec"]["sharedCounters"] = counters
    snapshot = ClusterSnapshot.build([shared], [GPU_CLASS])
    usage = Usage()
    before = usage.node_version("node-b")
    allocation = {"devices": {"results": [{"driver": DRV, "pool": "p", "device": "a"}]}}
    usage.record(snapshot, allocation)
    assert usage.node_version("node-b") != before


def _device(raw: dict[str, Any]) -> Any:
    snapshot = ClusterSnapshot.build([slice_("s", [raw])], [GPU_CLASS])
    return snapshot.devices[0]


def test_a_malformed_attribute_fails_as_it_did_from_the_json() -> None:
    device = _device(dev("g", attributes={"bad": {"colour": "red"}}))
    with pytest.raises(InputError, match=r"ResourceSlice s: device g\.attributes\[bad\]"):
        _ = device.attributes
    with pytest.raises(InputError, match=r"attributes\[bad\]"):
        device.attribute(f"{DRV}/type")


def test_sections_that_are_not_maps_are_kept_as_given() -> None:
    device = _device({"name": "g", "attributes": ["not", "a", "map"]})
    assert device.projection_key(frozenset({"type"})) is None
    with pytest.raises(InputError, match="expected an object"):
        _ = device.attributes
    with pytest.raises(ValueError, match="must be an object keyed by name"):
        device.variable()


def test_a_non_boolean_allow_multiple_reaches_the_cel_value() -> None:
    device = _device({**dev("g"), "allowMultipleAllocations": "yes"})
    with pytest.raises(ValueError, match="allowMultipleAllocations"):
        device.variable()


def test_compact_devices_read_like_their_json() -> None:
    raw = dev("g", attributes={"model": {"string": "x"}, f"{DRV}/numa": {"int": 3}})
    raw["capacity"] = {"memory": {"value": "8Gi"}}
    device = _device(raw)
    assert device.entries == device_entries(raw)
    assert device.attribute(f"{DRV}/numa") == ("int", 3)  # the later, qualified entry wins
    assert device.capacity[f"{DRV}/memory"].value == 8 * 2**30
    assert _device({"name": "e", "attributes": {}}).attributes == {}


def test_a_claim_changed_after_planning_does_not_change_the_kept_plan() -> None:
    snapshot = _snapshot(1)
    claim = next(iter(claim_mix(1, seed=3, mix=EXTENDED_MIX)))
    request = claim["spec"]["devices"]["requests"][0]
    body = request.get("exactly") or request["firstAvailable"][0]
    body["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
    original = copy.deepcopy(claim)
    first = plan_claim(snapshot, claim)
    body["tolerations"][0]["key"] = "changed"  # the caller's object, after planning
    again = plan_claim(snapshot, original)
    assert again.requests is first.requests  # the same spec: the kept plan
    assert again.requests[0].alternatives[0].tolerations[0].key == "k"
    assert plan_claim(snapshot, claim).requests[0].alternatives[0].tolerations[0].key == "changed"


def test_request_selectors_filter_each_node_list_as_device_by_device() -> None:
    """Request selectors reuse a node list's numbered projections (`filter_list`): nodes whose
    devices differ in order and values, a selector that sees more than names, a chain of two
    and one that fails at runtime must come out as `filter` has them."""
    gpu_class = device_class("gpu", f'device.driver == "{DRV}"')
    slices = [
        slice_("a", [dev("a0", numa=0), dev("a1", numa=1), dev("a2", "mig", 1)], node="node-a"),
        slice_("b", [dev("b0", "mig", 1), dev("b1", numa=1), dev("b2", numa=3)], node="node-b"),
    ]
    snapshot = ClusterSnapshot.build(slices, [gpu_class])
    index = CandidateIndex(snapshot)
    class_part = tuple(snapshot.cel.compile(e) for e in snapshot.classes["gpu"].selectors)
    chains = [
        (f'device.attributes["{DRV}"].numa == 1',),
        (f'device.attributes["{DRV}"].type == "mig"',),
        (f'device.attributes["{DRV}"].type == "gpu"',),
        (f'device.attributes["{DRV}"].type == "gpu"', f'device.attributes["{DRV}"].numa > 0'),
        ("device.attributes.size() > 0",),
        (f'device.attributes["{DRV}"].numa / 0 == 1',),
    ]
    for node in ("node-a", "node-b", "node-a"):
        view = snapshot.view(node)
        base = index.for_chain(view, class_part)
        for chain in chains:
            compiled = tuple(snapshot.cel.compile(e) for e in chain)
            listed = index.for_chain(view, class_part, compiled)
            assert listed == snapshot.evaluator.filter(compiled, base)
