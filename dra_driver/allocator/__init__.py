"""Structured-parameters allocation with the kube-scheduler's semantics, plus placement scoring.

See docs/allocation.md for the contract. Typical use::

    snapshot = ClusterSnapshot.build(slices, classes, nodes)
    usage = Usage.from_claims(snapshot, claims)
    result = allocate_on_node(snapshot, usage, pod_claims, "node-1", AllocationMode.FIRST_FIT)

Each module's opening docstring says what it caches, keyed by what, and when it is dropped. In
short: what follows from one snapshot lives with it (devices.py's interning, snapshot.py's node
views, and in `snapshot.caches` the objects of claims.py, search.py and scoring.py); what
depends on usage is dropped, or checked against usage's node versions, as usage changes
(usage.py, placement.py);
verdicts.py's `VerdictCache` and the parse caches of quantities.py and projection.py are keyed
by content and outlive snapshots.
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
