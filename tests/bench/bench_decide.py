"""The controller's decision alone: `decide` over a watch-fed view, no API server.

    .venv/bin/python -m tests.bench.bench_decide [--nodes 100] [--pods 1000] [--cpu-shapes 0]

The view is filled through watch events with `bench_controller`'s cluster (nodes of 8 fake H100,
slices from the real slice builder, the four DeviceClasses) and its claims (half a whole GPU,
half a MIG slice); each pod is decided in turn, and its allocations come back as the watch would
bring them. Prints milliseconds per decision for each tenth of the pods (the first decisions on
each node and demand cost more) and over all, as JSON. It measures what the controller's passes
spend in `decide_s`, without the API client's threads beside it. `--cpu-shapes N` gives each
pod one of N CPU requests, drawn log-uniformly (a long tail), so the workload the controller
learns has up to 4 N shapes: what a cluster of varied pods costs the fragmentation score, which
weighs every shape up to 95 % of the pods (at most `fragindex.MAX_SHAPES`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

from controller.decide import Decision, decide
from controller.informer import Event, key_of
from controller.view import ClusterView
from dra_driver.allocator import AllocationMode
from dra_driver.logging_setup import configure_logging
from tests.bench.bench_controller import claim_body
from tests.bench.cluster import cluster_slices, device_classes, node_name
from tests.support import objects

GATE = "gpu.dra-driver.dev/allocation"


class _Feed:
    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.version = 0

    def put(self, resource: str, obj: dict[str, Any], kind: str = "ADDED") -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.view.apply(Event(kind, resource, key_of(obj), obj, None))


async def _run(nodes: int, pods: int, seed: int, cpu_shapes: int = 0) -> dict[str, Any]:
    view = ClusterView(AllocationMode.SCORED)
    feed = _Feed(view)
    for body in device_classes():
        feed.put("deviceclasses", body)
    for i in range(nodes):
        name = node_name(i)
        feed.put("nodes", objects.node(name, labels={"kubernetes.io/hostname": name}, ready=True))
    for body in cluster_slices(nodes):
        feed.put("resourceslices", body)
    started = time.perf_counter()
    view.prepare()
    warm_s = time.perf_counter() - started
    rng = random.Random(seed)
    made = []
    for i in range(pods):
        claim = claim_body(i, rng)
        feed.put("resourceclaims", claim)
        containers = None
        if cpu_shapes:
            cpu = f"{100 + int(cpu_shapes ** rng.random()) - 1}m"
            containers = [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ]
        pod = objects.pod(
            f"pod-{i}",
            [claim["metadata"]["name"]],
            namespace=claim["metadata"]["namespace"],
            uid=f"u{i}",
            gates=[GATE],
            containers=containers,
        )
        feed.put("pods", pod)
        made.append(pod)
    chunk = max(1, pods // 10)
    chunks: list[float] = []
    decided = 0
    total = 0.0
    mark = time.perf_counter()
    for i, pod in enumerate(made):
        tick = time.perf_counter()
        outcome = decide(view, [pod])
        total += time.perf_counter() - tick
        if isinstance(outcome, Decision):
            decided += 1
            for key, allocation in outcome.allocations.items():
                claim = {**view.claims[key], "status": {"allocation": allocation}}
                claim["metadata"] = dict(claim["metadata"])
                feed.put("resourceclaims", claim, "MODIFIED")
        if (i + 1) % chunk == 0:
            chunks.append(round(1000 * (time.perf_counter() - mark) / chunk, 2))
            mark = time.perf_counter()
    index = view.pod_placer().cluster.index
    index.refresh()
    return {
        "nodes": nodes,
        "pods": pods,
        "shapes_kept": len(index.table.p),
        "decided": decided,
        "warm_s": round(warm_s, 2),
        "decide_ms_per_pod": round(1000 * total / pods, 2),
        "ms_per_pod_by_tenth": chunks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu-shapes", type=int, default=0)
    args = parser.parse_args(argv)
    if args.cpu_shapes < 0:
        parser.error(f"--cpu-shapes must be 0 or more, not {args.cpu_shapes}")
    configure_logging("json", "warning")  # stdout carries the figures alone
    result = asyncio.run(_run(args.nodes, args.pods, args.seed, args.cpu_shapes))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
