"""The controller process: watches, leader election, the allocation loop while leading, health
and metrics.

Watches run on every replica, leader or not, so a standby that takes over already has the whole
cluster in memory and starts deciding at once. Only the leader writes: the allocation loop runs
for one leadership term, every write is fenced by `is_leader(term)`, and when the term ends the
loop finishes its current step without writing and forgets every decision it had not written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from kubernetes import client

from controller.allocation_metrics import AllocationMetrics
from controller.config import ControllerConfig
from controller.health import HealthEndpoint, HealthState, serve_health
from controller.informer import Informer
from controller.kube_calls import ControllerApi
from controller.leader import LeaderElector
from controller.metrics import ControllerMetrics, MetricsEndpoint
from controller.queue_metrics import QueueMetrics
from controller.reconciler import WRITE_CONCURRENCY, Reconciler
from controller.view import ClusterView
from controller.workload_store import ProfileStore, register_metrics
from dra_driver.kube_client import api_client
from dra_driver.signals import install_signal_handlers
from dra_driver.simulation.workload_source import WorkloadSource

log = structlog.get_logger(__name__)

COMPONENT = "dra-controller"


class ControllerDaemon:
    def __init__(self, config: ControllerConfig, api: client.ApiClient) -> None:
        self.config = config
        self.api = api
        self.controller_metrics = ControllerMetrics()
        self.metrics = AllocationMetrics(self.controller_metrics.registry)
        self.health = HealthState()
        self.elector = LeaderElector(config.leader, api, metrics=self.controller_metrics)
        self.profile = WorkloadSource(config.workload_profile)
        self.view = ClusterView(config.mode, self.profile)
        self.calls = ControllerApi(api, COMPONENT)
        register_metrics(self.controller_metrics.registry, self.profile)
        self.store: ProfileStore | None = None
        if config.workload_profile is None and config.workload_configmap:
            self.store = ProfileStore(
                self.calls,
                config.leader.lease_namespace,
                config.workload_configmap,
                self.profile,
                config.workload_write_s,
            )
        self.term: int | None = None
        self.queue_metrics = QueueMetrics(self.controller_metrics.registry)
        self.reconciler = Reconciler(
            config,
            self.view,
            self.calls,
            self.metrics,
            is_leader=self._fence,
            queue_metrics=self.queue_metrics,
        )
        self.informers: list[Informer] = []
        self.synced = asyncio.Event()

    def _fence(self) -> bool:
        return self.term is not None and self.elector.is_leader(self.term)

    def start_watches(self) -> None:
        loop = asyncio.get_running_loop()
        for resource, (listing, watching) in self.calls.informer_calls().items():
            informer = Informer(
                resource,
                listing,
                watching,
                self.reconciler.on_event,
                loop=loop,
                optional=resource in self.calls.OPTIONAL,
            )
            self.informers.append(informer)
            informer.start()

    def stop_watches(self) -> None:
        for informer in self.informers:
            informer.stop()

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()

    async def run(self, stop: asyncio.Event) -> None:
        endpoints = self._serve_endpoints()
        heartbeat = asyncio.create_task(self.health.heartbeat(stop))
        release = asyncio.Event()
        election = asyncio.create_task(self.elector.run(release))
        self.start_watches()
        try:
            if not await _first(self.wait_synced(), stop):
                return
            self.view.prepare()  # parse and warm the allocator's caches before taking work
            self.synced.set()
            self.health.set_synced(True)
            log.info("watches synced", identity=self.config.leader.identity)
            while not stop.is_set():
                term = await _first(self.elector.wait_leading(), stop)
                if term is None:
                    break
                await self._lead(term, stop)
        finally:
            self.term = None
            release.set()  # the loop has stopped writing: the Lease may go
            with contextlib.suppress(asyncio.CancelledError):
                await election
            self.stop_watches()
            heartbeat.cancel()
            for endpoint in endpoints:
                endpoint.shutdown()

    async def _lead(self, term: int, stop: asyncio.Event) -> None:
        self.term = term
        log.info("leading: allocating", term=term)
        if self.store is not None:
            await self.store.load()  # the last leader's profile, before the first decision
            self.view.prepare()  # a profile taken back makes a new pod placer: warm it too
        self.reconciler.take_over()
        loop_task = asyncio.create_task(self.reconciler.run(stop))
        lost = asyncio.ensure_future(self.elector.wait_not_leading())
        keeping = asyncio.create_task(self.store.keep()) if self.store is not None else None
        await asyncio.wait([loop_task, lost], return_when=asyncio.FIRST_COMPLETED)
        if keeping is not None:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping
            if self.store is not None and not lost.done() and self._fence():
                await self.store.save()  # stopping on request: keep what was learned
        self.term = None  # fences every write from here on
        lost.cancel()
        self.reconciler.wake()
        await loop_task
        self.reconciler.step_down()
        log.info("no longer leading", term=term)

    def _serve_endpoints(self) -> list[MetricsEndpoint | HealthEndpoint]:
        endpoints: list[MetricsEndpoint | HealthEndpoint] = []
        if self.config.metrics_port is not None:
            endpoints.append(self.controller_metrics.serve(self.config.metrics_port))
        if self.config.healthcheck_port is not None:
            endpoints.append(serve_health(self.health, self.config.healthcheck_port))
        return endpoints


async def _first(work: Awaitable[Any], stop: asyncio.Event) -> Any:
    """The result of `work`, or None when `stop` is set first."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
    if task.cancelled() or not task.done():
        return None
    result = task.result()
    return True if result is None else result


#: Threads for blocking API calls: a pass writes many claims at once, each a few HTTP round trips.
API_THREADS = 32
#: Kept-alive connections: one per API thread and per thread of the pass's own calls
#: (`reconciler.WRITE_CONCURRENCY`), plus one held by each watch for good (six informers and the
#: leader Lease's calls), so that no call has to open a connection of its own.
API_CONNECTIONS = API_THREADS + WRITE_CONCURRENCY + 8


async def _serve(config: ControllerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(API_THREADS, thread_name_prefix="api"))
    install_signal_handlers(loop, stop)
    api = await asyncio.to_thread(api_client, config.kubeconfig, API_CONNECTIONS)
    try:
        await ControllerDaemon(config, api).run(stop)
    finally:
        api.close()  # type: ignore[no-untyped-call]


def run_controller(config: ControllerConfig) -> int:
    asyncio.run(_serve(config))
    return 0
