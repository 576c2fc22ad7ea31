"""Which nodes a pod may run on, as far as the kube-scheduler would let it.

The controller picks the node when it allocates a gated pod's claims (the allocation's node
selector then pins the pod), so it must honour what the scheduler's own filters would: the pod's
`nodeSelector`, its required node affinity, node taints against its tolerations, and nodes that
are cordoned or not Ready. Room for the pod's CPU, memory and other requests is checked next,
against what the pods already there take (`ClusterView.lacking`, NodeResourcesFit's rules in
`dra_driver.noderesources`). What else the scheduler checks (host ports, inter-pod affinity,
topology spread) can still keep the pod pending on the chosen node; that is the price of choosing
the node for the devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.allocator.node_selectors import node_selector_matches

Obj = Mapping[str, Any]

#: Taint effects that keep new pods off a node.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Eligibility:
    nodes: list[str]
    """Nodes the pod may go to, in name order."""
    rejected: dict[str, str]
    """Node name → why the pod may not go there."""

    def reason(self) -> str:
        if not self.rejected:
            return "the cluster has no nodes"
        shown = sorted(self.rejected.items())[:3]
        text = "; ".join(f"{node}: {why}" for node, why in shown)
        more = len(self.rejected) - len(shown)
        return f"no node is eligible for the pod ({text}{f'; and {more} more' if more else ''})"


def tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _ready(node: Obj) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def rejection(pod: Obj, node: Obj) -> str | None:
    """Why `pod` may not run on `node`, or None."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    name = str(meta.get("name"))
    labels: Mapping[str, str] = meta.get("labels") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned (unschedulable)"
    if not _ready(node):
        return "not Ready"
    if spec.get("nodeName") and spec["nodeName"] != name:
        return f"the pod names node {spec['nodeName']}"
    for label, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(label) != value:
            return f"nodeSelector {label}={value} does not match"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is not None and not node_selector_matches(required, name, labels):
        return "required node affinity does not match"
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')} is not tolerated"
    return None


def constrains_node(pod: Obj) -> bool:
    """Whether the pod says anything about its node (a name, a selector, required affinity,
    tolerations). A pod that does not is allowed on exactly the nodes every such pod is, so
    their eligibility is worked out once and shared."""
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return bool(
        spec.get("nodeName") or spec.get("nodeSelector") or required or spec.get("tolerations")
    )


def eligible_nodes(pod: Obj, nodes: Iterable[Obj]) -> Eligibility:
    allowed: list[str] = []
    rejected: dict[str, str] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        why = rejection(pod, node)
        if why is None:
            allowed.append(name)
        else:
            rejected[name] = why
    return Eligibility(sorted(allowed), rejected)
