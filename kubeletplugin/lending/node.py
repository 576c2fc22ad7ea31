"""Lending on this node: the lender's phases turned into taints, metrics and take-backs.

Taking a GPU back is three things at once, because each covers what the others cannot: the
lent share's NoExecute taint (Kubernetes' device-taint eviction deletes the borrowers' pods,
which releases their claims through the usual path, so the GPU's shares and counters end as
they were), stopping the borrowers' processes on the node now (the backend ends what it can;
the fake GPUs' processes end at once, NVML cannot end a process, see docs/overcommit.md), and a
Warning Event on each borrower pod that says why its work was lost. The interference time runs
from the sample that found the owner busy to the first look that finds none of the borrowers'
processes on the GPU.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from kubernetes import client

from api.device_type import DeviceType
from dra_driver.backends.base import GpuBackend
from dra_driver.backends.usage import UsageSample
from dra_driver.checkpoint.model import ClaimRecord
from dra_driver.events import post_event
from kubeletplugin.lending.lender import Lender, Phase, TakeBack
from kubeletplugin.lending.queues import QueueLending
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.telemetry.attribution import Attribution, ClaimPods

log = structlog.get_logger(__name__)

TAKE_BACK_REASON = "GpuTakenBack"
CONFIRM_POLL_S = 0.25
CONFIRM_LIMIT_S = 60.0
"""How long a take-back watches for the borrowers' processes to go (NVML cannot end them, so
there it waits for the eviction); the interference time is recorded in any case."""


def refusing(claims: Mapping[str, ClaimRecord]) -> frozenset[str]:
    """UIDs of the claims whose owner refused to lend (`lending: Never`, recorded per device at
    prepare): the lender keeps every GPU they hold closed to borrowers, however long it idles."""
    return frozenset(
        uid for uid, record in claims.items() if any(not d.lends for d in record.devices)
    )


class NodeLending:
    def __init__(
        self,
        lender: Lender,
        backend: GpuBackend,
        api: client.ApiClient,
        metrics: PluginMetrics,
        node_name: str,
        interval_s: float,
        changed: Callable[[], None],
        component: str,
        queues: QueueLending | None = None,
    ) -> None:
        self.lender = lender
        # GpuQueues that refuse to lend (kubeletplugin/lending/queues.py); None: none is read.
        self._queues = queues
        self._backend = backend
        self._api = api
        self._metrics = metrics
        self._node = node_name
        self._interval_s = interval_s
        self._changed = changed
        self._component = component
        self.lent_minors: tuple[int, ...] = ()
        self._uuids: dict[int, str] = {}
        self._taking: dict[int, asyncio.Task[None]] = {}
        self._published: dict[str, list[dict[str, str]]] = {}

    def taints(self) -> dict[str, list[dict[str, str]]]:
        """The lent shares' taints for a publication; what it publishes is what later samples
        compare with, so a GPU that opens at the first sample (nobody holds it) is published
        open too."""
        self._published = self.lender.taints(self.lent_minors)
        return self._published

    async def __call__(
        self,
        sample: UsageSample,
        claims: dict[str, ClaimRecord],
        attributed: Attribution,
        pods: dict[str, ClaimPods],
        pod_of: Callable[[int], Any],
    ) -> None:
        self._uuids = {g.minor: g.uuid for g in sample.gpus}
        refused = refusing(claims)
        if self._queues is not None:
            self._queues.refresh(claims)
            refused |= self._queues.refusing(claims)
        take_backs = self.lender.observe(
            sample, claims, attributed, pods, pod_of, self.lent_minors, refused
        )
        if self.lender.taints(self.lent_minors) != self._published:
            self._changed()
        self._account(attributed, claims)
        for take in take_backs:
            running = self._taking.get(take.minor)
            if running is None or running.done():
                self._taking[take.minor] = asyncio.create_task(
                    self._take_back_logged(take, pod_of), name=f"take-back-{take.minor}"
                )

    def _account(self, attributed: Attribution, claims: dict[str, ClaimRecord]) -> None:
        for minor in self.lent_minors:
            gpu = self._uuids.get(minor)
            if gpu is None:
                continue
            labels = (self._node, gpu)
            open_now = self.lender.phase(minor)
            self._metrics.lending_phase.labels(*labels).set(1 if open_now is Phase.OPEN else 0)
            if self.lender.borrowed(minor):
                self._metrics.gpu_lent.labels(*labels).inc(self._interval_s)
        for device in attributed.devices:
            record = claims.get(device.claim_uid)
            if record is None or device.sm_percent is None:
                continue
            lent = next(
                (
                    d.minor
                    for d in record.devices
                    if d.device_name == device.device and d.device_type is DeviceType.OPPORTUNISTIC
                ),
                None,
            )
            gpu = None if lent is None else self._uuids.get(lent)
            if gpu is not None:
                self._metrics.gpu_borrowed.labels(self._node, gpu).inc(
                    device.sm_percent / 100 * self._interval_s
                )

    async def _take_back_logged(self, take: TakeBack, pod_of: Callable[[int], Any]) -> None:
        """A failed take-back is logged; the next busy sample starts another."""
        try:
            await self._take_back(take, pod_of)
        except Exception as err:
            log.warning("taking a lent GPU back failed", gpu=take.minor, error=str(err))

    async def _take_back(self, take: TakeBack, pod_of: Callable[[int], Any]) -> None:
        gpu = self._uuids.get(take.minor, "")
        self._metrics.take_backs.labels(self._node, gpu).inc()
        left = await asyncio.to_thread(self._backend.stop_processes, take.pids)
        log.info(
            "lent GPU taken back",
            gpu=take.minor,
            reason=take.reason,
            stopped=len(take.pids) - len(left),
            left_to_eviction=len(left),
        )
        for borrower in take.borrowers:
            for name in borrower.pods.names:
                await asyncio.to_thread(self._event, borrower.claim.namespace, name, take.reason)
        uids = {u for b in take.borrowers for u in b.pods.uids}
        deadline = time.monotonic() + CONFIRM_LIMIT_S
        while time.monotonic() < deadline:
            sample = await asyncio.to_thread(self._backend.usage)
            if not any(p.uuid == gpu and pod_of(p.pid) in uids for p in sample.processes):
                break
            await asyncio.sleep(CONFIRM_POLL_S)
        seconds = time.monotonic() - take.busy_at
        self._metrics.interference.labels(self._node, gpu).observe(seconds)
        log.info("borrowers gone from the GPU", gpu=take.minor, interference_s=round(seconds, 3))

    def _event(self, namespace: str, pod: str, reason: str) -> None:
        post_event(
            self._api,
            namespace,
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace},
            "Warning",
            TAKE_BACK_REASON,
            f"{reason}; the work this pod did on it since it last saved is lost, and the pod "
            "is evicted (its claim is released as usual)",
            self._component,
            self._node,
        )

    async def stop(self) -> None:
        if self._queues is not None:
            await self._queues.stop()
        tasks: Sequence[asyncio.Task[None]] = list(self._taking.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
