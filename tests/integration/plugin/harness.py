"""A kubelet plugin on fake GPUs against the embedded API server, and the helpers tests need to
act as the scheduler (allocated claims) and as kubelet (gRPC over the plugin's real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends import GpuBackend
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.mps_control import terminate_daemons
from dra_driver.kubeletapi.client import RegistrationClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.daemon import PluginConfig, PluginDaemon
from localcluster.control_planes import Server
from tests.support import polling

DRIVER = DEFAULT_DRIVER_NAME
MERGE = "application/merge-patch+json"
_NAMES = itertools.count()


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    """Socket paths are limited to 108 bytes; pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="dra-", dir="/tmp") as d:
        yield Path(d)


def create_node(api: client.ApiClient, name: str) -> str:
    node: Any = client.CoreV1Api(api).create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name=name))
    )
    return str(node.metadata.uid)


#: Namespace of the share ids `result` makes from a test's short label.
_SHARES = uuid.UUID("5d0c1f6e-8a3b-4f27-9c1e-2b7a4d9e0f13")


def share_uuid(label: str) -> str:
    """The share id `result` writes for a test's label ("a1"): kube-apiserver only accepts a
    lowercase RFC 4122 UUID in `shareID`, so the label is turned into one, the same every time."""
    return str(uuid.uuid5(_SHARES, label))


def result(
    request: str,
    device: str,
    pool: str,
    *,
    driver: str = DRIVER,
    share_id: str | None = None,
    consumed: Mapping[str, str] | None = None,
    admin: bool = False,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share_id:
        entry["shareID"] = share_uuid(share_id)
    if consumed:
        entry["consumedCapacity"] = dict(consumed)
    if admin:
        entry["adminAccess"] = True
    return entry


def opaque(parameters: Mapping[str, Any], requests: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "source": "FromClaim",
        "requests": list(requests),
        "opaque": {"driver": DRIVER, "parameters": dict(parameters)},
    }


def create_claim(
    api: client.ApiClient,
    results: Sequence[Mapping[str, Any]] | None,
    config: Sequence[Mapping[str, Any]] = (),
    *,
    namespace: str = "default",
    name: str | None = None,
    reserved: bool = False,
) -> tuple[str, str]:
    """A claim as the scheduler leaves it: allocated with `results` (None: not allocated),
    and with `reserved`, reserved for a pod as it is by the time kubelet prepares it."""
    objects = client.CustomObjectsApi(api)
    name = name or f"claim-{next(_NAMES)}"
    requests = sorted({str(r["request"]).split("/")[0] for r in results or []}) or ["gpu"]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": r, "exactly": {"deviceClassName": "gpu.dra-driver.dev"}}
                    for r in requests
                ]
            }
        },
    }
    made: Any = objects.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims", body
    )
    if results is not None:
        status: dict[str, Any] = {
            "allocation": {"devices": {"results": list(results), "config": list(config)}},
        }
        if reserved:
            status["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": name}]
        objects.patch_namespaced_custom_object_status(
            "resource.k8s.io",
            "v1",
            namespace,
            "resourceclaims",
            name,
            {"status": status},
            _content_type=MERGE,
        )
    return name, str(made["metadata"]["uid"])


def reserve_for(
    api: client.ApiClient, name: str, pod: str, pod_uid: str, namespace: str = "default"
) -> None:
    """Reserve claim `name` for one pod, as the scheduler does before kubelet prepares it."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "resource.k8s.io",
        "v1",
        namespace,
        "resourceclaims",
        name,
        {"status": {"reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]}},
        _content_type=MERGE,
    )


def delete_claim(api: client.ApiClient, name: str, namespace: str = "default") -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims", name
    )


@dataclass
class RunningPlugin:
    daemon: PluginDaemon
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property
    def backend(self) -> FakeBackend:
        backend = self.daemon.backend
        assert isinstance(backend, FakeBackend)
        return backend

    @property
    def dra_socket(self) -> Path:
        return self.daemon.servers.dra_socket

    @property
    def registration_socket(self) -> Path:
        return self.daemon.servers.registration_socket


def plugin_config(root: Path, node: str, gpus: str, **extra: Any) -> PluginConfig:
    """The configuration of one node's plugin, every directory of it under `root`."""
    settings: dict[str, Any] = {
        "node_name": node,
        "kubeconfig": None,
        "plugin_dir": root / "plugins" / node,
        "registry_dir": root / "registry" / node,
        "cdi_root": root / "cdi" / node,
        "state_dir": root / "state" / node,
        "fake_gpus": gpus,
        "health_poll_s": 0.05,
    }
    return PluginConfig(**(settings | extra))


