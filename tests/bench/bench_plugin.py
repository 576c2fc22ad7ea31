"""Kubelet plugin: prepare/unprepare latency, cycle rate and memory, over real gRPC.

    .venv/bin/python -m tests.bench.bench_plugin [--claims 1000] [--workers 8] [--shape gpu]
        [--claim-cache]

The plugin runs as its own process (`python -m kubeletplugin.cli`, default log level) on 8 fake
H100s against the embedded API server, exactly as the crash tests start it; this process plays
kubelet. Each worker owns one GPU and runs prepare → unprepare cycles on its own claims
(allocated and reserved, as kubelet sees them), so claims never wait for each other's devices and
every call does the full work: read the claim (from the API server, or the plugin's watched copy
with --claim-cache), checkpoint, write and delete a CDI spec (and for MIG, create and destroy the
instance). CPU is counted over the cycles only, the plugin's and this process's apart. Peak RSS
is the plugin process's high-water mark (VmHWM). `BENCH_WRAP` (a command line, e.g. a sampling
profiler) is put in front of the plugin's command when set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_driver.kubeletapi.client import DraClient, RegistrationClient
from dra_driver.kubeletapi.types import ClaimRef
from localcluster.apiserver import ApiServer
from tests.integration.plugin.harness import DRIVER, create_claim, create_node, result

NODE = "bench-node"
GPUS = "H100-SXM5-80GB:8"
# CDI specs go to /var/run/cdi on a node, which is a tmpfs; /dev/shm is the tmpfs here.
RUNTIME_DIR = "/dev/shm" if Path("/dev/shm").is_dir() else None


def device_for(shape: str, gpu: int) -> tuple[str, dict[str, str] | None]:
    if shape == "gpu":
        return f"gpu-{gpu}", None
    if shape == "mig":
        return f"gpu-{gpu}-mig-1g10gb-0", None
    return f"gpu-{gpu}-shared", {"compute": "10", "memory": "2Gi"}


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def wait_registered(socket: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"plugin exited with {proc.returncode}")
        if socket.exists():
            try:
                async with RegistrationClient(socket, 2.0) as reg:
                    await reg.get_info()
                return
            except Exception:
                pass
        await asyncio.sleep(0.05)
    raise SystemExit("plugin did not start")


async def run(
    claims: int,
    workers: int,
    shape: str,
    claim_cache: bool,
    plugin_args: Sequence[str] = (),
) -> dict[str, Any]:
    """`plugin_args` go to the plugin's command line as they are; `{tmp}` in one stands for the
    run's scratch directory (for paths such as a proc root)."""
    with (
        ApiServer(port=0) as server,
        tempfile.TemporaryDirectory(dir="/tmp") as tmp,
        tempfile.TemporaryDirectory(dir=RUNTIME_DIR) as cdi,
    ):
        root = Path(tmp)
        cdi_root = Path(cdi)
        api = client.ApiClient(client.Configuration(host=server.url))
        create_node(api, NODE)
        kubeconfig = root / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        refs: list[list[ClaimRef]] = [[] for _ in range(workers)]
        for index in range(claims):
            gpu = index % workers
            device, consumed = device_for(shape, gpu)
            share = f"s{index}" if consumed else None
            name, uid = create_claim(
                api, [result("r", device, NODE, share_id=share, consumed=consumed)], reserved=True
            )
            refs[gpu].append(ClaimRef("default", uid, name))
        argv = [
            sys.executable, "-m", "kubeletplugin.cli", f"--node-name={NODE}",
            f"--kubeconfig={kubeconfig}", f"--plugin-dir={root / 'p'}",
            f"--registry-dir={root / 'r'}", f"--cdi-root={cdi_root}",
            f"--state-dir={root / 's'}", f"--fake-state-dir={root / 'f'}",
            f"--fake-gpus={GPUS}", "--log-format=json",
        ]  # fmt: skip
        if claim_cache:
            argv.append("--claim-cache")
        argv += [a.replace("{tmp}", str(root)) for a in plugin_args]
        if os.environ.get("BENCH_WRAP"):
            argv = os.environ["BENCH_WRAP"].split() + argv
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            await wait_registered(root / "r" / f"{DRIVER}-reg.sock", proc)
            prepare_s: list[float] = []
            unprepare_s: list[float] = []

            async def worker(mine: list[ClaimRef]) -> None:
                async with DraClient(root / "p" / "dra.sock") as dra:
                    for ref in mine:
                        t0 = time.perf_counter()
                        answer = await dra.prepare([ref])
                        t1 = time.perf_counter()
                        assert answer[ref.uid].error == "", answer[ref.uid].error
                        undone = await dra.unprepare([ref])
                        t2 = time.perf_counter()
                        assert undone[ref.uid] == "", undone[ref.uid]
                        prepare_s.append(t1 - t0)
                        unprepare_s.append(t2 - t1)

            # CPU is counted over the cycles only, so the plugin's start-up is left out.
            user0, sys0 = cpu_seconds(proc.pid)
            own0 = os.times()
            started = time.perf_counter()
            await asyncio.gather(*(worker(mine) for mine in refs))
            elapsed = time.perf_counter() - started
            own1 = os.times()
            user1, sys1 = cpu_seconds(proc.pid)
            rss = peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
        api.close()

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "shape": shape,
        "claims": claims,
        "workers": workers,
        "claim_cache": claim_cache,
        "cycles_per_s": round(claims / elapsed, 1),
        "prepare_p50_ms": ms(prepare_s, 0.50),
        "prepare_p99_ms": ms(prepare_s, 0.99),
        "unprepare_p50_ms": ms(unprepare_s, 0.50),
        "unprepare_p99_ms": ms(unprepare_s, 0.99),
        "prepare_mean_ms": round(statistics.fmean(prepare_s) * 1000, 2),
        "plugin_peak_rss_mib": round(rss, 1),
        "plugin_cpu_ms_per_cycle": round((user1 - user0 + sys1 - sys0) / claims * 1000, 2),
        "plugin_sys_ms_per_cycle": round((sys1 - sys0) / claims * 1000, 2),
        "bench_cpu_ms_per_cycle": round(
            (own1.user - own0.user + own1.system - own0.system) / claims * 1000, 2
        ),
        "elapsed_s": round(elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--shape", choices=("gpu", "mig", "shared", "all"), default="all")
    parser.add_argument(
        "--claim-cache", action="store_true", help="run the plugin with --claim-cache"
    )
    args = parser.parse_args()
    shapes = ("gpu", "mig", "shared") if args.shape == "all" else (args.shape,)
    for shape in shapes:
        figures = asyncio.run(run(args.claims, args.workers, shape, args.claim_cache))
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
