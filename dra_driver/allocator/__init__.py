"""Structured-parameters allocation with the kube-scheduler's semantics, plus placement scoring.

See docs/allocation.md for the contract. Typical use::

    snapshot = ClusterSnapshot.build(slices, classes, nodes)
    usage = Usage.from_claims(snapshot, claims)
    result = allocate_on_node(snapshot, usage, pod_claims, "node-1", AllocationMode.FIRST_FIT)
"""

from dra_driver.allocator.errors import AllocationError, InputError
from dra_driver.allocator.placement import (
    AllocationMode,
    NodeResult,
    Placement,
    Placer,
    allocate_on_node,
)
from dra_driver.allocator.scoring import ScoringPolicy, SolutionScore
from dra_driver.allocator.snapshot import ClusterSnapshot
from dra_driver.allocator.usage import Usage
from dra_driver.allocator.verdicts import VerdictCache

__all__ = [
    "AllocationError",
    "AllocationMode",
    "ClusterSnapshot",
    "InputError",
    "NodeResult",
    "Placement",
    "Placer",
    "ScoringPolicy",
    "SolutionScore",
    "Usage",
    "VerdictCache",
    "allocate_on_node",
]