def allocated(
    api: client.ApiClient,
    *results: Mapping[str, Any],
    config: Sequence[Mapping[str, Any]] = (),
    namespace: str = "default",
) -> ClaimRef:
    """A claim allocated with `results` (and `config`), as kubelet names it to the plugin."""
    name, uid = create_claim(api, list(results), config, namespace=namespace)
    return ClaimRef(namespace, uid, name)


ADMIN_NAMESPACE = "device-admins"


def admin_namespace(api: client.ApiClient) -> str:
    """A namespace labelled for admin access to devices, which kube-apiserver requires of any
    claim granted it (`AuthorizedForAdminStatus`); made once per API server."""
    core = client.CoreV1Api(api)
    body = {
        "metadata": {
            "name": ADMIN_NAMESPACE,
            "labels": {"resource.kubernetes.io/admin-access": "true"},
        }
    }
    try:
        core.create_namespace(body)
    except client.ApiException as failure:
        if failure.status != 409:
            raise
    return ADMIN_NAMESPACE


@contextlib.asynccontextmanager
async def stopped_plugin(
    server: Server, root: Path, node: str, gpus: str = "H100-SXM5-80GB:2", **extra: Any
) -> AsyncIterator[PluginDaemon]:
    """A plugin built as `running_plugin` builds it but not started: its parts (preparer,
    checkpoint store, claim source) for a test that drives one start-up step itself."""
    config = plugin_config(root, node, gpus, **extra)
    api = server.api_client()
    try:
        daemon = await asyncio.to_thread(PluginDaemon, config, api)
        try:
            yield daemon
        finally:
            daemon.backend.close()
    finally:
        api.close()
        await asyncio.to_thread(terminate_daemons, config.state_dir)


@contextlib.asynccontextmanager
async def running_plugin(
    server: Server,
    root: Path,
    node: str,
    gpus: str = "H100-SXM5-80GB:2",
    backend: GpuBackend | None = None,
    *,
    leave_daemons: bool = False,
    **extra: Any,
) -> AsyncIterator[RunningPlugin]:
    """With `leave_daemons`, MPS daemons outlive the plugin as they do on a node (the next
    plugin of the same root adopts them, and terminates them when it stops)."""
    config = plugin_config(root, node, gpus, **extra)
    api = server.api_client()
    daemon = await asyncio.to_thread(PluginDaemon, config, api, backend)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # raises the start-up error
    try:
        yield RunningPlugin(daemon, stop, task)
    finally:
        stop.set()
        try:
            await task
        finally:
            api.close()
            # MPS daemons outlive the plugin on purpose; a test must not leave them running.
            if not leave_daemons:
                await asyncio.to_thread(terminate_daemons, config.state_dir)


async def registered(
    proc: subprocess.Popen[bytes], socket: Path, log: Callable[[], str], timeout: float = 60.0
) -> None:
    """Wait for a plugin process to be ready: kubelet could register it, its registration
    socket answers GetInfo. Fails at once, with the plugin's log, when the process exits."""

    async def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"plugin exited with {proc.returncode}")
        if not socket.exists():
            return False
        try:
            async with RegistrationClient(socket, 2.0) as registration:
                await registration.get_info()
        except grpc.aio.AioRpcError:
            return False
        return True

    try:
        await polling.eventually(answers, "the plugin to register", timeout=timeout, interval=0.05)
    except AssertionError as error:
        raise AssertionError(f"{error}: {log()}") from None
