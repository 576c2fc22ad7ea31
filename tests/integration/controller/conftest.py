"""A local API server per test, official-client objects pointed at it, and elector helpers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from controller.config import LeaderElection
from controller.leader import LeaderElector
from controller.metrics import ControllerMetrics
from localcluster.control_planes import Server, api_server

NAMESPACE = "default"
LEASE = "test-controller"

# Small enough for quick tests, with room between the three for a loaded machine.
FAST = LeaderElection(
    lease_name=LEASE,
    lease_namespace=NAMESPACE,
    identity="",
    lease_duration_s=1.0,
    renew_deadline_s=0.6,
    retry_period_s=0.1,
)


@pytest.fixture
def server() -> Iterator[Server]:
    with api_server() as running:
        yield running


@pytest.fixture
def kubeconfig(server: Server, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def settings(identity: str, **changes: Any) -> LeaderElection:
    values = {
        "enabled": FAST.enabled,
        "lease_name": FAST.lease_name,
        "lease_namespace": FAST.lease_namespace,
        "lease_duration_s": FAST.lease_duration_s,
        "renew_deadline_s": FAST.renew_deadline_s,
        "retry_period_s": FAST.retry_period_s,
    }
    values.update(changes)
    return LeaderElection(identity=identity, **values)


def read_lease(custom: client.CustomObjectsApi, name: str = LEASE) -> dict[str, Any]:
    found: Any = custom.get_namespaced_custom_object(
        "coordination.k8s.io", "v1", NAMESPACE, "leases", name
    )
    return dict(found)


@dataclass
class Candidate:
    """An elector with its metrics, running in a task until stopped or crashed."""

    elector: LeaderElector
    metrics: ControllerMetrics
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.elector.identity

    def start(self) -> Candidate:
        self.task = asyncio.create_task(self.elector.run(self.stop), name=self.name)
        return self

    async def stop_cleanly(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 15)

    async def crash(self) -> None:
        """End the task without letting it write anything more, as a killed process would."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def transitions(self, event: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "dra_controller_leader_transitions_total", {"event": event}
        )
        return value or 0.0


@asynccontextmanager
async def candidates(
    api: client.ApiClient, *names: str, **changes: Any
) -> AsyncIterator[list[Candidate]]:
    """Run one elector per name; stop the survivors cleanly at the end."""
    running: list[Candidate] = []
    for name in names:
        metrics = ControllerMetrics()
        elector = LeaderElector(settings(name, **changes), api, metrics=metrics)
        running.append(Candidate(elector, metrics))
    for candidate in running:
        candidate.start()
    try:
        yield running
    finally:
        for candidate in running:
            if candidate.task is not None and not candidate.task.done():
                await candidate.stop_cleanly()


class LeaderWatch:
    """Samples who leads, from a thread, so a moment with two leaders cannot go unseen."""

    def __init__(self, electors: list[LeaderElector], interval_s: float = 0.005) -> None:
        self._electors = electors
        self._interval_s = interval_s
        self._halt = threading.Event()
        self.overlaps: list[list[str]] = []
        self.ever_led: set[str] = set()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._halt.wait(self._interval_s):
            leaders = [e.identity for e in self._electors if e.is_leader()]
            self.ever_led.update(leaders)
            if len(leaders) > 1:
                self.overlaps.append(leaders)

    def __enter__(self) -> LeaderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(timeout=5)
