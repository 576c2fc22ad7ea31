"""An openb trace as the input of `dra-driver simulate`: one JSON `List` on stdout.

    .venv/bin/python -m tests.bench.openb_input ../shared/data/traces/openb gpushare40 > openb.json
    .venv/bin/dra-driver simulate --input openb.json --mode scored --report 100%,120%

The objects are those the trace benchmark replays (tests/bench/traces.py): the Nodes with their
CPU and memory, one ResourceSlice per node with its GPUs, the two DeviceClasses, and per pod of
the trace, in trace order, the Pod and its ResourceClaimTemplate. Every pod arrives at time 0,
so `simulate` places them in file order. Unlike the benchmark, the pods are the trace's own, once
each (no sampling up to 130 % of the GPUs). JSON is YAML, and reads much faster than block YAML.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tests.bench.traces import cluster, pod_objects, read_nodes, read_pods


def objects(directory: Path, trace: str) -> list[dict[str, Any]]:
    nodes, slices, classes = cluster(read_nodes(directory))
    items: list[dict[str, Any]] = [*nodes, *slices, *classes]
    for index, trace_pod in enumerate(read_pods(directory, trace)):
        pod, templates = pod_objects(trace_pod, index)
        items += templates
        items.append(pod)
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path, help="the folder of the openb CSV files")
    parser.add_argument("trace", help="gpushare40, multigpu30, gpuspec20, ...")
    args = parser.parse_args(argv)
    document = {"apiVersion": "v1", "kind": "List", "items": objects(args.directory, args.trace)}
    json.dump(document, sys.stdout, separators=(",", ":"))
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
