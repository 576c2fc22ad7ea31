"""Scored mode, rule by rule: the score it reports, what it searches, and where it stops.

Small nodes whose best answer differs from first-fit's, so each part of the score (topology,
steering, fragmentation loss) and each bound of the search shows in the chosen devices.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator import (
    AllocationMode,
    ClusterSnapshot,
    ScoringPolicy,
    SolutionScore,
    Usage,
    allocate_on_node,
)
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.placement import NodeResult, search_node
from tests.unit.allocator.objects import (
    DRV,
    GPU_CLASS,
    Obj,
    claim,
    dev,
    device_class,
    exactly,
    first_available,
    picked,
    request,
    slice_,
)

MIG_CLASS = device_class("mig", f'device.attributes["{DRV}"].type == "mig"')
WHOLE_CLASS = device_class("whole", f'device.attributes["{DRV}"].type == "gpu"')
SHARED_CLASS = device_class("shared", "device.allowMultipleAllocations")
CLASSES = [GPU_CLASS, MIG_CLASS, WHOLE_CLASS, SHARED_CLASS]
NO_TOPOLOGY = (1, 1, 1)
"""Two picks without topology attributes: each is a group of its own on every attribute."""


def domain(name: str, value: str, **fields: Any) -> Obj:
    attributes = {"nvlinkDomain": {"string": value}}
    return dev(name, attributes=attributes, **fields)


def scored(
    devices: list[Obj],
    pod: list[Obj],
    *,
    policy: ScoringPolicy | None = None,
    earlier: list[Obj] = (),  # type: ignore[assignment]
    counters: list[Obj] | None = None,
) -> NodeResult:
    if counters:
        slices = [
            slice_("c", [], counters=counters, count=2),
            slice_("d", devices, count=2),
        ]
    else:
        slices = [slice_("s", devices)]
    snapshot = ClusterSnapshot.build(slices, CLASSES)
    usage = Usage()
    for c in earlier:
        found = allocate_on_node(snapshot, usage, [c], "node-a").allocations
        assert found is not None
        usage.record(snapshot, found[0])
    return allocate_on_node(snapshot, usage, pod, "node-a", AllocationMode.SCORED, policy=policy)


def devices_of(result: NodeResult) -> list[list[str]]:
    assert result.allocations is not None, result.reason
    return [picked(a) for a in result.allocations]


SPLIT = [domain("g0", "A"), domain("g1", "B"), domain("g2", "B")]
"""First-fit takes g0 and g1 (two domains); g1 and g2 share one."""


def two(cls: str = "gpu") -> Obj:
    return claim("c", request("r", exactly(cls, 2)))


# --- the score ----------------------------------------------------------------------------------


def test_the_score_of_plain_devices_names_every_part() -> None:
    result = scored([dev("a"), dev("b"), dev("c")], [two()])
    assert devices_of(result) == [["a", "b"]]
    assert result.score == SolutionScore(
        preference=(0,), topology=NO_TOPOLOGY, steer=0, loss=0.0, positions=(0, 1)
    )


def test_an_empty_topology_value_is_no_value() -> None:
    result = scored([domain("a", ""), domain("b", "")], [two()])
    assert result.score is not None and result.score.topology == NO_TOPOLOGY


def test_scored_keeps_an_all_request_and_the_rest_of_its_claim_on_one_domain() -> None:
    devices = [
        domain("g0", "A"),
        domain("g1", "B"),
        dev("m0", kind="mig", attributes={"nvlinkDomain": {"string": "B"}}),
        dev("m1", kind="mig", attributes={"nvlinkDomain": {"string": "B"}}),
    ]
    c = claim(
        "c", request("r0", exactly("whole")), request("r1", exactly("mig", allocationMode="All"))
    )
    result = scored(devices, [c])
    assert devices_of(result) == [["g1", "m0", "m1"]]
    assert result.score is not None and result.score.topology[0] == 0


def test_scored_keeps_the_claims_of_one_pod_on_one_domain() -> None:
    devices = [
        domain("g0", "A"),
        domain("g1", "B"),
        dev("m0", kind="mig", attributes={"nvlinkDomain": {"string": "B"}}),
    ]
    pod = [claim("a", request("r", exactly("whole"))), claim("b", request("r", exactly("mig")))]
    assert devices_of(scored(devices, pod)) == [["g1"], ["m0"]]


def test_scored_keeps_the_first_available_entry_first_fit_found() -> None:
    # No MIG: both take the second entry; scored still improves the topology within it.
    c = claim("c", first_available("r", ("mig", exactly("mig")), ("gpus", exactly("gpu", 2))))
    result = scored(SPLIT, [c])
    assert devices_of(result) == [["g1", "g2"]]
    assert result.score is not None and result.score.preference == (1,)
    pod = [c, claim("d", first_available("r", ("mig", exactly("mig")), ("gpu", exactly())))]
    result = scored([*SPLIT, domain("g3", "B")], pod)
    assert result.score is not None and result.score.preference == (1, 1)
    assert devices_of(result) == [["g1", "g2"], ["g3"]]


def test_scored_skips_devices_in_use_and_still_finds_the_best() -> None:
    devices = [dev("u"), *SPLIT]
    result = scored(devices, [two()], earlier=[claim("old", request("r", exactly()))])
    assert devices_of(result) == [["g1", "g2"]]


def test_scored_admin_access() -> None:
    c = claim("c", request("r", exactly("gpu", 2, adminAccess=True)))
    assert devices_of(scored(SPLIT, [c])) == [["g1", "g2"]]


# --- steering towards devices a cross-node score asked for -------------------------------------


def steered(names: set[str], count: int = 1, **policy: Any) -> NodeResult:
    snapshot = ClusterSnapshot.build([slice_("s", [dev("a"), dev("b"), dev("c")])], [GPU_CLASS])
    prefer = frozenset(d.id for d in snapshot.devices if d.name in names)
    plans = [plan_claim(snapshot, claim("c", request("r", exactly(count=count))))]
    return search_node(
        snapshot,
        Usage(),
        plans,
        "node-a",
        AllocationMode.SCORED,
        ScoringPolicy(**policy),
        prefer=prefer,
    )


@pytest.mark.parametrize("policy", [{}, {"branching": 1}])
def test_scored_takes_the_devices_it_is_steered_to(policy: dict[str, Any]) -> None:
    result = steered({"c"}, **policy)
    assert devices_of(result) == [["c"]]
    assert result.score is not None and result.score.steer == 0
    result = steered({"b"}, 2, **policy)
    assert devices_of(result) == [["a", "b"]]
    assert result.score is not None and result.score.steer == 1


# --- fragmentation loss -------------------------------------------------------------------------


def gpu_parts(*parts: tuple[str, str, int]) -> tuple[list[Obj], list[Obj]]:
    """Devices drawing on one counter set "g" of 4: (name, kind, amount)."""
    devices = [
        dev(name, kind=kind, consumesCounters=[{"counterSet": "g", "counters": _mem(amount)}])
        for name, kind, amount in parts
    ]
    return devices, [{"name": "g", "counters": _mem(4)}]


def _mem(amount: int) -> Obj:
    return {"mem": {"value": str(amount)}}


HALVES = gpu_parts(("whole", "gpu", 4), ("h0", "mig", 2), ("h1", "mig", 2))


def loss_of(devices: list[Obj], counters: list[Obj], c: Obj, **kw: Any) -> float:
    result = scored(devices, [c], counters=counters, **kw)
    assert result.score is not None, result.reason
    return result.score.loss


def test_loss_of_taking_a_whole_gpu_is_every_part_it_blocks() -> None:
    # Both halves fit before and not after: all that the neighbourhood offers is lost.
    assert loss_of(*HALVES, claim("c", request("r", exactly("whole")))) == 1.0


def test_loss_of_two_halves_counts_the_first_pick_in_the_second() -> None:
    # h0 blocks the whole GPU (weight 1 of 1.5); h1 then blocks h0's place (0.5 of 1.5).
    assert loss_of(*HALVES, claim("c", request("r", exactly("mig", 2)))) == 1.0
    one = loss_of(*HALVES, claim("c", request("r", exactly("mig"))))
    assert one == round(1 / 1.5, 9)
    # Out of steps, only first-fit's answer is scored: the same loss, replayed pick by pick.
    baseline = loss_of(
        *HALVES, claim("c", request("r", exactly("mig", 2))), policy=ScoringPolicy(max_steps=1)
    )
    assert baseline == 1.0


def test_loss_of_a_device_alone_on_its_counters_or_without_counters_is_nothing() -> None:
    alone = gpu_parts(("whole", "gpu", 4))
    assert loss_of(*alone, claim("c", request("r", exactly("whole")))) == 0.0
    assert scored([dev("a")], [claim("c", request("r", exactly()))]).score == SolutionScore(
        preference=(0,), topology=(0, 0, 0), steer=0, loss=0.0, positions=(0,)
    )


def test_a_share_of_a_shared_device_in_use_costs_nothing() -> None:
    # The shared device holds 2 of 6 once in use: taking it again would not leave 3 for "h",
    # but a further share draws no counters, so it blocks nothing.
    shared = dev(
        "s",
        kind="shared",
        allowMultipleAllocations=True,
        capacity={"memory": {"value": "10Gi", "requestPolicy": {"default": "1Gi"}}},
        consumesCounters=[{"counterSet": "g", "counters": _mem(2)}],
    )
    part = dev("h", kind="mig", consumesCounters=[{"counterSet": "g", "counters": _mem(3)}])
    share = claim("c", request("r", exactly("shared")))
    counters = [{"name": "g", "counters": _mem(6)}]
    assert loss_of([shared, part], counters, share, earlier=[share]) == 0.0


def test_scored_prefers_the_gpu_type_whose_parts_it_does_not_block() -> None:
    # Two GPUs with the same counters: only the first publishes halves beside its whole device.
    devices = [
        dev("x", consumesCounters=[{"counterSet": "gx", "counters": _mem(4)}]),
        dev("x-h0", kind="mig", consumesCounters=[{"counterSet": "gx", "counters": _mem(2)}]),
        dev("y", consumesCounters=[{"counterSet": "gy", "counters": _mem(4)}]),
    ]
    counters = [{"name": "gx", "counters": _mem(4)}, {"name": "gy", "counters": _mem(4)}]
    result = scored(devices, [claim("c", request("r", exactly("whole")))], counters=counters)
    assert devices_of(result) == [["y"]]


# --- shared devices -------------------------------------------------------------------------------


def shared(name: str, domain_name: str) -> Obj:
    return dev(
        name,
        kind="shared",
        allowMultipleAllocations=True,
        capacity={"memory": {"value": "10Gi", "requestPolicy": {"default": "1Gi"}}},
        attributes={"nvlinkDomain": {"string": domain_name}},
    )


def test_with_one_branch_the_fullest_shared_device_is_tried_first() -> None:
    # s1 is partly used: filling it keeps s0 whole, and here also joins the domain of r1's MIG.
    on_b = f'device.attributes["{DRV}"].nvlinkDomain == "B"'
    devices = [
        shared("s0", "A"),
        shared("s1", "B"),
        dev("m0", kind="mig", attributes={"nvlinkDomain": {"string": "A"}}),
        dev("m1", kind="mig", attributes={"nvlinkDomain": {"string": "B"}}),
    ]
    filler = claim("fill", request("r", exactly("shared", None, on_b, **gigabytes(6))))
    c = claim(
        "c",
        request("r0", exactly("shared", **gigabytes(2))),
        request("r1", exactly("mig", None, on_b)),
    )
    result = scored(devices, [c], policy=ScoringPolicy(branching=1), earlier=[filler])
    assert devices_of(result) == [["s1", "m1"]]
    assert result.allocations is not None
    assert result.allocations[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "2Gi"}


def gigabytes(amount: int) -> Obj:
    return {"capacity": {"requests": {"memory": f"{amount}Gi"}}}


def test_scored_takes_two_shared_devices_for_one_request() -> None:
    result = scored(
        [shared("s0", "A"), shared("s1", "A")], [claim("c", request("r", exactly("shared", 2)))]
    )
    assert devices_of(result) == [["s0", "s1"]]
    assert result.allocations is not None
    consumed = [r["consumedCapacity"] for r in result.allocations[0]["devices"]["results"]]
    assert consumed == [{"memory": "1Gi"}, {"memory": "1Gi"}]


# --- the bounds of the search ---------------------------------------------------------------------


def test_the_search_compares_at_most_max_solutions() -> None:
    # Best-first from g0: (g0, g1), (g0, g2), then (g1, g2), the only one on one domain.
    assert devices_of(scored(SPLIT, [two()], policy=ScoringPolicy(max_solutions=2))) == [
        ["g0", "g1"]
    ]
    assert devices_of(scored(SPLIT, [two()], policy=ScoringPolicy(max_solutions=3))) == [
        ["g1", "g2"]
    ]


def test_out_of_steps_the_search_keeps_what_first_fit_found() -> None:
    result = scored(SPLIT, [two()], policy=ScoringPolicy(max_steps=2))
    assert devices_of(result) == [["g0", "g1"]]


def test_each_slot_ranks_at_most_max_candidates() -> None:
    policy = ScoringPolicy(max_candidates_per_slot=1)
    assert devices_of(scored(SPLIT, [two()], policy=policy)) == [["g0", "g1"]]
    policy = ScoringPolicy(max_candidates_per_slot=2)
    assert devices_of(scored(SPLIT, [two()], policy=policy)) == [["g1", "g2"]]


def test_with_one_branch_the_next_pick_joins_the_domain_of_the_first() -> None:
    devices = [domain("g0", "A"), domain("g1", "B"), domain("g2", "A")]
    assert devices_of(scored(devices, [two()], policy=ScoringPolicy(branching=1))) == [["g0", "g2"]]
