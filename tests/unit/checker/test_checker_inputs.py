"""How the checker reads its inputs, seen through its verdicts: attribute values of every type,
tolerations, pools and their slices, defaults of claims, and the exact error for objects it
cannot read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.checker.rules import MalformedInputError, Violation, check_allocations
from tests.unit.checker.test_checker import (
    GPU,
    NIC,
    Obj,
    check,
    claim,
    cluster,
    device,
    devices_slice,
    exactly,
    gpu_config,
    result,
    results_of,
    share,
    valid_claims,
)


def pair_with(first: Obj, second: Obj, constraint: Obj) -> list[Violation]:
    """Two devices of one pool with these attributes, taken by one claim under `constraint`."""
    slices = [
        devices_slice(
            "pair",
            "node-a",
            GPU,
            "pair",
            [
                {"name": "first", "attributes": first},
                {"name": "second", "attributes": second},
            ],
        )
    ]
    _, classes, nodes = cluster()
    both = claim(
        "both",
        [exactly("p", "any", count=2)],
        [result("p", "first", "pair"), result("p", "second", "pair")],
        constraints=[constraint],
    )
    return check_allocations(slices, classes, [both], nodes)


def differ(name: str, left: str, right: str) -> list[Violation]:
    return [
        Violation(
            "default/both",
            "constraint",
            f"claim default/both: matchAttribute {name}: devices {GPU}/pair/first and "
            f"{GPU}/pair/second differ ({left} vs {right})",
        )
    ]


@pytest.mark.parametrize(
    ("first", "second", "equal", "shown"),
    [
        ({"bool": True}, {"bool": True}, True, ""),
        ({"bool": True}, {"bool": False}, False, "True vs False"),
        ({"int": 1}, {"string": "1"}, False, "1 vs '1'"),
        ({"version": "1.2.3"}, {"version": "v1.2.3+build.7"}, True, ""),
        ({"version": "1.2.3"}, {"version": "1.2.4"}, False, "(1, 2, 3, '') vs (1, 2, 4, '')"),
        ({"version": "1.2.3"}, {"version": "1.3.3"}, False, "(1, 2, 3, '') vs (1, 3, 3, '')"),
        ({"version": "1.2.3"}, {"version": "2.2.3"}, False, "(1, 2, 3, '') vs (2, 2, 3, '')"),
        (
            {"version": "1.2.3"},
            {"version": "1.2.3-rc.1"},
            False,
            "(1, 2, 3, '') vs (1, 2, 3, 'rc.1')",
        ),
        ({"version": "latest"}, {"version": "latest"}, True, ""),
        ({"version": "latest"}, {"version": "1.2.3"}, False, "'latest' vs (1, 2, 3, '')"),
    ],
)
def test_attribute_values_of_every_type_compare_as_kubernetes_compares_them(
    first: Obj, second: Obj, equal: bool, shown: str
) -> None:
    found = pair_with({"a": first}, {"a": second}, {"matchAttribute": f"{GPU}/a"})
    assert found == ([] if equal else differ(f"{GPU}/a", *shown.split(" vs ")))


def test_an_attribute_of_another_domain_is_not_the_devices_own() -> None:
    # Bare attribute names are in the device driver's domain, and only there.
    numa = {"numa": {"int": 0}}
    assert pair_with(numa, numa, {"matchAttribute": f"{GPU}/numa"}) == []
    assert pair_with(numa, numa, {"matchAttribute": "numa"}) == []
    assert pair_with(numa, numa, {"matchAttribute": f"{NIC}/numa"}) == [
        Violation(
            "default/both",
            "constraint",
            f"claim default/both: matchAttribute {NIC}/numa: device {GPU}/pair/{name} does not "
            "have the attribute",
        )
        for name in ("first", "second")
    ]


TAINT = {"key": "example.com/maint", "value": "yes", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "example.com/maint", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "example.com/other", "operator": "Exists"}, False),
        ({"key": "example.com/maint", "operator": "Equal", "value": "yes"}, True),
        ({"key": "example.com/maint", "value": "yes"}, True),
        ({"key": "example.com/maint", "operator": "Equal", "value": "no"}, False),
        ({"key": "example.com/maint", "operator": "Equal"}, False),
        ({"key": "example.com/other", "operator": "Equal", "value": "yes"}, False),
        ({"operator": "Equal", "value": "yes"}, True),
        ({"key": "example.com/maint", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "example.com/maint", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "example.com/maint", "operator": "Like", "value": "yes"}, False),
    ],
)
def test_a_toleration_tolerates_the_taints_kubernetes_says_it_does(
    toleration: Obj, tolerated: bool
) -> None:
    tainted = claim(
        "t",
        [exactly("g", tolerations=[toleration])],
        [result("g", "gpu-2", tolerations=[toleration])],
        config=gpu_config("g"),
    )
    found = check([tainted])
    assert found == (
        []
        if tolerated
        else [
            Violation(
                "default/t",
                "taint",
                f"claim default/t request g device {GPU}/a-gpu/gpu-2: taint "
                "example.com/maint=yes:NoSchedule is not tolerated",
            )
        ]
    )


def test_a_taint_that_only_prefers_other_pods_needs_no_toleration() -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][5]["taints"] = [{**TAINT, "effect": "PreferNoSchedule"}]
    free = claim("t", [exactly("g")], [result("g", "gpu-2")], config=gpu_config("g"))
    assert check([free], slices) == []


def test_a_request_for_all_of_a_devices_capacity_fits_it() -> None:
    whole = claim(
        "whole",
        [exactly("g", capacity={"requests": {"memory": "40Gi"}})],
        [result("g", "gpu-1")],
        config=gpu_config("g"),
    )
    assert check([whole]) == []


def test_a_capacity_written_with_its_domain_is_the_same_capacity() -> None:
    slices, _, _ = cluster()
    gpu_1 = slices[1]["spec"]["devices"][3]
    gpu_1["capacity"] = {f"{GPU}/memory": gpu_1["capacity"].pop("memory")}
    for name in ("memory", f"{GPU}/memory"):
        whole = claim(
            "whole",
            [exactly("g", capacity={"requests": {name: "40Gi"}})],
            [result("g", "gpu-1")],
            config=gpu_config("g"),
        )
        assert check([whole], slices) == []


def test_a_slice_count_and_generation_left_out_mean_one_slice_of_generation_zero() -> None:
    slices, classes, nodes = cluster()
    pool = slices[3]["spec"]["pool"]
    del pool["resourceSliceCount"], pool["generation"]
    on_b = claim(
        "on-b",
        [exactly("g")],
        [result("g", "gpu-0", "b-gpu")],
        node="node-b",
        config=gpu_config("g"),
    )
    assert check_allocations(slices, classes, [on_b], nodes) == []
    newer = copy.deepcopy(slices[3])
    newer["metadata"]["name"] = "b-gpu-newer"
    newer["spec"]["pool"]["generation"] = 1
    newer["spec"]["devices"] = [device("gpu-5")]
    # The newer generation replaces the slice without one, whatever their order.
    for ordered in ([*slices, newer], [newer, *slices]):
        assert [v.rule for v in check_allocations(ordered, classes, [on_b], nodes)] == [
            "unknown-device"
        ]


def test_an_older_slice_listed_after_a_newer_one_hides_no_other_pool() -> None:
    slices, classes, nodes = cluster()
    old = copy.deepcopy(slices[1])
    old["metadata"]["name"] = "a-gpu-devices-old"
    old["spec"]["pool"]["generation"] = 0
    # The stale slice comes between the pool's newer slices and the pools after it.
    ordered = [slices[0], slices[1], old, *slices[2:]]
    assert check_allocations(ordered, classes, valid_claims(), nodes) == []


def test_a_pool_names_every_counter_problem_of_a_device() -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][1]["consumesCounters"] = [
        {"counterSet": "nope", "counters": {"memory": {"value": "1"}}},
        {"counterSet": "gpu-0", "counters": {"watts": {"value": "1"}}},
    ]
    found = check([valid_claims()[0]], slices)
    assert [v.message for v in found] == [
        f"claim default/one request gpu: device {GPU}/a-gpu/gpu-0-mig-0 is in an unusable "
        f"pool: pool {GPU}/a-gpu is invalid: device gpu-0-mig-0 consumes counter set nope, "
        "which the pool does not define; device gpu-0-mig-0 consumes counter watts of set "
        "gpu-0, which the set does not define"
    ]


def test_a_slice_with_no_placement_is_on_no_node() -> None:
    slices, classes, nodes = cluster()
    slices.append(devices_slice("nowhere", None, NIC, "nowhere", [device("lost", "vf")]))
    lost = claim("lost", [exactly("n", "nic")], [result("n", "lost", "nowhere", NIC)], node=None)
    assert [v.rule for v in check_allocations(slices, classes, [lost], nodes)] == ["node-selector"]


def test_all_devices_on_a_node_are_those_of_its_per_device_slices_placed_there() -> None:
    slices, classes, nodes = cluster()
    slices.append(
        devices_slice(
            "mixed",
            None,
            NIC,
            "mixed",
            [
                {**device("on-a", "vf"), "nodeName": "node-a"},
                {**device("on-b", "vf"), "nodeName": "node-b"},
                {**device("on-a-too", "vf"), "nodeName": "node-a"},
            ],
            perDeviceNodeSelection=True,
        )
    )
    mixed = [result("n", name, "mixed", NIC) for name in ("on-a", "on-a-too")]
    nics = [result("n", name, "a-nic", NIC) for name in ("nic-0", "nic-1")]
    taken = claim("every", [exactly("n", "nic", allocationMode="All")], [*nics, *mixed])
    assert check_allocations(slices, classes, [taken], nodes) == []
    results_of(taken).append(result("n", "on-b", "mixed", NIC))
    assert "count" in {v.rule for v in check_allocations(slices, classes, [taken], nodes)}


def test_pools_of_devices_with_binding_conditions_come_last() -> None:
    slices, classes, nodes = cluster()
    # "a-bound" sorts before "a-nic" by name, but its device has binding conditions.
    bound = {**device("late", "vf"), "bindingConditions": ["attached"]}
    slices.append(devices_slice("a-bound", "node-a", NIC, "a-bound", [bound]))
    in_order = [result("n", "nic-0", "a-nic", NIC), result("n", "late", "a-bound", NIC)]
    taken = claim("two", [exactly("n", "nic", count=2)], in_order)
    assert check_allocations(slices, classes, [taken], nodes) == []
    results_of(taken).reverse()
    assert [v.rule for v in check_allocations(slices, classes, [taken], nodes)] == ["result-order"]


def test_the_node_of_an_allocation_is_named_only_by_a_metadata_name_in_requirement() -> None:
    slices, classes, nodes = cluster()
    slices.append(devices_slice("net", None, NIC, "net", [device("switch", "vf")], allNodes=True))
    for requirement in (
        {"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]},
        {"key": "metadata.name", "operator": "In", "values": []},
    ):
        net = claim("net", [exactly("n", "nic")], [result("n", "switch", "net", NIC)], node=None)
        selector = {"nodeSelectorTerms": [{"matchFields": [requirement]}]}
        net["status"]["allocation"]["nodeSelector"] = selector
        assert check_allocations(slices, classes, [net], nodes) == [
            Violation(
                "default/net",
                "node-selector",
                f"claim default/net: nodeSelector is {selector}, expected None (allocation "
                "checked on node node-a)",
            )
        ]


def test_a_claim_is_named_by_namespace_and_name_the_namespace_default_if_left_out() -> None:
    named = []
    for metadata in ({"namespace": "team", "name": "one"}, {"name": "one"}, {}):
        taken = valid_claims()[0]
        taken["metadata"] = metadata
        results_of(taken)[0]["device"] = "gpu-9"
        named += [v.claim for v in check([taken])]
    assert named == ["team/one", "default/one", "default/"]


def test_an_empty_allocation_mode_is_exact_count_and_a_missing_class_is_unknown() -> None:
    def change(c: Obj) -> None:
        c["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = ""

    assert malformed(change) == []

    def no_class(c: Obj) -> None:
        del c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]

    unknown = malformed(no_class)[0]
    assert unknown == Violation(
        "default/one",
        "unknown-class",
        "claim default/one request gpu: DeviceClass '' does not exist",
    )


@pytest.mark.parametrize(("value", "tolerated"), [(None, True), ("yes", False)])
def test_an_equal_toleration_without_a_value_tolerates_a_taint_without_one(
    value: str | None, tolerated: bool
) -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][5]["taints"] = [
        {"key": "example.com/maint", "effect": "NoSchedule"}
    ]
    toleration: Obj = {"key": "example.com/maint", "operator": "Equal"}
    if value is not None:
        toleration["value"] = value
    taken = claim(
        "t",
        [exactly("g", tolerations=[toleration])],
        [result("g", "gpu-2", tolerations=[toleration])],
        config=gpu_config("g"),
    )
    assert [v.rule for v in check([taken], slices)] == ([] if tolerated else ["taint"])


def test_a_share_of_a_capacity_without_a_default_takes_all_of_it() -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][4]["capacity"] = {"memory": {"value": "16Gi"}}
    whole = claim(
        "whole", [exactly("s")], [share("s", "shared-0", "16Gi", "id-1")], config=gpu_config("s")
    )
    assert check([whole], slices) == []
    half = claim(
        "half", [exactly("s")], [share("s", "shared-0", "8Gi", "id-1")], config=gpu_config("s")
    )
    assert [v.rule for v in check([half], slices)] == ["consumed-capacity"]


def malformed(change: Any) -> list[Violation]:
    taken = copy.deepcopy(valid_claims()[0])
    change(taken)
    return check([taken])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(
                capacity={"requests": {"memory": True}}
            ),
            "claim default/one request gpu.capacity.requests.memory: True is not a quantity",
        ),
        (
            lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(
                capacity={"requests": {"memory": "lots"}}
            ),
            'claim default/one request gpu.capacity.requests.memory: "lots" is not a quantity; '
            "write digits with an optional sign and fraction, then optionally one suffix (Ki, "
            "Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E) or an exponent such as e6",
        ),
        (
            lambda c: c["spec"]["devices"].update(
                requests=[
                    {
                        "name": "r",
                        "firstAvailable": [{"name": "x", "allocationMode": "Every"}],
                    }
                ]
            ),
            "claim default/one request r: unknown allocationMode 'Every'",
        ),
        (
            lambda c: c["spec"]["devices"].update(constraints=[{"requests": ["gpu"]}]),
            "claim default/one: a constraint names no attribute",
        ),
    ],
)
def test_a_claim_that_cannot_be_read_is_malformed_and_says_where(change: Any, message: str) -> None:
    assert malformed(change) == [Violation("default/one", "malformed", message)]


def test_a_first_available_entry_is_named_after_its_request() -> None:
    taken = claim(
        "fa",
        [{"name": "r", "firstAvailable": [{"deviceClassName": "gpu"}]}],
        [result("r/", "gpu-0-mig-0")],
        config=gpu_config("r"),
    )
    assert check([taken]) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s[1]["spec"]["devices"][3].update(capacity={"memory": {"value": True}}),
            "slice a-gpu-devices device gpu-1.capacity.memory.value: True is not a quantity",
        ),
        (
            lambda s: s[1]["spec"]["devices"][4]["capacity"]["memory"]["requestPolicy"].update(
                default=[]
            ),
            "slice a-gpu-devices device shared-0.capacity.memory.requestPolicy.default: [] is "
            "not a quantity",
        ),
        (
            lambda s: s[1]["spec"]["devices"][4]["capacity"]["memory"].update(
                requestPolicy={"validValues": ["1Gi", None]}
            ),
            "slice a-gpu-devices device shared-0.capacity.memory.requestPolicy.validValues: "
            "None is not a quantity",
        ),
        *(
            (
                lambda s, bound=bound: s[1]["spec"]["devices"][4]["capacity"]["memory"][
                    "requestPolicy"
                ]["validRange"].update({bound: False}),
                "slice a-gpu-devices device shared-0.capacity.memory.requestPolicy.validRange."
                f"{bound}: False is not a quantity",
            )
            for bound in ("min", "max", "step")
        ),
        (
            lambda s: s[1]["spec"]["devices"][1].update(
                consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {}}}]
            ),
            "slice a-gpu-devices device gpu-0-mig-0.consumesCounters: None is not a quantity",
        ),
        (
            lambda s: s[0]["spec"]["sharedCounters"][0]["counters"].update(memory={}),
            "slice a-gpu-counters sharedCounters: None is not a quantity",
        ),
        (
            lambda s: s[1]["spec"]["devices"][0].pop("name"),
            "slice a-gpu-devices: a device without a name",
        ),
        (
            lambda s: s[1]["spec"].pop("driver"),
            "slice a-gpu-devices: spec.driver and spec.pool.name are required",
        ),
        (
            lambda s: s[1]["spec"]["pool"].pop("name"),
            "slice a-gpu-devices: spec.driver and spec.pool.name are required",
        ),
    ],
)
def test_a_slice_that_cannot_be_read_stops_the_check_and_says_where(
    change: Any, message: str
) -> None:
    slices, classes, nodes = cluster()
    change(slices)
    with pytest.raises(MalformedInputError) as raised:
        check_allocations(slices, classes, valid_claims(), nodes)
    assert str(raised.value) == message


def test_a_node_without_a_name_stops_the_check() -> None:
    slices, classes, _ = cluster()
    with pytest.raises(MalformedInputError) as raised:
        check_allocations(slices, classes, valid_claims(), [{"metadata": {}}])
    assert str(raised.value) == "a Node without metadata.name: {'metadata': {}}"
