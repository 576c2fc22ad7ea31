"""What the checker says, word for word: each rule broken on its own in a copy of the valid
cluster of `test_checker.py`, and the violations it reports. The rule names what broke; the
message names the claim, request, device, amounts and node, which is what a person reading a
failed check (or the allocator's property tests) acts on."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.checker.rules import Violation, check_allocations
from tests.unit.checker.test_checker import (
    GPU,
    NIC,
    WHOLE_GPU,
    Obj,
    check,
    claim,
    cluster,
    device,
    devices_slice,
    exactly,
    first_available,
    gpu_config,
    on_node,
    result,
    results_of,
    share,
    valid_claims,
)

Case = tuple[list[Obj], list[Obj] | None]
SHARED = f"{GPU}/a-gpu/shared-0"
MIG_0 = f"{GPU}/a-gpu/gpu-0-mig-0"
MIG_1 = f"{GPU}/a-gpu/gpu-0-mig-1"
GPU_1 = f"{GPU}/a-gpu/gpu-1"


def changed(change: Callable[[list[Obj]], object]) -> Case:
    claims = copy.deepcopy(valid_claims())
    assert check(claims) == []
    change(claims)
    return claims, None


def request(c: Obj, index: int = 0) -> Obj:
    found: Obj = c["spec"]["devices"]["requests"][index]["exactly"]
    return found


def added(*claims: Obj) -> Case:
    return [*valid_claims(), *claims], None


def alone(*claims: Obj) -> Case:
    return list(claims), None


def swap_requests(claims: list[Obj]) -> None:
    results = results_of(claims[1])
    results.insert(0, results.pop())


def swap_slots(claims: list[Obj]) -> None:
    results = results_of(claims[1])
    results[0], results[1] = results[1], results[0]


def on_another_gpu(claims: list[Obj]) -> None:
    results_of(claims[1])[2].update(device="gpu-1", driver=GPU, pool="a-gpu")


def without_counters() -> Case:
    slices, _, _ = cluster()
    del slices[0]
    return [valid_claims()[0]], slices


def both_subrequests() -> Case:
    fa = first_available()
    results_of(fa).append(result("r/big", "gpu-1"))
    return [fa], None


def malformed() -> Case:
    bad = valid_claims()[0]
    request(bad)["allocationMode"] = "Some"
    return [bad], None


CASES: dict[str, tuple[Callable[[], Case], list[Violation]]] = {
    "device-in-two-claims": (
        lambda: changed(lambda c: results_of(c[1])[0].update(device="gpu-0-mig-0")),
        [
            Violation(
                "default/two",
                "device-twice",
                f"claim default/two request pair: device {MIG_0} is already allocated to claim "
                "default/one",
            )
        ],
    ),
    "device-twice-in-one-claim": (
        lambda: changed(lambda c: results_of(c[1])[1].update(device="gpu-0-mig-1")),
        [
            Violation(
                "default/two",
                "result-order",
                f"claim default/two request pair: device {MIG_1} does not come after the previous "
                "device of the request in the device order",
            ),
            Violation(
                "default/two",
                "device-twice",
                f"claim default/two: device {MIG_1} is used more than once (request pair)",
            ),
        ],
    ),
    "admin-access": (
        lambda: changed(lambda c: results_of(c[0])[0].update(adminAccess=True)),
        [
            Violation(
                "default/one",
                "admin-access",
                f"claim default/one request gpu device {MIG_0}: the result's adminAccess does "
                "not match the request's (False)",
            )
        ],
    ),
    "counter-exceeded": (
        lambda: added(
            claim("whole", [exactly("g")], [result("g", "gpu-0")], config=gpu_config("g"))
        ),
        [
            Violation(
                "default/whole",
                "counter-exceeded",
                f"claim default/whole: counter memory of set gpu-0 in pool {GPU}/a-gpu: devices "
                "in use consume 85899345920, more than its 42949672960",
            ),
            Violation(
                "default/whole",
                "counter-exceeded",
                f"claim default/whole: counter slots of set gpu-0 in pool {GPU}/a-gpu: devices in "
                "use consume 4, more than its 2",
            ),
        ],
    ),
    "shared-capacity-exceeded": (
        lambda: added(
            claim(
                "big",
                [exactly("s", capacity={"requests": {"memory": "11Gi"}})],
                [share("s", "shared-0", "12Gi", "id-3")],
                config=gpu_config("s"),
            )
        ),
        [
            Violation(
                "default/big",
                "capacity-exceeded",
                f"claim default/big request s: capacity {GPU}/memory of device {SHARED}: "
                "6442450944 already consumed, 12884901888 more exceeds 17179869184",
            )
        ],
    ),
    "over-the-policy-maximum": (
        lambda: changed(lambda c: request(c[2])["capacity"].update(requests={"memory": "17Gi"})),
        [
            Violation(
                "default/three",
                "capacity-exceeded",
                f"claim default/three request s device {SHARED}: capacity {GPU}/memory of "
                f"device {SHARED}: the policy allows no amount for 18253611008",
            )
        ],
    ),
    "exclusive-capacity": (
        lambda: changed(lambda c: request(c[1]).update(capacity={"requests": {"memory": "41Gi"}})),
        [
            Violation(
                "default/two",
                "capacity-exceeded",
                f"claim default/two request pair device {MIG_1}: the request asks for capacity "
                f"memory, which device {MIG_1} does not have",
            ),
            Violation(
                "default/two",
                "capacity-exceeded",
                f"claim default/two request pair device {GPU_1}: the request asks for "
                f"44023414784 of capacity memory; device {GPU_1} has 42949672960",
            ),
        ],
    ),
    "consumed-capacity": (
        lambda: changed(lambda c: results_of(c[2])[0]["consumedCapacity"].update(memory="3Gi")),
        [
            Violation(
                "default/three",
                "consumed-capacity",
                f"claim default/three request s device {SHARED}: consumedCapacity "
                "{'memory': '3Gi'} differs from the rounded request "
                f"{{{GPU}/memory: 4294967296}}",
            )
        ],
    ),
    "consumed-capacity-unreadable": (
        lambda: changed(lambda c: results_of(c[2])[0]["consumedCapacity"].update(memory="lots")),
        [
            Violation(
                "default/three",
                "consumed-capacity",
                f"claim default/three request s device {SHARED}: claim default/three request s "
                f'device {SHARED} consumedCapacity: "lots" is not a quantity; write digits with '
                "an optional sign and fraction, then optionally one suffix (Ki, Mi, Gi, Ti, Pi, "
                "Ei, n, u, m, k, M, G, T, P, E) or an exponent such as e6",
            )
        ],
    ),
    "share-without-id": (
        lambda: changed(lambda c: results_of(c[2])[0].pop("shareID")),
        [
            Violation(
                "default/three",
                "share-id",
                f"claim default/three request s device {SHARED}: a share of a device needs a "
                "shareID",
            ),
            Violation(
                "default/four",
                "device-twice",
                f"claim default/four request s: device {SHARED} is already allocated to claim "
                "default/three",
            ),
        ],
    ),
    "share-id-twice": (
        lambda: changed(lambda c: results_of(c[3])[0].update(shareID="id-1")),
        [
            Violation(
                "default/four",
                "share-id",
                f"claim default/four: shareID id-1 of device {SHARED} is not unique",
            )
        ],
    ),
    "share-id-on-an-exclusive-device": (
        lambda: changed(lambda c: results_of(c[0])[0].update(shareID="id-9")),
        [
            Violation(
                "default/one",
                "share-id",
                f"claim default/one request gpu device {MIG_0}: the result carries a shareID or "
                "consumedCapacity, but the device does not allow multiple allocations",
            )
        ],
    ),
    "class-selector-false": (
        lambda: changed(on_another_gpu),
        [
            Violation(
                "default/two",
                "selector-false",
                f"claim default/two request nic device {GPU_1}: selector "
                f"'device.driver == \"{NIC}\"' is false",
            ),
            Violation(
                "default/two",
                "device-twice",
                f"claim default/two: device {GPU_1} is used more than once (request nic)",
            ),
        ],
    ),
    "request-selector-false": (
        lambda: changed(
            lambda c: request(c[0]).update(selectors=[{"cel": {"expression": WHOLE_GPU}}])
        ),
        [
            Violation(
                "default/one",
                "selector-false",
                f"claim default/one request gpu device {MIG_0}: selector {WHOLE_GPU!r} is false",
            )
        ],
    ),
    "untolerated-taint": (
        lambda: alone(claim("t", [exactly("g")], [result("g", "gpu-2")], config=gpu_config("g"))),
        [
            Violation(
                "default/t",
                "taint",
                f"claim default/t request g device {GPU}/a-gpu/gpu-2: taint "
                "example.com/maint=yes:NoSchedule is not tolerated",
            )
        ],
    ),
    "tolerations-not-carried": (
        lambda: changed(
            lambda c: request(c[0]).update(
                tolerations=[{"key": "example.com/maint", "operator": "Exists"}]
            )
        ),
        [
            Violation(
                "default/one",
                "tolerations",
                f"claim default/one request gpu device {MIG_0}: the result does not carry the "
                "request's tolerations",
            )
        ],
    ),
    "match-attribute": (
        lambda: changed(
            lambda c: c[1]["spec"]["devices"].update(
                constraints=[{"requests": ["pair"], "matchAttribute": f"{GPU}/numa"}]
            )
        ),
        [
            Violation(
                "default/two",
                "constraint",
                f"claim default/two: matchAttribute {GPU}/numa: devices {MIG_1} and {GPU_1} "
                "differ (0 vs 1)",
            )
        ],
    ),
    "distinct-attribute": (
        lambda: alone(
            claim(
                "pair",
                [exactly("p", count=2)],
                [result("p", "gpu-0-mig-0"), result("p", "gpu-0-mig-1")],
                config=gpu_config("p"),
                constraints=[{"distinctAttribute": f"{GPU}/numa"}],
            )
        ),
        [
            Violation(
                "default/pair",
                "constraint",
                f"claim default/pair: distinctAttribute {GPU}/numa: devices {MIG_0} and {MIG_1} "
                "have the same value",
            )
        ],
    ),
    "constraint-attribute-missing": (
        lambda: changed(
            lambda c: c[1]["spec"]["devices"].update(
                constraints=[{"distinctAttribute": f"{GPU}/numa"}]
            )
        ),
        [
            Violation(
                "default/two",
                "constraint",
                f"claim default/two: distinctAttribute {GPU}/numa: device {NIC}/a-nic/nic-1 does "
                "not have the attribute",
            )
        ],
    ),
    "count": (
        lambda: changed(lambda c: results_of(c[1]).pop(1)),
        [
            Violation(
                "default/two",
                "count",
                "claim default/two request pair asks for 2 device(s) but has 1 result(s)",
            )
        ],
    ),
    "request-without-results": (
        lambda: changed(lambda c: results_of(c[1]).pop(2)),
        [Violation("default/two", "count", "claim default/two: request nic has no results")],
    ),
    "all-devices-not-all-taken": (
        lambda: alone(
            claim(
                "nics",
                [exactly("n", "nic", allocationMode="All")],
                [result("n", "nic-0", "a-nic", NIC)],
            )
        ),
        [
            Violation(
                "default/nics",
                "count",
                "claim default/nics request n asks for all devices: expected "
                f"['{NIC}/a-nic/nic-0', '{NIC}/a-nic/nic-1'], got ['{NIC}/a-nic/nic-0']",
            )
        ],
    ),
    "all-devices-none-selectable": (
        lambda: alone(
            claim(
                "none",
                [
                    exactly(
                        "n",
                        "nic",
                        allocationMode="All",
                        selectors=[{"cel": {"expression": "false"}}],
                    )
                ],
                [result("n", "nic-0", "a-nic", NIC)],
            )
        ),
        [
            Violation(
                "default/none",
                "count",
                "claim default/none request n asks for all devices, but no device on node "
                "node-a is selectable",
            ),
            Violation(
                "default/none",
                "selector-false",
                f"claim default/none request n device {NIC}/a-nic/nic-0: selector 'false' is false",
            ),
        ],
    ),
    "unknown-device": (
        lambda: changed(lambda c: results_of(c[0])[0].update(device="gpu-9")),
        [
            Violation(
                "default/one",
                "unknown-device",
                f"claim default/one request gpu: device {GPU}/a-gpu/gpu-9 is not published in "
                "the newest generation of its pool",
            )
        ],
    ),
    "unknown-request": (
        lambda: changed(lambda c: results_of(c[0])[0].update(request="nope")),
        [
            Violation(
                "default/one",
                "unknown-request",
                "claim default/one: result names unknown request 'nope'",
            ),
            Violation("default/one", "count", "claim default/one: request gpu has no results"),
        ],
    ),
    "unknown-class": (
        lambda: changed(lambda c: request(c[4]).update(deviceClassName="nope")),
        [
            Violation(
                "default/on-b",
                "unknown-class",
                "claim default/on-b request g: DeviceClass 'nope' does not exist",
            ),
            Violation(
                "default/on-b",
                "config",
                "claim default/on-b: devices.config is [{'source': 'FromClass', 'opaque': "
                f"{{'driver': '{GPU}', 'parameters': {{'from': 'class'}}}}, 'requests': []}}], "
                "expected class configs then claim configs: []",
            ),
        ],
    ),
    "both-first-available-entries": (
        both_subrequests,
        [
            Violation(
                "default/fa",
                "unknown-request",
                "claim default/fa request r: results use both r/nic and r/big; one "
                "firstAvailable entry must be chosen",
            ),
            Violation(
                "default/fa",
                "result-order",
                f"claim default/fa request r/big: device {GPU_1} does not come after the "
                "previous device of the request in the device order",
            ),
            Violation(
                "default/fa",
                "count",
                "claim default/fa request r/nic asks for 1 device(s) but has 2 result(s)",
            ),
        ],
    ),
    "device-on-another-node": (
        lambda: changed(
            lambda c: c[0]["status"]["allocation"].update(nodeSelector=on_node("node-b"))
        ),
        [
            Violation(
                "default/one",
                "node-selector",
                f"claim default/one request gpu: device {MIG_0} is not available on node node-b",
            )
        ],
    ),
    "node-selector-missing": (
        lambda: changed(lambda c: c[0]["status"]["allocation"].pop("nodeSelector")),
        [
            Violation(
                "default/one",
                "node-selector",
                f"claim default/one: nodeSelector is None, expected {on_node('node-a')} "
                "(allocation checked on node node-a)",
            )
        ],
    ),
    "results-of-a-later-request-first": (
        lambda: changed(swap_requests),
        [
            Violation(
                "default/two",
                "result-order",
                "claim default/two: the result for request pair comes after a result of a "
                "later request",
            )
        ],
    ),
    "devices-of-a-request-out-of-order": (
        lambda: changed(swap_slots),
        [
            Violation(
                "default/two",
                "result-order",
                f"claim default/two request pair: device {MIG_1} does not come after the "
                "previous device of the request in the device order",
            )
        ],
    ),
    "config-missing": (
        lambda: changed(lambda c: c[0]["status"]["allocation"]["devices"].pop("config")),
        [
            Violation(
                "default/one",
                "config",
                "claim default/one: devices.config is [], expected class configs then claim "
                f"configs: [{{'opaque': {{'driver': '{GPU}', 'parameters': {{'from': 'class'}}}}, "
                "'source': 'FromClass', 'requests': []}]",
            )
        ],
    ),
    "claim-twice": (
        lambda: alone(valid_claims()[0], valid_claims()[0]),
        [Violation(None, "duplicate-claim", "claim default/one appears more than once")],
    ),
    "malformed-claim": (
        malformed,
        [
            Violation(
                "default/one",
                "malformed",
                "claim default/one request gpu: unknown allocationMode 'Some'",
            )
        ],
    ),
    "device-in-an-unusable-pool": (
        without_counters,
        [
            Violation(
                "default/one",
                "pool-unusable",
                f"claim default/one request gpu: device {MIG_0} is in an unusable pool: pool "
                f"{GPU}/a-gpu is invalid: "
                + "; ".join(
                    f"device {d} consumes counter set gpu-0, which the pool does not define"
                    for d in ("gpu-0", "gpu-0-mig-0", "gpu-0-mig-1")
                ),
            )
        ],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_violation_names_the_claim_request_device_and_amounts(case: str) -> None:
    build, expected = CASES[case]
    claims, slices = build()
    assert check(claims, slices) == expected


def test_a_selector_error_names_the_expression_and_the_device() -> None:
    expression = 'device.attributes["gpu.example.com"].missing == 1'
    claims, _ = changed(
        lambda c: request(c[0]).update(selectors=[{"cel": {"expression": expression}}])
    )
    (found,) = check(claims)
    assert (found.claim, found.rule) == ("default/one", "selector-error")
    # The rest is the CEL runtime's own text.
    assert found.message.startswith(
        f"claim default/one request gpu device {MIG_0}: {expression!r} on device {MIG_0}: "
        f"CEL selector {expression!r} failed: "
    )


def rules_of(claims: list[Obj], slices: list[Obj] | None = None) -> list[tuple[str | None, str]]:
    return [(v.claim, v.rule) for v in check(claims, slices)]


def with_results(name: str, requests: list[Obj], results: list[Obj], **extra: Any) -> Obj:
    return claim(
        name, requests, results, config=gpu_config(*(r["name"] for r in requests)), **extra
    )


@pytest.mark.parametrize(
    ("memory", "members"),
    [
        ("8Gi", ["gpu-1", "shared-0"]),
        ("10Gi", ["gpu-1", "shared-0"]),
        ("12Gi", ["gpu-1"]),
        ("20Gi", ["gpu-1"]),  # more than shared-0's policy allows a share
    ],
)
def test_all_devices_are_those_whose_capacity_serves_the_request_after_earlier_claims(
    memory: str, members: list[str]
) -> None:
    # gpu-1 has 40Gi for itself; shared-0 has 16Gi, of which "three" and "four" share 6Gi.
    earlier = [c for c in valid_claims() if c["metadata"]["name"] != "two"]
    request = exactly("a", allocationMode="All", capacity={"requests": {"memory": memory}})
    results = [
        share("a", name, memory, "id-9") if name == "shared-0" else result("a", name)
        for name in members
    ]
    assert check([*earlier, with_results("all", [request], results)]) == []
    # A member left out, or a device added that cannot serve the request, is a wrong set.
    fewer = with_results("all", [request], [result("a", "gpu-1")])
    assert rules_of([*earlier, fewer]) == ([] if len(members) == 1 else [("default/all", "count")])
    more = with_results("all", [request], [*results, result("a", "gpu-2")])
    assert ("default/all", "count") in rules_of([*earlier, more])


def test_an_admin_share_counts_against_the_rest_of_its_own_claim() -> None:
    requests = [exactly("a1", adminAccess=True), exactly("a2", adminAccess=True), exactly("p")]
    for request in requests:
        request["exactly"]["capacity"] = {"requests": {"memory": "4Gi"}}

    def taking(plain: str) -> Obj:
        requests[2]["exactly"]["capacity"] = {"requests": {"memory": plain}}
        return with_results(
            "mixed",
            copy.deepcopy(requests),
            [
                share("a1", "shared-0", "4Gi", "s-1", adminAccess=True),
                share("a2", "shared-0", "4Gi", "s-2", adminAccess=True),
                share("p", "shared-0", plain, "s-3"),
            ],
        )

    # 4Gi + 4Gi taken by the admin shares: 8Gi more fits the 16Gi, 10Gi does not.
    assert check([taking("8Gi")]) == []
    assert rules_of([taking("10Gi")]) == [("default/mixed", "capacity-exceeded")]


# Of a type known only when it runs: the compiler cannot refuse it, the runtime does.
NUMA = "device.attributes[device.driver].numa"
NOT_BOOL = f"CEL selector {NUMA!r} failed: must evaluate to bool, got int"


def test_a_selector_that_gives_no_boolean_is_an_error() -> None:
    claims = copy.deepcopy(valid_claims())
    claims[0]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": NUMA}}
    ]
    assert check(claims) == [
        Violation(
            "default/one",
            "selector-error",
            f"claim default/one request gpu device {MIG_0}: {NUMA!r} on device {MIG_0}: {NOT_BOOL}",
        )
    ]


def test_a_selector_error_in_an_all_request_is_reported_for_each_device() -> None:
    broken = claim(
        "nics",
        [exactly("n", "nic", allocationMode="All", selectors=[{"cel": {"expression": NUMA}}])],
        [result("n", "nic-0", "a-nic", NIC)],
    )
    assert [v.message for v in check([broken]) if v.rule == "selector-error"][:2] == [
        f"claim default/nics request n: {NUMA!r} on device {NIC}/a-nic/{name}: {NOT_BOOL}"
        for name in ("nic-0", "nic-1")
    ]


def test_an_all_request_of_an_unknown_class_is_reported() -> None:
    unknown = claim("all", [exactly("a", "nope", allocationMode="All")], [result("a", "gpu-1")])
    assert ("default/all", "unknown-class") in rules_of([unknown])


def test_a_constraint_on_a_first_available_request_covers_its_entries() -> None:
    for named in ("r", "r/two"):
        fa = claim(
            "fa",
            [
                {
                    "name": "r",
                    "firstAvailable": [{"name": "two", "deviceClassName": "gpu", "count": 2}],
                }
            ],
            [result("r/two", "gpu-0-mig-1"), result("r/two", "gpu-1")],
            config=gpu_config("r"),
            constraints=[{"requests": [named], "matchAttribute": f"{GPU}/numa"}],
        )
        assert check([fa]) == [
            Violation(
                "default/fa",
                "constraint",
                f"claim default/fa: matchAttribute {GPU}/numa: devices {MIG_1} and {GPU_1} "
                "differ (0 vs 1)",
            )
        ]


def test_every_device_of_a_constraint_is_compared_past_results_it_does_not_cover() -> None:
    taken = claim(
        "x",
        [exactly("nic", "nic"), exactly("pair", count=3)],
        [
            result("nope", "gpu-0"),
            result("nic", "nic-1", "a-nic", NIC),
            result("pair", "gpu-0-mig-1"),
            result("pair", "gpu-1"),
            share("pair", "shared-0", "2Gi", "s-1"),
        ],
        config=gpu_config("pair", every=False),
        constraints=[{"requests": ["pair"], "matchAttribute": f"{GPU}/numa"}],
    )
    found = [(v.rule, v.message) for v in check([taken])]
    assert found == [
        ("unknown-request", "claim default/x: result names unknown request 'nope'"),
        *(
            (
                "constraint",
                f"claim default/x: matchAttribute {GPU}/numa: devices {MIG_1} and {other} "
                "differ (0 vs 1)",
            )
            for other in (GPU_1, SHARED)
        ),
    ]


def test_results_after_one_that_is_not_resolved_are_still_checked() -> None:
    taken = claim(
        "x",
        [exactly("g", count=3)],
        [result("g", "gpu-9"), result("g", "gpu-0-mig-0"), result("g", "gpu-0-mig-0")],
        config=gpu_config("g"),
        constraints=[{"matchAttribute": f"{GPU}/numa"}],
    )
    assert rules_of([*valid_claims()[1:], taken]) == [
        ("default/x", "unknown-device"),
        ("default/x", "result-order"),
        ("default/x", "device-twice"),
    ]
    # And what they hold counts against the claims after.
    later = claim("later", [exactly("g")], [result("g", "gpu-0-mig-0")], config=gpu_config("g"))
    assert ("default/later", "device-twice") in rules_of([taken, later])


def test_what_a_claim_holds_after_an_admin_result_counts_against_later_claims() -> None:
    first = claim(
        "first",
        [exactly("a", adminAccess=True), exactly("p")],
        [result("a", "gpu-0-mig-0", adminAccess=True), result("p", "gpu-1")],
        config=gpu_config("a", "p"),
    )
    later = claim("later", [exactly("g")], [result("g", "gpu-1")], config=gpu_config("g"))
    assert rules_of([first, later]) == [("default/later", "device-twice")]


def test_a_claim_sharing_a_device_it_also_holds_alone_conflicts_with_no_one_else() -> None:
    both = claim(
        "both",
        [exactly("a"), exactly("b")],
        [result("a", "shared-0"), share("b", "shared-0", "2Gi", "s-1")],
        config=gpu_config("a", "b"),
    )
    assert rules_of([both]) == [("default/both", "share-id"), ("default/both", "consumed-capacity")]


def test_the_device_at_the_head_of_the_order_is_checked_for_order_too() -> None:
    # gpu-0 is the first device of node-a.
    backwards = claim(
        "pair",
        [exactly("p", count=2)],
        [result("p", "gpu-1"), result("p", "gpu-0")],
        config=gpu_config("p"),
    )
    assert rules_of([backwards]) == [("default/pair", "result-order")]
    twice = claim(
        "pair",
        [exactly("p", count=2)],
        [result("p", "gpu-0"), result("p", "gpu-0")],
        config=gpu_config("p"),
    )
    assert rules_of([twice]) == [("default/pair", "result-order"), ("default/pair", "device-twice")]


def test_every_request_is_counted_after_one_without_results() -> None:
    claims = copy.deepcopy(valid_claims())
    results_of(claims[1])[:] = [result("nic", name, "a-nic", NIC) for name in ("nic-0", "nic-1")]
    assert [v.message for v in check(claims)] == [
        "claim default/two: request pair has no results",
        "claim default/two request nic asks for 1 device(s) but has 2 result(s)",
    ]


def test_claims_after_a_malformed_one_are_checked() -> None:
    bad = copy.deepcopy(valid_claims()[0])
    bad["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Some"
    wrong = copy.deepcopy(valid_claims()[4])
    results_of(wrong)[0]["device"] = "gpu-9"
    assert rules_of([bad, wrong]) == [
        ("default/one", "malformed"),
        ("default/on-b", "unknown-device"),
    ]


def test_the_requests_a_config_is_written_for_must_be_the_right_ones() -> None:
    claims = copy.deepcopy(valid_claims())
    claims[1]["status"]["allocation"]["devices"]["config"][0]["requests"] = ["nic"]
    assert rules_of(claims) == [("default/two", "config")]
    claims = copy.deepcopy(valid_claims())
    # A claim config for one request of two is written with that request's name.
    claims[1]["spec"]["devices"]["config"] = [
        {"requests": ["nic"], "opaque": {"driver": NIC, "parameters": {}}}
    ]
    allocation = claims[1]["status"]["allocation"]["devices"]
    allocation["config"] = [
        *gpu_config("pair", every=False),
        {"source": "FromClaim", "requests": ["nic"], "opaque": {"driver": NIC, "parameters": {}}},
    ]
    assert check(claims) == []
    del allocation["config"][1]["requests"]
    assert rules_of(claims) == [("default/two", "config")]


def test_a_claim_config_for_an_entry_not_chosen_is_left_out_and_the_next_kept() -> None:
    fa = first_available()
    fa["spec"]["devices"]["config"] = [
        {"requests": ["r/big"], "opaque": {"driver": GPU, "parameters": {}}},
        *fa["spec"]["devices"]["config"],
    ]
    assert check([fa]) == []


def test_the_class_config_of_a_later_request_is_expected_after_one_of_an_unknown_class() -> None:
    claims = copy.deepcopy(valid_claims())
    claims[1]["spec"]["devices"]["requests"][1]["exactly"]["deviceClassName"] = "nope"
    claims[1]["spec"]["devices"]["requests"].reverse()
    results_of(claims[1]).reverse()
    assert rules_of(claims) == [
        ("default/two", "result-order"),
        ("default/two", "unknown-class"),
    ]


def test_a_taint_without_a_value_is_named_without_one() -> None:
    slices, _, _ = cluster()
    slices[1]["spec"]["devices"][5]["taints"] = [
        {"key": "example.com/maint", "effect": "NoSchedule"}
    ]
    tainted = claim("t", [exactly("g")], [result("g", "gpu-2")], config=gpu_config("g"))
    assert [v.message for v in check([tainted], slices)] == [
        f"claim default/t request g device {GPU}/a-gpu/gpu-2: taint example.com/maint=:NoSchedule "
        "is not tolerated"
    ]


def test_without_any_node_an_allocation_is_checked_on_no_particular_node() -> None:
    net = devices_slice("net", None, NIC, "net", [device("switch", "vf")], allNodes=True)
    taken = claim("net", [exactly("n", "nic")], [result("n", "switch", "net", NIC)], node=None)
    taken["status"]["allocation"]["nodeSelector"] = on_node("node-a")
    _, classes, _ = cluster()
    assert [v.message for v in check_allocations([net], classes, [taken], [])] == [
        f"claim default/net: nodeSelector is {on_node('node-a')}, expected None (allocation "
        "checked on node node-a)"
    ]
    del taken["status"]["allocation"]["nodeSelector"]
    taken["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": []}]
    }
    assert [v.message for v in check_allocations([net], classes, [taken], [])] == [
        "claim default/net: nodeSelector is {'nodeSelectorTerms': [{'matchExpressions': []}]}, "
        "expected None (allocation checked on no particular node)"
    ]


def test_too_many_results_says_how_many() -> None:
    slices, classes, nodes = cluster()
    slices.append(devices_slice("big", "node-b", GPU, "big", [device(f"d-{i}") for i in range(33)]))
    big = claim(
        "big",
        [exactly("g", "any", count=33)],
        [result("g", f"d-{i}", "big") for i in range(33)],
        node="node-b",
    )
    assert [v.message for v in check_allocations(slices, classes, [big], nodes)] == [
        "claim default/big has 33 results; at most 32 are allowed"
    ]


def test_a_result_without_a_request_name_names_an_empty_one() -> None:
    claims = copy.deepcopy(valid_claims())
    del results_of(claims[0])[0]["request"]
    assert check(claims)[0].message == "claim default/one: result names unknown request ''"
