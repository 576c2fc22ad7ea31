"""Queues under load: borrowing, fair order and reclaim on 100 nodes x 8 H100.

    .venv/bin/python -m tests.bench.bench_queues                  # 100 nodes, 4 queues
    .venv/bin/python -m tests.bench.bench_queues --nodes 20       # smaller, quicker

Four queues (namespaces q0..q3) are each guaranteed a quarter of the GPUs. Three of them arrive
at once with more pods than the cluster holds (a burst of `--overload` times the capacity, in
GPU-equivalents: one-GPU pods, two-GPU pods and 3g.40gb MIG slices), so they borrow q3's
share. Then q3 arrives with pods for its whole guarantee and must get it back by reclaim.

Reported: the controller's pods/s for the burst, with queues and (same workload, no GpuQueue
objects) without; GPU utilisation while demand exceeds capacity (allocated GPU-equivalents over
capacity, sampled from the controller's queue gauges); for the starved queue the time from its
arrival (its first pod sent) until it holds its guarantee (the gate of the last pod it needs
seen lifted by this process's watch; `reached_noticed_by_sampling_s` is when the 0.25 s sampling
loop noticed it, as figures before this field was added were read), and its pods' latency
p50/p99; evictions.

The API server and the controller run as processes (as in bench_controller); this process plays
the resourceclaim controller: when a pod is gone, it drops the pod from its claim's
`reservedFor` and deletes the claim, which the controller then releases (no kubelet runs here,
so evicted pods go at once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.queues import GROUP as QGROUP
from dra_driver.queues import PLURAL as QPLURAL
from dra_driver.queues import VERSION as QVERSION
from localcluster.crds import bundled_definitions
from tests.bench.bench_controller import (
    cpu_seconds,
    free_port,
    peak_rss_mib,
    publish,
    start_apiserver,
    start_controller,
    wait_ready,
)

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"
GROUP, VERSION = "resource.k8s.io", "v1"
QUEUES = 4
QUIET_S = 8.0
#: The starved queue's wait ends early once none of its pods was placed for this long.
STARVED_QUIET_S = 20.0
#: (GPU-equivalents, share of pods): whole GPU, two GPUs, a 3g.40gb slice (4 of 8 slices).
SHAPES = ((1.0, 0.6), (2.0, 0.2), (0.5, 0.2))


def claim_body(namespace: str, name: str, gpus: float) -> dict[str, Any]:
    if gpus == 0.5:
        request: dict[str, Any] = {
            "deviceClassName": "mig.dra-driver.dev",
            "selectors": [
                {"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "3g.40gb"'}}
            ],
        }
    else:
        request = {"deviceClassName": "gpu.dra-driver.dev", "count": int(gpus)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": request}]}},
    }


def pod_body(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        },
    }


def workload(capacity: int, overload: float, seed: int) -> list[tuple[str, str, float]]:
    """(namespace, name, GPU-equivalents) of the burst: q0..q2 in turns, `overload` x capacity."""
    rng = random.Random(seed)
    weights = [w for _, w in SHAPES]
    pods: list[tuple[str, str, float]] = []
    asked = 0.0
    index = 0
    while asked < overload * capacity:
        gpus = rng.choices([g for g, _ in SHAPES], weights)[0]
        namespace = f"q{index % (QUEUES - 1)}"
        pods.append((namespace, f"p{index}", gpus))
        asked += gpus
        index += 1
    return pods


class Cluster:
    """Watches pods: when gates come off, and plays the claim controller for deleted pods."""

    def __init__(self, api: client.ApiClient) -> None:
        self.lifted: dict[tuple[str, str], float] = {}
        self.deleted: set[tuple[str, str]] = set()
        self.gone_at: dict[tuple[str, str], float] = {}
        """Pod → when its deletion was seen."""
        self.released_at: dict[tuple[str, str], float] = {}
        """Pod → when its claim was released and deleted (as the claim controller does)."""
        self._core = client.CoreV1Api(api)
        self._objects = client.CustomObjectsApi(api)
        self._response: Any = None
        self._lock = threading.Lock()
        self._known: set[tuple[str, str]] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError):  # closed already
                response.shutdown()  # wakes the thread out of its blocking read

    def _run(self) -> None:
        # The server ends a watch now and then: list to catch up, then watch again from there.
        # Events are read as raw JSON lines (as the controller's informers read them): the
        # client's typed models cost this process more CPU than the controller spends per pod.
        while not self._stopped.is_set():
            listed: Any = self._core.list_pod_for_all_namespaces(_preload_content=False)
            body = json.loads(listed.data)
            present = set()
            for raw in body["items"]:
                present.add(self._seen(raw))
            with self._lock:
                gone = set(self._known) - present
            for key in gone:
                self._gone(key)
            try:
                self._response = self._core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=body["metadata"]["resourceVersion"],
                    _preload_content=False,
                )
                for line in iter_resp_lines(self._response):  # type: ignore[no-untyped-call]
                    if not line:
                        continue
                    event = json.loads(line)
                    raw = event.get("object")
                    if not isinstance(raw, dict) or "metadata" not in raw:
                        continue
                    if event["type"] == "DELETED":
                        self._gone((raw["metadata"]["namespace"], raw["metadata"]["name"]))
                    else:
                        self._seen(raw)
            except (urllib3.exceptions.HTTPError, client.ApiException, OSError, ValueError):
                continue

    def _seen(self, raw: dict[str, Any]) -> tuple[str, str]:
        key = (raw["metadata"]["namespace"], raw["metadata"]["name"])
        gates = (raw.get("spec") or {}).get("schedulingGates") or []
        with self._lock:
            self._known.add(key)
            if not any(g.get("name") == GATE for g in gates):
                self.lifted.setdefault(key, time.perf_counter())
        return key

    def _gone(self, key: tuple[str, str]) -> None:
        with self._lock:
            if key in self.deleted:
                return
            self._known.discard(key)
            self.deleted.add(key)
            self.gone_at[key] = time.perf_counter()
        # As the resourceclaim controller does: the pod leaves `reservedFor`, and a claim
        # made for the pod goes with it.
        try:
            self._objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                key[0],
                "resourceclaims",
                key[1],
                {"status": {"reservedFor": None}},
                _content_type="application/merge-patch+json",
            )
            self._objects.delete_namespaced_custom_object(
                GROUP, VERSION, key[0], "resourceclaims", key[1]
            )
        except client.ApiException as err:
            if err.status != 404:
                raise
        with self._lock:
            self.released_at[key] = time.perf_counter()

    def lifted_in(self, namespace: str) -> dict[str, float]:
        with self._lock:
            return {n: t for (ns, n), t in self.lifted.items() if ns == namespace}


def scrape(port: int) -> dict[str, float]:
    """The controller's queue gauges: `used{queue,gpu}` and evictions, from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'dra_controller_queue_used\{queue="([^"]+)",resource="gpu"\} (\S+)', line)
        if match:
            found[f"used:{match[1]}"] = float(match[2])
        match = re.match(r"dra_controller_queue_evictions_total\{[^}]*\} (\S+)", line)
        if match:
            found["evictions"] = found.get("evictions", 0.0) + float(match[1])
    return found


