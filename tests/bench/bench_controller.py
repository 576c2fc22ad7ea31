"""Allocation controller end to end: gated pods in, gates lifted, on 100 nodes x 8 H100.

    .venv/bin/python -m tests.bench.bench_controller                 # 1,000 pods at once
    .venv/bin/python -m tests.bench.bench_controller --rate 100      # 100 pods/s arriving

The embedded API server runs as its own process (`dra-driver apiserver`), and so does the
controller (`dra-controller`, scored mode, no leader election); this process publishes the
nodes' slices (built by the real slice builder from fake H100s), creates the claims, then creates
the gated pods and watches them. A pod's latency is from just before its create call to the
watch event that shows its gate gone; pods/s is the pod count over the time from the first
create to the last gate lifted. Half the pods ask for a whole GPU, half for a MIG slice (1g, 2g
or 3g). Peak RSS is the controller process's high-water mark (VmHWM). `BENCH_WRAP` (a command
line, e.g. a sampling profiler) is put in front of the controller's command when set;
`BENCH_REQUEST_LOG=1` has the API server log every request to `requests.log` in the work
directory (`dra-driver apiserver --request-log`), to count the calls the controller makes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices
from tests.bench.cluster import device_classes, node_name

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"
NAMESPACE = "bench"
GROUP, VERSION = "resource.k8s.io", "v1"
PRODUCT = "H100-SXM5-80GB"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_apiserver(workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    kubeconfig = workdir / "kubeconfig"
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "apiserver",
            f"--port={port}",
            f"--kubeconfig-out={kubeconfig}",
            *(
                [f"--request-log={workdir / 'requests.log'}"]
                if os.environ.get("BENCH_REQUEST_LOG")
                else []
            ),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "apiserver.log").open("wb"),
    )
    deadline = time.monotonic() + 60
    while not kubeconfig.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the API server did not start")
        time.sleep(0.05)  # waiting for another process to write its file
    return process, kubeconfig


def publish(api: client.ApiClient, nodes: int) -> int:
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    devices = 0
    for index in range(nodes):
        name = node_name(index)
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        backend = FakeBackend.from_spec(f"{PRODUCT}:8", name)
        for body in build_resource_slices(backend.inventory(), SliceSettings()):
            devices += len(body["spec"].get("devices") or [])
            objects.create_cluster_custom_object(
                GROUP, VERSION, "resourceslices", body, _preload_content=False
            )
    for body in device_classes():
        objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
    return devices


def claim_body(index: int, rng: random.Random) -> dict[str, Any]:
    if index % 2 == 0:
        request: dict[str, Any] = {"deviceClassName": "gpu.dra-driver.dev"}
    else:
        profile = rng.choice(("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"))
        request = {
            "deviceClassName": "mig.dra-driver.dev",
            "selectors": [
                {"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "{profile}"'}}
            ],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{index}", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": request}]}},
    }


def pod_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{index}", "namespace": NAMESPACE},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{index}"}],
        },
    }


class GateWatcher:
    """Records when each pod's gate is seen gone, from a pod watch in a thread."""

    def __init__(self, api: client.ApiClient, expected: int) -> None:
        self.lifted: dict[str, float] = {}
        self.expected = expected
        self.done = threading.Event()
        self._core = client.CoreV1Api(api)
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        stream = self._watch.stream(  # type: ignore[no-untyped-call]
            self._core.list_namespaced_pod, NAMESPACE, _preload_content=False
        )
        for event in stream:
            raw = event.get("raw_object") or event.get("object")
            if not isinstance(raw, dict):
                continue
            gates = (raw.get("spec") or {}).get("schedulingGates") or []
            name = raw["metadata"]["name"]
            if not any(g.get("name") == GATE for g in gates) and name not in self.lifted:
                self.lifted[name] = time.perf_counter()
                if len(self.lifted) >= self.expected:
                    self.done.set()
                    self._watch.stop()  # type: ignore[no-untyped-call]


