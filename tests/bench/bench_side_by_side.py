"""kube-scheduler's DynamicResources plugin beside the allocation controller, on a real cluster.

    .venv/bin/python -m tests.bench.bench_side_by_side                     # 100 nodes, 1,000 pods
    .venv/bin/python -m tests.bench.bench_side_by_side --nodes 10 --pods 100 --trace-name none

One `UpstreamControlPlane` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, as
`hack/upstream.sh build` builds them) serves the whole run, so both ways of allocating meet the
same API server, the same resourceclaim controller and the same binder. The nodes are Node objects
with CPU, memory and a Ready condition, their Leases renewed as kubelet would (no kubelet runs and
no pod is prepared); their ResourceSlices are what the real slice builder makes of 8 fake H100s
each, and the DeviceClasses are the chart's. Every pod asks its devices through a
ResourceClaimTemplate, so kube-controller-manager makes each pod's claim and deletes it with the
pod, whichever path allocated it.

Each workload runs twice, one path after the other, the cluster emptied in between:

- `scheduler`: the pods carry no gate; kube-scheduler allocates the claims and binds the pods;
- `controller`: the pods that ask for devices carry `gpu.dra-driver.dev/allocation` and
  `dra-controller` (scored mode, no leader election, no stored workload profile) runs; it
  allocates and lifts the gate, and kube-scheduler binds the pod to the allocation's node. Pods
  without devices are not gated: a user opts in per pod, and those go to kube-scheduler alone.

Workloads: the mix of `bench_controller` (half the pods one whole GPU, half one MIG slice of
1g.10gb, 2g.20gb or 3g.40gb), then an openb trace scaled to the cluster (see `openb_pods`). A
pod's latency runs from just before its create call to the watch event that shows
`spec.nodeName` set; pods/s is the bound pods over the time from the first create to the last
bind. A round ends when every pod is bound or when nothing was bound for `--settle` seconds
after the last create (pods that fit nowhere wait for ever, on either path). CPU is user plus
system time of each process over the round, per pod created. The GPU allocation ratio is what the
allocated claims hold, in GPUs as `simulate --report` counts them (a MIG slice by the memory
slices it covers, a share by the largest fraction of the GPU its capacity request takes), over
the GPUs published.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.deviceclasses import device_classes
from dra_driver.simulation.gpu_units import GpuUnits
from localcluster.cluster import NODE_ALLOCATABLE, ready_node
from localcluster.crds import bundled_definitions
from localcluster.roles import node_heartbeat
from localcluster.upstream.control_plane import UpstreamControlPlane, cpu_seconds
from tests.bench.bench_controller import (
    GATE,
    GROUP,
    NAMESPACE,
    VERSION,
    claim_body,
    free_port,
    peak_rss_mib,
    start_controller,
    wait_ready,
)
from tests.bench.cluster import DOMAIN, iter_cluster_slices, node_name
from tests.bench.traces import TracePod, inflate, read_nodes, read_pods

DEFAULT_TRACE_DIR = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces" / "openb"
)
WATCHED = ("kube-scheduler", "kube-apiserver", "kube-controller-manager")


# --- the cluster ------------------------------------------------------------------------------


def _create_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    except ApiException as error:
        if error.status != 409:
            raise


def install_crds(api: client.ApiClient, timeout_s: float = 60.0) -> None:
    """The chart's CRDs: the controller watches GpuQueues, and a list of a resource the API
    server does not serve would keep it from ever becoming ready."""
    crds = client.ApiextensionsV1Api(api)
    names = []
    for body in bundled_definitions():
        crds.create_custom_resource_definition(body)  # type: ignore[arg-type]
        names.append(body["metadata"]["name"])
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            conditions = (
                crds.read_custom_resource_definition(name).to_dict().get("status") or {}
            ).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"CRD {name} not established within {timeout_s:g} s")
            time.sleep(0.1)  # polling the API server for another component's work


def create_nodes(api: client.ApiClient, count: int) -> list[str]:
    """Node objects as kubelet registers them: Ready, with the local cluster's allocatable."""
    core = client.CoreV1Api(api)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    names = [node_name(i) for i in range(count)]
    for name in names:
        core.create_node(ready_node(name, now))  # type: ignore[arg-type]
    return names