def utilisation(gauges: dict[str, float], capacity: int) -> float:
    return sum(v for k, v in gauges.items() if k.startswith("used:")) / capacity


def run(nodes: int, overload: float, seed: int, queues: bool) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-queues-"))
    apiserver, kubeconfig = start_apiserver(workdir)
    controller: subprocess.Popen[bytes] | None = None
    cluster: Cluster | None = None
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)
        objects = client.CustomObjectsApi(api)
        for crd in bundled_definitions():
            objects.create_cluster_custom_object(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", crd
            )
        publish(api, nodes)
        capacity = nodes * 8
        share = capacity // QUEUES
        for index in range(QUEUES):
            core.create_namespace({"metadata": {"name": f"q{index}"}})
            if queues:
                body = {
                    "apiVersion": f"{QGROUP}/{QVERSION}",
                    "kind": "GpuQueue",
                    "metadata": {"name": f"q{index}"},
                    "spec": {"namespaces": [f"q{index}"], "guaranteed": {"gpu": str(share)}},
                }
                objects.create_cluster_custom_object(QGROUP, QVERSION, QPLURAL, body)
        burst = workload(capacity, overload, seed)
        starved = [(f"q{QUEUES - 1}", f"s{i}", 1.0) for i in range(share)]
        for namespace, name, gpus in [*burst, *starved]:
            objects.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", claim_body(namespace, name, gpus)
            )
        health, metrics = free_port(), free_port()
        controller = start_controller(kubeconfig, workdir, health, f"--metrics-port={metrics}")
        wait_ready(health, controller)
        cluster = Cluster(api)
        cluster.start()
        cpu_before = cpu_seconds(controller.pid)
        first = time.perf_counter()
        for namespace, name, _ in burst:
            core.create_namespaced_pod(namespace, pod_body(namespace, name), _preload_content=False)
        # The burst is over once nothing more is placed for a while.
        samples: list[tuple[float, float]] = []
        """(when, allocated GPU-equivalents / capacity)."""
        # Over once something was placed and then nothing more for QUIET_S (every pod that
        # fits is placed within one or two passes; the rest wait for capacity).
        placed, still = 0, time.perf_counter()
        give_up = still + 600
        while (
            not placed or time.perf_counter() - still < QUIET_S
        ) and time.perf_counter() < give_up:
            time.sleep(0.25)  # sampling another process's gauges
            used = scrape(metrics)
            samples.append((time.perf_counter(), utilisation(used, capacity)))
            count = len(cluster.lifted)
            if count != placed:
                placed, still = count, time.perf_counter()
        burst_times = sorted(cluster.lifted.values())
        burst_s = burst_times[-1] - first if burst_times else float("nan")
        cpu_burst = cpu_seconds(controller.pid) - cpu_before
        cpu_starved = (cpu_seconds(controller.pid), cpu_seconds(apiserver.pid))
        arrived = time.perf_counter()
        for namespace, name, _ in starved:
            core.create_namespaced_pod(namespace, pod_body(namespace, name), _preload_content=False)
        created = time.perf_counter()
        deadline = arrived + 300
        starved_ns = f"q{QUEUES - 1}"
        reached: float | None = None
        got, moved = 0, time.perf_counter()
        done_cpu = cpu_starved
        while time.perf_counter() < deadline:
            time.sleep(0.25)  # sampling another process's gauges
            used = scrape(metrics)
            samples.append((time.perf_counter(), utilisation(used, capacity)))
            count = len(cluster.lifted_in(starved_ns))
            if count != got:
                got, moved = count, time.perf_counter()
                done_cpu = (cpu_seconds(controller.pid), cpu_seconds(apiserver.pid))
            if reached is None and count >= share:
                reached = time.perf_counter() - arrived
                deadline = min(deadline, time.perf_counter() + 3.0)  # and a little after
            if not queues and time.perf_counter() - arrived > 10:
                break  # without queues nobody reclaims: it never gets there
            if got and time.perf_counter() - moved > STARVED_QUIET_S:
                break  # stuck short of the guarantee (e.g. only halves of GPUs left to take)
        created_s = created - arrived
        # CPU from the starved queue's arrival to its last pod placed.
        starved_cpu = {
            "wall_s": round(moved - arrived, 2),
            "controller_s": round(done_cpu[0] - cpu_starved[0], 2),
            "apiserver_s": round(done_cpu[1] - cpu_starved[1], 2),
        }
        latencies = sorted(t - arrived for t in cluster.lifted_in(starved_ns).values())
        # When the last pod of the guarantee had its gate lifted, as the watch saw it; the
        # sampling loop above notices it up to a sampling period (and a scrape) later.
        lifted_at = latencies[share - 1] if len(latencies) >= share else None
        timeline = {
            "starved_created_s": round(created_s, 3),
            "starved_lifted_s": {
                n: round(t - arrived, 3) for n, t in sorted(cluster.lifted_in(starved_ns).items())
            },
            "victims_gone_s": {
                f"{k[0]}/{k[1]}": round(t - arrived, 3) for k, t in sorted(cluster.gone_at.items())
            },
            "victims_released_s": {
                f"{k[0]}/{k[1]}": round(t - arrived, 3)
                for k, t in sorted(cluster.released_at.items())
            },
            "arrived_unix": time.time() - (time.perf_counter() - arrived),
        }
        (workdir / "timeline.json").write_text(json.dumps(timeline, indent=1))
        final = scrape(metrics)
        rss = peak_rss_mib(controller.pid)
    finally:
        if cluster is not None:
            cluster.stop()
        if controller is not None:
            controller.terminate()
            controller.wait(30)
        apiserver.terminate()
        apiserver.wait(30)

    def pct(values: list[float], q: float) -> float | None:
        if not values:
            return None
        return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 2)

    # Demand exceeds capacity from the end of the burst's placements to the end: the cluster
    # should stay full, through reclaim (evicted pods' GPUs idle until the starved pods get them).
    busy = [u for t, u in samples if burst_times and t >= burst_times[-1]]
    return {
        "nodes": nodes,
        "gpus": capacity,
        "queues": QUEUES if queues else 0,
        "burst_pods": len(burst),
        "burst_placed": placed,
        "burst_pods_per_s": None if math.isnan(burst_s) else round(placed / burst_s, 1),
        "controller_cpu_ms_per_placed_pod": round(1000 * cpu_burst / max(1, placed), 2),
        "utilisation_while_overloaded": {
            "mean": round(sum(busy) / len(busy), 4) if busy else None,
            "min": round(min(busy), 4) if busy else None,
            "samples": len(busy),
        },
        "starved_queue": {
            "guarantee_gpus": share,
            "reached_guarantee_s": None if lifted_at is None else round(lifted_at, 2),
            "reached_noticed_by_sampling_s": None if reached is None else round(reached, 2),
            "all_created_s": round(created_s, 2),
            "cpu_until_done": starved_cpu,
            "held_gpus_at_end": final.get(f"used:{starved_ns}", 0.0),
            "placed": len(latencies),
            "latency_s": {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99)},
        },
        "evictions": final.get("evictions", 0.0),
        "controller_peak_rss_mib": round(rss, 1),
        "logs": str(workdir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--overload", type=float, default=1.2, help="burst demand / capacity")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--without-queues", action="store_true", help="only the run without GpuQueue objects"
    )
    parser.add_argument(
        "--with-queues-only", action="store_true", help="only the run with GpuQueue objects"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    results = {}
    if not args.without_queues:
        print("run with queues ...", file=sys.stderr) if sys.stderr.isatty() else None
        results["with_queues"] = run(args.nodes, args.overload, args.seed, queues=True)
    if not args.with_queues_only:
        print("run without queues ...", file=sys.stderr) if sys.stderr.isatty() else None
        results["without_queues"] = run(args.nodes, args.overload, args.seed, queues=False)
    if "with_queues" in results and "without_queues" in results:
        with_q = results["with_queues"]["burst_pods_per_s"]
        without = results["without_queues"]["burst_pods_per_s"]
        if with_q and without:
            results["pods_per_s_ratio"] = round(with_q / without, 3)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
