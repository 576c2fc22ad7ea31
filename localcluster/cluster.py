"""The whole local cluster in one object: API server, control-plane stand-ins, and per node a
kubelet plugin process with fake GPUs and a node agent playing kubelet toward it. The plugins
run MPS control daemons through the fake `nvidia-cuda-mps-control`, their default with fake GPUs.
The chart's CRDs (GpuQueue) are installed at start-up, as `helm install` would.

Two control planes (`control_plane=`, default `DRA_CONTROL_PLANE` or ``embedded``):

* ``embedded``: the in-memory API server of this package, with stand-ins for kube-scheduler and
  the claim-from-template controller, all in this process; starts in a second, needs no Go;
* ``upstream``: etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.37, built by
  `hack/upstream.sh` (see :mod:`localcluster.upstream`); the chart's RBAC, ServiceAccounts and
  admission policy are installed, and the plugins and controllers log in as the chart's
  ServiceAccounts. The node agents stay (no kubelet runs) and keep their nodes' Leases renewed.

The plugin runs as a separate process (`python -m kubeletplugin.cli`), the way it runs on a real
node: it has its own event loop, its own checkpoint and fake-GPU state files, and it can be
killed and restarted without the rest of the cluster noticing. Everything else runs in the
caller's event loop. Paths live under one short directory, because unix socket paths are
limited to 108 bytes.

GPU usage: each node has a fake proc root (`<node>/proc`, the plugin's `--proc-root`) where the
node agent writes the cgroup files of the fake processes it runs for pods annotated with a fake
utilization (see `roles/node_agent.py`); the plugins sample every second, and `idle_after`
(seconds) is their `--idle-after`, so tests and the demo see devices go idle without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import structlog
from kubernetes import client, dynamic

from controller.config import default_lease_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake.mps_control import terminate_daemons
from dra_driver.backends.fake.state import FileStateStore, state_file_name
from localcluster.apiserver import ApiServer
from localcluster.control_planes import CONTROL_PLANES, default_control_plane
from localcluster.crds import bundled_definitions
from localcluster.defaults import DEFAULT_GPUS, DEFAULT_WATCH_HISTORY
from localcluster.roles import (
    claims_from_templates,
    device_taint_eviction,
    node_heartbeat,
    scheduler,
)
from localcluster.roles.node_agent import FakeLoad, NodeAgent
from localcluster.upstream.control_plane import UpstreamControlPlane, kubeconfig_client

if TYPE_CHECKING:
    from localcluster.upstream.identities import ChartInstall

log = structlog.get_logger(__name__)

#: What each node offers pods, as a kubelet on an eight-GPU server reports it (system and kube
#: reservations already taken off): the scheduler stand-in and the controller both check pods'
#: CPU and memory requests against it.
NODE_ALLOCATABLE = {"cpu": "110", "memory": "1900Gi", "ephemeral-storage": "3Ti", "pods": "110"}


def ready_node(name: str, now: str) -> dict[str, Any]:
    """A Node as kubelet registers it: Ready since `now`, with the local cluster's allocatable
    (the local cluster's nodes, and the benchmarks' that run without node agents)."""
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "conditions": [ready],
            "capacity": NODE_ALLOCATABLE,
            "allocatable": NODE_ALLOCATABLE,
        },
    }


#: Seconds between the plugins' usage samples: short, so tests and the demo need not wait.
TELEMETRY_INTERVAL_S = 1


@dataclass
class LocalNode:
    name: str
    root: Path
    agent: NodeAgent
    process: subprocess.Popen[bytes] | None = None
    #: The plugin's Prometheus port on 127.0.0.1 (LocalCluster(plugin_metrics=True)), else None.
    metrics_port: int | None = None

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    @property
    def registry_dir(self) -> Path:
        return self.root / "registry"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def fake_state_dir(self) -> Path:
        return self.root / "fake-gpus"

    @property
    def proc_root(self) -> Path:
        """The node's fake /proc: cgroup files of the fake processes on its GPUs."""
        return self.root / "proc"

    @property
    def log_path(self) -> Path:
        return self.root / "plugin.log"

    @property
    def kubeconfig(self) -> Path:
        """The plugin's own login (upstream control plane only)."""
        return self.root / "plugin.kubeconfig"


@dataclass
class LocalController:
    name: str
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None


