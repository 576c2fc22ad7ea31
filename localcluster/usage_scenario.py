"""A busy pod and an idle pod on whole GPUs, and what the driver says about their usage.

Both pods (namespace `usage`) get one whole GPU each, with MIG mode off: NVML reports no
utilisation for a GPU in MIG mode (docs/telemetry.md), so such a GPU is never called idle, and
the pods' claims select GPUs without it by UUID. The node agent runs a fake process for
each at the percent of its `gpu.dra-driver.dev/fake-utilization` annotation (80 and 0). The
kubelet plugins sample every second, so within the plugins' `--idle-after` (a few seconds in the
demo) the idle pod's claim says `Idle=True` for its device in `status.devices`, while the busy
one's says `Idle=False` or nothing.

The demo runs it after the examples; it returns what went wrong (nothing, when the driver
behaves) and prints what it saw.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.backends.fake import FakeBackend
from dra_driver.cli.claim_idleness import held_devices
from dra_driver.cli.queue_list import list_claims
from dra_driver.cli.usage import render_table, usage_rows
from dra_driver.cli.usage_metrics import scrape
from dra_driver.device_status import IDLE, allocated_devices, idleness, parse_time
from dra_driver.deviceclasses import class_name
from dra_driver.pod_claims import claim_names
from localcluster.cluster import LocalCluster
from localcluster.roles.node_agent import FAKE_UTILIZATION_ANNOTATION, PREPARED_ANNOTATION
from localcluster.scenario_pods import one_gpu_pod

NAMESPACE = "usage"
#: The bound for the idle pod's device to be reported idle, from when the pod runs.
IDLE_DEADLINE_S = 30.0
#: Pod name -> its fake utilisation in percent.
PODS: Mapping[str, str] = {"busy": "80", "idle": "0"}

Obj = dict[str, Any]


@dataclass(frozen=True)
class DeviceReport:
    """What one pod's claim says about its device: (status, reason, message, since) of its
    Idle condition, or None when the claim carries none."""

    pod: str
    claim: str
    node: str
    device: str
    idle: tuple[str, str, str, datetime | None] | None

    @property
    def idle_true(self) -> bool:
        return self.idle is not None and self.idle[0] == "True"

    def line(self, now: datetime) -> str:
        where = f"{NAMESPACE}/{self.pod}  claim {self.claim}  {self.node}/{self.device}"
        if self.idle is None:
            return f"{where}  Idle: not reported"
        status, reason, message, since = self.idle
        stretch = f" for {(now - since).total_seconds():.0f} s" if since else ""
        return f"{where}  Idle={status} ({reason}{stretch}): {message}"


class UsagePods:
    """The two pods: made, read and removed through the API as a user would."""

    def __init__(self, cluster: LocalCluster, uuids: Sequence[str] = ()) -> None:
        """`uuids`: the GPUs the pods may get (all whole GPUs when empty)."""
        assert cluster.api is not None
        self.cluster = cluster
        self.uuids = tuple(uuids)
        self.driver = cluster.driver_name
        # Typed as Any: bodies are plain dicts, which the client sends as they are.
        self.core: Any = client.CoreV1Api(cluster.api)
        self.objects: Any = client.CustomObjectsApi(cluster.api)

    def create(self) -> None:
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        exactly: Obj = {"deviceClassName": class_name("gpu", self.driver)}
        if self.uuids:
            listed = ", ".join(f'"{u}"' for u in self.uuids)
            expression = f'device.attributes["{self.driver}"].uuid in [{listed}]'
            exactly["selectors"] = [{"cel": {"expression": expression}}]
        request = {"name": "gpu", "exactly": exactly}
        self.objects.create_namespaced_custom_object(
            "resource.k8s.io",
            "v1",
            NAMESPACE,
            "resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
                "spec": {"spec": {"devices": {"requests": [request]}}},
            },
        )
        for name, percent in PODS.items():
            self.core.create_namespaced_pod(
                NAMESPACE,
                one_gpu_pod(
                    name,
                    NAMESPACE,
                    "one-gpu",
                    annotations={FAKE_UTILIZATION_ANNOTATION: percent},
                ),
            )

    def _pod(self, name: str) -> Obj | None:
        """The pod as the API writes it (camelCase), which the shared helpers read."""
        assert self.cluster.dyn is not None
        pods = self.cluster.dyn.resources.get(api_version="v1", kind="Pod")
        try:
            pod: Obj = pods.get(name=name, namespace=NAMESPACE).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return pod

    def running_since(self) -> datetime | None:
        """When the later of the two pods started (its Ready condition's time, as the node
        agent writes it); None while either does not run."""
        started: list[datetime] = []
        for name in PODS:
            pod = self._pod(name)
            if pod is None or PREPARED_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
                return None
            ready = next(
                (
                    c
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready" and c.get("status") == "True"
                ),
                None,
            )
            since = parse_time((ready or {}).get("lastTransitionTime"))
            if since is None:
                return None
            started.append(since)
        return max(started)

    def report(self, name: str) -> DeviceReport | None:
        """What the pod's claim says about its device; None before the claim is allocated."""
        pod = self._pod(name)
        names = claim_names(pod) if pod else None
        if not names:
            return None
        claim: Obj = self.objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", names[0]
        )
        devices = allocated_devices(claim, self.driver)
        if not devices:
            return None
        key = devices[0]
        entry = next(
            (
                c
                for e in (claim.get("status") or {}).get("devices") or []
                if (e.get("driver"), e.get("pool"), e.get("device")) == key
                for c in e.get("conditions") or []
                if c.get("type") == IDLE
            ),
            None,
        )
        state = idleness(claim).get(key)
        idle = None
        if entry is not None:
            idle = (
                str(entry.get("status")),
                str(entry.get("reason", "")),
                str(entry.get("message", "")),
                state.since if state else None,
            )
        return DeviceReport(name, names[0], key[1], key[2], idle)

    def delete(self) -> None:
        for name in PODS:
            try:
                self.core.delete_namespaced_pod(name, NAMESPACE)
            except ApiException as error:
                if error.status != 404:
                    raise

    def gone(self) -> bool:
        claims = self.objects.list_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims"
        )
        return all(self._pod(n) is None for n in PODS) and not claims["items"]


