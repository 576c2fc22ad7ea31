"""First-fit search: the kube-scheduler's answer, case by case (docs/allocation.md)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator import (
    AllocationError,
    AllocationMode,
    ClusterSnapshot,
    Placer,
    Usage,
    allocate_on_node,
)
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


def run(
    slices: list[Obj],
    claims: list[Obj],
    *,
    classes: list[Obj] | None = None,
    in_use: list[Obj] = (),  # type: ignore[assignment]
    node: str = "node-a",
) -> list[Obj] | None:
    snapshot = ClusterSnapshot.build(slices, classes or [GPU_CLASS])
    usage = Usage.from_claims(snapshot, in_use)
    return allocate_on_node(snapshot, usage, claims, node).allocations


def one(slices: list[Obj], c: Obj, **kw: Any) -> Obj | None:
    found = run(slices, [c], **kw)
    return None if found is None else found[0]


def test_device_order_is_pool_then_slice_name_then_listing() -> None:
    slices = [
        slice_("s-b", [dev("d3"), dev("d4")], pool="p", count=2),
        slice_("s-a", [dev("d2"), dev("d1")], pool="p", count=2),
        slice_("s-0", [dev("z0")], pool="q"),
    ]
    result = one(slices, claim("c", request("r", exactly(count=5))))
    assert picked(result) == ["d2", "d1", "d3", "d4", "z0"]


def test_count_picks_combinations_in_order_and_backtracks_for_constraints() -> None:
    slices = [slice_("s", [dev("a", numa=0), dev("b", numa=1), dev("c", numa=1)])]
    constraint = [{"matchAttribute": f"{DRV}/numa"}]
    result = one(slices, claim("c", request("r", exactly(count=2)), constraints=constraint))
    assert picked(result) == ["b", "c"]


def test_distinct_attribute_and_bare_name_lookup() -> None:
    slices = [slice_("s", [dev("a", numa=0), dev("b", numa=0), dev("c", numa=1)])]
    result = one(
        slices,
        claim(
            "c", request("r", exactly(count=2)), constraints=[{"distinctAttribute": f"{DRV}/numa"}]
        ),
    )
    assert picked(result) == ["a", "c"]


def test_constraint_fails_when_a_device_lacks_the_attribute() -> None:
    slices = [slice_("s", [dev("a"), dev("b")])]
    c = claim("c", request("r", exactly(count=2)), constraints=[{"matchAttribute": f"{DRV}/nope"}])
    assert one(slices, c) is None


def test_in_use_devices_are_skipped_and_usage_comes_from_allocations() -> None:
    slices = [slice_("s", [dev("a"), dev("b")])]
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "a"}]
            }
        }
    }
    assert picked(one(slices, claim("c", request("r", exactly())), in_use=[taken])) == ["b"]


def test_admin_access_takes_in_use_device_but_not_twice_in_a_claim() -> None:
    slices = [slice_("s", [dev("a")])]
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "a"}]
            }
        }
    }
    admin = claim("c", request("r", exactly(adminAccess=True)))
    result = one(slices, admin, in_use=[taken])
    assert result is not None
    assert result["devices"]["results"][0]["adminAccess"] is True
    twice = claim("c", request("r", exactly(count=2, adminAccess=True)))
    assert one(slices, twice, in_use=[taken]) is None


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    slices = [slice_("s", [dev("small", kind="mig"), dev("big", kind="gpu")])]
    classes = [
        GPU_CLASS,
        device_class("mig", f'device.attributes["{DRV}"].type == "mig"'),
        device_class("whole", f'device.attributes["{DRV}"].type == "gpu"'),
    ]
    c = claim("c", first_available("r", ("two", exactly("whole", 2)), ("mig", exactly("mig"))))
    result = one(slices, c, classes=classes)
    assert result is not None
    assert result["devices"]["results"][0]["request"] == "r/mig"
    assert picked(result) == ["small"]


def test_all_mode_takes_every_match_and_fails_if_one_is_in_use() -> None:
    slices = [slice_("s", [dev("a"), dev("b"), dev("m", kind="mig")])]
    classes = [device_class("gpu", f'device.attributes["{DRV}"].type == "gpu"')]
    c = claim("c", request("r", exactly(allocationMode="All")))
    assert picked(one(slices, c, classes=classes)) == ["a", "b"]
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "b"}]
            }
        }
    }
    assert one(slices, c, classes=classes, in_use=[taken]) is None


def test_all_mode_over_an_incomplete_pool_is_fatal() -> None:
    slices = [slice_("s", [dev("a")], count=2)]
    with pytest.raises(AllocationError, match="incomplete"):
        run(slices, [claim("c", request("r", exactly(allocationMode="All")))])


def test_incomplete_and_invalid_pools_are_skipped_for_exact_count() -> None:
    slices = [
        slice_("s1", [dev("a")], pool="p1", count=2),
        slice_("s2", [dev("b"), dev("b")], pool="p2"),
        slice_("s3", [dev("c")], pool="p3"),
    ]
    assert picked(one(slices, claim("c", request("r", exactly())))) == ["c"]


def test_only_the_newest_generation_counts() -> None:
    slices = [slice_("old", [dev("a")], generation=1), slice_("new", [dev("b")], generation=2)]
    assert picked(one(slices, claim("c", request("r", exactly(count=1))))) == ["b"]
    assert one(slices, claim("c", request("r", exactly(count=2)))) is None


def test_cel_error_is_fatal_only_when_the_search_reaches_the_device() -> None:
    # Device "a" lacks the attribute the request selector reads; "b" has it.
    slices = [slice_("s", [dev("b", attributes={"mem": {"int": 8}}), dev("a")])]
    selector = f'device.attributes["{DRV}"].mem >= 4'
    c = claim("c", request("r", exactly("gpu", None, selector)))
    assert picked(one(slices, c)) == ["b"]
    with pytest.raises(AllocationError, match="mem"):
        run(slices, [claim("c", request("r", exactly("gpu", 2, selector)))])
    # With "b" in use, the search meets "a" first: fatal.
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "b"}]
            }
        }
    }
    with pytest.raises(AllocationError, match="selector"):
        run(slices, [c], in_use=[taken])


def test_in_use_device_is_skipped_before_its_selector_can_fail() -> None:
    slices = [slice_("s", [dev("a"), dev("b", attributes={"mem": {"int": 8}})])]
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "a"}]
            }
        }
    }
    c = claim("c", request("r", exactly("gpu", None, f'device.attributes["{DRV}"].mem >= 4')))
    assert picked(one(slices, c, in_use=[taken])) == ["b"]


def counter_slices() -> list[Obj]:
    counters = [{"name": "g0", "counters": {"s0": {"value": "1"}, "s1": {"value": "1"}}}]
    whole = {"counterSet": "g0", "counters": {"s0": {"value": "1"}, "s1": {"value": "1"}}}
    half0 = {"counterSet": "g0", "counters": {"s0": {"value": "1"}}}
    half1 = {"counterSet": "g0", "counters": {"s1": {"value": "1"}}}
    return [
        slice_("c", [], counters=counters, count=2),
        slice_(
            "d",
            [
                dev("half-0", kind="mig", consumesCounters=[half0]),
                dev("half-1", kind="mig", consumesCounters=[half1]),
                dev("whole", consumesCounters=[whole]),
            ],
            count=2,
        ),
    ]


def test_shared_counters_exclude_overlapping_devices_and_roll_back() -> None:
    slices = counter_slices()
    assert picked(one(slices, claim("c", request("r", exactly(count=2))))) == ["half-0", "half-1"]
    assert one(slices, claim("c", request("r", exactly(count=3)))) is None
    # One half in use: the whole device no longer fits, the other half does.
    taken = claim("old", request("r", exactly()))
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRV, "pool": "node-a", "device": "half-0"}]
            }
        }
    }
    whole_only = device_class("whole", f'device.attributes["{DRV}"].type == "gpu"')
    assert (
        one(
            slices, claim("c", request("r", exactly("whole"))), classes=[whole_only], in_use=[taken]
        )
        is None
    )
    assert picked(one(slices, claim("c", request("r", exactly())), in_use=[taken])) == ["half-1"]


def test_consuming_a_counter_the_pool_lacks_makes_the_pool_invalid() -> None:
    bad = {"counterSet": "nope", "counters": {"x": {"value": "1"}}}
    slices = [
        slice_("d", [dev("a", consumesCounters=[bad])]),
        slice_("e", [dev("b")], pool="other"),
    ]
    assert picked(one(slices, claim("c", request("r", exactly())))) == ["b"]


def shared_device(**policy: Any) -> Obj:
    return dev(
        "share",
        kind="shared",
        allowMultipleAllocations=True,
        capacity={
            "memory": {"value": "10Gi", "requestPolicy": policy or {"default": "2Gi"}},
            "compute": {
                "value": "100",
                "requestPolicy": {"default": "10", "validRange": {"min": "1", "step": "1"}},
            },
        },
    )


def test_consumable_capacity_defaults_rounding_and_exhaustion() -> None:
    slices = [
        slice_(
            "s",
            [
                shared_device(
                    default="1Gi", validRange={"min": "1Gi", "step": "512Mi", "max": "8Gi"}
                )
            ],
        )
    ]
    result = one(
        slices, claim("c", request("r", exactly(capacity={"requests": {"memory": "1200Mi"}})))
    )
    assert result is not None
    share = result["devices"]["results"][0]
    assert share["consumedCapacity"] == {"memory": "1536Mi", "compute": "10"}
    assert share["shareID"]
    assert (
        one(slices, claim("c", request("r", exactly(capacity={"requests": {"memory": "9Gi"}}))))
        is None
    )
    # Several shares of one device in one claim, until memory runs out (5 x 2Gi > 10Gi).
    four = claim(
        "c",
        *[request(f"r{i}", exactly(capacity={"requests": {"memory": "2Gi"}})) for i in range(5)],
    )
    assert picked(one(slices, four)) == ["share"] * 5
    six = claim(
        "c",
        *[request(f"r{i}", exactly(capacity={"requests": {"memory": "2Gi"}})) for i in range(6)],
    )
    assert one(slices, six) is None


def test_valid_values_round_up_to_the_next_listed_value() -> None:
    slices = [slice_("s", [shared_device(validValues=["1Gi", "4Gi"])])]
    result = one(
        slices, claim("c", request("r", exactly(capacity={"requests": {"memory": "2Gi"}})))
    )
    assert result is not None
    assert result["devices"]["results"][0]["consumedCapacity"]["memory"] == "4Gi"
    assert (
        one(slices, claim("c", request("r", exactly(capacity={"requests": {"memory": "5Gi"}}))))
        is None
    )


def test_capacity_request_on_an_exclusive_device_only_needs_enough() -> None:
    slices = [
        slice_(
            "s",
            [
                dev("small", capacity={"memory": {"value": "10Gi"}}),
                dev("big", capacity={"memory": {"value": "80Gi"}}),
            ],
        )
    ]
    result = one(
        slices, claim("c", request("r", exactly(capacity={"requests": {"memory": "40Gi"}})))
    )
    assert picked(result) == ["big"]
    assert result is not None
    assert "consumedCapacity" not in result["devices"]["results"][0]


def test_taints_need_tolerations_and_results_carry_them() -> None:
    tainted = dev("a", taints=[{"key": "broken", "value": "xid", "effect": "NoSchedule"}])
    slices = [slice_("s", [tainted, dev("b")])]
    assert picked(one(slices, claim("c", request("r", exactly())))) == ["b"]
    tolerations = [{"key": "broken", "operator": "Exists"}]
    result = one(slices, claim("c", request("r", exactly(tolerations=tolerations))))
    assert picked(result) == ["a"]
    assert result is not None
    assert result["devices"]["results"][0]["tolerations"] == tolerations
    wrong_value = [{"key": "broken", "operator": "Equal", "value": "other"}]
    assert picked(one(slices, claim("c", request("r", exactly(tolerations=wrong_value))))) == ["b"]


def test_more_than_32_results_is_fatal() -> None:
    slices = [slice_("s", [dev(f"d{i}") for i in range(40)])]
    with pytest.raises(AllocationError, match="32"):
        run(slices, [claim("c", request("r", exactly(count=33)))])


def test_config_lists_class_configs_then_claim_configs() -> None:
    opaque = {"opaque": {"driver": DRV, "parameters": {"kind": "A"}}}
    claim_config = {"requests": ["r"], "opaque": {"driver": DRV, "parameters": {"kind": "B"}}}
    classes = [device_class("gpu", f'device.driver == "{DRV}"', config=[opaque])]
    slices = [slice_("s", [dev("a")])]
    result = one(
        slices, claim("c", request("r", exactly()), config=[claim_config]), classes=classes
    )
    assert result is not None
    # One request: both configs cover every request, so neither keeps `requests`.
    assert result["devices"]["config"] == [
        {"source": "FromClass", **opaque},
        {"source": "FromClaim", "opaque": claim_config["opaque"]},
    ]


def test_node_selector_names_the_node_only_for_node_local_devices() -> None:
    local = one([slice_("s", [dev("a")])], claim("c", request("r", exactly())))
    assert local is not None
    assert local["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]
    everywhere = [slice_("s", [dev("a")], node=None, pool="net", allNodes=True)]
    snapshot = ClusterSnapshot.build(everywhere, [GPU_CLASS], [{"metadata": {"name": "node-a"}}])
    result = allocate_on_node(snapshot, Usage(), [claim("c", request("r", exactly()))], "node-a")
    assert result.allocations is not None
    assert "nodeSelector" not in result.allocations[0]


def test_claims_of_one_pod_are_allocated_together() -> None:
    slices = [slice_("s", [dev("a"), dev("b")])]
    found = run(
        slices, [claim("one", request("r", exactly())), claim("two", request("r", exactly()))]
    )
    assert found is not None
    assert [picked(a) for a in found] == [["a"], ["b"]]
    assert run(slices, [claim(f"c{i}", request("r", exactly())) for i in range(3)]) is None


def test_placer_tries_nodes_in_name_order_and_records_usage() -> None:
    slices = [slice_("sb", [dev("b")], node="node-b"), slice_("sa", [dev("a")], node="node-a")]
    snapshot = ClusterSnapshot.build(slices, [GPU_CLASS])
    placer = Placer(snapshot, Usage(), AllocationMode.FIRST_FIT)
    first = placer.place([claim("c1", request("r", exactly()))])
    second = placer.place([claim("c2", request("r", exactly()))])
    third = placer.place([claim("c3", request("r", exactly()))])
    assert (first.node, second.node, third.node) == ("node-a", "node-b", None)
    assert third.reason is not None and "already allocated" in third.reason
    assert first.allocations is not None
    placer.release(first.allocations[0], "node-a")
    assert placer.place([claim("c4", request("r", exactly()))]).node == "node-a"


def test_missing_device_class_is_fatal_with_its_name() -> None:
    with pytest.raises(AllocationError, match="DeviceClass nope does not exist"):
        run([slice_("s", [dev("a")])], [claim("c", request("r", exactly("nope")))])
