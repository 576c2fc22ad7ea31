"""The node daemon: everything the kubelet plugin runs, wired together in start-up order.

Order matters: recovery runs before the servers start (kubelet must never call into a plugin
whose checkpoint disagrees with the GPUs), the first publication happens before registration
(kubelet wipes a driver's slices while no instance is registered, and the scheduler needs them
before any claim can reach this node), and on the way down the registration socket goes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import structlog
from kubernetes import client

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.base import GpuBackend
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake import mps_control as fake_mps_control
from dra_driver.backends.fake.state import read_boot_id
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.cdi import CdiSpecDir, ContainerEdits
from dra_driver.checkpoint import CheckpointStore
from dra_driver.driverroot import discover, driver_edits
from dra_driver.events import NodeEvents
from dra_driver.kube_client import api_client
from dra_driver.slices import SliceSettings, build_resource_slices
from dra_driver.slices.builder import lendable_memory
from kubeletplugin.health import HealthMonitor
from kubeletplugin.lending.lender import Lender, LendingSettings
from kubeletplugin.lending.node import NodeLending
from kubeletplugin.lending.queues import ApiQueues, QueueLending
from kubeletplugin.metrics import MetricsEndpoint, PluginMetrics
from kubeletplugin.mps.daemon import DEFAULT_MPS_CONTROL, MpsControl
from kubeletplugin.mps.manager import MpsManager
from kubeletplugin.prepare.claim_cache import ClaimCache
from kubeletplugin.prepare.claims import KubernetesClaimSource
from kubeletplugin.prepare.container_edits import DeviceNodes, HostDeviceNodes, NoDeviceNodes
from kubeletplugin.prepare.faults import CrashPoints
from kubeletplugin.prepare.preparer import Preparer
from kubeletplugin.prepare.recovery import recover
from kubeletplugin.publisher.loop import PublishLoop
from kubeletplugin.publisher.plan import NodeOwner
from kubeletplugin.publisher.publisher import SlicePublisher
from kubeletplugin.publisher.store import KubernetesSliceStore
from kubeletplugin.server.liveness import LivenessServer
from kubeletplugin.server.servers import PluginServers
from kubeletplugin.telemetry.sampler import TelemetrySampler, TelemetrySettings
from kubeletplugin.telemetry.status_writer import ClaimStatusWriter

log = structlog.get_logger(__name__)

COMPONENT = "dra-kubelet-plugin"
_MINOR = re.compile(r"gpu-(\d+)")


@dataclass(frozen=True)
class PluginConfig:
    node_name: str
    driver_name: str = DEFAULT_DRIVER_NAME
    kubeconfig: str | None = None
    plugin_dir: Path = Path(f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER_NAME}")
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    cdi_root: Path = Path("/var/run/cdi")
    state_dir: Path = Path(f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER_NAME}")
    fake_gpus: str | None = None
    # Where fake GPUs keep their state (live MIG instances, faults); shared with tests and tools.
    fake_state_dir: Path | None = None
    nvml: bool = False
    shapes: frozenset[DeviceType] = frozenset(DeviceType)
    timeslice_shares: int = 4
    metrics_port: int | None = None
    healthcheck_port: int | None = None
    pod_uid: str | None = None
    health_poll_s: float = 5.0
    resync_s: float = 60.0
    delete_slices_on_exit: bool = False
    # Answer prepare from a watched copy of every claim when it can (see prepare/claim_cache.py).
    claim_cache: bool = False
    dev_root: Path = Path("/dev")
    proc_root: Path = Path("/proc")
    # Fake GPUs get device nodes from `dev_root` and MIG capability nodes from `proc_root`, as
    # real GPUs do (a test lays out such trees); off, fake GPUs get no device nodes at all.
    fake_device_nodes: bool = False
    # Where the driver's files are seen from here; None: / for NVML, none at all for fake GPUs.
    driver_root: Path | None = None
    # The same directory as the container runtime sees it; None: `driver_root`.
    container_driver_root: PurePosixPath | None = None
    # nvidia-cuda-mps-control; None: the driver's own under the driver root (/ with NVML), or
    # the built-in fake with fake GPUs (dra_driver/backends/fake/mps_control.py).
    mps_control: Path | None = None
    # The state directory as the host (the container runtime) sees it, when the plugin's
    # container mounts it elsewhere: the MPS pipe directories are mounted from there.
    host_state_dir: Path | None = None
    # A GPU's shares turn unhealthy when its MPS daemon fails this often within the window.
    mps_max_failures: int = 3
    mps_failure_window_s: float = 300.0
    # GPU usage per prepared device: metrics and the Idle condition (docs/telemetry.md);
    # an interval of 0 turns it off. Processes are told apart by pod under `proc_root`.
    telemetry_interval_s: float = 10.0
    idle_threshold_percent: float = 5.0
    idle_after_s: float = 1800.0
    # Lending idle GPUs to best-effort borrowers (docs/overcommit.md); None lends nothing.
    lend_after_s: float | None = None
    lend_headroom_bytes: int = 4 << 30


def mps_command(config: PluginConfig) -> tuple[str, ...]:
    """How to run the MPS control tool.

    The fake one runs under this interpreter, by file and without `site` (it needs only the
    standard library): `-m` would import its parent packages, the whole fake backend, on every
    start and stop of a daemon.
    """
    if config.mps_control is not None:
        return (str(config.mps_control),)
    if config.fake_gpus:
        return (sys.executable, "-S", fake_mps_control.__file__)
    if config.driver_root is not None:
        return (str(config.driver_root / DEFAULT_MPS_CONTROL.relative_to("/")),)
    return (str(DEFAULT_MPS_CONTROL),)


def make_backend(config: PluginConfig) -> GpuBackend:
    if config.fake_gpus:
        return FakeBackend.from_spec(
            config.fake_gpus, config.node_name, state_dir=config.fake_state_dir
        )
    return NvmlBackend(config.node_name)


def driver_files(config: PluginConfig, backend: GpuBackend) -> ContainerEdits | None:
    """What every container gets from the driver installation; None only for fake GPUs without
    a driver root (demos, kind), whose containers have no use for driver files.

    Raises DriverRootError naming the path when the driver root or its libraries are missing,
    so the plugin does not start handing out GPUs that containers cannot use.
    """
    root = config.driver_root
    version = None
    if not config.fake_gpus:
        root = root or Path("/")
        gpus = backend.inventory().gpus
        version = gpus[0].driver_version if gpus else None
    if root is None:
        return None
    driver = discover(root, version)
    log.info(
        "driver found",
        root=str(root),
        version=driver.version,
        libraries=len(driver.libraries),
        firmware=len(driver.firmware),
        hook=str(driver.hook.path) if driver.hook else None,
    )
    return driver_edits(driver, host_root=config.container_driver_root, dev_root=config.dev_root)


def device_minors(slices: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Published device names with the minor of their GPU (every name starts `gpu-<minor>`)."""
    found: dict[str, int] = {}
    for obj in slices:
        for device in (obj.get("spec") or {}).get("devices") or []:
            match = _MINOR.match(str(device.get("name", "")))
            if match:
                found[str(device["name"])] = int(match.group(1))
    return found


