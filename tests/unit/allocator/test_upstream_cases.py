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
from tests.support import objects
from tests.unit.allocator.strategies import Cluster
from tests.unit.allocator.test_simulate_reference import reference_simulation

Obj = dict[str, Any]
DRIVER = "gpu.example.com"
NODE = "node-a"
CLASSES = {
    "any": [],
    "shared": ["device.allowMultipleAllocations"],
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


CLASS_CONFIG = {"whole": "W", "part": "P"}
"""Classes with an opaque config, and the value it carries."""


def opaque(value: str) -> Obj:
    return {"opaque": {"driver": DRIVER, "parameters": {"config": value}}}


def claim(
    name: str,
    *requests: Obj,
    constraints: list[Obj] | None = None,
    config: list[Obj] | None = None,
    allocation: Obj | None = None,
) -> Obj:
    """A claim; with `allocation` it is already allocated (in use, not allocated again)."""
    extra = {
        key: value for key, value in (("constraints", constraints), ("config", config)) if value
    }
    status = None if allocation is None else {"allocation": allocation}
    return objects.claim(name, *requests, status=status, **extra)


def held(*devices: str) -> Obj:
    """An allocation holding `devices` of pool `gpus` exclusively."""
    results = [{"request": "r0", "driver": DRIVER, "pool": "gpus", "device": d} for d in devices]
    return {"devices": {"results": results}}


def exactly(name: str, **fields: Any) -> Obj:
    return {"name": name, "exactly": ask(**fields)}


def first_available(name: str, *subrequests: tuple[str, Obj]) -> Obj:
    return {"name": name, "firstAvailable": [{"name": n, **a} for n, a in subrequests]}


@dataclass
class Case:
    """`expected` lists the pending claims only; `config` and `shared`, when given, are per
    pending claim the written `devices.config` and which results carry a shareID."""

    rule: str
    upstream: str
    slices: list[Obj]
    claims: list[Obj]
    expected: list[list[str] | None]
    config: list[list[Obj]] | None = None
    shared: list[list[bool]] | None = None
    fatal: str | None = None
    """Text of the fatal error that decides the first pending claim; the brute-force reference
    models no fatal errors, so such a row runs through `simulate` only."""


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
    Case(
        "All leaves out a device whose capacity cannot serve the request",
        "validateDeviceRequest (CmpRequestOverCapacity on every selectable device)",
        [pool("gpus", [dev("g0", memory="8Gi"), dev("g1", memory="4Gi")])],
        [
            claim(
                "c0", exactly("r0", allocationMode="All", capacity={"requests": {"memory": "6Gi"}})
            )
        ],
        [["r0: g0"]],
    ),
    Case(
        "All leaves out a shared device whose share no longer fits what earlier claims took",
        "validateDeviceRequest (CmpRequestOverCapacity against AggregatedCapacity)",
        [pool("gpus", [dev("s0", shared=True), dev("s1", shared=True)])],
        [
            claim(
                "c0", exactly("r0", device_class="shared", capacity={"requests": {"memory": "6Gi"}})
            ),
            claim(
                "c1",
                exactly(
                    "r0",
                    device_class="shared",
                    allocationMode="All",
                    capacity={"requests": {"memory": "4Gi"}},
                ),
            ),
        ],
        [["r0: s0"], ["r0: s1"]],
    ),
    Case(
        "a constraint that refuses a member of the All set is fatal: no fallback subrequest",
        "allocateDevice (must: constraint not satisfied is an error)",
        [pool("gpus", [dev("g0", numa=0), dev("g1", numa=1)])],
        [
            claim(
                "c0",
                first_available("r0", ("s0", ask(allocationMode="All")), ("s1", ask())),
                constraints=[{"matchAttribute": f"{DRIVER}/numa"}],
            )
        ],
        [None],
        fatal="breaks a constraint",
    ),
    Case(
        "admin access to a shared device takes a share that later picks of the claim count",
        "allocateDevice (share ID and consumed capacity for multiple allocations)",
        [pool("gpus", [dev("s0", shared=True), dev("s1", shared=True)])],
        [
            claim(
                "c0",
                exactly(
                    "r0",
                    device_class="shared",
                    adminAccess=True,
                    capacity={"requests": {"memory": "6Gi"}},
                ),
                exactly("r1", device_class="shared", capacity={"requests": {"memory": "4Gi"}}),
            ),
            claim(
                "c1", exactly("r0", device_class="shared", capacity={"requests": {"memory": "8Gi"}})
            ),
        ],
        [["r0: s0", "r1: s1"], ["r0: s0"]],
        shared=[[True, True], [True]],
    ),
    Case(
        "class configs once per class naming their requests; claim configs once; requests "
        "dropped where a config covers every request",
        "Allocate (Populate configs; Kubernetes 1.37)",
        [pool("gpus", [dev("g0"), dev("h0", "mig"), dev("h1", "mig")])],
        [
            claim(
                "c0",
                exactly("r0", device_class="part"),
                exactly("r1", device_class="part"),
                exactly("r2", device_class="whole"),
                config=[
                    {"requests": ["r0"], **opaque("c-r0")},
                    {"requests": ["r2", "r1", "r0"], **opaque("c-all")},
                    {**opaque("c-empty")},
                ],
            )
        ],
        [["r0: h0", "r1: h1", "r2: g0"]],
        config=[
            [
                {"source": "FromClass", "requests": ["r0", "r1"], **opaque("P")},
                {"source": "FromClass", "requests": ["r2"], **opaque("W")},
                {"source": "FromClaim", "requests": ["r0"], **opaque("c-r0")},
                {"source": "FromClaim", **opaque("c-all")},
                {"source": "FromClaim", **opaque("c-empty")},
            ]
        ],
    ),
    Case(
        "a claim config naming only an unchosen subrequest is left out; one naming the chosen "
        "subrequest of the only request covers every request",
        "Allocate (Populate configs; Kubernetes 1.37)",
        [pool("gpus", [dev("h0", "mig")])],
        [
            claim(
                "c0",
                first_available("r0", ("s0", ask("whole")), ("s1", ask("part"))),
                config=[
                    {"requests": ["r0/s0"], **opaque("c-s0")},
                    {"requests": ["r0/s1"], **opaque("c-s1")},
                ],
            )
        ],
        [["r0/s1: h0"]],
        config=[
            [
                {"source": "FromClass", **opaque("P")},
                {"source": "FromClaim", **opaque("c-s1")},
            ]
        ],
    ),
    Case(
        "a pool with an over-committed counter yields no device that draws counters",
        "checkAvailableCounters (every counter of the pool is compared)",
        [
            pool(
                "gpus",
                [
                    dev("gpu-0", mem=4),
                    dev("half-0", "mig", mem=2),
                    dev("n0", "mig", mem=1, counter_set="gpu-1"),
                    dev("free", "mig"),
                ],
                {"gpu-0": 4, "gpu-1": 1},
            )
        ],
        [
            claim("old", exactly("r0"), allocation=held("gpu-0", "half-0")),
            claim("c0", exactly("r0", device_class="part")),
        ],
        [["r0: free"]],
    ),
]