class Heartbeats:
    """The nodes' Leases renewed from an event loop in a thread of its own, so that the node
    lifecycle controller does not taint the nodes unreachable halfway through a round."""

    def __init__(self, api: client.ApiClient, names: Sequence[str]) -> None:
        self._api = api
        self._names = list(names)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._started.wait(30)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        await asyncio.gather(*(node_heartbeat.run(self._api, n, self._stop) for n in self._names))

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def publish_slices(api: client.ApiClient, nodes: int) -> list[dict[str, Any]]:
    """Every node's slices, as the kubelet plugin would publish them; returned for the count of
    GPUs held at the end of a round."""
    objects = client.CustomObjectsApi(api)
    published = []
    for body in iter_cluster_slices(nodes):
        objects.create_cluster_custom_object(
            GROUP, VERSION, "resourceslices", body, _preload_content=False
        )
        published.append(body)
    return published


# --- workloads --------------------------------------------------------------------------------


@dataclass
class PodSpec:
    """One pod of a workload: its ResourceClaimTemplate (None: no devices) and its requests."""

    template: str | None
    requests: dict[str, str] = field(default_factory=dict)
    demand: float = 0.0


@dataclass
class Workload:
    name: str
    templates: dict[str, dict[str, Any]]
    """Template name → the claim spec it stamps out."""
    pods: list[PodSpec]


def controller_mix(pods: int, seed: int) -> Workload:
    """`bench_controller`'s claims, as templates: one per distinct claim spec."""
    rng = random.Random(seed)
    by_spec: dict[str, str] = {}
    templates: dict[str, dict[str, Any]] = {}
    out: list[PodSpec] = []
    for index in range(pods):
        spec = claim_body(index, rng)["spec"]
        key = json.dumps(spec, sort_keys=True)
        if key not in by_spec:
            by_spec[key] = f"mix-{len(by_spec)}"
            templates[by_spec[key]] = spec
        out.append(PodSpec(by_spec[key]))
    return Workload("mix", templates, out)


def _quantity(value: str) -> float:
    return float(parse_quantity(value))  # type: ignore[no-untyped-call]


