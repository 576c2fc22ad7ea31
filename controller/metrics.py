"""Prometheus metrics of the allocation controller.

All metrics hang off one :class:`ControllerMetrics` object that owns its registry instead of using
the process-wide default, so that several controllers (two electors in one test, the local
cluster) can live in one process without clashing over names. A part of the controller that
needs metrics of its own adds them as attributes here, registered on `self.registry`.
"""

from __future__ import annotations

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from dra_driver.metrics_endpoint import MetricsEndpoint, serve_registry

log = structlog.get_logger(__name__)

ACQUIRED = "acquired"
"""This replica took the Lease and started leading."""
LOST = "lost"
"""This replica stopped leading without wanting to (renewals failed or the Lease was taken)."""
RELEASED = "released"
"""This replica stopped leading because it was asked to stop."""
LEADER_EVENTS = (ACQUIRED, LOST, RELEASED)


class ControllerMetrics:
    """The controller's metrics; see the module docstring for how to add more."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.leader = Gauge(
            "dra_controller_leader",
            "1 while this replica holds the Lease and acts as leader, else 0.",
            registry=self.registry,
        )
        self.leader_transitions = Counter(
            "dra_controller_leader_transitions",
            "Changes of this replica's leadership, by what happened.",
            ["event"],
            registry=self.registry,
        )
        # Pre-create every series so a scrape shows zeros before the first change.
        for event in LEADER_EVENTS:
            self.leader_transitions.labels(event=event)

    def record_leadership(self, event: str) -> None:
        """Count `event` (one of LEADER_EVENTS) and set the gauge to match it."""
        self.leader_transitions.labels(event=event).inc()
        self.leader.set(1 if event == ACQUIRED else 0)

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsEndpoint:
        """Start the HTTP exposition server in a thread; port 0 lets the OS choose."""
        return serve_registry(self.registry, port, addr)


__all__ = [
    "ACQUIRED",
    "LEADER_EVENTS",
    "LOST",
    "RELEASED",
    "ControllerMetrics",
    "MetricsEndpoint",
]
