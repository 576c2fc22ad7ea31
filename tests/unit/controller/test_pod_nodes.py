"""Which nodes a gated pod may use: the scheduler's filters the controller must honour."""

from __future__ import annotations

from typing import Any

import pytest

from controller.pod_nodes import eligible_nodes, tolerates
from tests.support import objects


def node(
    name: str, *, ready: bool = True, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return objects.node(name, labels=labels or {}, ready=ready, **spec)


def pod(**spec: Any) -> dict[str, Any]:
    return objects.pod("p", **spec)


NODES = [
    node("a", labels={"zone": "x"}),
    node("b", labels={"zone": "y"}),
    node("cordoned", unschedulable=True),
    node("down", ready=False),
    node("tainted", taints=[{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]),
    node("soft", taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]),
]


def test_cordoned_not_ready_and_untolerated_taints_are_out() -> None:
    found = eligible_nodes(pod(), NODES)
    assert found.nodes == ["a", "b", "soft"]
    assert found.rejected["cordoned"] == "cordoned (unschedulable)"
    assert found.rejected["down"] == "not Ready"
    assert found.rejected["tainted"] == "taint gpu=reserved:NoSchedule is not tolerated"


def test_node_selector_and_required_affinity() -> None:
    assert eligible_nodes(pod(nodeSelector={"zone": "y"}), NODES).nodes == ["b"]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }
    found = eligible_nodes(pod(affinity=affinity), NODES)
    assert found.nodes == ["a"]
    assert found.rejected["b"] == "required node affinity does not match"


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "other"}, False),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_tolerations(toleration: dict[str, str], ok: bool) -> None:
    taint = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}
    assert tolerates([toleration], taint) is ok
    assert ("tainted" in eligible_nodes(pod(tolerations=[toleration]), NODES).nodes) is ok


def test_reason_names_nodes_when_none_is_eligible() -> None:
    found = eligible_nodes(pod(nodeSelector={"zone": "nowhere"}), NODES[:2])
    assert found.nodes == []
    assert found.reason().startswith(
        "no node is eligible for the pod (a: nodeSelector zone=nowhere"
    )
