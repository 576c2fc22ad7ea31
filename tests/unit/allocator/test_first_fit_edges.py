"""First-fit search: the edges of each rule (limits, `All` sets, backtracking, tolerations).

Each case is small and names the rule it pins down; together they make the search's checks and
its undo exact, not only right on the common path.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator import AllocationError, AllocationMode, ClusterSnapshot, Usage
from dra_driver.allocator import allocate_on_node as allocate
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.placement import search_node
from dra_driver.allocator.scoring import ScoringPolicy
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

NUMA = f"{DRV}/numa"
MIG_CLASS = device_class("mig", f'device.attributes["{DRV}"].type == "mig"')
WHOLE_CLASS = device_class("whole", f'device.attributes["{DRV}"].type == "gpu"')
SHARED_CLASS = device_class("shared", "device.allowMultipleAllocations")
CLASSES = [GPU_CLASS, MIG_CLASS, WHOLE_CLASS, SHARED_CLASS]
NO_SCHEDULE = [{"key": "broken", "value": "xid", "effect": "NoSchedule"}]


def in_turn(slices: list[Obj], *pods: list[Obj]) -> list[list[Obj] | None]:
    """Each pod's allocations on node-a, recording each before the next pod is allocated."""
    snapshot = ClusterSnapshot.build(slices, CLASSES)
    usage = Usage()
    outcomes: list[list[Obj] | None] = []
    for pod in pods:
        found = allocate(snapshot, usage, pod, "node-a").allocations
        for allocation in found or []:
            usage.record(snapshot, allocation)
        outcomes.append(found)
    return outcomes


def one(slices: list[Obj], c: Obj, *earlier: Obj) -> Obj | None:
    """The allocation of `c` after the claims in `earlier` are allocated, one pod each."""
    *_, last = in_turn(slices, *[[e] for e in earlier], [c])
    return None if last is None else last[0]


def fatal(slices: list[Obj], c: Obj) -> AllocationError:
    with pytest.raises(AllocationError) as caught:
        in_turn(slices, [c])
    assert caught.value.claim == "ns/c"
    return caught.value


def shared(name: str, memory: str = "10Gi", **fields: Any) -> Obj:
    return dev(
        name,
        kind="shared",
        allowMultipleAllocations=True,
        capacity={"memory": {"value": memory, "requestPolicy": {"default": "1Gi"}}},
        **fields,
    )


def memory(amount: str, **fields: Any) -> Obj:
    return {"capacity": {"requests": {"memory": amount}}, **fields}


def counters(name: str, value: int) -> list[Obj]:
    return [{"name": name, "counters": {"mem": {"value": str(value)}}}]


def consumes(counter_set: str, amount: int) -> list[Obj]:
    return [{"counterSet": counter_set, "counters": {"mem": {"value": str(amount)}}}]


# --- the per-claim limit on results ---------------------------------------------------------


def test_a_first_available_entry_that_takes_a_claim_past_32_results_is_fatal() -> None:
    # Only the smallest entry counts before the search (20 + 1); the search meets 20 + 13.
    slices = [slice_("s", [dev(f"d{i}") for i in range(40)])]
    c = claim(
        "c",
        request("r0", exactly(count=20)),
        first_available("r1", ("many", exactly(count=13)), ("few", exactly())),
    )
    err = fatal(slices, c)
    assert "needs more than the 32 devices a claim may hold" in err.message


def test_a_claim_may_hold_exactly_32_results() -> None:
    slices = [slice_("s", [dev(f"d{i}") for i in range(40)])]
    c = claim(
        "c",
        request("r0", exactly(count=19)),
        first_available("r1", ("many", exactly(count=13)), ("few", exactly())),
    )
    found = one(slices, c)
    assert picked(found) == [f"d{i}" for i in range(32)]


def test_an_all_request_counts_the_results_the_claim_already_holds() -> None:
    slices = [slice_("s", [dev("m", kind="mig"), *[dev(f"g{i}") for i in range(32)]])]
    alone = claim("c", request("r", exactly("whole", allocationMode="All")))
    assert len(picked(one(slices, alone))) == 32
    with_one_more = claim(
        "c", request("r0", exactly("mig")), request("r1", exactly("whole", allocationMode="All"))
    )
    assert "needs more than the 32" in fatal(slices, with_one_more).message