class LocalCluster:
    def __init__(
        self,
        nodes: int = 2,
        gpus: str = DEFAULT_GPUS,
        *,
        driver_name: str = DEFAULT_DRIVER_NAME,
        port: int = 0,
        workdir: Path | None = None,
        poll_s: float = 0.2,
        plugin_args: tuple[str, ...] = (),
        controllers: int = 1,
        controller_args: tuple[str, ...] = (),
        watch_history: int = DEFAULT_WATCH_HISTORY,
        idle_after: float | None = None,
        lend_after: float | None = None,
        plugin_metrics: bool = False,
        control_plane: str | None = None,
    ) -> None:
        self.control_plane = control_plane or default_control_plane()
        if self.control_plane not in CONTROL_PLANES:
            raise ValueError(
                f"control_plane must be one of {', '.join(CONTROL_PLANES)}, "
                f"got {self.control_plane!r}"
            )
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        if idle_after is not None and idle_after < 0:
            raise ValueError(f"idle_after must be at least 0 seconds, got {idle_after}")
        # The plugins' --idle-after in seconds; None leaves the plugin's default.
        self.idle_after = idle_after
        if lend_after is not None and lend_after < 0:
            raise ValueError(f"lend_after must be at least 0 seconds, got {lend_after}")
        # The plugins' --lend-after in seconds; None: they lend nothing.
        self.lend_after = lend_after
        # Each plugin serves its metrics on a port of its own, picked at start and kept across
        # restarts (the plugins share `plugin_args`, so one fixed port could not serve them all).
        self._plugin_metrics = plugin_metrics
        self.gpus = gpus
        self.driver_name = driver_name
        # `watch_history` bounds the API server's event history: a small one makes the daemons'
        # watches fall behind it (410 Gone) and list again, as after etcd compaction.
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="dra-lc-", dir="/tmp"))
        self.server: ApiServer | None = None
        self.upstream: UpstreamControlPlane | None = None
        self._chart: ChartInstall | None = None
        if self.control_plane == "embedded":
            self.server = ApiServer(port=port, history=watch_history)
        else:
            self.upstream = UpstreamControlPlane(self.workdir / "control-plane")
        self._poll_s = poll_s
        self._plugin_args = plugin_args
        self._controller_args = controller_args
        self.controllers: list[LocalController] = [
            LocalController(f"controller-{i + 1}") for i in range(controllers)
        ]
        self._node_names = [f"node-{i + 1}" for i in range(nodes)]
        self.nodes: list[LocalNode] = []
        self.api: client.ApiClient | None = None
        self.dyn: dynamic.DynamicClient | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def kubeconfig(self) -> Path:
        """The administrator's kubeconfig (tests, demos and the node agents use it)."""
        return self.workdir / "kubeconfig"

    @property
    def controller_lease(self) -> tuple[str, str]:
        """Namespace and name of the controllers' leader-election Lease: the chart's on the
        real control plane, the controller's defaults on the embedded one."""
        if self._chart is not None:
            name = self._chart.controller_env.get("DRA_LEASE_NAME")
            return self._chart.namespace, name or default_lease_name(self.driver_name)
        return "default", default_lease_name(self.driver_name)

    @property
    def url(self) -> str:
        if self.server is not None:
            return self.server.url
        assert self.upstream is not None
        return self.upstream.url

    async def start(self) -> None:
        if self.server is not None:
            self.server.start()
            self.server.write_kubeconfig(self.kubeconfig)
            self.api = client.ApiClient(client.Configuration(host=self.server.url))
        else:
            await self._start_upstream()
        assert self.api is not None
        api = self.api
        self.dyn = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
        # The chart's CRDs (GpuQueue), as `helm install` creates them before anything else.
        self.apply(bundled_definitions())
        if self.upstream is not None:
            await asyncio.to_thread(self._wait_crds_established)
        nodes = self.dyn.resources.get(api_version="v1", kind="Node")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in self._node_names:
            nodes.create(body=ready_node(name, now))
            if self.upstream is not None:
                self._tasks.append(
                    asyncio.create_task(node_heartbeat.run(api, name, self._stop), name=name)
                )
            root = self.workdir / name
            load = FakeLoad(self.driver_name, root / "fake-gpus", root / "proc")
            agent = NodeAgent(
                api,
                name,
                root / "registry",
                root / "cdi",
                poll_s=self._poll_s,
                fake_load=load,
                # kube-controller-manager's resourceclaim controller drops a gone pod's
                # reservations there, as it does for kubelet; the embedded cluster's agent does.
                drop_reservations=self.upstream is None,
            )
            node = LocalNode(name, root, agent)
            if self._plugin_metrics:
                node.metrics_port = _free_port()
            _boot(node)
            if self.upstream is not None:
                await asyncio.to_thread(self._plugin_login, node)
            self.nodes.append(node)
            self.start_plugin(node)
        for controller in self.controllers:
            self.start_controller(controller)
        if self.server is not None:
            self._tasks.append(asyncio.create_task(self._control_plane(), name="control-plane"))
        for node in self.nodes:
            self._tasks.append(asyncio.create_task(node.agent.run(self._stop), name=node.name))

    def start_plugin(self, node: LocalNode, extra_env: dict[str, str] | None = None) -> None:
        """(Re)start a node's plugin process; its state directories survive restarts."""
        for directory in (node.plugin_dir, node.registry_dir, node.cdi_root, node.state_dir):
            directory.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "kubeletplugin.cli",
            f"--node-name={node.name}",
            f"--driver-name={self.driver_name}",
            f"--kubeconfig={node.kubeconfig if self.upstream else self.kubeconfig}",
            f"--plugin-dir={node.plugin_dir}",
            f"--registry-dir={node.registry_dir}",
            f"--cdi-root={node.cdi_root}",
            f"--state-dir={node.state_dir}",
            f"--fake-state-dir={node.fake_state_dir}",
            f"--fake-gpus={self.gpus}",
            "--log-format=json",
            *self._telemetry_args(node),
            *self._plugin_args,
        ]
        env = {**os.environ, **(extra_env or {})}
        with node.log_path.open("ab") as log_file:
            node.process = subprocess.Popen(argv, env=env, stdout=log_file, stderr=log_file)

    def _telemetry_args(self, node: LocalNode) -> list[str]:
        args = [f"--proc-root={node.proc_root}", f"--telemetry-interval={TELEMETRY_INTERVAL_S}"]
        if self.idle_after is not None:
            args.append(f"--idle-after={self.idle_after:g}")
        if self.lend_after is not None:
            args.append(f"--lend-after={self.lend_after:g}")
        if node.metrics_port is not None:
            args.append(f"--metrics-port={node.metrics_port}")
        return args

    def start_controller(self, controller: LocalController) -> None:
        """(Re)start an allocation controller process (`dra-controller`).

        With more than one controller they elect a leader through a Lease, as the chart's
        replicas do; a single one runs without election.
        """
        kubeconfig = self.kubeconfig
        env = dict(os.environ)
        if self._chart is not None:
            # The chart's ServiceAccount, and the Lease and ConfigMap its Roles name.
            kubeconfig = self.workdir / "controller.kubeconfig"
            env["POD_NAMESPACE"] = self._chart.namespace
            for key in ("DRA_LEASE_NAME", "DRA_WORKLOAD_CONFIGMAP"):
                if key in self._chart.controller_env:
                    env[key] = self._chart.controller_env[key]
        argv = [
            sys.executable,
            "-m",
            "controller.cli",
            f"--driver-name={self.driver_name}",
            f"--kubeconfig={kubeconfig}",
            f"--identity={controller.name}",
            "--leader-elect" if len(self.controllers) > 1 else "--no-leader-elect",
            "--log-format=json",
            *self._controller_args,
        ]
        controller.log_path = self.workdir / f"{controller.name}.log"
        with controller.log_path.open("ab") as log_file:
            controller.process = subprocess.Popen(argv, stdout=log_file, stderr=log_file, env=env)

    async def _start_upstream(self) -> None:
        """The real control plane, the chart's install, and the daemons' logins."""
        from localcluster.upstream import identities  # noqa: PLC0415 - needs the Helm SDK

        assert self.upstream is not None
        await self.upstream.start()
        shutil.copyfile(self.upstream.admin_kubeconfig, self.kubeconfig)
        self.api = kubeconfig_client(self.kubeconfig)
        dyn = dynamic.DynamicClient(self.api)  # type: ignore[no-untyped-call]
        self._chart = await asyncio.to_thread(identities.render_install, self.driver_name)
        await asyncio.to_thread(identities.install, dyn, self._chart)
        if self.controllers:
            await asyncio.to_thread(
                identities.controller_kubeconfig,
                self.upstream,
                self.api,
                self._chart,
                self.workdir / "controller.kubeconfig",
            )

    def _plugin_login(self, node: LocalNode) -> None:
        from localcluster.upstream import identities  # noqa: PLC0415 - needs the Helm SDK

        assert self.upstream is not None and self.api is not None and self._chart is not None
        node.root.mkdir(parents=True, exist_ok=True)
        identities.plugin_kubeconfig(
            self.upstream, self.api, self._chart, node.name, node.kubeconfig
        )

    def _wait_crds_established(self, timeout_s: float = 60.0) -> None:
        """kube-apiserver serves a CRD's kind only once it is Established (a moment later)."""
        assert self.dyn is not None
        crds = self.dyn.resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
        )
        names = [d["metadata"]["name"] for d in bundled_definitions()]
        deadline = time.monotonic() + timeout_s
        while True:
            pending = []
            for name in names:
                conditions = (crds.get(name=name).to_dict().get("status") or {}).get(
                    "conditions"
                ) or []
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions
                ):
                    pending.append(name)
            if not pending:
                self.dyn.resources.invalidate_cache()
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not established within {timeout_s:g} s: {pending}")
            time.sleep(0.1)

    async def stop_controller(self, controller: LocalController, *, kill: bool = False) -> None:
        process = controller.process
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        await asyncio.to_thread(process.wait, 30)

    async def stop_plugin(self, node: LocalNode) -> int | None:
        process = node.process
        if process is None or process.poll() is not None:
            return process.returncode if process else None
        process.terminate()
        return await asyncio.to_thread(process.wait, 30)

    async def wait_registered(self, timeout: float = 60.0) -> None:
        """Until every node's agent has registered its plugin (or a plugin died)."""
        for node in self.nodes:

            def ready(node: LocalNode = node) -> bool:
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(
                        f"the kubelet plugin of {node.name} exited with "
                        f"{node.process.returncode}; log: {node.log_path}"
                    )
                return self.driver_name in node.agent.plugins

            await node.agent.wait_until(ready, timeout)

    async def _control_plane(self) -> None:
        """The two upstream controllers this flow needs, polled: simple and good enough here."""
        assert self.dyn is not None
        dyn = self.dyn
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(claims_from_templates.reconcile_once, dyn)
                await asyncio.to_thread(claims_from_templates.drop_stale_reservations, dyn)
                await asyncio.to_thread(scheduler.reconcile_once, dyn)
                await asyncio.to_thread(device_taint_eviction.reconcile_once, dyn)
            except Exception as err:  # a stand-in must keep going, like the real controllers
                log.warning("control-plane stand-in pass failed", error=str(err))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._poll_s)

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for node in self.nodes:
            await self.stop_plugin(node)
            # MPS daemons outlive a plugin on purpose (their clients keep running); the local
            # cluster's nodes go away with it, so their daemons go too.
            await asyncio.to_thread(terminate_daemons, node.state_dir)
        for controller in self.controllers:
            await self.stop_controller(controller)
        if self.api is not None:
            self.api.close()  # type: ignore[no-untyped-call]
        if self.server is not None:
            self.server.stop()
        if self.upstream is not None:
            await asyncio.to_thread(self.upstream.stop)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def apply(self, documents: list[dict[str, Any]]) -> None:
        """Create objects (YAML documents) through the API, as `kubectl create` would.

        The body goes as compact JSON, as kubectl sends it. That matters on kube-apiserver: it
        keeps opaque claim parameters as the bytes it was sent, kube-scheduler copies them into
        the allocation, and a later JSON patch of the claim's status re-encodes them compactly;
        when the two differ, kube-apiserver refuses the write because the allocation "changed".
        The official client pads the JSON it makes from a dict (`, `, `: `) and sends a string
        unchanged only under a non-JSON content type: so the compact JSON goes as YAML, which
        it also is (kube-apiserver turns YAML into compact JSON; the embedded server reads it
        as JSON).
        """
        assert self.dyn is not None
        for doc in documents:
            resource = self.dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            namespace = doc.get("metadata", {}).get("namespace")
            body = json.dumps(doc, separators=(",", ":"))
            extra: dict[str, Any] = {"content_type": "application/yaml"}
            if resource.namespaced:
                extra["namespace"] = namespace or "default"
            resource.create(body=body, **extra)


def _boot(node: LocalNode) -> None:
    """What a reboot does to a node's fake processes: they end. A fresh workdir has none; a
    reused one may hold those of an earlier run, in the fake GPU state and the proc root."""
    shutil.rmtree(node.proc_root, ignore_errors=True)
    node.proc_root.mkdir(parents=True)
    state_dir = node.root / "fake-gpus"
    if (state_dir / state_file_name(node.name)).exists():
        with FileStateStore(state_dir, node.name).transaction() as state:
            if state.processes:
                state.processes = []


def _free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick); the plugin binds it moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
