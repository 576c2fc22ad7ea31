"""Allocator throughput, latency and memory on a 500-node H100 cluster.

    .venv/bin/python -m tests.bench.bench_allocator [--nodes 500] [--claims 5000] [--mode both]
        [--mix standard|extended] [--no-check] [--digest]

Each mode runs in its own process so peak RSS is that mode's alone. Claims are placed one at a
time (nodes in name order for first-fit, ranked for scored), each against the usage left by the
earlier ones. Building the slices and the snapshot, and evaluating the DeviceClass selectors on
every device (what the controller does as slices arrive), are timed separately from allocation.

The standard mix keeps figures comparable across changes; the extended mix adds selectors the
projection cache cannot share (a CEL evaluation per device, on `pciBusID` and on capacity) and
GPU pairs on one PCIe root, which make first fit backtrack. After the timed loop, every
allocation is checked by the independent checker (dra_driver/checker), untimed.

Peak RSS is the whole process's. By default it includes the generated slices' JSON, all of it
held at once (as a controller's informer would hold it); with --stream, slices are generated
while the snapshot reads them, so the peak is what the allocator itself holds (snapshot,
verdicts, usage, caches), and slice generation is timed within "snapshot".

--digest adds a SHA-256 over every claim's outcome (index, node, allocation, in claim order), so a
change meant to be faster only can be shown to give the same answers: run it before and after.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from dra_driver.allocator import AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.placement import warm_class_verdicts
from dra_driver.checker.rules import check_allocations
from tests.bench.cluster import (
    EXTENDED_MIX,
    MIX,
    claim_mix,
    cluster_slices,
    device_classes,
    iter_cluster_slices,
)

MIXES = {"standard": MIX, "extended": EXTENDED_MIX}


def run_mode(
    mode: AllocationMode,
    nodes: int,
    claims: int,
    mix: str = "standard",
    check: bool = True,
    stream: bool = False,
    digest: bool = False,
) -> dict[str, Any]:
    started = time.perf_counter()
    if stream:
        # Slices are generated while the snapshot reads them (generation and parse are timed
        # together, reported as snapshot): the peak is then the allocator's, not the JSON's.
        slices: Iterable[dict[str, Any]] = iter_cluster_slices(nodes)
    else:
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
    placed: list[dict[str, Any]] = []
    outcomes = hashlib.sha256()
    # CPU time of the loop: steadier than claims/s when other jobs share the machine.
    cpu_started = time.process_time()
    for index, claim in enumerate(claim_mix(claims, mix=MIXES[mix])):
        t0 = time.perf_counter()
        placement = placer.place([claim])
        latencies.append(time.perf_counter() - t0)
        if digest:
            outcome = [index, placement.node, placement.allocations]
            outcomes.update(json.dumps(outcome, sort_keys=True).encode())
        if placement.allocations is not None:
            placed.append({**claim, "status": {"allocation": placement.allocations[0]}})
    loop_cpu_s = time.process_time() - cpu_started
    peak_total = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    violations: int | None = None
    if check:
        found = check_allocations(cluster_slices(nodes), device_classes(), placed)
        violations = len(found)
        for violation in found[:5]:
            print(f"violation: {violation}", file=sys.stderr)
    total = sum(latencies)
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "mode": mode.value,
        "mix": mix,
        "stream": stream,
        "nodes": nodes,
        "devices": len(snapshot.devices),
        "claims": claims,
        "placed": len(placed),
        "build_slices_s": round(built - started, 2),
        "snapshot_s": round(parsed - built, 2),
        "class_verdicts_s": round(warmed - parsed, 2),
        "claims_per_s": round(claims / total, 1),
        "loop_cpu_s": round(loop_cpu_s, 2),
        "p50_ms": round(quantiles[49] * 1000, 3),
        "p99_ms": round(quantiles[98] * 1000, 3),
        "max_ms": round(max(latencies) * 1000, 3),
        "peak_rss_mib": peak_total,
        "violations": violations,
        "digest": outcomes.hexdigest()[:16] if digest else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--claims", type=int, default=5000)
    parser.add_argument("--mode", choices=["both", "first-fit", "scored"], default="both")
    parser.add_argument("--mix", choices=sorted(MIXES), default="standard")
    parser.add_argument(
        "--no-check", action="store_true", help="skip checking the allocations afterwards"
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="generate slices while the snapshot reads them (peak RSS without the JSON)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per mode")
    parser.add_argument(
        "--digest", action="store_true", help="print a hash of every claim's node and devices"
    )
    args = parser.parse_args()
    if args.mode != "both":
        figures = run_mode(
            AllocationMode(args.mode),
            args.nodes,
            args.claims,
            args.mix,
            not args.no_check,
            args.stream,
            args.digest,
        )
        print(json.dumps(figures) if args.json else _line(figures))
        if figures["violations"]:
            sys.exit(1)
        return
    for mode in AllocationMode:
        command = [sys.executable, "-m", "tests.bench.bench_allocator", "--mode", mode.value]
        command += ["--nodes", str(args.nodes), "--claims", str(args.claims), "--mix", args.mix]
        command += ["--json"] if args.json else []
        command += ["--no-check"] if args.no_check else []
        command += ["--stream"] if args.stream else []
        command += ["--digest"] if args.digest else []
        subprocess.run(command, check=True)


def _line(f: dict[str, Any]) -> str:
    checked = (
        "not checked"
        if f["violations"] is None
        else ("checker: all valid" if not f["violations"] else f"{f['violations']} VIOLATIONS")
    )
    return (
        f"{f['mode']:>9} ({f['mix']} mix{', streamed' if f['stream'] else ''}): "
        f"{f['nodes']} nodes, {f['devices']} devices, "
        f"{f['claims']} claims ({f['placed']} placed, {checked}): {f['claims_per_s']} claims/s, "
        f"p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms, max {f['max_ms']} ms, "
        f"peak RSS {f['peak_rss_mib']} MiB "
        f"[setup: slices {f['build_slices_s']} s, snapshot {f['snapshot_s']} s, "
        f"class verdicts {f['class_verdicts_s']} s]"
        + (f" digest {f['digest']}" if f["digest"] else "")
    )


if __name__ == "__main__":
    main()
