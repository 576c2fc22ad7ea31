"""An embedded API server with published fake-GPU nodes and a controller running in-process.

Slices come from the real pipeline (fake backend → slice builder), written through the API, so
the controller sees exactly what plugins would publish. No kubelet plugins run here: these tests
are about allocation; tests/e2e runs the whole local cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kubernetes import client

from controller.config import ControllerConfig, LeaderElection
from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import AllocationMode
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices
from localcluster.control_planes import Server
from tests.support import objects, polling

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"
FINALIZER = f"{DRIVER}/allocation"
GROUP, VERSION = "resource.k8s.io", "v1"


def config(**overrides: Any) -> ControllerConfig:
    base = ControllerConfig(
        driver_name=DRIVER,
        kubeconfig=None,
        gate_name=GATE,
        finalizer=FINALIZER,
        gang_label=f"{DRIVER}/gang",
        gang_size_label=f"{DRIVER}/gang-size",
        mode=AllocationMode.SCORED,
        leader=LeaderElection(enabled=False),
        resync_s=5.0,
    )
    return replace(base, **overrides)


def device_class(kind: str) -> dict[str, Any]:
    return objects.device_class(kind, f"{kind}.dra-driver.dev", DRIVER)


def claim(name: str, kind: str = "gpu", count: int = 1, **devices: Any) -> dict[str, Any]:
    """A claim for `count` devices of the class of `kind`, as the chart names it."""
    return objects.claim(name, objects.request("req", f"{kind}.dra-driver.dev", count), **devices)


def pod(
    name: str,
    claims: list[str],
    *,
    gated: bool = True,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod held by the controller's gate unless `gated` is False."""
    return objects.pod(name, claims, labels=labels or {}, gates=[GATE] if gated else [], **spec)


class Cluster:
    """Objects in the embedded API server, through the official client."""

    def __init__(self, server: Server, api: client.ApiClient) -> None:
        self.server = server
        self.api = api
        self.core = client.CoreV1Api(api)
        self.objects = client.CustomObjectsApi(api)

    def add_nodes(
        self,
        count: int,
        gpus: str = "H100-SXM5-80GB:8",
        prefix: str = "node",
        allocatable: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Ready nodes with fake GPUs; `allocatable` is their `status.allocatable` (none by
        default: then CPU and memory are not checked)."""
        names = []
        for index in range(count):
            name = f"{prefix}-{index + 1}"
            status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
            if allocatable is not None:
                status["allocatable"] = dict(allocatable)
            self.core.create_node(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": status,
                }
            )
            backend = FakeBackend.from_spec(gpus, name)
            for body in build_resource_slices(backend.inventory(), SliceSettings()):
                self.objects.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
            names.append(name)
        return names

    def add_classes(self) -> None:
        for kind in ("gpu", "mig", "timeslice", "shared"):
            self.objects.create_cluster_custom_object(
                GROUP, VERSION, "deviceclasses", device_class(kind)
            )

    def create_claim(self, body: dict[str, Any]) -> None:
        self.objects.create_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", body
        )

    def create_pod(self, body: dict[str, Any]) -> None:
        self.core.create_namespaced_pod("default", body)

    def get_claim(self, name: str) -> dict[str, Any]:
        found: Any = self.objects.get_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", name
        )
        return dict(found)

    def claims(self) -> list[dict[str, Any]]:
        found: Any = self.objects.list_cluster_custom_object(GROUP, VERSION, "resourceclaims")
        return list(found["items"])

    def get_pod(self, name: str) -> dict[str, Any]:
        return dict(
            self.api.sanitize_for_serialization(self.core.read_namespaced_pod(name, "default"))
        )

    def gated(self, name: str) -> bool:
        gates = self.get_pod(name)["spec"].get("schedulingGates") or []
        return any(g["name"] == GATE for g in gates)

    def events_for(self, name: str) -> list[dict[str, Any]]:
        events = self.core.list_namespaced_event("default").items
        return [
            dict(self.api.sanitize_for_serialization(e))
            for e in events
            if e.involved_object.name == name
        ]


async def eventually(
    check: Callable[[], bool], timeout: float = polling.TIMEOUT_S, what: str = ""
) -> None:
    """The controller runs on the test's loop and a look reads the API server: each look runs in
    a thread, so the controller goes on while the test waits for the answer."""
    await polling.eventually(check, what, timeout=timeout, in_thread=True)


@dataclass
class RunningController:
    daemon: ControllerDaemon
    task: asyncio.Task[None]
    stop: asyncio.Event

    async def shutdown(self) -> None:
        self.stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 10)


async def start_controller(api: client.ApiClient, **overrides: Any) -> RunningController:
    daemon = ControllerDaemon(config(**overrides), api)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))
    await asyncio.wait_for(daemon.synced.wait(), 20)
    return RunningController(daemon, task, stop)


def kubeconfig_of(server: Server, path: Path) -> Path:
    return server.write_kubeconfig(path)


async def manual_controller(api: client.ApiClient, **overrides: Any) -> ControllerDaemon:
    """Watches running and synced, but passes run only when the test calls `run_pass`."""
    daemon = ControllerDaemon(config(**overrides), api)
    daemon.term = 0  # election is off in these tests: any term leads
    daemon.start_watches()
    await asyncio.wait_for(daemon.wait_synced(), 20)
    return daemon


class Withdrawals(ControllerApi):
    """The controller's API calls, counting the status writes that clear a claim's allocation."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.cleared: list[str] = []

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        if "allocation" in status and status["allocation"] is None:
            self.cleared.append(claim["metadata"]["name"])
        return super().patch_claim_status(claim, status)


async def held_until_theirs_lets_go(
    cluster: Cluster, daemon: ControllerDaemon, *, ours: str, theirs: str, pod: str
) -> Withdrawals:
    """Our allocation that collided with `theirs` on a whole device is kept, its pod gated,
    while theirs holds the device (kube-scheduler counts the device once for both claims, so
    withdrawing ours first would free it in its eyes); once theirs lets go, the next pass
    withdraws ours and decides the pod again. The recorder of that pass's writes."""
    key = ("default", ours)
    assert (cluster.get_claim(ours).get("status") or {}).get("allocation"), "ours must be kept"
    assert cluster.gated(pod)
    assert key in daemon.reconciler.state.held
    writes = Withdrawals(daemon.reconciler.api)
    daemon.reconciler.api = daemon.reconciler.writer.api = writes
    await daemon.reconciler.run_pass()
    assert writes.cleared == [], "held while theirs still holds the device"
    cluster.objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", theirs, {"status": {"allocation": None}}
    )
    await eventually(
        lambda: not (daemon.view.claims[("default", theirs)].get("status") or {}).get("allocation"),
        what="their allocation gone from the view",
    )
    await daemon.reconciler.run_pass()
    assert writes.cleared[:1] == [ours], "withdrawn once the device is free"
    assert key not in daemon.reconciler.state.held
    return writes