class PluginDaemon:
    """Holds the running parts so tests and the local cluster can reach them."""

    def __init__(
        self,
        config: PluginConfig,
        api: client.ApiClient | None = None,
        backend: GpuBackend | None = None,
    ) -> None:
        """`backend` replaces the one `config` names; tests pass an NVML backend over a stand-in
        `pynvml`, so the NVML path runs end to end without a GPU."""
        self.config = config
        self.api = api if api is not None else api_client(config.kubeconfig)
        self.metrics = PluginMetrics()
        self.backend = backend if backend is not None else make_backend(config)
        # Before anything talks to the API server: a node without usable driver files must fail
        # here, naming the path, rather than publish GPUs its containers cannot use.
        try:
            driver = driver_files(config, self.backend)
        except BaseException:
            self.backend.close()
            raise
        self.boot_id = read_boot_id()
        self.devices: dict[str, int] = {}
        self.ready = asyncio.Event()
        node: Any = client.CoreV1Api(self.api).read_node(config.node_name)
        self.owner = NodeOwner(config.node_name, str(node.metadata.uid))
        self.events = NodeEvents(self.api, config.node_name, self.owner.uid, COMPONENT)
        nodes: DeviceNodes = (
            NoDeviceNodes(driver)
            if config.fake_gpus and not config.fake_device_nodes
            else HostDeviceNodes(config.dev_root, config.proc_root, driver)
        )
        self.store = CheckpointStore(config.state_dir / "checkpoint.json")
        self.claims = KubernetesClaimSource(self.api)
        self.claim_cache = (
            ClaimCache(self.api, on_lookup=self.metrics.record_claim_lookup)
            if config.claim_cache
            else None
        )
        self.mps = MpsManager(
            MpsControl(mps_command(config)),
            config.state_dir / "mps",
            (config.host_state_dir or config.state_dir) / "mps",
            max_failures=config.mps_max_failures,
            failure_window_s=config.mps_failure_window_s,
            on_running=self.metrics.set_mps_daemons,
            on_restart=self.metrics.record_mps_restart,
        )
        self.lending = self._lending()
        self.preparer = Preparer(
            backend=self.backend,
            claims=self.claims,
            store=self.store,
            cdi=CdiSpecDir(config.cdi_root),
            device_nodes=nodes,
            driver_name=config.driver_name,
            node_name=config.node_name,
            boot_id=self.boot_id,
            crash=CrashPoints.from_environment(),
            on_prepared_devices=self.metrics.set_prepared_devices,
            claim_cache=self.claim_cache,
            mps=self.mps,
            lendable=self.lending.lender.lendable if self.lending is not None else None,
        )
        self.health = HealthMonitor(
            self.backend,
            config.driver_name,
            config.node_name,
            lambda: self.devices,
            mps_unhealthy=self.mps.unhealthy,
        )
        self.publisher = SlicePublisher(
            KubernetesSliceStore(self.api),
            self.owner,
            config.driver_name,
            self._build,
            warn=lambda message: self.events.warning("ResourceSliceFallback", message),
        )
        self.publish_loop = PublishLoop(self.publisher, resync_s=config.resync_s)
        self.servers = PluginServers(
            config.driver_name,
            config.plugin_dir,
            config.registry_dir,
            self.preparer,
            health_source=self.health,
            pod_uid=config.pod_uid,
            metrics=self.metrics,
        )
        self.telemetry = self._telemetry()
        self.liveness: LivenessServer | None = None
        self.metrics_endpoint: MetricsEndpoint | None = None

    def _lending(self) -> NodeLending | None:
        """Lending idle GPUs, where the node lends (`--lend-after`) and samples their use."""
        config = self.config
        if config.lend_after_s is None or config.telemetry_interval_s <= 0:
            return None
        settings = LendingSettings(
            config.lend_after_s, config.idle_threshold_percent, config.lend_headroom_bytes
        )
        return NodeLending(
            Lender(settings, config.driver_name),
            self.backend,
            self.api,
            self.metrics,
            config.node_name,
            config.telemetry_interval_s,
            self._taints_changed,
            COMPONENT,
            # Only a node that lends reads GpuQueues: the one thing it needs them for.
            QueueLending(ApiQueues(self.api)),
        )

    def _taints_changed(self) -> None:
        """The lent shares' taints changed: publish again soon."""
        self.publish_loop.request()

    def _telemetry(self) -> TelemetrySampler | None:
        """The usage sampler, unless turned off (an interval of 0)."""
        config = self.config
        if config.telemetry_interval_s <= 0:
            return None
        settings = TelemetrySettings(
            node_name=config.node_name,
            driver_name=config.driver_name,
            interval_s=config.telemetry_interval_s,
            idle_threshold_percent=config.idle_threshold_percent,
            idle_after_s=config.idle_after_s,
            proc_root=config.proc_root,
        )
        return TelemetrySampler(
            settings,
            self.backend.usage,
            lambda: self.preparer.checkpoint,
            ClaimStatusWriter(self.api, config.driver_name),
            self.metrics,
            observer=self.lending,
        )

    def _build(self, partitionable: bool) -> list[dict[str, Any]]:
        settings = SliceSettings(
            driver_name=self.config.driver_name,
            shapes=self.config.shapes,
            timeslice_shares=self.config.timeslice_shares,
            partitionable=partitionable,
            node_uid=self.owner.uid,
            dynamic_instances=self.preparer.dynamic_instances(),
            taints=self.health.taints(),
            device_taints=self.health.device_taints(),
            lend_headroom_bytes=(
                self.config.lend_headroom_bytes if self.lending is not None else None
            ),
        )
        inventory = self.backend.inventory()
        if self.lending is not None:
            self.lending.lent_minors = tuple(
                g.minor for g in inventory.gpus if lendable_memory(g, settings) is not None
            )
            device_taints = {k: list(v) for k, v in settings.device_taints.items()}
            for name, taints in self.lending.taints().items():
                device_taints.setdefault(name, []).extend(taints)
            settings = dataclasses.replace(settings, device_taints=device_taints)
        slices = build_resource_slices(inventory, settings)
        self.devices = device_minors(slices)
        return slices

    async def _health_changed(self) -> None:
        self.publish_loop.request()

    async def _watch_mps(self, interval_s: float, stop: asyncio.Event) -> None:
        """Start again MPS daemons that died under their clients; a GPU whose daemon keeps
        failing reaches the slices and kubelet's health stream like a GPU fault."""
        while not stop.is_set():
            try:
                if await self.preparer.mps.check():
                    await self._health_changed()
                    await self.health.notify()
            except Exception as err:
                log.warning("checking MPS control daemons failed", error=str(err))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)

    async def run(self, stop: asyncio.Event) -> None:
        config = self.config
        report = await recover(
            self.preparer,
            self.store,
            self.claims,
            self.boot_id,
            warn=lambda message: self.events.warning("CheckpointReset", message),
        )
        log.info(
            "recovered",
            rolled_back=len(report.rolled_back),
            unprepared=len(report.unprepared),
            kept=len(report.kept),
            orphan_specs=len(report.orphan_specs),
        )
        await asyncio.to_thread(self.health.poll)
        try:
            await self.publish_loop.publish_now()
        except Exception as err:  # the loop keeps trying; serving kubelet must not wait for it
            log.error("first ResourceSlice publication failed", error=str(err))
            self.publish_loop.request()
        if config.metrics_port is not None:
            self.metrics_endpoint = self.metrics.serve(config.metrics_port)
        if self.claim_cache is not None:
            # Not waited for: until the first list arrives, prepare reads the API server.
            self.claim_cache.start()
        await self.servers.start()
        if config.healthcheck_port is not None:
            self.liveness = LivenessServer(
                self.servers.registration_socket,
                self.servers.dra_socket,
                port=config.healthcheck_port,
            )
            await self.liveness.start()
        tasks = [
            asyncio.create_task(self.publish_loop.run(stop), name="publish"),
            asyncio.create_task(
                self.health.run(config.health_poll_s, self._health_changed, stop), name="health"
            ),
            asyncio.create_task(self._watch_mps(config.health_poll_s, stop), name="mps"),
        ]
        if self.telemetry is not None:
            tasks.append(asyncio.create_task(self.telemetry.run(stop), name="telemetry"))
        self.ready.set()
        log.info(
            "kubelet plugin running",
            node=config.node_name,
            driver=config.driver_name,
            dra_socket=str(self.servers.dra_socket),
            registration_socket=str(self.servers.registration_socket),
        )
        try:
            await stop.wait()
        finally:
            await self.shutdown(tasks)

    async def shutdown(self, tasks: Sequence[asyncio.Task[None]]) -> None:
        await self.servers.stop(grace=1.0)
        try:
            await self.preparer.flush()
        except Exception as err:  # recovery at the next start copes without it
            log.warning("cannot save the checkpoint on exit", error=str(err))
        if self.liveness is not None:
            await self.liveness.stop()
        for task in tasks:
            task.cancel()
        if self.lending is not None:
            await self.lending.stop()
        if self.claim_cache is not None:
            await asyncio.to_thread(self.claim_cache.stop)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.config.delete_slices_on_exit:
            try:
                removed = await asyncio.to_thread(self.publisher.withdraw)
                log.info("deleted this node's ResourceSlices", count=removed)
            except Exception as err:
                log.warning("cannot delete ResourceSlices on exit", error=str(err))
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.shutdown()
        self.backend.close()
        log.info("kubelet plugin stopped", node=self.config.node_name)
