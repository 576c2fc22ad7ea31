"""Prometheus metrics of the queues: per queue what it is guaranteed, uses, borrows and has
waiting, the GPUs it holds idle, and the evictions reclaim made (by the queue that reclaimed
and the queue that lent)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from dra_driver.queues import Ledger
from dra_driver.queues.spec import RESOURCES


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.guaranteed = Gauge(
            "dra_controller_queue_guaranteed",
            "What a queue is guaranteed (gpu: GPU-equivalents, memory: bytes).",
            ["queue", "resource"],
            registry=registry,
        )
        self.used = Gauge(
            "dra_controller_queue_used",
            "What a queue's namespaces (and its child queues') hold now.",
            ["queue", "resource"],
            registry=registry,
        )
        self.borrowed = Gauge(
            "dra_controller_queue_borrowed",
            "What a queue holds beyond its guarantee.",
            ["queue", "resource"],
            registry=registry,
        )
        self.pending = Gauge(
            "dra_controller_queue_pending_pods",
            "Gated pods of a queue that are not allocated yet.",
            ["queue"],
            registry=registry,
        )
        self.idle = Gauge(
            "dra_controller_queue_idle_gpus",
            "GPU-equivalents a queue holds in claims whose devices are all idle.",
            ["queue"],
            registry=registry,
        )
        self.evictions = Counter(
            "dra_controller_queue_evictions",
            "Pods evicted to give a queue back its guarantee.",
            ["queue", "victim_queue"],
            registry=registry,
        )
        self._shown: set[str] = set()

    def update(
        self, ledger: Ledger, pending: dict[str, int], idle: dict[str, float] | None = None
    ) -> None:
        queues = set(ledger.tree.queues)
        for gone in self._shown - queues:
            self.pending.remove(gone)
            self.idle.remove(gone)
            for resource in RESOURCES:
                for gauge in (self.guaranteed, self.used, self.borrowed):
                    gauge.remove(gone, resource)
        self._shown = queues
        for name, spec in ledger.tree.queues.items():
            used = ledger.used(name)
            borrowed = ledger.borrowed(name)
            for resource in RESOURCES:
                self.guaranteed.labels(name, resource).set(spec.guaranteed.get(resource) or 0.0)
                self.used.labels(name, resource).set(used.get(resource))
                self.borrowed.labels(name, resource).set(borrowed.get(resource))
            self.pending.labels(name).set(pending.get(name, 0))
            self.idle.labels(name).set((idle or {}).get(name, 0.0))