def wait_ready(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the controller exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # polling another process's readiness endpoint
    raise SystemExit("the controller did not become ready")


def start_controller(
    kubeconfig: Path, workdir: Path, health: int, *flags: str
) -> subprocess.Popen[bytes]:
    """`dra-controller` as a process of its own, without leader election, logging to the
    work directory; `BENCH_WRAP` (e.g. a sampling profiler) goes in front of it when set."""
    wrap = os.environ.get("BENCH_WRAP", "").split()
    return subprocess.Popen(
        [
            *wrap,
            sys.executable,
            "-m",
            "controller.cli",
            f"--kubeconfig={kubeconfig}",
            "--no-leader-elect",
            f"--healthcheck-port={health}",
            "--log-format=json",
            "--log-level=" + os.environ.get("BENCH_CONTROLLER_LOG_LEVEL", "warning"),
            *flags,
        ],
        stderr=(workdir / "controller.log").open("wb"),
    )


def run(nodes: int, pods: int, rate: float, mode: str, seed: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-ctl-"))
    apiserver, kubeconfig = start_apiserver(workdir)
    controller: subprocess.Popen[bytes] | None = None
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        devices = publish(api, nodes)
        objects = client.CustomObjectsApi(api)
        rng = random.Random(seed)
        for index in range(pods):
            objects.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "resourceclaims", claim_body(index, rng)
            )
        setup_s = time.perf_counter() - started
        health = free_port()
        controller = start_controller(kubeconfig, workdir, health, f"--mode={mode}")
        started = time.perf_counter()
        wait_ready(health, controller)
        sync_s = time.perf_counter() - started
        watcher = GateWatcher(api, pods)
        watcher.start()
        core = client.CoreV1Api(api)
        created: dict[str, float] = {}
        cpu_before = (cpu_seconds(controller.pid), cpu_seconds(apiserver.pid))
        first = time.perf_counter()
        for index in range(pods):
            if rate > 0:
                due = first + index / rate
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)  # pacing arrivals at the requested rate
            created[f"pod-{index}"] = time.perf_counter()
            core.create_namespaced_pod(NAMESPACE, pod_body(index), _preload_content=False)
        # One client creates the pods one after another: "all at once" arrives no faster than
        # that, so the span is reported beside pods/s to show which of the two limits it.
        create_span = time.perf_counter() - first
        if not watcher.done.wait(600):
            raise SystemExit(f"only {len(watcher.lifted)} of {pods} gates were lifted")
        last = max(watcher.lifted.values())
        latencies = sorted(watcher.lifted[n] - created[n] for n in created)
        rss = peak_rss_mib(controller.pid)
        cpu = (
            cpu_seconds(controller.pid) - cpu_before[0],
            cpu_seconds(apiserver.pid) - cpu_before[1],
        )
    finally:
        if controller is not None:
            controller.terminate()
            controller.wait(30)
        apiserver.terminate()
        apiserver.wait(30)

    def ms(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, round(q * (len(latencies) - 1)))]

    return {
        "nodes": nodes,
        "devices": devices,
        "pods": pods,
        "mode": mode,
        "arrival_rate": rate or "all at once",
        "pods_per_s": round(pods / (last - first), 1),
        "created_per_s": round(pods / create_span, 1),
        "latency_ms": {
            "p50": round(ms(0.5), 1),
            "p99": round(ms(0.99), 1),
            "max": round(1000 * latencies[-1], 1),
            "mean": round(1000 * statistics.fmean(latencies), 1),
        },
        "controller_peak_rss_mib": round(rss, 1),
        "cpu_ms_per_pod": {
            "controller": round(1000 * cpu[0] / pods, 2),
            "apiserver": round(1000 * cpu[1] / pods, 2),
        },
        "setup_s": round(setup_s, 1),
        "controller_sync_s": round(sync_s, 1),
        "logs": str(workdir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=0, help="pods/s arriving; 0: all at once")
    parser.add_argument("--mode", choices=("scored", "first-fit"), default="scored")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print(json.dumps(run(args.nodes, args.pods, args.rate, args.mode, args.seed), indent=2))


if __name__ == "__main__":
    main()