# --- All sets ---------------------------------------------------------------------------------


def test_a_selector_failing_on_a_member_of_an_all_request_is_fatal() -> None:
    slices = [slice_("s", [dev("a", attributes={"mem": {"int": 8}}), dev("b")])]
    selector = f'device.attributes["{DRV}"].mem >= 4'
    err = fatal(
        slices, claim("c", request("r", exactly("gpu", None, selector, allocationMode="All")))
    )
    assert err.message.startswith(f"request r: selector {selector!r} failed on device {DRV}/b: ")


def test_an_all_entry_of_first_available_is_checked_even_when_an_earlier_entry_fits() -> None:
    slices = [slice_("s", [dev("a", attributes={"mem": {"int": 8}}), dev("b")])]
    selector = f'device.attributes["{DRV}"].mem >= 4'
    c = claim(
        "c",
        first_available(
            "r", ("one", exactly()), ("all", exactly("gpu", None, selector, allocationMode="All"))
        ),
    )
    assert f"failed on device {DRV}/b" in fatal(slices, c).message
    incomplete = [slice_("s", [dev("a")], count=2)]
    c = claim("c", first_available("r", ("one", exactly()), ("all", exactly(allocationMode="All"))))
    assert "request r/all asks for all devices, but" in fatal(incomplete, c).message


def test_an_all_request_that_matches_no_device_does_not_fit() -> None:
    slices = [slice_("s", [dev("a")])]
    assert one(slices, claim("c", request("r", exactly("mig", allocationMode="All")))) is None
    c = claim(
        "c", first_available("r", ("all", exactly("mig", allocationMode="All")), ("one", exactly()))
    )
    assert picked(one(slices, c)) == ["a"]


def test_an_all_entry_with_a_member_in_use_or_tainted_gives_way_to_the_next_entry() -> None:
    c = claim("c", first_available("r", ("all", exactly(allocationMode="All")), ("one", exactly())))
    slices = [slice_("s", [dev("a"), dev("b"), dev("c", kind="mig")])]
    found = one(slices, c, claim("old", request("r", exactly("mig"))))
    # "old" took "c", the last member: the All entry gives back "a" and "b" it had taken.
    assert found is not None
    assert [(r["request"], r["device"]) for r in found["devices"]["results"]] == [("r/one", "a")]
    tainted = [slice_("s", [dev("a"), dev("b", taints=NO_SCHEDULE)])]
    found = one(tainted, c)
    assert found is not None
    assert [(r["request"], r["device"]) for r in found["devices"]["results"]] == [("r/one", "a")]


def test_admin_access_to_all_devices_includes_those_in_use() -> None:
    slices = [slice_("s", [dev("a"), dev("b")])]
    admin = claim("c", request("r", exactly(allocationMode="All", adminAccess=True)))
    found = one(slices, admin, claim("old", request("r", exactly())))
    assert picked(found) == ["a", "b"]


def test_all_over_shared_devices_leaves_out_those_that_cannot_serve_the_share() -> None:
    slices = [slice_("s", [shared("small", "4Gi"), shared("big", "10Gi")])]
    c = claim("c", request("r", exactly("shared", allocationMode="All", **memory("6Gi"))))
    assert picked(one(slices, c)) == ["big"]
    # A device without the requested capacity cannot serve it at all.
    no_memory = dev("plain", kind="shared", allowMultipleAllocations=True)
    slices = [slice_("s", [no_memory, shared("big", "10Gi")])]
    assert picked(one(slices, c)) == ["big"]


def test_all_over_a_shared_device_may_fill_it_exactly() -> None:
    slices = [slice_("s", [shared("big", "10Gi")])]
    full = claim("c", request("r", exactly("shared", allocationMode="All", **memory("10Gi"))))
    assert picked(one(slices, full)) == ["big"]
    rest = claim("c", request("r", exactly("shared", allocationMode="All", **memory("4Gi"))))
    earlier = claim("old", request("r", exactly("shared", **memory("6Gi"))))
    assert picked(one(slices, rest, earlier)) == ["big"]


