"""Prometheus metrics of the node plugin.

Metrics live in a registry owned by :class:`PluginMetrics` rather than the process-wide default,
so that several plugin instances (tests, the local cluster) can coexist in one process without
clashing over metric names.
"""

from __future__ import annotations

import contextlib
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dra_driver.metrics_endpoint import MetricsEndpoint, serve_registry

log = structlog.get_logger(__name__)

SUCCESS = "success"
ERROR = "error"


class PluginMetrics:
    """Counters and timings of kubelet's calls, the number of prepared devices, and each
    prepared device's usage (kubeletplugin/telemetry/)."""

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
        device_labels = ["node", "gpu_uuid", "device", "claim_namespace", "claim_name", "pods"]
        self.device_utilization = Gauge(
            "dra_device_utilization_percent",
            "SM utilisation of a prepared device (a share: its pods' processes); no series "
            "while the hardware cannot tell.",
            device_labels,
            registry=self.registry,
        )
        self.device_memory = Gauge(
            "dra_device_memory_used_bytes",
            "GPU memory used on a prepared device (a share: by its pods' processes).",
            device_labels,
            registry=self.registry,
        )
        self.device_idle = Gauge(
            "dra_device_idle_seconds",
            "How long a prepared device has stayed below the idle threshold; 0 while used.",
            device_labels,
            registry=self.registry,
        )
        # (claim UID, pool, device) -> the label values its series carry now.
        self._device_series: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self.mps_restarts = Counter(
            "dra_mps_daemon_restarts",
            "MPS control daemons found dead under their clients and started again.",
            registry=self.registry,
        )
        # Lending (kubeletplugin/lending): per GPU, by its UUID.
        self.gpu_lent = Counter(
            "dra_gpu_lent_seconds",
            "Seconds a GPU was lent: borrowers held its lent share.",
            ["node", "uuid"],
            registry=self.registry,
        )
        self.gpu_borrowed = Counter(
            "dra_gpu_borrowed_gpu_seconds",
            "GPU-seconds the borrowers of a lent GPU computed (their SM share times seconds).",
            ["node", "uuid"],
            registry=self.registry,
        )
        self.take_backs = Counter(
            "dra_gpu_take_backs",
            "Times a lent GPU was taken back from its borrowers for its owner.",
            ["node", "uuid"],
            registry=self.registry,
        )
        self.interference = Histogram(
            "dra_gpu_take_back_interference_seconds",
            "From the sample that found a lent GPU's owner busy to no borrower running on it.",
            ["node", "uuid"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60),
            registry=self.registry,
        )
        self.lending_phase = Gauge(
            "dra_gpu_lending_open",
            "1 while a GPU may be lent (owner idle long enough, or nobody holds it), else 0.",
            ["node", "uuid"],
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

    def set_device_usage(
        self,
        key: tuple[str, str, str],
        labels: tuple[str, str, str, str, str, str],
        sm_percent: float | None,
        memory_used_bytes: int | None,
        idle_seconds: float,
    ) -> None:
        """One prepared device's series, `key` being (claim UID, pool, device) and `labels`
        the values of (node, gpu_uuid, device, claim_namespace, claim_name, pods)."""
        old = self._device_series.get(key)
        if old is not None and old != labels:
            self._remove_series(old)
        self._device_series[key] = labels
        if sm_percent is None:
            self._remove_one(self.device_utilization, labels)
        else:
            self.device_utilization.labels(*labels).set(sm_percent)
        if memory_used_bytes is None:
            self._remove_one(self.device_memory, labels)
        else:
            self.device_memory.labels(*labels).set(memory_used_bytes)
        self.device_idle.labels(*labels).set(idle_seconds)

    def remove_device_usage(self, key: tuple[str, str, str]) -> None:
        labels = self._device_series.pop(key, None)
        if labels is not None:
            self._remove_series(labels)

    def device_usage_keys(self) -> set[tuple[str, str, str]]:
        return set(self._device_series)

    def _remove_series(self, labels: tuple[str, ...]) -> None:
        for gauge in (self.device_utilization, self.device_memory, self.device_idle):
            self._remove_one(gauge, labels)

    @staticmethod
    def _remove_one(gauge: Gauge, labels: tuple[str, ...]) -> None:
        with contextlib.suppress(KeyError):  # no such series: nothing to remove
            gauge.remove(*labels)

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsEndpoint:
        """Start the HTTP exposition server in a thread; port 0 lets the OS choose."""
        return serve_registry(self.registry, port, addr)


__all__ = ["ERROR", "SUCCESS", "MetricsEndpoint", "PluginMetrics"]
