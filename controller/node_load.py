"""What the pods on each node request, kept pod by pod as watch events arrive.

The controller must not pin a pod to a node whose CPU, memory or pod slots are taken (the
kube-scheduler's NodeResourcesFit would never place it there, and it would wait while holding its
GPUs). Summing every pod's requests per decision would cost a pass over all pods each time; this
ledger instead moves one pod's requests whenever that pod, or the allocation of one of its claims,
changes.

Which pods count against a node follows the kube-scheduler's cache: bound pods (`spec.nodeName`),
pods nominated there (`status.nominatedNodeName`), and pods not yet bound whose claims are
allocated on the node (this controller's own decisions, gated until they settle, and the
scheduler's pods between its allocation and its binding). Pods being deleted still count until
they are gone, as in the scheduler's cache; pods that have finished (Succeeded, Failed) do not,
as the scheduler does not watch them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controller.informer import Key
from dra_driver.noderesources import NodeUsage, Resources, pod_requests
from dra_driver.pod_claims import known_claim_names

FINISHED_PHASES = ("Succeeded", "Failed")

Counted = tuple[str, Resources]
"""The node a pod counts against, and what it requests there."""


def counted_node(pod: Mapping[str, Any], claim_node: Callable[[str], str | None]) -> str | None:
    """The node `pod` takes resources on, or None; `claim_node` gives the node a claim of the
    pod's namespace is allocated on (observed or assumed)."""
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return None
    node = (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get(
        "nominatedNodeName"
    )
    if node:
        return str(node)
    for name in known_claim_names(pod):
        node = claim_node(name)
        if node:
            return node
    return None


class NodeLoad:
    """Per node, the summed requests and the number of the pods counted against it."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeUsage] = {}
        self._pods: dict[Key, Counted] = {}
        self.changed: set[str] = set()
        """Nodes whose totals changed since the pod placer last read them (it clears this)."""

    def on(self, node: str) -> NodeUsage:
        return self._nodes.get(node, NodeUsage())

    def of(self, pod: Key) -> Counted | None:
        return self._pods.get(pod)

    def set(self, pod: Key, counted: Counted | None) -> bool:
        """Count `pod` as `counted` (None: nowhere). True when that freed room on a node, so
        pods that did not fit before may fit now."""
        old = self._pods.get(pod)
        if old == counted:
            return False
        if old is not None:
            node, requests = old
            self.changed.add(node)
            usage = self._nodes[node].minus(requests)
            if usage.pods:
                self._nodes[node] = usage
            else:
                del self._nodes[node]
            del self._pods[pod]
        if counted is not None:
            node, requests = counted
            self.changed.add(node)
            self._nodes[node] = self.on(node).plus(requests)
            self._pods[pod] = counted
        return old is not None

    def count(self, pod: Key, body: Mapping[str, Any] | None, node: str | None) -> bool:
        """Count `pod` (its current object, None once deleted) against `node`."""
        if body is None or node is None:
            return self.set(pod, None)
        return self.set(pod, (node, pod_requests(body)))