async def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    """Poll what the roles and daemons write until `check()` holds; False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


async def check_usage(pods: UsagePods, out: TextIO, timeout_s: float = 60.0) -> list[str]:
    """Wait for both pods to run and the idle one to be reported idle (at most
    `IDLE_DEADLINE_S` after they run); print what the claims say; the problems found."""
    started: list[datetime] = []

    def running() -> bool:
        since = pods.running_since()
        started[:] = [since] if since else []
        return since is not None

    if not await _until(running, timeout_s):
        return ["usage: the busy and idle pods did not both run"]
    # The bound counts from when the pods started, which may be well before this call (the
    # demo checks after the examples); when it is over already, one look decides.
    left = IDLE_DEADLINE_S - (datetime.now(UTC) - started[0]).total_seconds()
    reports: dict[str, DeviceReport | None] = {}

    def idle_reported() -> bool:
        reports.update({name: pods.report(name) for name in PODS})
        idle = reports.get("idle")
        return idle is not None and idle.idle_true

    reported = await _until(idle_reported, max(left, 0.0))
    now = datetime.now(UTC)
    print("\nusage: what the claims' status says about their devices", file=out)
    for name, percent in PODS.items():
        report = reports.get(name)
        text = report.line(now) if report else f"{NAMESPACE}/{name}  no allocated claim"
        print(f"  {text}   (fake utilization {percent} %)", file=out)
    table = await asyncio.to_thread(usage_table, pods.cluster)
    print("  dra-driver usage --metrics <each plugin's endpoint>:", file=out)
    print(textwrap.indent(table.rstrip("\n"), "    "), file=out)
    problems = []
    if not reported:
        problems.append(
            f"the idle pod's device was not reported Idle=True within {IDLE_DEADLINE_S:.0f} s"
        )
    busy = reports.get("busy")
    if busy is not None and busy.idle_true:
        problems.append("the busy pod's device (80 %) is reported Idle=True")
    return problems


async def remove_usage(pods: UsagePods, timeout_s: float = 30.0) -> list[str]:
    """Delete the pods and wait until they and their claims are gone (their GPUs free)."""
    await asyncio.to_thread(pods.delete)
    if not await _until(pods.gone, timeout_s):
        return ["usage: the busy and idle pods or their claims were not gone 30 s after deletion"]
    return []


def usage_table(cluster: LocalCluster) -> str:
    """What `dra-driver usage --metrics URL...` prints for the scenario's namespace: the claims'
    Idle conditions and, from every plugin that serves metrics, utilisation and memory."""
    claims = list_claims(str(cluster.kubeconfig)) or []
    ours = [c for c in claims if c["metadata"].get("namespace") == NAMESPACE]
    urls = [
        f"http://127.0.0.1:{n.metrics_port}/metrics"
        for n in cluster.nodes
        if n.metrics_port is not None
    ]
    figures = scrape(urls).figures if urls else None
    rows = usage_rows(held_devices(ours, cluster.driver_name), figures, datetime.now(UTC))
    return render_table(rows, with_metrics=figures is not None)


def gpus_without_mig(cluster: LocalCluster) -> list[str]:
    """UUIDs of the cluster's GPUs with MIG mode off, the only whole GPUs with a utilisation."""
    found: list[str] = []
    for node in cluster.nodes:
        backend = FakeBackend.from_spec(cluster.gpus, node.name, state_dir=node.fake_state_dir)
        try:
            found.extend(g.uuid for g in backend.inventory().gpus if not g.mig_enabled)
        finally:
            backend.close()
    return found


async def busy_and_idle(cluster: LocalCluster, out: TextIO) -> list[str] | None:
    """The whole scenario on a running cluster: the problems found, or None when the cluster
    has fewer than two GPUs with MIG mode off (then it says so and checks nothing)."""
    uuids = await asyncio.to_thread(gpus_without_mig, cluster)
    if len(uuids) < len(PODS):
        print(
            "\nusage: skipped: fewer than two GPUs with MIG mode off, and NVML reports no "
            "utilisation for a whole GPU in MIG mode",
            file=out,
        )
        return None
    pods = UsagePods(cluster, uuids)
    await asyncio.to_thread(pods.create)
    problems = await check_usage(pods, out)
    return problems + await remove_usage(pods)
