"""Allocation cases written from the upstream allocator's rules, one row per rule.

Each row names the rule it pins and the function of kube-scheduler's structured allocator
(`structured/internal/incubating/allocator_incubating.go` in k8s.io/dynamic-resource-allocation)
that implements it, the cluster and the claims, and the answer: per claim, in order, the devices
it gets (as `request: device`) or None when it cannot be allocated. Claims are allocated one at a
time, as `simulate` does. Every row runs through `simulate --mode first-fit` and through the
brute-force reference, and both must give the written answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dra_driver.allocator import AllocationMode
from dra_driver.cli.inputs import ClusterObjects
from dra_driver.cli.simulate import simulate
from tests.unit.allocator.strategies import Cluster
from tests.unit.allocator.test_simulate_reference import reference_simulation

Obj = dict[str, Any]
DRIVER = "gpu.example.com"
NODE = "node-a"
CLASSES = {
    "any": [],
    "whole": [f'device.attributes["{DRIVER}"].type == "gpu"'],
    "part": [f'device.attributes["{DRIVER}"].type != "gpu"'],
}


def dev(
    name: str,
    kind: str = "gpu",
    *,
    numa: int = 0,
    mem: int | None = None,
    counter_set: str = "gpu-0",
    taint: str | None = None,
    shared: bool = False,
    memory: str = "8Gi",
) -> Obj:
    """A device; `mem` is what it draws from `counter_set`, `taint` the effect of its taint."""
    device: Obj = {
        "name": name,
        "attributes": {"type": {"string": kind}, "numa": {"int": numa}},
        "capacity": {"memory": {"value": memory}},
    }
    if mem is not None:
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"mem": {"value": str(mem)}}}
        ]
    if taint is not None:
        device["taints"] = [{"key": "example.com/maint", "value": "yes", "effect": taint}]
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def pool(name: str, devices: list[Obj], counters: dict[str, int] | None = None) -> Obj:
    spec: Obj = {
        "driver": DRIVER,
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        "nodeName": NODE,
        "devices": devices,
    }
    if counters:
        spec["sharedCounters"] = [
            {"name": set_name, "counters": {"mem": {"value": str(value)}}}
            for set_name, value in counters.items()
        ]
    return {"metadata": {"name": name}, "spec": spec}


def ask(device_class: str = "any", **fields: Any) -> Obj:
    return {"deviceClassName": device_class, **fields}


def claim(name: str, *requests: Obj, constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"devices": devices}}


def exactly(name: str, **fields: Any) -> Obj:
    return {"name": name, "exactly": ask(**fields)}


def first_available(name: str, *subrequests: tuple[str, Obj]) -> Obj:
    return {"name": name, "firstAvailable": [{"name": n, **a} for n, a in subrequests]}


@dataclass
class Case:
    rule: str
    upstream: str
    slices: list[Obj]
    claims: list[Obj]
    expected: list[list[str] | None]


GPU_SPLIT = [
    pool(
        "gpus",
        [dev("gpu-0", mem=4), dev("half-0", "mig", mem=2), dev("half-1", "mig", mem=2)],
        {"gpu-0": 4},
    )
]
TOLERATE_ALL = [{"operator": "Exists"}]

CASES = [
    Case(
        "admin access still needs the counters: no whole GPU while a half of it is allocated",
        "allocateDevice -> checkAvailableCounters (not skipped for admin access)",
        GPU_SPLIT,
        [
            claim("c0", exactly("r0", device_class="part")),
            claim("c1", exactly("r0", device_class="whole", adminAccess=True)),
        ],
        [["r0: half-0"], None],
    ),
    Case(
        "admin access counts a held device's counters again: fits only where there is room",
        "allocateDevice -> checkAvailableCounters",
        [pool("gpus", [dev("gpu-0", mem=4)], {"gpu-0": 8})],
        [
            claim("c0", exactly("r0", device_class="whole")),
            claim("c1", exactly("r0", device_class="whole", adminAccess=True)),
            claim("c2", exactly("r0", device_class="whole", adminAccess=True)),
        ],
        [["r0: gpu-0"], ["r0: gpu-0"], ["r0: gpu-0"]],
    ),
    Case(
        "admin access skips the in-use check for devices another claim holds",
        "allocateOne (deviceInUse is not asked for admin access)",
        [pool("gpus", [dev("gpu-0")])],
        [
            claim("c0", exactly("r0")),
            claim("c1", exactly("r0", adminAccess=True)),
            claim("c2", exactly("r0")),
        ],
        [["r0: gpu-0"], ["r0: gpu-0"], None],
    ),
    Case(
        "admin access does not take one device twice within its own claim",
        "allocateOne / allocateDevice (allocatingDeviceForClaim)",
        [pool("gpus", [dev("gpu-0")])],
        [claim("c0", exactly("r0", adminAccess=True), exactly("r1", adminAccess=True))],
        [None],
    ),
    Case(
        "an untolerated NoSchedule taint skips the device",
        "allocateDevice -> taintPreventsAllocation",
        [pool("gpus", [dev("gpu-0", taint="NoSchedule"), dev("gpu-1")])],
        [claim("c0", exactly("r0"))],
        [["r0: gpu-1"]],
    ),
    Case(
        "a tolerated NoExecute taint does not",
        "taintPreventsAllocation -> taintTolerated",
        [pool("gpus", [dev("gpu-0", taint="NoExecute"), dev("gpu-1")])],
        [
            claim(
                "c0",
                exactly(
                    "r0",
                    tolerations=[
                        {"key": "example.com/maint", "operator": "Exists", "effect": "NoExecute"}
                    ],
                ),
            )
        ],
        [["r0: gpu-0"]],
    ),
    Case(
        "a toleration for another effect does not tolerate the taint",
        "taintTolerated (ToleratesTaint compares effects)",
        [pool("gpus", [dev("gpu-0", taint="NoExecute")])],
        [
            claim(
                "c0",
                exactly(
                    "r0",
                    tolerations=[
                        {
                            "key": "example.com/maint",
                            "operator": "Equal",
                            "value": "yes",
                            "effect": "NoSchedule",
                        }
                    ],
                ),
            )
        ],
        [None],
    ),
    Case(
        "a taint with effect None never prevents allocation",
        "taintPreventsAllocation (only NoSchedule and NoExecute count)",
        [pool("gpus", [dev("gpu-0", taint="None")])],
        [claim("c0", exactly("r0"))],
        [["r0: gpu-0"]],
    ),
    Case(
        "taints apply to admin access too",
        "allocateDevice -> taintPreventsAllocation (no admin exception)",
        [pool("gpus", [dev("gpu-0", taint="NoSchedule"), dev("gpu-1", taint="NoSchedule")])],
        [
            claim("c0", exactly("r0", adminAccess=True)),
            claim("c1", exactly("r0", adminAccess=True, tolerations=TOLERATE_ALL)),
        ],
        [None, ["r0: gpu-0"]],
    ),
    Case(
        "consumable capacity: shares fit until the device's capacity is used up",
        "allocateOne / allocateDevice -> CmpRequestOverCapacity",
        [pool("gpus", [dev("shared-0", "shared", shared=True, memory="4Gi")])],
        [
            claim("c0", exactly("r0", capacity={"requests": {"memory": "3Gi"}})),
            claim("c1", exactly("r0", capacity={"requests": {"memory": "1Gi"}})),
            claim("c2", exactly("r0", capacity={"requests": {"memory": "1Gi"}})),
        ],
        [["r0: shared-0"], ["r0: shared-0"], None],
    ),
    Case(
        "a shared device draws its counters once, however many shares it has",
        "allocateDevice (skipCounterCheck when capacity is in use)",
        [
            pool(
                "gpus",
                [
                    dev("shared-0", "shared", mem=2, shared=True, memory="4Gi"),
                    dev("half-0", "mig", mem=2),
                    dev("half-1", "mig", mem=2),
                ],
                {"gpu-0": 4},
            )
        ],
        [
            claim("c0", exactly("r0", capacity={"requests": {"memory": "1Gi"}})),
            claim("c1", exactly("r0", capacity={"requests": {"memory": "1Gi"}})),
            claim("c2", exactly("r0", device_class="part", count=2)),
        ],
        [["r0: shared-0"], ["r0: shared-0"], None],
    ),
    Case(
        "All takes every selectable device, and fails when one of them is in use",
        "validateDeviceRequest (allDevices) / allocateOne (doAllDevices)",
        [pool("gpus", [dev("gpu-0"), dev("half-0", "mig"), dev("half-1", "mig")])],
        [
            claim("c0", exactly("r0", device_class="part", allocationMode="All")),
            claim("c1", exactly("r0", device_class="any", allocationMode="All")),
        ],
        [["r0: half-0", "r0: half-1"], None],
    ),
    Case(
        "firstAvailable falls back to the next subrequest and names it request/subrequest",
        "allocateOne (subrequest loop)",
        GPU_SPLIT,
        [
            claim("c0", exactly("r0", device_class="part")),
            claim("c1", first_available("r0", ("s0", ask("whole")), ("s1", ask("part")))),
        ],
        [["r0: half-0"], ["r0/s1: half-1"]],
    ),
    Case(
        "matchAttribute across a request and a subrequest backtracks into the earlier request",
        "matchAttributeConstraint.add / allocateOne",
        [
            pool(
                "gpus",
                [dev("a0", "mig", numa=0), dev("b0", "gpu", numa=1), dev("b1", "mig", numa=1)],
            )
        ],
        [
            claim(
                "c0",
                exactly("r0", device_class="part"),
                first_available("r1", ("s0", ask("whole")), ("s1", ask("part"))),
                constraints=[{"matchAttribute": f"{DRIVER}/numa"}],
            )
        ],
        [["r0: b1", "r1/s0: b0"]],
    ),
    Case(
        "pools are walked in name order, not in the order their slices arrive",
        "GatherPools (sorted pools) / allocateOne",
        [pool("zeta", [dev("z0")]), pool("alpha", [dev("a0")])],
        [claim("c0", exactly("r0"))],
        [["r0: a0"]],
    ),
]


def _nodes() -> list[Obj]:
    return [{"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}]


def _classes() -> list[Obj]:
    return [
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for name, expressions in CLASSES.items()
    ]


def _devices(allocation: Obj | None) -> list[str] | None:
    if allocation is None:
        return None
    return [f"{r['request']}: {r['device']}" for r in allocation["devices"]["results"]]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_simulate_first_fit_gives_the_upstream_answer(case: Case) -> None:
    objects = ClusterObjects(
        slices=case.slices, classes=_classes(), claims=case.claims, nodes=_nodes()
    )
    got = [_devices(o.allocation) for o in simulate(objects, AllocationMode.FIRST_FIT)]
    assert got == case.expected


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_reference_gives_the_upstream_answer(case: Case) -> None:
    cluster = Cluster(case.slices, _classes(), _nodes())
    got = [_devices(o[1] if o else None) for o in reference_simulation(cluster, case.claims)]
    assert got == case.expected
