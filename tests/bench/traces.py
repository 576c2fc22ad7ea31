"""The openb traces (Weng et al., USENIX ATC '23) as Kubernetes objects: Nodes, slices, Pods.

Per GPU, the slices publish a whole device and a consumable-capacity shared device
(`gpumilli: 1000`, `allowMultipleAllocations`) that exclude each other through a shared counter,
so a GPU is either one pod's or shared by fractional pods. A pod's `gpu_spec` becomes a CEL
selector on the model attribute. Nodes carry `status.allocatable` CPU and memory.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = "gpu.sim.dra-driver.dev"
NAMESPACE = "trace"


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]

    @property
    def gpu_demand(self) -> float:
        return self.num_gpu * self.gpu_milli / 1000


def read_nodes(directory: Path) -> list[dict[str, str]]:
    with (directory / "openb_node_list_gpu_node.csv").open() as f:
        return list(csv.DictReader(f))


def read_pods(directory: Path, trace: str) -> list[TracePod]:
    with (directory / f"openb_pod_list_{trace}.csv").open() as f:
        rows = list(csv.DictReader(f))
    return [
        TracePod(
            r["name"],
            int(r["cpu_milli"]),
            int(r["memory_mib"]),
            int(r["num_gpu"]),
            int(r["gpu_milli"]) if int(r["num_gpu"]) else 0,
            tuple(m for m in (r.get("gpu_spec") or "").split("|") if m),
        )
        for r in rows
    ]


def inflate(pods: list[TracePod], capacity: float, target: float, seed: int) -> list[TracePod]:
    """Pods sampled with replacement until their GPU demand reaches `target` times `capacity`."""
    rng = random.Random(seed)
    out: list[TracePod] = []
    demand = 0.0
    while demand < target * capacity:
        pod = rng.choice(pods)
        out.append(pod)
        demand += pod.gpu_demand
    return out


def paper_arrivals(
    pods: list[TracePod], capacity: float, target: float, rng: random.Random
) -> list[TracePod]:
    """The arrivals as FGD's simulator makes them for the paper's runs: every pod of the trace
    once, shuffled; then, if their demand is above `target` times `capacity`, random pods
    dropped until it is not, else random pods of the trace (with replacement) appended while
    the next one still fits under it."""
    out = list(pods)
    rng.shuffle(out)
    demand = sum(p.gpu_demand for p in out)
    if demand > target * capacity:
        while out and demand > target * capacity:
            demand -= out.pop(rng.randrange(len(out))).gpu_demand
        return out
    while pods:
        extra = rng.choice(pods)
        if demand + extra.gpu_demand > target * capacity:
            break
        demand += extra.gpu_demand
        out.append(extra)
    return out


def paper_node_names(rows: list[dict[str, str]], rng: random.Random) -> list[dict[str, str]]:
    """The nodes as FGD's simulator names them: in name order, each prefixed by a distinct
    random four-digit number. Its scheduler breaks equal scores by the lowest name, so ties go
    to a random node order fixed for the run, not to the trace's (which lists nodes by GPU
    model)."""
    ordered = sorted(rows, key=lambda r: r["sn"])
    prefixes = rng.sample(range(len(ordered)), len(ordered))
    return [{**r, "sn": f"{k:04d}-{r['sn']}"} for k, r in zip(prefixes, ordered, strict=True)]


def cluster(rows: list[dict[str, str]]) -> tuple[list[Any], list[Any], list[Any]]:
    """(nodes, slices, device classes)."""
    nodes: list[Any] = []
    slices: list[Any] = []
    for row in rows:
        name = row["sn"]
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {
                    "allocatable": {
                        "cpu": f"{row['cpu_milli']}m",
                        "memory": f"{row['memory_mib']}Mi",
                        "pods": "1000",
                    }
                },
            }
        )
        gpus = int(row["gpu"])
        if not gpus:
            continue
        devices: list[Any] = []
        for i in range(gpus):
            attributes = {"model": {"string": row["model"]}, "index": {"int": i}}
            takes = [{"counterSet": "gpus", "counters": {f"gpu-{i}": {"value": "1"}}}]
            devices.append(
                {
                    "name": f"gpu-{i}",
                    "attributes": {**attributes, "kind": {"string": "whole"}},
                    "consumesCounters": takes,
                }
            )
            devices.append(
                {
                    "name": f"gpu-{i}-shared",
                    "attributes": {**attributes, "kind": {"string": "shared"}},
                    "capacity": {"gpumilli": {"value": "1000"}},
                    "allowMultipleAllocations": True,
                    "consumesCounters": takes,
                }
            )
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "sharedCounters": [
                        {
                            "name": "gpus",
                            "counters": {f"gpu-{i}": {"value": "1"} for i in range(gpus)},
                        }
                    ],
                    "devices": devices,
                },
            }
        )
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": kind},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && '
                            f'device.attributes["{DRIVER}"].kind == "{kind}"'
                        }
                    }
                ]
            },
        }
        for kind in ("whole", "shared")
    ]
    return nodes, slices, classes


def pod_objects(pod: TracePod, index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Pod and its ResourceClaimTemplate (none for a CPU-only pod)."""
    name = f"{pod.name}-{index}"
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
                    },
                }
            ]
        },
    }
    if not pod.num_gpu:
        return obj, []
    if pod.gpu_milli < 1000:
        exactly: dict[str, Any] = {
            "deviceClassName": "shared",
            "capacity": {"requests": {"gpumilli": str(pod.gpu_milli)}},
        }
    else:
        exactly = {"deviceClassName": "whole", "count": pod.num_gpu}
    if pod.gpu_spec:
        models = ", ".join(f'"{m}"' for m in pod.gpu_spec)
        exactly["selectors"] = [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].model in [{models}]'}}
        ]
    template_name = f"{name}-gpu"
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name}]
    return obj, [template]
