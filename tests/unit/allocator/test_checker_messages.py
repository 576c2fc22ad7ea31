"""What the checker says, word for word: each rule broken on its own in a copy of the valid
cluster of `test_checker.py`, and the violations it reports. The rule names what broke; the
message names the claim, request, device, amounts and node, which is what a person reading a
failed check (or the allocator's property tests) acts on."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from dra_driver.checker.rules import Violation
from tests.unit.allocator.test_checker import (
    GPU,
    NIC,
    WHOLE_GPU,
    Obj,
    check,
    claim,
    cluster,
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
