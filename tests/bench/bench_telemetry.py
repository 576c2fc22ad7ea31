"""Kubelet plugin telemetry: CPU per sampling cycle, and prepare latency with sampling on and off.

    .venv/bin/python -m tests.bench.bench_telemetry [--cycles 500] [--claims 1000]
        [--interval 0.1]

Sampling cost: a plugin (in this process, on the embedded API server) with 8 fake H100 (MIG mode
off) and 16 time-slice shares prepared, two per GPU, each reserved for a pod of its own that
runs one fake process (`apply_pod_load`, 30 %), whose `/proc/PID/cgroup` lies under the plugin's
proc root. Its own sampler runs `sample_once()` back to back `--cycles` times: the backend's
usage, attribution of every process to its pod through its cgroup file, the per-device metrics
and the idle tracking (the Idle condition is written on transitions only, none here: every share
is busy). CPU is this process's (all threads) over those cycles, divided per cycle and per GPU;
the target is at most 1 ms per GPU per cycle.

Prepare latency: the plugin benchmark (`bench_plugin`, whole GPUs, 8 workers) twice, with the
plugin's `--telemetry-interval=0` (off) and `--telemetry-interval=<--interval>` (on, with a proc
root of its own), on this same machine one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from kubernetes import client

from dra_driver.backends.fake.load import apply_pod_load
from dra_driver.kubeletapi import DRA_V1
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from dra_driver.logging_setup import configure_logging
from localcluster.apiserver import ApiServer
from tests.bench import bench_plugin
from tests.integration.plugin.harness import (
    create_claim,
    create_node,
    result,
    running_plugin,
    short_dir,
)

NODE = "bench-telemetry"
GPUS = 8
SHARES_PER_GPU = 2
LOAD_PERCENT = 30.0
#: The sampler's own loop must not run beside the measured cycles: one cycle at start, then this.
IDLE_LOOP_S = 3600.0


def _reserve(api: client.ApiClient, name: str, pod: str, pod_uid: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "resource.k8s.io",
        "v1",
        "default",
        "resourceclaims",
        name,
        {"status": {"reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]}},
        _content_type="application/merge-patch+json",
    )


async def sampling_cost(cycles: int) -> dict[str, Any]:
    with ApiServer(port=0) as server, short_dir() as root:
        api = client.ApiClient(client.Configuration(host=server.url))
        create_node(api, NODE)
        spec = root / "gpus.yaml"
        spec.write_text(
            f"gpus:\n  - profile: H100-SXM5-80GB\n    count: {GPUS}\n    migEnabled: false\n"
        )
        proc_root, state_dir = root / "proc", root / "fake"
        async with running_plugin(
            server,
            root,
            NODE,
            str(spec),
            fake_state_dir=state_dir,
            proc_root=proc_root,
            telemetry_interval_s=IDLE_LOOP_S,
            health_poll_s=60.0,
        ) as plugin:
            sampler = plugin.daemon.telemetry
            assert sampler is not None, "telemetry is off"
            uuids = [g.uuid for g in plugin.backend.inventory().gpus]
            refs: list[ClaimRef] = []
            for gpu in range(GPUS):
                for share in range(SHARES_PER_GPU):
                    name, uid = create_claim(api, [result("gpu", f"gpu-{gpu}-ts-{share}", NODE)])
                    pod_uid = str(uuid.uuid4())
                    _reserve(api, name, f"pod-{gpu}-{share}", pod_uid)
                    apply_pod_load(state_dir, NODE, proc_root, pod_uid, [uuids[gpu]], LOAD_PERCENT)
                    refs.append(ClaimRef("default", uid, name))
            async with DraClient(plugin.dra_socket, DRA_V1) as dra:
                answer = await dra.prepare(refs)
            errors = [answer[r.uid].error for r in refs if answer[r.uid].error]
            assert not errors, errors
            # The first cycle reads every claim's pods from the API server, once.
            await sampler.sample_once()
            await sampler.flush_writes()
            series = plugin.daemon.metrics.device_usage_keys()
            assert len(series) == GPUS * SHARES_PER_GPU, f"{len(series)} devices sampled"
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(cycles):
                await sampler.sample_once()
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - wall0
            await sampler.flush_writes()
            registry = plugin.daemon.metrics.registry
            shares = [
                registry.get_sample_value(
                    "dra_device_utilization_percent",
                    {
                        "node": NODE,
                        "gpu_uuid": uuids[0],
                        "device": f"gpu-0-ts-{k}",
                        "claim_namespace": "default",
                        "claim_name": refs[k].name,
                        "pods": f"pod-0-{k}",
                    },
                )
                for k in range(SHARES_PER_GPU)
            ]
        api.close()  # type: ignore[no-untyped-call]
    assert shares == [LOAD_PERCENT] * SHARES_PER_GPU, f"shares attributed {shares}"
    per_cycle_ms = cpu / cycles * 1000
    return {
        "gpus": GPUS,
        "shares_prepared": GPUS * SHARES_PER_GPU,
        "fake_processes": GPUS * SHARES_PER_GPU,
        "cycles": cycles,
        "cpu_ms_per_cycle": round(per_cycle_ms, 3),
        "cpu_ms_per_gpu_per_cycle": round(per_cycle_ms / GPUS, 3),
        "wall_ms_per_cycle": round(wall / cycles * 1000, 3),
    }


async def prepare_latency(claims: int, interval: float) -> list[dict[str, Any]]:
    rows = []
    for label, args in (
        ("off", ("--telemetry-interval=0",)),
        ("on", (f"--telemetry-interval={interval:g}", "--proc-root={tmp}/proc")),
    ):
        figures = await bench_plugin.run(claims, 8, "gpu", False, args)
        keep = ("prepare_p50_ms", "prepare_p99_ms", "unprepare_p50_ms", "unprepare_p99_ms")
        rows.append(
            {
                "sampling": label,
                "interval_s": interval if label == "on" else None,
                "claims": claims,
                **{k: figures[k] for k in keep},
                "plugin_cpu_ms_per_cycle": figures["plugin_cpu_ms_per_cycle"],
                "cycles_per_s": figures["cycles_per_s"],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cycles", type=int, default=500, help="sampling cycles measured")
    parser.add_argument("--claims", type=int, default=1000, help="prepare/unprepare cycles")
    parser.add_argument(
        "--interval", type=float, default=0.1, help="telemetry interval (s) with sampling on"
    )
    args = parser.parse_args()
    # The in-process plugin's own log lines would bury the figures on stdout.
    configure_logging(level="warning")
    print(json.dumps(asyncio.run(sampling_cost(args.cycles))), flush=True)
    for row in asyncio.run(prepare_latency(args.claims, args.interval)):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
