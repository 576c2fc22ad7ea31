"""Prometheus metrics of the node plugin.

Metrics live in a registry owned by :class:`PluginMetrics` rather than the process-wide default,
so that several plugin instances (tests, the local cluster) can coexist in one process without
clashing over metric names.
"""

from __future__ import annotations

from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dra_driver.metrics_endpoint import MetricsEndpoint, serve_registry

log = structlog.get_logger(__name__)

SUCCESS = "success"
ERROR = "error"


class PluginMetrics:
    """Counters and timings of kubelet's calls, and the number of prepared devices."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.prepare_claims = Counter(
            "dra_prepare_claims",
            "Claims handled by NodePrepareResources, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.unprepare_claims = Counter(
            "dra_unprepare_claims",
            "Claims handled by NodeUnprepareResources, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.request_duration = Histogram(
            "dra_grpc_request_duration_seconds",
            "Time spent serving kubelet's gRPC calls.",
            ["method", "version"],
            registry=self.registry,
        )
        self.claim_reads = Counter(
            "dra_claim_reads",
            "ResourceClaims read for NodePrepareResources with the claim cache on, by where "
            "they came from (cache, or the API server when the cached copy could not be used).",
            ["source"],
            registry=self.registry,
        )
        self.prepared_devices = Gauge(
            "dra_prepared_devices",
            "Devices currently prepared on this node.",
            registry=self.registry,
        )
        self.mps_daemons = Gauge(
            "dra_mps_daemons",
            "MPS control daemons the plugin runs for GPUs with MPS clients.",
            registry=self.registry,
        )
        self.mps_restarts = Counter(
            "dra_mps_daemon_restarts",
            "MPS control daemons found dead under their clients and started again.",
            registry=self.registry,
        )
        # The outcome series exist from the start, so a scrape shows zeros before the first
        # call; they and the duration series are looked up once, not on every call.
        self._prepared = {o: self.prepare_claims.labels(outcome=o) for o in (SUCCESS, ERROR)}
        self._unprepared = {o: self.unprepare_claims.labels(outcome=o) for o in (SUCCESS, ERROR)}
        self._durations: dict[tuple[str, str], Any] = {}
        self._claim_reads = {
            True: self.claim_reads.labels(source="cache"),
            False: self.claim_reads.labels(source="api"),
        }

    def record_prepare(self, error: str) -> None:
        self._prepared[ERROR if error else SUCCESS].inc()

    def record_unprepare(self, error: str) -> None:
        self._unprepared[ERROR if error else SUCCESS].inc()

    def record_claim_lookup(self, served_from_cache: bool) -> None:
        self._claim_reads[served_from_cache].inc()

    def observe_request(self, method: str, version: str, seconds: float) -> None:
        series = self._durations.get((method, version))
        if series is None:
            series = self.request_duration.labels(method=method, version=version)
            self._durations[(method, version)] = series
        series.observe(seconds)

    def set_prepared_devices(self, n: int) -> None:
        self.prepared_devices.set(n)

    def set_mps_daemons(self, n: int) -> None:
        self.mps_daemons.set(n)

    def record_mps_restart(self) -> None:
        self.mps_restarts.inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsEndpoint:
        """Start the HTTP exposition server in a thread; port 0 lets the OS choose."""
        return serve_registry(self.registry, port, addr)


__all__ = ["ERROR", "SUCCESS", "MetricsEndpoint", "PluginMetrics"]
