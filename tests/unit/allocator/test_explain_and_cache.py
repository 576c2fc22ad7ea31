"""Diagnosis in plain words, and selector verdicts that outlive a snapshot only while valid."""

from __future__ import annotations

import pytest

from dra_driver.allocator import (
    AllocationError,
    ClusterSnapshot,
    Usage,
    VerdictCache,
    allocate_on_node,
)
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.explain import explain_node
from tests.unit.allocator.objects import (
    DRV,
    GPU_CLASS,
    Obj,
    claim,
    dev,
    device_class,
    exactly,
    picked,
    request,
    slice_,
)


def explain(slices: list[Obj], c: Obj, usage: Usage | None = None) -> list[str]:
    snapshot = ClusterSnapshot.build(slices, [GPU_CLASS])
    plans = [plan_claim(snapshot, c)]
    return explain_node(snapshot, usage or Usage(), plans, "node-a").lines()


def test_each_device_is_counted_under_its_first_reason() -> None:
    slices = [
        slice_(
            "s",
            [
                dev("tainted", taints=[{"key": "k", "effect": "NoExecute"}]),
                dev("small", capacity={"memory": {"value": "1Gi"}}),
                dev("other", attributes={"model": {"string": "x"}}),
            ],
        ),
        slice_("n", [dev("nic")], driver="nic.example.com", pool="nics"),
    ]
    selector = f'!("model" in device.attributes["{DRV}"])'
    c = claim(
        "c", request("r", exactly("gpu", 1, selector, capacity={"requests": {"memory": "2Gi"}}))
    )
    (line,) = explain(slices, c)
    assert "needs 1 device(s), 0 usable" in line
    assert "1 rejected by the DeviceClass selectors" in line  # the NIC
    assert "1 rejected by the request's selectors" in line
    assert "1 tainted without a matching toleration" in line
    assert "1 without enough capacity left" in line


def test_a_share_asked_beyond_its_policy_is_told_apart_from_one_without_room_left() -> None:
    """Asking more than any one claim may have is a request to fix, not a wait for room."""

    def share(name: str, top: str) -> Obj:
        policy = {"default": "1Gi", "validRange": {"min": "1Gi", "max": top, "step": "1Gi"}}
        return dev(
            name,
            allowMultipleAllocations=True,
            capacity={"memory": {"value": "80Gi", "requestPolicy": policy}},
        )

    slices = [slice_("s", [share("small", "8Gi"), share("large", "76Gi")])]
    c = claim("c", request("r", exactly("gpu", 1, capacity={"requests": {"memory": "78Gi"}})))
    (line,) = explain(slices, c)
    assert "2 giving one claim at most" not in line  # each device is named by its own limit
    assert "1 giving one claim at most 8Gi of memory (asked 78Gi)" in line
    assert "1 giving one claim at most 76Gi of memory (asked 78Gi)" in line
    assert "capacity left" not in line


def test_requests_that_fit_alone_but_not_together_name_the_constraint() -> None:
    slices = [slice_("s", [dev("a", numa=0), dev("b", numa=1)])]
    c = claim(
        "c",
        request("one", exactly()),
        request("two", exactly()),
        constraints=[{"matchAttribute": f"{DRV}/numa"}],
    )
    lines = explain(slices, c)
    assert "not all together" in lines[-1] and f"matchAttribute {DRV}/numa" in lines[-1]


def test_skipped_pools_and_empty_nodes_are_reported() -> None:
    assert explain([], claim("c", request("r", exactly()))) == [
        "no devices are published for this node"
    ]
    lines = explain([slice_("s", [dev("a")], count=2)], claim("c", request("r", exactly())))
    assert lines[0].startswith("pool skipped: pool gpu.example.com/node-a is incomplete")


def versioned(version: str) -> list[Obj]:
    body = slice_("s", [dev("a"), dev("b")])
    body["metadata"]["resourceVersion"] = version
    return [body]


# Counts attributes, so it can see every key: verdicts are per device, not per projection.
OPAQUE_CLASS = device_class("gpu", f'device.attributes["{DRV}"].size() > 0')


def test_opaque_verdicts_are_reused_until_the_slice_changes() -> None:
    cache = VerdictCache()
    c = [claim("c", request("r", exactly()))]
    first = ClusterSnapshot.build(versioned("10"), [OPAQUE_CLASS], verdicts=cache)
    allocate_on_node(first, Usage(), c, "node-a")
    assert first.evaluator.evaluations == 2
    again = ClusterSnapshot.build(versioned("10"), [OPAQUE_CLASS], verdicts=cache)
    allocate_on_node(again, Usage(), c, "node-a")
    assert again.evaluator.evaluations == 0
    changed = ClusterSnapshot.build(versioned("11"), [OPAQUE_CLASS], verdicts=cache)
    allocate_on_node(changed, Usage(), c, "node-a")
    assert changed.evaluator.evaluations == 2


def test_devices_that_look_alike_to_a_selector_share_one_evaluation() -> None:
    devices = [
        dev(f"d{i}", numa=i % 2, attributes={"serial": {"string": f"s{i}"}}) for i in range(8)
    ]
    devices.append(dev("x", kind="mig"))
    by_type = device_class("gpu", f'device.attributes["{DRV}"].type == "gpu"')
    snapshot = ClusterSnapshot.build([slice_("s", devices)], [by_type])
    found = allocate_on_node(
        snapshot, Usage(), [claim("c", request("r", exactly("gpu", 8)))], "node-a"
    )
    assert picked(found.allocations[0] if found.allocations else None) == [
        f"d{i}" for i in range(8)
    ]
    # The serial numbers differ but the selector never names them: one verdict per type.
    assert snapshot.evaluator.evaluations == 2
    by_numa = claim("c", request("r", exactly("gpu", 4, f'device.attributes["{DRV}"].numa == 1')))
    found = allocate_on_node(snapshot, Usage(), [by_numa], "node-a")
    assert picked(found.allocations[0] if found.allocations else None) == ["d1", "d3", "d5", "d7"]
    assert snapshot.evaluator.evaluations == 4


def test_a_shared_error_verdict_still_names_the_device_the_search_reaches() -> None:
    devices = [dev("a"), dev("b")]
    reads_missing = device_class("gpu", f'device.attributes["{DRV}"].memory > 0')
    snapshot = ClusterSnapshot.build([slice_("s", devices)], [reads_missing])
    with pytest.raises(AllocationError, match=r"gpu\.example\.com/a"):
        allocate_on_node(snapshot, Usage(), [claim("c", request("r", exactly()))], "node-a")
    assert snapshot.evaluator.evaluations == 1
