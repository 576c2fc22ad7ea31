"""Diagnosis in plain words, and selector verdicts that outlive a snapshot only while valid."""

from __future__ import annotations

from dra_driver.allocator import ClusterSnapshot, Usage, VerdictCache, allocate_on_node
from dra_driver.allocator.claims import plan_claim
from dra_driver.allocator.explain import explain_node
from tests.unit.allocator.objects import (
    DRV,
    GPU_CLASS,
    Obj,
    claim,
    dev,
    exactly,
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


def test_verdicts_are_reused_until_the_slice_changes() -> None:
    cache = VerdictCache()
    c = [claim("c", request("r", exactly()))]
    first = ClusterSnapshot.build(versioned("10"), [GPU_CLASS], verdicts=cache)
    allocate_on_node(first, Usage(), c, "node-a")
    assert first.evaluator.evaluations == 2
    again = ClusterSnapshot.build(versioned("10"), [GPU_CLASS], verdicts=cache)
    allocate_on_node(again, Usage(), c, "node-a")
    assert again.evaluator.evaluations == 0
    changed = ClusterSnapshot.build(versioned("11"), [GPU_CLASS], verdicts=cache)
    allocate_on_node(changed, Usage(), c, "node-a")
    assert changed.evaluator.evaluations == 2
