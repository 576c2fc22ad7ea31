"""Allocate the unallocated claims of a file one at a time, in file order, as a scheduler would.

Claims that already carry `status.allocation` count as in use. Each later claim sees the usage
left by the earlier ones. In first-fit mode nodes are tried in name order and the first node that
fits (or raises a fatal error) decides — the kube-scheduler's answer for one claim at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.allocator import (
    AllocationError,
    AllocationMode,
    ClusterSnapshot,
    InputError,
    Placer,
    Usage,
)
from dra_driver.allocator.claims import claim_key
from dra_driver.allocator.result import allocation_node
from dra_driver.cli.inputs import ClusterObjects


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    namespace: str
    name: str
    allocated: bool
    node: str | None
    allocation: dict[str, Any] | None
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "allocated": self.allocated,
            "node": self.node,
            "allocation": self.allocation,
            "reason": self.reason,
        }


class Simulation:
    """The state of one run; `explain` reuses it to replay the claims before the one asked about."""

    def __init__(self, objects: ClusterObjects, mode: AllocationMode) -> None:
        self.objects = objects
        self.snapshot = ClusterSnapshot.build(objects.slices, objects.classes, objects.nodes)
        self.usage = Usage()
        self.placer = Placer(
            self.snapshot, self.usage, mode, nodes=self.snapshot.schedulable_node_names()
        )
        for claim in objects.claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                node = allocation_node(allocation) or ""
                self.placer.record(allocation, node)

    def allocate(self, claim: Mapping[str, Any]) -> ClaimOutcome:
        meta = claim.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name"))
        try:
            placement = self.placer.place([claim])
        except AllocationError as err:
            return ClaimOutcome(namespace, name, False, None, None, err.message)
        if placement.allocations is None:
            return ClaimOutcome(namespace, name, False, None, None, placement.reason)
        return ClaimOutcome(namespace, name, True, placement.node, placement.allocations[0], None)


def pending_claims(objects: ClusterObjects) -> list[dict[str, Any]]:
    return [c for c in objects.claims if not (c.get("status") or {}).get("allocation")]


def simulate(objects: ClusterObjects, mode: AllocationMode) -> list[ClaimOutcome]:
    """Raises InputError for malformed objects (the message names object and field)."""
    run = Simulation(objects, mode)
    seen: set[str] = set()
    outcomes: list[ClaimOutcome] = []
    for claim in pending_claims(objects):
        key = claim_key(claim)
        if key in seen:
            raise InputError(f"ResourceClaim {key} appears twice in the input")
        seen.add(key)
        outcomes.append(run.allocate(claim))
    return outcomes
