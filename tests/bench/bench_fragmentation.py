"""Fragmentation: how far a MIG-heavy arrival/departure trace gets before the first rejection.

    .venv/bin/python -m tests.bench.bench_fragmentation [--nodes 500] [--seed 11]

The trace (fixed seed) mixes MIG claims of every H100 profile with whole-GPU claims; after each
arrival, a random live claim departs with probability `--departure`. Both modes replay the same
trace; for each we print the claims placed before the first rejection and the memory-slice
utilisation of the cluster at that point (used memory-slice counters / all of them).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import Any

from dra_driver.allocator import AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.placement import warm_class_verdicts
from tests.bench.cluster import cluster_slices, device_classes, mig, whole_gpus

ARRIVALS = (
    ("1g.10gb", 0.28),
    ("2g.20gb", 0.20),
    ("3g.40gb", 0.14),
    ("4g.40gb", 0.10),
    ("7g.80gb", 0.08),
    ("gpu", 0.20),
)


SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8, "gpu": 8}
"""Memory slices (of 8 on an H100) each kind of claim occupies."""


def trace(seed: int, occupancy: float, length: int, gpus: int) -> list[tuple[str, Any]]:
    """("arrive", claim) and ("depart", index of an earlier arrival) events.

    A busy cluster at steady state: claims arrive one after another, and whenever the live
    claims' demand goes above `occupancy` of all memory slices, randomly chosen live claims
    depart until it is below again. Demand never exceeds capacity, so a rejection can only come
    from fragmentation: free slices scattered where the arriving claim cannot use them.
    """
    rng = random.Random(seed)
    kinds = [k for k, _ in ARRIVALS]
    weights = [w for _, w in ARRIVALS]
    budget = occupancy * gpus * 8
    events: list[tuple[str, Any]] = []
    live: list[tuple[int, int]] = []
    demand = 0
    for i in range(length):
        kind = rng.choices(kinds, weights)[0]
        while live and demand + SLICES[kind] > budget:
            index, slices = live.pop(rng.randrange(len(live)))
            demand -= slices
            events.append(("depart", index))
        name = f"t{i:06d}"
        events.append(("arrive", whole_gpus(name) if kind == "gpu" else mig(name, kind)))
        live.append((i, SLICES[kind]))
        demand += SLICES[kind]
    return events


def memory_slice_utilisation(snapshot: ClusterSnapshot, usage: Usage) -> float:
    total = 0.0
    used = 0.0
    for pool in snapshot.pools:
        counters = usage.counters.get(pool.index)
        for (_set, name), index in pool.counter_index.items():
            if name.startswith("memory-slice-"):
                total += float(pool.counter_totals[index])
                used += float(counters[index]) if counters is not None else 0.0
    return used / total if total else 0.0


def replay(
    snapshot: ClusterSnapshot, events: list[tuple[str, Any]], mode: AllocationMode
) -> dict[str, Any]:
    usage = Usage()
    placer = Placer(snapshot, usage, mode, explain_failures=False)
    placed: dict[int, tuple[dict[str, Any], str]] = {}
    arrivals = 0
    started = time.perf_counter()
    for kind, payload in events:
        if kind == "depart":
            found = placed.pop(payload, None)
            if found is not None:
                placer.release(found[0], found[1])
            continue
        placement = placer.place([payload])
        if placement.allocations is None or placement.node is None:
            break
        placed[arrivals] = (placement.allocations[0], placement.node)
        arrivals += 1
    return {
        "mode": mode.value,
        "placed_before_first_rejection": arrivals,
        "live_claims": len(placed),
        "memory_slice_utilisation": round(memory_slice_utilisation(snapshot, usage), 4),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--occupancy", type=float, default=0.90)
    parser.add_argument("--length", type=int, default=0, help="arrivals (default: 10 per GPU)")
    args = parser.parse_args()
    snapshot = ClusterSnapshot.build(cluster_slices(args.nodes), device_classes())
    warm_class_verdicts(snapshot)
    gc.collect()
    gc.freeze()  # the snapshot is long-lived: keep the cyclic collector from rescanning it
    gpus = args.nodes * 8
    events = trace(args.seed, args.occupancy, args.length or gpus * 10, gpus)
    results = [replay(snapshot, events, mode) for mode in AllocationMode]
    arrivals = sum(1 for kind, _ in events if kind == "arrive")
    for r in results:
        placed = r["placed_before_first_rejection"]
        outcome = (
            f"no rejection in all {arrivals} arrivals"
            if placed == arrivals
            else f"{placed} claims placed before the first rejection"
        )
        print(
            f"{r['mode']:>9}: {outcome}, {r['live_claims']} live, memory-slice utilisation "
            f"{r['memory_slice_utilisation']:.1%} ({r['seconds']} s)"
        )
    base = results[0]["placed_before_first_rejection"]
    scored = results[1]["placed_before_first_rejection"]
    if base:
        bound = "at least " if scored == arrivals else ""
        print(f"scored places {bound}{scored / base - 1:+.1%} claims compared with first-fit")


if __name__ == "__main__":
    main()
