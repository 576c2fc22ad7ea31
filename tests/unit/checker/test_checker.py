"""The checker accepts a valid allocation and names the rule a minimally broken copy breaks.

Each test starts from a small cluster whose allocations are valid (checked first, so a test cannot
pass because the "valid" case was already broken) and changes one thing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.checker.rules import Violation, check_allocations
from tests.support import objects
from tests.unit.allocator.reference import TooManyCandidatesError, first_fit_reference

GPU = "gpu.example.com"
NIC = "nic.example.com"
IS_GPU = f'device.driver == "{GPU}"'
IS_NIC = f'device.driver == "{NIC}"'
WHOLE_GPU = 'device.attributes[device.driver].type == "gpu"'

Obj = dict[str, Any]


def attrs(kind: str, numa: int, **extra: Obj) -> Obj:
    return {"type": {"string": kind}, "numa": {"int": numa}, **extra}


def device(name: str, kind: str = "gpu", numa: int = 0, **fields: Any) -> Obj:
    return {"name": name, "attributes": attrs(kind, numa), **fields}


def devices_slice(
    name: str,
    node: str | None,
    driver: str,
    pool: str,
    devices: list[Obj],
    *,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> Obj:
    placement: Obj = {"nodeName": node} if node else {}
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            **placement,
            "devices": devices,
            **spec,
        },
    }


def counters_slice(name: str, node: str, pool: str, sets: dict[str, dict[str, str]]) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": GPU,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
            "nodeName": node,
            "sharedCounters": [
                {"name": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
                for set_name, counters in sets.items()
            ],
        },
    }


def consumes(memory: str, slots: str) -> list[Obj]:
    return [
        {
            "counterSet": "gpu-0",
            "counters": {"memory": {"value": memory}, "slots": {"value": slots}},
        }
    ]


SHARED_CAPACITY = {
    "memory": {
        "value": "16Gi",
        "requestPolicy": {
            "default": "2Gi",
            "validRange": {"min": "2Gi", "max": "16Gi", "step": "2Gi"},
        },
    }
}


def cluster() -> tuple[list[Obj], list[Obj], list[Obj]]:
    """Two nodes; node-a has partitionable GPU devices, a shared device and NICs."""
    slices = [
        counters_slice(
            "a-gpu-counters", "node-a", "a-gpu", {"gpu-0": {"memory": "40Gi", "slots": "2"}}
        ),
        devices_slice(
            "a-gpu-devices",
            "node-a",
            GPU,
            "a-gpu",
            [
                device("gpu-0", consumesCounters=consumes("40Gi", "2")),
                device("gpu-0-mig-0", "mig", consumesCounters=consumes("20Gi", "1")),
                device("gpu-0-mig-1", "mig", consumesCounters=consumes("20Gi", "1")),
                device("gpu-1", numa=1, capacity={"memory": {"value": "40Gi"}}),
                device(
                    "shared-0",
                    "shared",
                    numa=1,
                    allowMultipleAllocations=True,
                    capacity=copy.deepcopy(SHARED_CAPACITY),
                ),
                device(
                    "gpu-2",
                    numa=1,
                    taints=[{"key": "example.com/maint", "value": "yes", "effect": "NoSchedule"}],
                ),
            ],
            count=2,
        ),
        devices_slice(
            "a-nic",
            "node-a",
            NIC,
            "a-nic",
            [
                {
                    "name": "nic-0",
                    "attributes": {**attrs("vf", 0), "example.com/link": {"string": "l1"}},
                },
                {
                    "name": "nic-1",
                    "attributes": {**attrs("vf", 1), "example.com/link": {"string": "l2"}},
                },
            ],
        ),
        devices_slice("b-gpu", "node-b", GPU, "b-gpu", [device("gpu-0"), device("gpu-1")]),
    ]
    classes: list[Obj] = [
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "selectors": [{"cel": {"expression": IS_GPU}}],
                "config": [{"opaque": {"driver": GPU, "parameters": {"from": "class"}}}],
            },
        },
        {"metadata": {"name": "nic"}, "spec": {"selectors": [{"cel": {"expression": IS_NIC}}]}},
        {"metadata": {"name": "any"}, "spec": {}},
    ]
    nodes: list[Obj] = [{"metadata": {"name": "node-a"}}, {"metadata": {"name": "node-b"}}]
    return slices, classes, nodes


def on_node(node: str) -> Obj:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def result(request: str, dev: str, pool: str = "a-gpu", driver: str = GPU, **extra: Any) -> Obj:
    return {"request": request, "driver": driver, "pool": pool, "device": dev, **extra}


def claim(
    name: str,
    requests: list[Obj],
    results: list[Obj] | None = None,
    *,
    node: str | None = "node-a",
    config: list[Obj] | None = None,
    constraints: list[Obj] | None = None,
    claim_config: list[Obj] | None = None,
) -> Obj:
    devices: Obj = {}
    if constraints:
        devices["constraints"] = constraints
    if claim_config:
        devices["config"] = claim_config
    status = None
    if results is not None:
        allocation: Obj = {"devices": {"results": results}}
        if config:
            allocation["devices"]["config"] = config
        if node is not None:
            allocation["nodeSelector"] = on_node(node)
        status = {"allocation": allocation}
    return objects.claim(name, *requests, status=status, **devices)


def exactly(name: str, device_class: str = "gpu", **fields: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


def gpu_config(*requests: str, every: bool = True) -> list[Obj]:
    """The class config as written once per claim, naming the requests that use the class;
    with `every` (the class serves every request of the claim) it carries no `requests`."""
    entry: Obj = {"source": "FromClass", "opaque": {"driver": GPU, "parameters": {"from": "class"}}}
    if not every:
        entry["requests"] = list(requests)
    return [entry]


def share(request: str, dev: str, memory: str, share_id: str, **extra: Any) -> Obj:
    return result(request, dev, shareID=share_id, consumedCapacity={"memory": memory}, **extra)


def valid_claims() -> list[Obj]:
    return [
        claim("one", [exactly("gpu")], [result("gpu", "gpu-0-mig-0")], config=gpu_config("gpu")),
        claim(
            "two",
            [exactly("pair", count=2), exactly("nic", "nic")],
            [
                result("pair", "gpu-0-mig-1"),
                result("pair", "gpu-1"),
                result("nic", "nic-1", pool="a-nic", driver=NIC),
            ],
            config=gpu_config("pair", every=False),
        ),
        claim(
            "three",
            [exactly("s", capacity={"requests": {"memory": "3Gi"}})],
            [share("s", "shared-0", "4Gi", "id-1")],
            config=gpu_config("s"),
        ),
        claim(
            "four", [exactly("s")], [share("s", "shared-0", "2Gi", "id-2")], config=gpu_config("s")
        ),
        claim(
            "on-b",
            [exactly("g")],
            [result("g", "gpu-0", "b-gpu")],
            node="node-b",
            config=gpu_config("g"),
        ),
        claim("pending", [exactly("g")]),
    ]


def check(claims: list[Obj], slices: list[Obj] | None = None) -> list[Violation]:
    base_slices, classes, nodes = cluster()
    return check_allocations(slices or base_slices, classes, claims, nodes)


def rules(claims: list[Obj], slices: list[Obj] | None = None) -> set[str]:
    return {v.rule for v in check(claims, slices)}


def test_valid_cluster_passes() -> None:
    assert check(valid_claims()) == []


def mutated(change: Callable[[list[Obj]], None]) -> list[Obj]:
    claims = copy.deepcopy(valid_claims())
    assert check(claims) == []
    change(claims)
    return claims


def results_of(c: Obj) -> list[Obj]:
    results: list[Obj] = c["status"]["allocation"]["devices"]["results"]
    return results


# --- device used twice ------------------------------------------------------------------------


def test_device_in_two_claims() -> None:
    def change(claims: list[Obj]) -> None:
        results_of(claims[1])[0]["device"] = "gpu-0-mig-0"

    found = check(mutated(change))
    assert [(v.claim, v.rule) for v in found] == [("default/two", "device-twice")]
    assert "gpu-0-mig-0" in found[0].message and "default/one" in found[0].message


def test_device_twice_in_one_claim() -> None:
    def change(claims: list[Obj]) -> None:
        results_of(claims[1])[1]["device"] = "gpu-0-mig-1"

    assert rules(mutated(change)) == {"device-twice", "result-order"}


def test_admin_access_may_reuse_a_device_but_not_twice_in_one_claim() -> None:
    admin = claim(
        "admin",
        [exactly("a", adminAccess=True)],
        [result("a", "gpu-0-mig-0", adminAccess=True)],
        config=gpu_config("a"),
    )
    assert check([*valid_claims(), admin]) == []
    twice = claim(
        "admin2",
        [exactly("a", adminAccess=True), exactly("b", adminAccess=True)],
        [result("a", "gpu-1", adminAccess=True), result("b", "gpu-1", adminAccess=True)],
        config=gpu_config("a", "b"),
    )
    assert rules([*valid_claims(), twice]) == {"device-twice"}


def test_admin_access_flag_must_match_the_request() -> None:
    def change(claims: list[Obj]) -> None:
        results_of(claims[0])[0]["adminAccess"] = True

    assert rules(mutated(change)) == {"admin-access"}


# --- counters and capacity --------------------------------------------------------------------


def test_counter_exceeded() -> None:
    whole = claim("whole", [exactly("g")], [result("g", "gpu-0")], config=gpu_config("g"))
    found = check([*valid_claims(), whole])
    assert {(v.claim, v.rule) for v in found} == {("default/whole", "counter-exceeded")}
    assert {v.message.split(":")[1].split()[1] for v in found} == {"memory", "slots"}
    # Alone, the whole GPU fits its counters.
    assert check([whole]) == []


def test_admin_access_consumes_no_counters() -> None:
    whole = claim(
        "whole",
        [exactly("g", adminAccess=True)],
        [result("g", "gpu-0", adminAccess=True)],
        config=gpu_config("g"),
    )
    assert check([*valid_claims(), whole]) == []


def test_shared_capacity_exceeded() -> None:
    big = claim(
        "big",
        [exactly("s", capacity={"requests": {"memory": "10Gi"}})],
        [share("s", "shared-0", "10Gi", "id-3")],
        config=gpu_config("s"),
    )
    # 4Gi + 2Gi are taken; 10Gi more is exactly 16Gi.
    assert check([*valid_claims(), big]) == []
    bigger = copy.deepcopy(big)
    bigger["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "11Gi"
    results_of(bigger)[0]["consumedCapacity"]["memory"] = "12Gi"
    found = check([*valid_claims(), bigger])
    assert [(v.claim, v.rule) for v in found] == [("default/big", "capacity-exceeded")]


def test_capacity_over_policy_maximum() -> None:
    def change(claims: list[Obj]) -> None:
        claims[2]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = {
            "memory": "17Gi"
        }

    assert rules(mutated(change)) == {"capacity-exceeded"}


def test_exclusive_capacity_request_too_large() -> None:
    def change(claims: list[Obj]) -> None:
        claims[1]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
            "requests": {"memory": "41Gi"}
        }

    # gpu-0-mig-1 has no memory capacity at all, gpu-1 has only 40Gi.
    found = check(mutated(change))
    assert {v.rule for v in found} == {"capacity-exceeded"}
    assert len(found) == 2


def test_consumed_capacity_is_the_rounded_request() -> None:
    # The policy allows 2Gi, 4Gi, ... 16Gi: "three" asked for 3Gi and took 4Gi.
    def change(claims: list[Obj]) -> None:
        results_of(claims[2])[0]["consumedCapacity"]["memory"] = "3Gi"

    assert rules(mutated(change)) == {"consumed-capacity"}

    def round_up(claims: list[Obj]) -> None:
        claims[2]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = {
            "memory": "4097Mi"
        }

    assert rules(mutated(round_up)) == {"consumed-capacity"}

    def rounded(claims: list[Obj]) -> None:
        round_up(claims)
        results_of(claims[2])[0]["consumedCapacity"]["memory"] = "6Gi"

    assert rules(mutated(rounded)) == set()

    def below_minimum(claims: list[Obj]) -> None:
        claims[3]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
            "requests": {"memory": "1"}
        }

    # 1 byte rounds up to the minimum, 2Gi, which "four" already records.
    assert rules(mutated(below_minimum)) == set()


def test_valid_values_policy() -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][4]["capacity"]["memory"]["requestPolicy"] = {
        "default": "4Gi",
        "validValues": ["4Gi", "8Gi"],
    }
    four = claim(
        "four", [exactly("s")], [share("s", "shared-0", "4Gi", "x")], config=gpu_config("s")
    )
    five = claim(
        "five",
        [exactly("s", capacity={"requests": {"memory": "5Gi"}})],
        [share("s", "shared-0", "8Gi", "y")],
        config=gpu_config("s"),
    )
    assert check([four, five], slices) == []
    nine = copy.deepcopy(five)
    nine["metadata"]["name"] = "nine"
    nine["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "9Gi"
    assert rules([four, nine], slices) == {"capacity-exceeded"}


def test_share_ids() -> None:
    def missing(claims: list[Obj]) -> None:
        del results_of(claims[2])[0]["shareID"]

    # Without a shareID the result holds the device alone, so the next share conflicts.
    found = check(mutated(missing))
    assert [(v.claim, v.rule) for v in found] == [
        ("default/three", "share-id"),
        ("default/four", "device-twice"),
    ]

    def duplicate(claims: list[Obj]) -> None:
        results_of(claims[3])[0]["shareID"] = "id-1"

    found = check(mutated(duplicate))
    assert [(v.claim, v.rule) for v in found] == [("default/four", "share-id")]

    def on_exclusive(claims: list[Obj]) -> None:
        results_of(claims[0])[0]["shareID"] = "id-9"

    assert rules(mutated(on_exclusive)) == {"share-id"}


# --- selectors, taints, constraints -----------------------------------------------------------


def test_class_selector_false() -> None:
    def change(claims: list[Obj]) -> None:
        results_of(claims[1])[2]["device"] = "gpu-1"
        results_of(claims[1])[2].update(driver=GPU, pool="a-gpu")

    assert "selector-false" in rules(mutated(change))


def test_request_selector_false() -> None:
    def change(claims: list[Obj]) -> None:
        claims[0]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": WHOLE_GPU}}
        ]

    found = check(mutated(change))
    assert [v.rule for v in found] == ["selector-false"]
    assert WHOLE_GPU in found[0].message


def test_selector_error_is_reported() -> None:
    def change(claims: list[Obj]) -> None:
        claims[0]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": 'device.attributes["gpu.example.com"].missing == 1'}}
        ]

    assert rules(mutated(change)) == {"selector-error"}


def test_untolerated_taint() -> None:
    tainted = claim("t", [exactly("g")], [result("g", "gpu-2")], config=gpu_config("g"))
    assert rules([tainted]) == {"taint"}
    toleration = {"key": "example.com/maint", "operator": "Exists"}
    tolerated = claim(
        "t",
        [exactly("g", tolerations=[toleration])],
        [result("g", "gpu-2", tolerations=[toleration])],
        config=gpu_config("g"),
    )
    assert check([tolerated]) == []
    wrong_value = {"key": "example.com/maint", "operator": "Equal", "value": "no"}
    tolerated["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [wrong_value]
    results_of(tolerated)[0]["tolerations"] = [wrong_value]
    assert rules([tolerated]) == {"taint"}
    other_effect = {"operator": "Exists", "effect": "NoExecute"}
    tolerated["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [other_effect]
    results_of(tolerated)[0]["tolerations"] = [other_effect]
    assert rules([tolerated]) == {"taint"}


def test_results_carry_the_request_tolerations() -> None:
    toleration = {"key": "example.com/maint", "operator": "Exists"}

    def change(claims: list[Obj]) -> None:
        claims[0]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [toleration]

    assert rules(mutated(change)) == {"tolerations"}


def test_match_and_distinct_attribute() -> None:
    match = [{"matchAttribute": f"{GPU}/numa"}]

    def matching(claims: list[Obj]) -> None:
        claims[1]["spec"]["devices"]["constraints"] = [{"requests": ["pair"], **match[0]}]

    found = check(mutated(matching))
    assert [v.rule for v in found] == ["constraint"]

    def distinct(claims: list[Obj]) -> None:
        claims[1]["spec"]["devices"]["constraints"] = [
            {"requests": ["pair"], "distinctAttribute": f"{GPU}/numa"}
        ]

    assert check(mutated(distinct)) == []

    def cross_driver(claims: list[Obj]) -> None:
        # The NIC has numa under its own driver's domain only.
        claims[1]["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{GPU}/numa"}]

    assert rules(mutated(cross_driver)) == {"constraint"}

    def qualified(claims: list[Obj]) -> None:
        claims[1]["spec"]["devices"]["constraints"] = [
            {"requests": ["nic"], "matchAttribute": "example.com/link"}
        ]

    assert check(mutated(qualified)) == []


# --- counts, requests, devices, pools ---------------------------------------------------------


def test_wrong_count() -> None:
    def change(claims: list[Obj]) -> None:
        del results_of(claims[1])[1]

    assert rules(mutated(change)) == {"count"}

    def missing_request(claims: list[Obj]) -> None:
        del results_of(claims[1])[2]

    assert rules(mutated(missing_request)) == {"count"}


def test_all_mode_takes_every_selectable_device() -> None:
    nics = claim(
        "nics",
        [exactly("n", "nic", allocationMode="All")],
        [result("n", "nic-0", "a-nic", NIC), result("n", "nic-1", "a-nic", NIC)],
    )
    assert check([nics]) == []
    del results_of(nics)[1]
    assert rules([nics]) == {"count"}


def test_all_mode_with_an_incomplete_pool_on_the_node() -> None:
    slices, _, _ = cluster()
    slices[2]["spec"]["pool"]["resourceSliceCount"] = 1
    extra = devices_slice("a-extra", "node-a", GPU, "a-extra", [device("x")], count=2)
    nics = claim(
        "nics",
        [exactly("n", "nic", allocationMode="All")],
        [result("n", "nic-0", "a-nic", NIC), result("n", "nic-1", "a-nic", NIC)],
    )
    assert check([nics], [*slices, extra]) == [
        Violation(
            "default/nics",
            "pool-unusable",
            "claim default/nics request n asks for all devices, but on node node-a pool "
            "gpu.example.com/a-extra is incomplete: it has 1 slice(s) at generation 1, but "
            "resourceSliceCount is 2",
        )
    ]


def test_unknown_device_request_and_class() -> None:
    def device_name(claims: list[Obj]) -> None:
        results_of(claims[0])[0]["device"] = "gpu-9"

    assert rules(mutated(device_name)) == {"unknown-device"}

    def request_name(claims: list[Obj]) -> None:
        results_of(claims[0])[0]["request"] = "nope"

    assert rules(mutated(request_name)) == {"unknown-request", "count"}

    def class_name(claims: list[Obj]) -> None:
        claims[4]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope"

    assert rules(mutated(class_name)) == {"unknown-class", "config"}


def test_incomplete_pool() -> None:
    slices, _, _ = cluster()
    del slices[0]
    assert rules(valid_claims(), slices) >= {"pool-unusable"}
    assert {v.claim for v in check(valid_claims(), slices)} == {
        "default/one",
        "default/two",
        "default/three",
        "default/four",
    }


@pytest.mark.parametrize(
    "breakage",
    ["duplicate device", "unknown counter set", "unknown counter", "duplicate counter set"],
)
def test_invalid_pool(breakage: str) -> None:
    slices, _, _ = cluster()
    gpu_devices = slices[1]["spec"]["devices"]
    if breakage == "duplicate device":
        gpu_devices.append(device("gpu-1"))
    elif breakage == "unknown counter set":
        gpu_devices[3]["consumesCounters"] = [
            {"counterSet": "nope", "counters": {"memory": {"value": "1"}}}
        ]
    elif breakage == "unknown counter":
        gpu_devices[3]["consumesCounters"] = [
            {"counterSet": "gpu-0", "counters": {"nope": {"value": "1"}}}
        ]
    else:
        slices[0]["spec"]["sharedCounters"].append(slices[0]["spec"]["sharedCounters"][0])
    found = check(valid_claims(), slices)
    assert {v.rule for v in found} == {"pool-unusable"}
    assert all("invalid" in v.message for v in found)


def test_newest_generation_counts() -> None:
    slices, _, _ = cluster()
    old = copy.deepcopy(slices[3])
    old["metadata"]["name"] = "b-gpu-old"
    old["spec"]["devices"].append(device("gpu-old"))
    slices[3]["spec"]["pool"]["generation"] = 2
    on_old = claim(
        "old",
        [exactly("g")],
        [result("g", "gpu-old", "b-gpu")],
        node="node-b",
        config=gpu_config("g"),
    )
    assert rules([on_old], [*slices, old]) == {"unknown-device"}
    old["spec"]["pool"]["generation"] = 3
    assert check([on_old], [*slices, old]) == []


def test_wrong_node_selector() -> None:
    def other_node(claims: list[Obj]) -> None:
        claims[0]["status"]["allocation"]["nodeSelector"] = on_node("node-b")

    found = check(mutated(other_node))
    assert {v.rule for v in found} == {"node-selector"}
    assert "not available on node node-b" in found[0].message

    def missing(claims: list[Obj]) -> None:
        del claims[0]["status"]["allocation"]["nodeSelector"]

    assert rules(mutated(missing)) == {"node-selector"}


def test_network_devices_need_no_node_selector() -> None:
    slices, classes, nodes = cluster()
    nodes[0]["metadata"]["labels"] = {"rack": "r1"}
    rack = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    slices.append(devices_slice("net", None, NIC, "net", [device("switch", "vf")], allNodes=True))
    slices.append(
        devices_slice("rack", None, NIC, "rack", [device("link", "vf")], nodeSelector=rack)
    )
    net = claim("net", [exactly("n", "nic")], [result("n", "switch", "net", NIC)], node=None)
    on_rack = claim("rack", [exactly("n", "nic")], [result("n", "link", "rack", NIC)], node=None)
    on_rack["status"]["allocation"]["nodeSelector"] = rack
    assert check_allocations(slices, classes, [net, on_rack], nodes) == []
    del on_rack["status"]["allocation"]["nodeSelector"]
    assert {v.rule for v in check_allocations(slices, classes, [on_rack], nodes)} == {
        "node-selector"
    }
    # No labelled node matches: the rack slice applies nowhere.
    assert {v.rule for v in check_allocations(slices, classes, [on_rack], [])} == {"node-selector"}


def test_per_device_node_selection() -> None:
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
            ],
            perDeviceNodeSelection=True,
        )
    )
    good = claim("g", [exactly("n", "nic")], [result("n", "on-b", "mixed", NIC)], node="node-b")
    assert check_allocations(slices, classes, [good], nodes) == []
    bad = claim("g", [exactly("n", "nic")], [result("n", "on-b", "mixed", NIC)], node="node-a")
    assert {v.rule for v in check_allocations(slices, classes, [bad], nodes)} == {"node-selector"}


def test_too_many_results() -> None:
    slices, classes, nodes = cluster()
    many = [device(f"d-{i}") for i in range(33)]
    slices.append(devices_slice("big", "node-b", GPU, "big", many))
    big = claim(
        "big",
        [exactly("g", "any", count=33)],
        [result("g", f"d-{i}", "big") for i in range(33)],
        node="node-b",
    )
    assert {v.rule for v in check_allocations(slices, classes, [big], nodes)} == {
        "too-many-results"
    }
    big["spec"]["devices"]["requests"][0]["exactly"]["count"] = 32
    del results_of(big)[32]
    assert check_allocations(slices, classes, [big], nodes) == []


# --- firstAvailable, order, config ------------------------------------------------------------


def first_available() -> Obj:
    return claim(
        "fa",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu", "count": 2},
                    {"name": "nic", "deviceClassName": "nic"},
                ],
            }
        ],
        [result("r/nic", "nic-0", "a-nic", NIC)],
        claim_config=[{"requests": ["r"], "opaque": {"driver": NIC, "parameters": {}}}],
        # The claim config names the only request, so it is written without `requests`.
        config=[{"source": "FromClaim", "opaque": {"driver": NIC, "parameters": {}}}],
    )


def test_first_available_names_one_subrequest() -> None:
    fa = first_available()
    assert check([fa]) == []
    results_of(fa).append(result("r/big", "gpu-1"))
    assert "unknown-request" in rules([fa])
    fa = first_available()
    results_of(fa)[0]["request"] = "r"
    assert "unknown-request" in rules([fa])


def test_result_order() -> None:
    def swap_requests(claims: list[Obj]) -> None:
        results = results_of(claims[1])
        results.insert(0, results.pop())

    assert rules(mutated(swap_requests)) == {"result-order"}

    def swap_slots(claims: list[Obj]) -> None:
        results = results_of(claims[1])
        results[0], results[1] = results[1], results[0]

    assert rules(mutated(swap_slots)) == {"result-order"}


def test_config_order() -> None:
    def swap(claims: list[Obj]) -> None:
        claims[1]["spec"]["devices"]["config"] = [{"opaque": {"driver": GPU, "parameters": {}}}]
        claims[1]["status"]["allocation"]["devices"]["config"] = [
            {"source": "FromClaim", "opaque": {"driver": GPU, "parameters": {}}},
            *gpu_config("pair", every=False),
        ]

    assert rules(mutated(swap)) == {"config"}

    def in_order(claims: list[Obj]) -> None:
        swap(claims)
        configs = claims[1]["status"]["allocation"]["devices"]["config"]
        configs.append(configs.pop(0))

    assert rules(mutated(in_order)) == set()

    def missing(claims: list[Obj]) -> None:
        del claims[0]["status"]["allocation"]["devices"]["config"]

    assert rules(mutated(missing)) == {"config"}


# --- the reference ------------------------------------------------------------------------------


def test_reference_takes_the_first_fit_and_backtracks() -> None:
    slices, classes, nodes = cluster()
    pending = claim("p", [exactly("g", count=2)], config=gpu_config("g"))
    found = first_fit_reference(slices, classes, [pending], "node-a", nodes=nodes)
    assert found is not None
    # gpu-0 and either partition would exceed the counters: gpu-0 goes with gpu-1.
    assert [r["device"] for r in found[0]["devices"]["results"]] == ["gpu-0", "gpu-1"]
    assert found[0]["nodeSelector"] == on_node("node-a")
    assert found[0]["devices"]["config"] == gpu_config("g")

    in_use = [c for c in valid_claims() if c["metadata"]["name"] != "pending"]
    # Partitions in use block gpu-0 (counters), gpu-1 is taken and gpu-2 is tainted: only the
    # shared device is left, and a share is one device.
    assert first_fit_reference(slices, classes, [pending], "node-a", in_use=in_use) is None
    pending["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    found = first_fit_reference(slices, classes, [pending], "node-a", in_use=in_use)
    assert found is not None
    (only,) = found[0]["devices"]["results"]
    assert only["device"] == "shared-0"
    assert only["consumedCapacity"] == {"memory": str(2 * 2**30)}
    assert only["shareID"]


def test_reference_first_available_falls_back() -> None:
    slices, classes, nodes = cluster()
    fa = first_available()
    del fa["status"]
    found = first_fit_reference(slices, classes, [fa], "node-b", nodes=nodes)
    assert found is not None
    assert [r["request"] for r in found[0]["devices"]["results"]] == ["r/big", "r/big"]
    assert first_fit_reference(slices, classes, [fa], "node-a", nodes=nodes) is not None
    constrained = copy.deepcopy(fa)
    constrained["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{GPU}/numa"}]
    found = first_fit_reference(slices, classes, [constrained], "node-b", nodes=nodes)
    assert found is not None
    assert [r["device"] for r in found[0]["devices"]["results"]] == ["gpu-0", "gpu-1"]


def test_reference_none_and_limit() -> None:
    slices, classes, nodes = cluster()
    too_many = claim("p", [exactly("g", count=3)], config=gpu_config("g"))
    assert first_fit_reference(slices, classes, [too_many], "node-b", nodes=nodes) is None
    with pytest.raises(TooManyCandidatesError):
        first_fit_reference(slices, classes, [too_many], "node-a", nodes=nodes, max_candidates=5)


def test_reference_pod_claims_do_not_share_devices() -> None:
    slices, classes, nodes = cluster()
    admin = claim("a", [exactly("g", "any", adminAccess=True)])
    plain = claim("b", [exactly("g", "any")])
    found = first_fit_reference(slices, classes, [admin, plain], "node-b", nodes=nodes)
    assert found is not None
    assert [a["devices"]["results"][0]["device"] for a in found] == ["gpu-0", "gpu-1"]


def test_admin_pick_blocks_a_later_plain_pick_in_the_same_claim() -> None:
    both = claim(
        "both",
        [exactly("a", adminAccess=True), exactly("b")],
        [result("a", "gpu-1", adminAccess=True), result("b", "gpu-1")],
        config=gpu_config("a", "b"),
    )
    assert rules([both]) == {"device-twice"}


def test_shares_of_one_device_in_one_claim() -> None:
    # Different requests may each take a share of a device that allows multiple allocations,
    # admin access or not (an admin pick gets a share too); the same request may not take two
    # shares of it.
    mixed = claim(
        "mixed",
        [exactly("a"), exactly("b", adminAccess=True)],
        [
            share("a", "shared-0", "2Gi", "s-1"),
            share("b", "shared-0", "2Gi", "s-2", adminAccess=True),
        ],
        config=gpu_config("a", "b"),
    )
    assert check([mixed]) == []
    twice = claim(
        "twice",
        [exactly("a", count=2)],
        [share("a", "shared-0", "2Gi", "s-1"), share("a", "shared-0", "2Gi", "s-2")],
        config=gpu_config("a"),
    )
    assert rules([twice]) >= {"device-twice"}


def test_admin_access_to_a_shared_device_takes_a_share_that_later_claims_ignore() -> None:
    full = claim(
        "full",
        [exactly("s", capacity={"requests": {"memory": "16Gi"}})],
        [share("s", "shared-0", "16Gi", "s-1")],
        config=gpu_config("s"),
    )
    admin = claim(
        "admin",
        [exactly("s", adminAccess=True)],
        [share("s", "shared-0", "2Gi", "s-2", adminAccess=True)],
        config=gpu_config("s"),
    )
    # Upstream (allocateDevice) gives an admin pick of such a device a share, which must fit
    # what is left; a written admin result counts for nobody after it.
    assert rules([full, admin]) == {"capacity-exceeded"}
    assert check([admin, full]) == []
    too_big = claim(
        "too-big",
        [exactly("s", adminAccess=True, capacity={"requests": {"memory": "64Gi"}})],
        [share("s", "shared-0", "64Gi", "s-3", adminAccess=True)],
        config=gpu_config("s"),
    )
    assert "capacity-exceeded" in rules([too_big])
    without_share = claim(
        "without-share",
        [exactly("s", adminAccess=True)],
        [result("s", "shared-0", adminAccess=True)],
        config=gpu_config("s"),
    )
    assert "share-id" in rules([without_share])


def test_an_unreached_all_entry_on_a_node_with_an_unusable_pool() -> None:
    slices, _, _ = cluster()
    extra = devices_slice("a-extra", "node-a", GPU, "a-extra", [device("x")], count=2)
    fallback = claim(
        "fallback",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {"name": "one", "deviceClassName": "nic"},
                    {"name": "all", "deviceClassName": "nic", "allocationMode": "All"},
                ],
            }
        ],
        [result("r/one", "nic-0", "a-nic", NIC)],
    )
    assert check([fallback]) == []
    found = check([fallback], [*slices, extra])
    assert [v.rule for v in found] == ["pool-unusable"]
    assert "r/all asks for all devices" in found[0].message


def test_reference_shares_one_device_between_requests() -> None:
    slices, classes, nodes = cluster()
    only_shared = {"cel": {"expression": "device.allowMultipleAllocations"}}
    two = claim(
        "two",
        [
            exactly("a", "any", selectors=[only_shared]),
            exactly("b", "any", adminAccess=True, selectors=[only_shared]),
        ],
    )
    found = first_fit_reference(slices, classes, [two], "node-a", nodes=nodes)
    assert found is not None
    results = found[0]["devices"]["results"]
    assert [(r["request"], r["device"], r.get("adminAccess")) for r in results] == [
        ("a", "shared-0", None),
        ("b", "shared-0", True),
    ]
    # Both take a share, admin access included (upstream allocateDevice).
    assert results[0]["shareID"] and results[1]["shareID"]
    assert results[1]["consumedCapacity"]
