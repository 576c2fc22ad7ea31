"""What each node has left of its CPU, memory and other node resources, as the scheduler counts.

The arithmetic is the noderesources module's (the kube-scheduler's NodeResourcesFit); this keeps
the per-node running totals so a replay checks a pod against a node in a few comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.noderesources import (
    EMPTY,
    PODS,
    NodeUsage,
    Resources,
    insufficient,
    node_allocatable,
)


def asked(requests: Resources) -> list[tuple[str, int]]:
    """The requests the scheduler checks: only those above zero."""
    return [(name, amount) for name, amount in requests.items() if amount > 0]


class NodeResourceLedger:
    """Allocatable and used node resources per node, and what is left of them."""

    def __init__(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.allocatable: dict[str, Resources] = {}
        for node in nodes:
            found = node_allocatable(node)
            if found is not None:
                self.allocatable[str(node["metadata"]["name"])] = found
        self.used: dict[str, NodeUsage] = {}
        self._free: dict[str, dict[str, int]] = {n: dict(a) for n, a in self.allocatable.items()}
        """Running totals of what is left, `pods` included: the per-node check in a replay."""

    def limited(self, node: str) -> bool:
        return node in self.allocatable

    def free(self, node: str) -> Mapping[str, int]:
        """What is left: running totals; `pods` counts the pods still admitted."""
        return self._free.get(node, EMPTY)

    def shortfalls(self, node: str, requests: Resources) -> list[str]:
        """Why `requests` do not fit on `node` now (empty when they fit): `insufficient cpu ...`."""
        allocatable = self.allocatable.get(node)
        if allocatable is None:
            return []
        used = self.used.get(node, NodeUsage())
        return [str(s) for s in insufficient(requests, allocatable, used)]

    def fits(self, node: str, asks: Sequence[tuple[str, int]]) -> bool:
        """`insufficient` is empty, in a few comparisons; `asks` are `asked(requests)`."""
        free = self._free.get(node)
        if free is None:
            return True
        if free.get(PODS, 0) < 1:
            return False
        return all(free.get(name, 0) >= amount for name, amount in asks)

    def take(self, node: str, requests: Resources) -> None:
        self.used[node] = self.used.get(node, NodeUsage()).plus(requests)
        self._adjust(node, requests, -1)

    def set_used(self, node: str, used: NodeUsage) -> None:
        """What the pods on `node` request, as counted elsewhere (the controller's view of the
        pods on each node): the running totals follow."""
        self.used[node] = used
        allocatable = self.allocatable.get(node)
        if allocatable is None:
            return
        free = dict(allocatable)
        for name, amount in used.requested.items():
            free[name] = free.get(name, 0) - amount
        free[PODS] = free.get(PODS, 0) - used.pods
        self._free[node] = free

    def give_back(self, node: str, requests: Resources) -> None:
        self.used[node] = self.used.get(node, NodeUsage()).minus(requests)
        self._adjust(node, requests, +1)

    def _adjust(self, node: str, requests: Resources, sign: int) -> None:
        free = self._free.get(node)
        if free is None:
            return
        for name, amount in requests.items():
            free[name] = free.get(name, 0) + sign * amount
        free[PODS] = free.get(PODS, 0) + sign

    def over_committed(self) -> list[str]:
        """Nodes whose pods request more of some resource than the node offers (never, unless
        something bypassed `fits`): the invariant the property tests check."""
        bad = []
        for node, used in self.used.items():
            allocatable = self.allocatable.get(node)
            if allocatable is None:
                continue
            for name, amount in used.requested.items():
                if amount > allocatable.amount(name):
                    bad.append(f"{node}: {name}")
        return bad