def openb_pods(
    directory: Path, trace: str, gpus: int, seed: int
) -> tuple[Workload, dict[str, float]]:
    """An openb trace scaled to `gpus` fake H100s, until the arrived GPU demand reaches them.

    Arrivals are drawn from the trace with replacement (`traces.inflate`, as the trace
    benchmark and FGD's paper do), not taken in file order: the files list their CPU-only pods
    first (gpushare40: the first 1,088 pods ask for no GPU and 27,730 cores, more than twice
    the cluster's CPU). Shapes: a pod's `num_gpu` whole GPUs become one request of that many
    devices of the `gpu` class; a fraction (`gpu_milli` < 1000) becomes one device of the
    `shared` class with `compute` of gpu_milli / 10 percent (its memory left at the class's
    default), which takes that fraction of a GPU; `gpu_spec` (a model) is dropped, every GPU
    here being an H100. CPU and memory requests are scaled by the cluster's CPU (memory) per
    GPU over openb's, at most 1, so CPU is as scarce next to the GPUs as in the trace's
    cluster."""
    rows = read_nodes(directory)
    trace_gpus = sum(int(r["gpu"]) for r in rows)
    trace_cpu = sum(int(r["cpu_milli"]) for r in rows) / 1000 / trace_gpus
    trace_memory = sum(int(r["memory_mib"]) for r in rows) * 2**20 / trace_gpus
    ours_cpu = _quantity(NODE_ALLOCATABLE["cpu"]) / 8
    ours_memory = _quantity(NODE_ALLOCATABLE["memory"]) / 8
    scale = {
        "cpu": min(1.0, ours_cpu / trace_cpu),
        "memory": min(1.0, ours_memory / trace_memory),
    }
    arrivals: list[TracePod] = inflate(read_pods(directory, trace), gpus, 1.0, seed)
    templates: dict[str, dict[str, Any]] = {}
    pods: list[PodSpec] = []
    for pod in arrivals:
        template: str | None = None
        if pod.num_gpu:
            if pod.gpu_milli < 1000:
                template = f"share-{pod.gpu_milli // 10}"
                exactly: dict[str, Any] = {
                    "deviceClassName": f"shared.{DOMAIN}",
                    "capacity": {"requests": {"compute": str(pod.gpu_milli // 10)}},
                }
            else:
                template = f"gpus-{pod.num_gpu}"
                exactly = {"deviceClassName": f"gpu.{DOMAIN}", "count": pod.num_gpu}
            templates[template] = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
        requests = {
            "cpu": f"{max(1, round(pod.cpu_milli * scale['cpu']))}m",
            "memory": f"{max(1, round(pod.memory_mib * scale['memory']))}Mi",
        }
        pods.append(PodSpec(template, requests, pod.gpu_demand))
    return Workload(f"openb {trace}", templates, pods), scale


def pod_manifest(name: str, spec: PodSpec, gated: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if spec.requests:
        container["resources"] = {"requests": spec.requests}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    if spec.template is not None:
        body["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": spec.template}
        ]
        if gated:
            body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


# --- measuring --------------------------------------------------------------------------------


class BindWatcher:
    """When each pod is first seen bound, from a pod watch in a thread; the watch is taken up
    again from the last resourceVersion when the server ends it."""

    def __init__(self, api: client.ApiClient) -> None:
        self.bound: dict[str, float] = {}
        self._core = client.CoreV1Api(api)
        self._stopped = threading.Event()
        self._watch: Any = None
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._synced.wait(60):
            raise SystemExit("the pod watch did not start")

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()
        # The stream notices only at its next event; the thread is a daemon and records into
        # this watcher alone, so the round need not wait for it.
        self._thread.join(1)

    def _run(self) -> None:
        version = self._list()
        self._synced.set()
        while not self._stopped.is_set():
            self._watch = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in self._watch.stream(
                    self._core.list_namespaced_pod,
                    NAMESPACE,
                    resource_version=version,
                    timeout_seconds=600,
                    deserialize=False,
                ):
                    raw = event.get("object") or {}
                    version = (raw.get("metadata") or {}).get("resourceVersion", version)
                    self._seen(raw)
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                if self._stopped.is_set():
                    return  # the control plane going away under a watcher no one reads
                if not isinstance(error, ApiException) or error.status == 410:
                    version = self._list()  # binds in the gap are in the list
                else:
                    raise

    def _seen(self, pod: dict[str, Any]) -> None:
        name = str((pod.get("metadata") or {}).get("name"))
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound[name] = time.perf_counter()

    def _list(self) -> str:
        """Record the pods bound now; the version to watch from."""
        listed = self._core.list_namespaced_pod(NAMESPACE, _preload_content=False)
        body = json.loads(listed.data)  # type: ignore[attr-defined]
        for pod in body.get("items") or []:
            self._seen(pod)
        return str((body.get("metadata") or {}).get("resourceVersion", ""))


def allocated_gpus(api: client.ApiClient, units: GpuUnits, snapshot: ClusterSnapshot) -> float:
    listed: dict[str, Any] = client.CustomObjectsApi(api).list_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, NAMESPACE, "resourceclaims"
    )
    claims = listed["items"]
    return units.held(Usage.from_claims(snapshot, claims))


def _percentile(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def _poll(check: Callable[[], bool], what: str, timeout_s: float, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)  # polling the API server for other processes' work


@dataclass
class Bench:
    plane: UpstreamControlPlane
    api: client.ApiClient
    snapshot: ClusterSnapshot
    units: GpuUnits
    workdir: Path
    settle_s: float
    clients: int
    controller: subprocess.Popen[bytes] | None = None
    controller_starts: int = 0

    def start_controller(self) -> float:
        """`dra-controller` as `bench_controller` runs it (admin kubeconfig); seconds to ready.
        `--workload-configmap=-`: each start learns the workload afresh, so a round is not
        weighed by the pods of the one before."""
        self.controller_starts += 1
        logs = self.workdir / f"controller-{self.controller_starts}"
        logs.mkdir()
        kubeconfig = self.plane.write_kubeconfig(self.workdir / "controller.kubeconfig")
        health = free_port()
        started = time.perf_counter()
        self.controller = start_controller(
            kubeconfig, logs, health, "--mode=scored", "--workload-configmap=-"
        )
        wait_ready(health, self.controller)
        return time.perf_counter() - started

    def stop_controller(self) -> None:
        if self.controller is not None:
            self.controller.terminate()
            try:
                self.controller.wait(30)
            except subprocess.TimeoutExpired:
                self.controller.kill()
                self.controller.wait(30)
            self.controller = None

    def _cpu(self) -> dict[str, float]:
        found = {}
        for name in WATCHED:
            pid = self.plane.pid(name)
            if pid is not None:
                found[name] = cpu_seconds(pid)
        if self.controller is not None:
            found["dra-controller"] = cpu_seconds(self.controller.pid)
        found["benchmark"] = time.process_time()
        return found

    def round(self, workload: Workload, path: str) -> dict[str, Any]:
        """One workload through one path; the cluster is emptied again afterwards."""
        gated = path == "controller"
        objects = client.CustomObjectsApi(self.api)
        core = client.CoreV1Api(self.api)
        for name, claim_spec in workload.templates.items():
            objects.create_namespaced_custom_object(
                GROUP,
                VERSION,
                NAMESPACE,
                "resourceclaimtemplates",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"spec": claim_spec},
                },
            )
        watcher = BindWatcher(self.api)
        watcher.start()
        created: dict[str, float] = {}
        arrivals = iter(enumerate(workload.pods))
        taking = threading.Lock()

        def create() -> None:
            """One client: takes the next pod in workload order and creates it."""
            while True:
                with taking:
                    taken = next(arrivals, None)
                    if taken is None:
                        return
                    name = f"{path[:5]}-{taken[0]:05d}"
                    created[name] = time.perf_counter()
                core.create_namespaced_pod(
                    NAMESPACE,
                    pod_manifest(name, taken[1], gated),  # type: ignore[arg-type]
                    _preload_content=False,
                )

        clients = [threading.Thread(target=create) for _ in range(self.clients)]
        cpu_before = self._cpu()
        first = time.perf_counter()
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        create_span = time.perf_counter() - first

        def settled() -> bool:
            if len(watcher.bound) >= len(created):
                return True
            latest = max(watcher.bound.values(), default=first + create_span)
            return time.perf_counter() - max(latest, first + create_span) > self.settle_s

        _poll(settled, f"the pods of {workload.name} to be bound", 1800)
        cpu_after = self._cpu()
        watcher.stop()
        bound = {n: t for n, t in watcher.bound.items() if n in created}
        held = allocated_gpus(self.api, self.units, self.snapshot)
        latencies = sorted(bound[n] - created[n] for n in bound)
        last = max(bound.values(), default=first)
        pods = len(created)
        cpu_ms = {
            name: round(1000 * (cpu_after[name] - cpu_before.get(name, 0.0)) / pods, 2)
            for name in cpu_after
        }
        result: dict[str, Any] = {
            "workload": workload.name,
            "path": path,
            "pods": pods,
            "bound": len(bound),
            "arrived_gpus": round(sum(p.demand for p in workload.pods), 2) or None,
            "pods_per_s": round(len(bound) / (last - first), 1) if bound else 0.0,
            "created_per_s": round(pods / create_span, 1),
            "latency_ms": {
                "p50": round(1000 * _percentile(latencies, 0.5), 1) if latencies else None,
                "p99": round(1000 * _percentile(latencies, 0.99), 1) if latencies else None,
                "mean": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
            },
            "cpu_ms_per_pod": cpu_ms,
            "allocated_gpus": round(held, 2),
            "allocation_ratio": round(100 * held / self.units.capacity, 2),
        }
        if self.controller is not None:
            result["controller_peak_rss_mib"] = round(peak_rss_mib(self.controller.pid), 1)
        started = time.perf_counter()
        self.empty(workload)
        result["cleanup_s"] = round(time.perf_counter() - started, 1)
        return result

    def empty(self, workload: Workload) -> None:
        """Delete the round's pods and templates; wait until kube-controller-manager has
        deleted every generated claim and nothing in the cluster is allocated."""
        core = client.CoreV1Api(self.api)
        objects = client.CustomObjectsApi(self.api)
        for name in workload.templates:
            objects.delete_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "resourceclaimtemplates", name
            )
        asked = [0.0]

        def delete_pods() -> None:
            """A collection delete of a thousand pods can outlast the API server's request
            timeout on a loaded machine (504); what it deleted stays deleted, so the rest is
            asked for again a while later."""
            asked[0] = time.monotonic()
            try:
                core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
            except ApiException as error:
                if error.status != 504:
                    raise

        delete_pods()

        def empty() -> bool:
            if core.list_namespaced_pod(NAMESPACE, limit=1).items:
                if time.monotonic() - asked[0] > 30:
                    delete_pods()
                return False
            claims: dict[str, Any] = objects.list_cluster_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, "resourceclaims"
            )
            return not claims["items"]

        _poll(empty, "every pod and claim of the round to be gone", 600)