def _nodes() -> list[Obj]:
    return [{"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}]


def _classes() -> list[Obj]:
    classes = []
    for name, expressions in CLASSES.items():
        spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
        if name in CLASS_CONFIG:
            spec["config"] = [opaque(CLASS_CONFIG[name])]
        classes.append({"metadata": {"name": name}, "spec": spec})
    return classes


def _pending(claims: list[Obj]) -> list[Obj]:
    return [c for c in claims if "status" not in c]


def _in_use(claims: list[Obj]) -> list[Obj]:
    return [c for c in claims if "status" in c]


def _check_fields(case: Case, allocations: list[Obj | None]) -> None:
    if case.config is not None:
        got = [(a or {}).get("devices", {}).get("config", []) for a in allocations]
        assert got == case.config
    if case.shared is not None:
        shares = [
            [bool(r.get("shareID")) for r in (a or {}).get("devices", {}).get("results", [])]
            for a in allocations
        ]
        assert shares == case.shared


def _devices(allocation: Obj | None) -> list[str] | None:
    if allocation is None:
        return None
    return [f"{r['request']}: {r['device']}" for r in allocation["devices"]["results"]]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_simulate_first_fit_gives_the_upstream_answer(case: Case) -> None:
    objects = ClusterObjects(
        slices=case.slices, classes=_classes(), claims=case.claims, nodes=_nodes()
    )
    outcomes = simulate(objects, AllocationMode.FIRST_FIT)
    assert [_devices(o.allocation) for o in outcomes] == case.expected
    _check_fields(case, [o.allocation for o in outcomes])
    if case.fatal is not None:
        assert case.fatal in (outcomes[0].reason or "")


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_reference_gives_the_upstream_answer(case: Case) -> None:
    if case.fatal is not None:
        pytest.skip("the reference models no fatal errors")
    cluster = Cluster(case.slices, _classes(), _nodes())
    outcomes = reference_simulation(cluster, _pending(case.claims), _in_use(case.claims))
    assert [_devices(o[1] if o else None) for o in outcomes] == case.expected
    _check_fields(case, [o[1] if o else None for o in outcomes])
