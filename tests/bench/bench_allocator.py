"""Allocator throughput, latency and memory on a 500-node H100 cluster.

    .venv/bin/python -m tests.bench.bench_allocator [--nodes 500] [--claims 5000] [--mode both]

Each mode runs in its own process so peak RSS is that mode's alone. Claims are placed one at a
time (nodes in name order for first-fit, ranked for scored), each against the usage left by the
earlier ones. Building the slices and the snapshot, and evaluating the DeviceClass selectors on
every device (what the controller does as slices arrive), are timed separately from allocation.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from dra_driver.allocator import AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.placement import warm_class_verdicts
from tests.bench.cluster import claim_mix, cluster_slices, device_classes


def run_mode(mode: AllocationMode, nodes: int, claims: int) -> dict[str, Any]:
    started = time.perf_counter()
    slices = cluster_slices(nodes)
    built = time.perf_counter()
    snapshot = ClusterSnapshot.build(slices, device_classes())
    parsed = time.perf_counter()
    # The snapshot keeps nothing of the slices' JSON; the informer's copy is not ours to count.
    del slices
    warm_class_verdicts(snapshot)
    # The snapshot is long-lived: keep the cyclic collector from rescanning it (as a daemon would).
    gc.collect()
    gc.freeze()
    warmed = time.perf_counter()
    placer = Placer(snapshot, Usage(), mode, explain_failures=False)
    latencies: list[float] = []
    placed = 0
    for claim in claim_mix(claims):
        t0 = time.perf_counter()
        placement = placer.place([claim])
        latencies.append(time.perf_counter() - t0)
        placed += placement.allocations is not None
    total = sum(latencies)
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "mode": mode.value,
        "nodes": nodes,
        "devices": len(snapshot.devices),
        "claims": claims,
        "placed": placed,
        "build_slices_s": round(built - started, 2),
        "snapshot_s": round(parsed - built, 2),
        "class_verdicts_s": round(warmed - parsed, 2),
        "claims_per_s": round(claims / total, 1),
        "p50_ms": round(quantiles[49] * 1000, 3),
        "p99_ms": round(quantiles[98] * 1000, 3),
        "max_ms": round(max(latencies) * 1000, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--claims", type=int, default=5000)
    parser.add_argument("--mode", choices=["both", "first-fit", "scored"], default="both")
    parser.add_argument("--json", action="store_true", help="one JSON object per mode")
    args = parser.parse_args()
    if args.mode != "both":
        figures = run_mode(AllocationMode(args.mode), args.nodes, args.claims)
        print(json.dumps(figures) if args.json else _line(figures))
        return
    for mode in AllocationMode:
        command = [sys.executable, "-m", "tests.bench.bench_allocator", "--mode", mode.value]
        command += ["--nodes", str(args.nodes), "--claims", str(args.claims)]
        command += ["--json"] if args.json else []
        subprocess.run(command, check=True)


def _line(f: dict[str, Any]) -> str:
    return (
        f"{f['mode']:>9}: {f['nodes']} nodes, {f['devices']} devices, {f['claims']} claims "
        f"({f['placed']} placed): {f['claims_per_s']} claims/s, p50 {f['p50_ms']} ms, "
        f"p99 {f['p99_ms']} ms, max {f['max_ms']} ms, peak RSS {f['peak_rss_mib']} MiB "
        f"[setup: slices {f['build_slices_s']} s, snapshot {f['snapshot_s']} s, "
        f"class verdicts {f['class_verdicts_s']} s]"
    )


if __name__ == "__main__":
    main()
