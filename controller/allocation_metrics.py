"""Prometheus metrics of the allocation loop.

Kept in a registry owned by the controller (not the process-wide default), so that two controllers
in one process, as in the failover tests, do not clash over metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AllocationMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "dra_controller_allocation_seconds",
            "From the controller first seeing a gated pod to lifting its gate.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.pending = Gauge(
            "dra_controller_pending_pods",
            "Pods carrying the controller's gate that are not allocated yet.",
            registry=registry,
        )
        self.allocations = Counter(
            "dra_controller_allocations",
            "Claims allocated by the controller.",
            registry=registry,
        )
        self.deallocations = Counter(
            "dra_controller_deallocations",
            "Claims whose allocation the controller cleared after their last user left.",
            registry=registry,
        )
        self.conflicts = Counter(
            "dra_controller_conflicts",
            "Decisions dropped because the cluster changed under them, by where it was noticed.",
            ["stage"],
            registry=registry,
        )
        self.held = Gauge(
            "dra_controller_held_claims",
            "Claims of the controller's that collided with another allocator's on a device and "
            "keep it, unused, until the other claim lets it go.",
            registry=registry,
        )
        self.failures = Counter(
            "dra_controller_unallocatable",
            "Attempts that found no node and devices for a pod or gang.",
            registry=registry,
        )
