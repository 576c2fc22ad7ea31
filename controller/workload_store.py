"""The learned workload profile kept in a ConfigMap, so that it outlives this replica.

Read when this replica starts leading (what the last leader learned replaces what this one
counted while it stood by, which is nothing: only the leader places pods); written while it leads,
at most every `ControllerConfig.workload_write_s` and only when a pod was counted since, and once
more when it stops on request. Writes carry the resourceVersion last read or written: a former
leader's late write then fails with a conflict instead of overwriting this one's. Failures are
logged and tried again at the next interval; placement goes on with what is in memory.

The ConfigMap is plain YAML under `profile.yaml` (`dra_driver.workload_profile`), so a cluster
admin reads the profile in use with `kubectl get configmap`, and `simulate --workload learned`
replays the learning on from the ConfigMap as it is in its input. What is counted, and when the
weights move, is `dra_driver.simulation.workload_source`, shared with that replay.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry, Gauge

from controller.kube_calls import ControllerApi
from dra_driver.simulation.workload_source import WorkloadSource
from dra_driver.workload_profile import PROFILE_KEY, dump_profile, profile_text

log = structlog.get_logger(__name__)


def register_metrics(registry: CollectorRegistry, source: WorkloadSource) -> None:
    """Gauges read at scrape time: how many pods and shapes the profile in use holds."""
    pods = Gauge(
        "dra_controller_workload_pods",
        "Pods the scored placement's workload profile is made of: counted so far (learned) "
        "or the configured profile's entries (configured).",
        ["source"],
        registry=registry,
    )
    pods.labels(source=source.source).set_function(source.pods)
    shapes = Gauge(
        "dra_controller_workload_shapes",
        "Distinct pod shapes (requests and claim specs) in the workload profile.",
        ["source"],
        registry=registry,
    )
    shapes.labels(source=source.source).set_function(
        lambda: len(source.configured) if source.configured is not None else len(source.learned)
    )


class ProfileStore:
    def __init__(
        self,
        calls: ControllerApi,
        namespace: str,
        name: str,
        source: WorkloadSource,
        interval_s: float,
    ) -> None:
        self.calls = calls
        self.namespace = namespace
        self.name = name
        self.source = source
        self.interval_s = interval_s
        self._version: str | None = None
        """The ConfigMap's resourceVersion as last read or written; None: there is none."""
        self._written = -1
        """The source's revision last written (or read)."""

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    async def load(self) -> None:
        """Take the kept profile (at the start of a term)."""
        try:
            found = await asyncio.to_thread(self.calls.get_configmap, self.namespace, self.name)
        except Exception as err:
            log.warning("workload profile not read", where=self.where, error=str(err))
            return
        if found is None:
            self._version = None
            log.info(
                "no workload profile kept yet: learning from the pods placed", where=self.where
            )
            return
        self._version = str(found["metadata"].get("resourceVersion") or "") or None
        text = (found.get("data") or {}).get(PROFILE_KEY)
        try:
            entries = profile_text(str(text or ""), self.where)
        except ValueError as err:
            log.warning("kept workload profile unreadable: learning afresh", error=str(err))
            return
        self.source.restore(entries)
        self._written = self.source.revision
        log.info(
            "workload profile taken back",
            where=self.where,
            shapes=len(entries),
            pods=self.source.pods(),
        )

    async def save(self) -> None:
        """Write the learned profile if a pod was counted since the last write."""
        revision = self.source.revision
        if revision == self._written:
            return
        text = dump_profile(list(self.source.learned.values()))
        try:
            self._version = await asyncio.to_thread(
                self.calls.put_configmap,
                self.namespace,
                self.name,
                {PROFILE_KEY: text},
                self._version,
            )
        except client.ApiException as err:
            if err.status in (404, 409):  # deleted, or written by another: go by what is there
                with contextlib.suppress(Exception):
                    found = await asyncio.to_thread(
                        self.calls.get_configmap, self.namespace, self.name
                    )
                    self._version = None if found is None else found["metadata"]["resourceVersion"]
            log.warning("workload profile not written", where=self.where, status=err.status)
            return
        except Exception as err:
            log.warning("workload profile not written", where=self.where, error=str(err))
            return
        self._written = revision

    async def keep(self) -> None:
        """Write every interval while leading (cancelled when the term ends)."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.save()