def progress(result: dict[str, Any]) -> None:
    """A round's figures as soon as it ends (stderr), so a later failure does not lose them."""
    print(json.dumps(result), file=sys.stderr, flush=True)


def run(
    nodes: int,
    pods: int,
    trace_dir: Path,
    trace: str | None,
    seed: int,
    settle_s: float,
    clients: int,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-sbs-"))
    wall = time.perf_counter()
    heartbeats: Heartbeats | None = None
    bench: Bench | None = None
    with UpstreamControlPlane(workdir / "plane") as plane:
        try:
            api = plane.api_client()
            started = time.perf_counter()
            install_crds(api)
            _create_namespace(api, NAMESPACE)
            names = create_nodes(api, nodes)
            heartbeats = Heartbeats(plane.api_client(), names)
            heartbeats.start()
            classes = device_classes()
            objects = client.CustomObjectsApi(api)
            for body in classes:
                objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
            slices = publish_slices(api, nodes)
            snapshot = ClusterSnapshot.build(slices, classes)
            units = GpuUnits(snapshot)
            setup_s = time.perf_counter() - started
            bench = Bench(plane, api, snapshot, units, workdir, settle_s, clients)
            workloads = [controller_mix(pods, seed)]
            scale: dict[str, float] | None = None
            if trace:
                openb, scale = openb_pods(trace_dir, trace, round(units.capacity), seed)
                workloads.append(openb)
            rounds = []
            ready_s = []
            for workload in workloads:
                rounds.append(bench.round(workload, "scheduler"))
                progress(rounds[-1])
                ready_s.append(round(bench.start_controller(), 1))
                rounds.append(bench.round(workload, "controller"))
                progress(rounds[-1])
                bench.stop_controller()
        finally:
            if bench is not None:
                bench.stop_controller()
            if heartbeats is not None:
                heartbeats.stop()
    return {
        "nodes": nodes,
        "gpus": units.capacity,
        "devices": len(snapshot.devices),
        "setup_s": round(setup_s, 1),
        "controller_ready_s": ready_s,
        "openb_resource_scale": scale,
        "rounds": rounds,
        "wall_s": round(time.perf_counter() - wall, 1),
        "logs": str(workdir),
    }


def table(report: dict[str, Any]) -> str:
    """The rounds as a Markdown table; CPU per pod is the allocating and binding processes'
    (kube-scheduler, plus the controller on its path)."""
    lines = [
        "| workload | path | pods | bound | pods/s | p50 s | p99 s | kube-scheduler CPU/pod "
        "| controller CPU/pod | both | GPU ratio % |",
        "|" + "---|" * 11,
    ]

    def seconds(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.2f}"

    for r in report["rounds"]:
        cpu = r["cpu_ms_per_pod"]
        scheduler = cpu.get("kube-scheduler", 0.0)
        controller = cpu.get("dra-controller")
        lines.append(
            f"| {r['workload']} | {r['path']} | {r['pods']} | {r['bound']} | {r['pods_per_s']} "
            f"| {seconds(r['latency_ms']['p50'])} | {seconds(r['latency_ms']['p99'])} "
            f"| {scheduler:.1f} ms | {'-' if controller is None else f'{controller:.1f} ms'} "
            f"| {scheduler + (controller or 0.0):.1f} ms | {r['allocation_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE_DIR, help="openb folder")
    parser.add_argument(
        "--trace-name", default="gpushare40", help="gpushare40, multigpu30, ...; none: skip"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--settle", type=float, default=20.0, help="seconds without a bind that end a round"
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=4,
        help="pods created by this many clients at once, taking them in workload order",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    trace = None if args.trace_name == "none" else args.trace_name
    report = run(args.nodes, args.pods, args.trace, trace, args.seed, args.settle, args.clients)
    print(json.dumps(report, indent=2))
    print(table(report))


if __name__ == "__main__":
    main()