# --- an All member that breaks a constraint ----------------------------------------------------


def constrained_all(**member: Any) -> tuple[list[Obj], Obj]:
    """r0 takes a MIG on NUMA 0; r1 asks for all whole GPUs, one of them (g1) on NUMA 1."""
    slices = [
        slice_("c", [], counters=counters("m", 1) + counters("g", 1), count=2),
        slice_(
            "d",
            [
                dev("m", kind="mig", numa=0, consumesCounters=consumes("m", 1)),
                dev("g0", numa=0),
                dev("g1", numa=1, **member),
            ],
            count=2,
        ),
    ]
    c = claim(
        "c",
        request("r0", exactly("mig")),
        request(
            "r1",
            exactly(
                "whole", allocationMode="All", tolerations=[{"key": "broken", "operator": "Exists"}]
            ),
        ),
        constraints=[{"matchAttribute": NUMA, "requests": ["r0", "r1"]}],
    )
    return slices, c


def test_an_all_member_that_breaks_a_constraint_is_fatal() -> None:
    for member in (
        {},
        {"taints": NO_SCHEDULE},
        {"consumesCounters": consumes("g", 1)},
    ):
        slices, c = constrained_all(**member)
        err = fatal(slices, c)
        assert err.message == (
            f"request r1 asks for all devices, but device {DRV}/g1 breaks a constraint of the claim"
        ), member


def test_an_all_member_refused_for_another_reason_first_only_does_not_fit() -> None:
    untolerated = [{"key": "other", "value": "x", "effect": "NoExecute"}]
    for member in (
        # An untolerated taint, even on a device whose counters would fit.
        {"taints": untolerated, "consumesCounters": consumes("g", 1)},
        # Counters the MIG of r0 already took.
        {"consumesCounters": consumes("m", 1)},
    ):
        slices, c = constrained_all(**member)
        assert one(slices, c) is None, member


def test_an_all_member_without_room_for_its_share_only_does_not_fit() -> None:
    # The set is chosen against what other claims use; this claim's own share comes after.
    slices = [slice_("s", [shared("big", "10Gi")])]
    c = claim(
        "c",
        request("r0", exactly("shared", **memory("6Gi"))),
        request("r1", exactly("shared", allocationMode="All", **memory("6Gi"))),
    )
    assert one(slices, c) is None


# --- constraints ------------------------------------------------------------------------------


def test_a_constraint_compares_only_the_picks_of_its_own_claim() -> None:
    slices = [slice_("s", [dev("a", numa=0), dev("b", numa=1), dev("c", numa=0), dev("d", numa=1)])]
    pod = [
        claim("first", request("r", exactly())),
        claim("second", request("r", exactly(count=2)), constraints=[{"matchAttribute": NUMA}]),
    ]
    (found,) = in_turn(slices, pod)
    assert found is not None
    assert [picked(a) for a in found] == [["a"], ["b", "d"]]


def test_each_constraint_applies_to_the_requests_it_names() -> None:
    slices = [slice_("s", [dev("a", numa=0), dev("b", numa=1), dev("c", numa=0)])]
    c = claim(
        "c",
        request("r0", exactly()),
        request("r1", exactly()),
        request("r2", exactly("whole")),
        constraints=[
            {"distinctAttribute": NUMA, "requests": ["r2"]},
            {"matchAttribute": NUMA, "requests": ["r0", "r1"]},
        ],
    )
    found = one(slices, c)
    assert picked(found) == ["a", "c", "b"]


