"""The controller process: watches, the allocation loop while leading, health and metrics.

Watches run on every replica, leader or not, so a standby that takes over already has the whole
cluster in memory and starts deciding at once. Only the leader writes; the allocation loop checks
the Lease before every write and stops the moment leadership is lost.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.allocation_metrics import AllocationMetrics
from controller.api import ControllerApi
from controller.config import ControllerConfig
from controller.informer import Informer
from controller.reconciler import Reconciler
from controller.view import ClusterView
from dra_driver.kube_client import api_client
from dra_driver.signals import install_signal_handlers

log = structlog.get_logger(__name__)

COMPONENT = "dra-controller"


class ControllerDaemon:
    def __init__(self, config: ControllerConfig, api: client.ApiClient) -> None:
        self.config = config
        self.api = api
        self.registry = CollectorRegistry()
        self.metrics = AllocationMetrics(self.registry)
        self.view = ClusterView(config.mode)
        self.calls = ControllerApi(api, COMPONENT)
        self.leading = asyncio.Event()
        self.reconciler = Reconciler(
            config, self.view, self.calls, self.metrics, is_leader=self.leading.is_set
        )
        self.informers: list[Informer] = []
        self.synced = asyncio.Event()

    def start_watches(self) -> None:
        loop = asyncio.get_running_loop()
        for resource, (call, args) in self.calls.list_calls().items():
            informer = Informer(resource, call, self.reconciler.on_event, loop=loop, list_args=args)
            self.informers.append(informer)
            informer.start()

    def stop_watches(self) -> None:
        for informer in self.informers:
            informer.stop()

    async def run(self, stop: asyncio.Event) -> None:
        self.start_watches()
        try:
            await self._wait_synced(stop)
            if stop.is_set():
                return
            self.synced.set()
            log.info("watches synced")
            self.leading.set()  # without leader election this replica always leads
            self.reconciler.take_over()
            await self.reconciler.run(stop)
        finally:
            self.leading.clear()
            self.stop_watches()

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()

    async def _wait_synced(self, stop: asyncio.Event) -> None:
        synced = asyncio.ensure_future(self.wait_synced())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([synced, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
            stopped.cancel()


async def _serve(config: ControllerConfig) -> None:
    stop = asyncio.Event()
    install_signal_handlers(asyncio.get_running_loop(), stop)
    api = await asyncio.to_thread(api_client, config.kubeconfig)
    try:
        await ControllerDaemon(config, api).run(stop)
    finally:
        with contextlib.suppress(Exception):
            api.close()  # type: ignore[no-untyped-call]


def run_controller(config: ControllerConfig) -> int:
    asyncio.run(_serve(config))
    return 0