# --- tolerations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "device"),
    [
        ([{"key": "broken", "operator": "Equal", "value": "xid"}], "a"),
        ([{"key": "broken", "value": "xid"}], "a"),
        ([{"key": "other", "operator": "Equal", "value": "xid"}], "b"),
        ([{"key": "broken", "operator": "Exists", "effect": "NoExecute"}], "b"),
        (
            [
                {"key": "broken", "operator": "Exists", "effect": "NoExecute"},
                {"key": "broken", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "a",
        ),
        ([{"operator": "Exists"}], "a"),
    ],
)
def test_a_toleration_matches_key_value_and_effect(tolerations: list[Obj], device: str) -> None:
    slices = [slice_("s", [dev("a", taints=NO_SCHEDULE), dev("b")])]
    assert picked(one(slices, claim("c", request("r", exactly(tolerations=tolerations))))) == [
        device
    ]


# --- backtracking undoes exactly what a pick did ------------------------------------------------


def test_backtracking_gives_back_the_counters_of_an_undone_pick() -> None:
    slices = [
        slice_("c", [], counters=counters("g", 2), count=2),
        slice_(
            "d",
            [dev(f"p{i}", kind="mig", consumesCounters=consumes("g", 1)) for i in range(4)],
            count=2,
        ),
    ]
    assert picked(one(slices, claim("c", request("r", exactly(count=2))))) == ["p0", "p1"]
    assert one(slices, claim("c", request("r", exactly(count=3)))) is None


def test_backtracking_gives_back_the_capacity_of_an_undone_share() -> None:
    slices = [slice_("s", [shared("big", "10Gi")])]
    c = claim(
        "c",
        first_available(
            "r",
            ("two", exactly("shared", 2, **memory("6Gi"))),
            ("one", exactly("shared", **memory("6Gi"))),
        ),
    )
    found = one(slices, c)
    assert found is not None
    assert [(r["request"], r["device"]) for r in found["devices"]["results"]] == [("r/one", "big")]


def test_an_admin_request_may_take_a_device_its_claim_gave_back() -> None:
    # r0 takes the MIG first; r1 (MIGs only) cannot have it twice, so r0 moves to the GPU.
    slices = [slice_("s", [dev("m", kind="mig"), dev("g")])]
    c = claim(
        "c",
        request("r0", exactly(adminAccess=True)),
        request("r1", exactly("mig", adminAccess=True)),
    )
    assert picked(one(slices, c)) == ["g", "m"]


def test_one_request_takes_two_shared_devices_but_not_one_twice() -> None:
    slices = [slice_("s", [shared("s0"), shared("s1")])]
    assert picked(one(slices, claim("c", request("r", exactly("shared", 2))))) == ["s0", "s1"]
    single = [slice_("s", [shared("s0")])]
    assert one(single, claim("c", request("r", exactly("shared", 2)))) is None


def test_a_shared_device_draws_its_counters_once_for_all_its_shares() -> None:
    slices = [
        slice_("c", [], counters=counters("g", 2), count=2),
        slice_(
            "d",
            [
                shared("s", consumesCounters=consumes("g", 2)),
                dev("w", consumesCounters=consumes("g", 2)),
            ],
            count=2,
        ),
    ]
    share = claim("c", request("r", exactly("shared")))
    # A second share of a device in use needs no counters of its own.
    assert picked(one(slices, share, claim("old", request("r", exactly("shared"))))) == ["s"]
    # The first share takes the counters: nothing else on them fits beside it.
    both = claim("c", request("r0", exactly("shared")), request("r1", exactly("whole")))
    assert one(slices, both) is None


# --- the step budget ----------------------------------------------------------------------------


def test_the_search_gives_up_after_its_budget_of_candidate_checks() -> None:
    snapshot = ClusterSnapshot.build([slice_("s", [dev("a"), dev("b"), dev("c")])], CLASSES)
    plans = [plan_claim(snapshot, claim("c", request("r", exactly(count=3))))]

    def search(steps: int) -> tuple[bool, str | None]:
        result = search_node(
            snapshot, Usage(), plans, "node-a", AllocationMode.FIRST_FIT, ScoringPolicy(), steps
        )
        return result.allocations is not None, result.reason

    assert search(3) == (True, None)
    assert search(2) == (False, "gave up after 2 candidate checks")
    four = [plan_claim(snapshot, claim("c", request("r", exactly(count=4))))]
    result = search_node(
        snapshot, Usage(), four, "node-a", AllocationMode.FIRST_FIT, ScoringPolicy()
    )
    assert (result.allocations, result.reason, result.score) == (
        None,
        "the claims do not fit",
        None,
    )
    fits = search_node(
        snapshot, Usage(), plans, "node-a", AllocationMode.FIRST_FIT, ScoringPolicy()
    )
    assert fits.allocations is not None and fits.score is None
