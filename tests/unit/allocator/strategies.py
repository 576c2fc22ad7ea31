"""Hypothesis strategies for small random clusters and claims, for the allocator's property tests.

Small on purpose: the brute-force reference enumerates every candidate, so a node has at most six
devices and a pod at most three requests. Within that, the shapes that make allocation
interesting all occur: shared counters, devices split over slices, stale generations, incomplete
and invalid pools, shared (consumable-capacity) devices, taints, firstAvailable, All, admin
access, constraints and opaque configs.

Every CEL expression used never raises on these devices: every device has ``type``, ``numa``,
``model``, ``ver`` and ``memory``, and the optional ``example.com/link`` is tested with ``in``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st

GPU = "gpu.example.com"
NIC = "nic.example.com"
DRIVERS = (GPU, NIC)

CLASS_SELECTORS = (
    f'device.driver == "{GPU}"',
    f'device.driver == "{NIC}"',
    'device.attributes[device.driver].type != "vf"',
    "device.attributes[device.driver].numa == 0",
)
REQUEST_SELECTORS = (
    'device.attributes[device.driver].type == "gpu"',
    "device.attributes[device.driver].numa == 1",
    'device.attributes[device.driver].model.startsWith("h")',
    'device.attributes[device.driver].ver.isGreaterThan(semver("1.1.0"))',
    '"link" in device.attributes["example.com"]',
    'device.capacity[device.driver].memory.compareTo(quantity("8Gi")) >= 0',
    "device.allowMultipleAllocations",
)
CONSTRAINT_ATTRIBUTES = (f"{GPU}/numa", f"{NIC}/numa", "example.com/link")
TAINT_KEY = "example.com/maint"
TOLERATIONS: tuple[dict[str, Any], ...] = (
    {"operator": "Exists"},
    {"key": TAINT_KEY, "operator": "Exists"},
    {"key": TAINT_KEY, "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
    {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
)
COUNTER_NAMES = ("mem", "slots", "bw")

Obj = dict[str, Any]
T = TypeVar("T")


@dataclass
class Cluster:
    slices: list[Obj]
    classes: list[Obj]
    nodes: list[Obj]

    @property
    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.nodes)


@dataclass
class Scenario:
    """A cluster, claims to allocate before (in order), and one pod's claims for one node."""

    cluster: Cluster
    earlier: list[Obj]
    pod: list[Obj] = field(default_factory=list)
    node: str = ""


@dataclass(frozen=True)
class Odds:
    """How often the generators make the choices that tend to make a claim fail (a broken pool,
    a taint, a selector, admin access, "All" devices). The defaults explore every feature; `FITS`
    keeps them all possible but rare enough that most claims are allocated, so properties about
    allocations compare allocations rather than two failures."""

    broken_pool_one_in: int = 40
    taint: float = 0.1
    class_selector: float = 0.35
    request_selector: float = 0.2
    all_devices: float = 0.1
    admin_access: float = 0.2
    tolerations: float = 0.2
    capacity_request: float = 0.2
    constraint: float = 0.3
    incomplete_pool: float = 0.1
    min_devices: int = 1


FITS = Odds(
    broken_pool_one_in=1000,
    taint=0.03,
    class_selector=0.05,
    request_selector=0.05,
    all_devices=0.02,
    admin_access=0.05,
    tolerations=0.2,
    capacity_request=0.05,
    constraint=0.1,
    incomplete_pool=0.02,
    min_devices=4,
)


class _Picker:
    """Many small choices from one Hypothesis draw.

    A device or request has a dozen independent choices; drawing each through Hypothesis made
    generating examples cost far more than testing them. One drawn seed drives them instead, and
    seed 0 (where shrinking heads) gives the plainest item: first options, no optional extras.
    """

    def __init__(self, draw: st.DrawFn) -> None:
        seed = draw(st.integers(0, 2**32 - 1))
        self._plain = seed == 0
        self._rng = random.Random(seed)

    def choice(self, options: Sequence[T]) -> T:
        return options[0] if self._plain else self._rng.choice(options)

    def chance(self, probability: float) -> bool:
        return False if self._plain else self._rng.random() < probability

    def integer(self, low: int, high: int) -> int:
        return low if self._plain else self._rng.randint(low, high)

    def subset(self, options: Sequence[T]) -> list[T]:
        """A non-empty subset, in the given order."""
        picked = [o for o in options if self.chance(0.5)]
        return picked or [options[0]]


def _capacity(pick: _Picker, shared: bool) -> Obj:
    value = pick.choice(("4Gi", "8Gi", "16Gi"))
    memory: Obj = {"value": value}
    if shared:
        policy = pick.choice(("none", "range", "range-step2", "values"))
        if policy == "range":
            memory["requestPolicy"] = {
                "default": "2Gi",
                "validRange": {"min": "1Gi", "max": value, "step": "1Gi"},
            }
        elif policy == "range-step2":
            memory["requestPolicy"] = {
                "default": "1Gi",
                "validRange": {"min": "1Gi", "max": value, "step": "2Gi"},
            }
        elif policy == "values":
            memory["requestPolicy"] = {"default": "2Gi", "validValues": ["2Gi", "4Gi"]}
    return {"memory": memory}


def _device(
    draw: st.DrawFn,
    name: str,
    counters: dict[str, int] | None,
    broken: bool,
    odds: Odds = Odds(),
) -> Obj:
    pick = _Picker(draw)
    attributes: Obj = {
        "type": {"string": pick.choice(("gpu", "mig", "vf"))},
        "numa": {"int": pick.integer(0, 1)},
        "model": {"string": pick.choice(("a100", "h100"))},
        "ver": {"version": pick.choice(("1.0.0", "1.2.0", "2.0.0"))},
    }
    if pick.chance(0.4):
        attributes["example.com/link"] = {"string": pick.choice(("l1", "l2"))}
    shared = pick.chance(0.3)
    device: Obj = {"name": name, "attributes": attributes, "capacity": _capacity(pick, shared)}
    if shared:
        device["allowMultipleAllocations"] = True
    if pick.chance(odds.taint):
        device["taints"] = [
            {
                "key": TAINT_KEY,
                "value": pick.choice(("yes", "no")),
                "effect": pick.choice(("NoSchedule", "NoExecute")),
            }
        ]
    if counters and pick.chance(0.6):
        device["consumesCounters"] = [
            {
                "counterSet": "cs-0",
                "counters": {
                    n: {"value": str(pick.integer(1, 3))} for n in pick.subset(sorted(counters))
                },
            }
        ]
    if broken:
        device["consumesCounters"] = [{"counterSet": "ghost", "counters": {"mem": {"value": "1"}}}]
    return device


def _pool_slices(
    draw: st.DrawFn, node: str, driver: str, pool: str, size: int, odds: Odds = Odds()
) -> list[Obj]:
    pick = _Picker(draw)
    counters: dict[str, int] | None = None
    if pick.chance(0.5):
        counters = {n: pick.integer(1, 4) for n in pick.subset(COUNTER_NAMES)}
    broken_at = pick.integer(0, odds.broken_pool_one_in - 1)  # a pool is invalid now and then
    devices = [
        _device(draw, f"d{i}", counters, broken=i == broken_at, odds=odds) for i in range(size)
    ]
    groups = [devices]
    if size >= 2 and pick.chance(0.3):
        cut = pick.integer(1, size - 1)
        groups = [devices[:cut], devices[cut:]]
    specs: list[Obj] = []
    if counters is not None:
        specs.append(
            {
                "sharedCounters": [
                    {
                        "name": "cs-0",
                        "counters": {n: {"value": str(v)} for n, v in counters.items()},
                    }
                ]
            }
        )
    specs.extend({"devices": group} for group in groups)
    suffixes = pick.choice(("abc", "bca", "cab", "cba"))
    generation = 2 if pick.chance(0.25) else 1
    slice_count = len(specs) + (1 if pick.chance(odds.incomplete_pool) else 0)
    slices = [
        {
            "metadata": {"name": f"{pool}-{suffixes[i]}"},
            "spec": {
                "driver": driver,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": slice_count},
                "nodeName": node,
                **spec,
            },
        }
        for i, spec in enumerate(specs)
    ]
    if generation == 2:
        # A stale slice from before the pool was republished: it must be ignored.
        stale = [_device(draw, f"d{i}", None, broken=False) for i in range(pick.integer(1, 2))]
        slices.append(
            {
                "metadata": {"name": f"{pool}-old"},
                "spec": {
                    "driver": driver,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": node,
                    "devices": stale,
                },
            }
        )
    return slices


@st.composite
def clusters(draw: st.DrawFn, odds: Odds = Odds()) -> Cluster:
    node_count = draw(st.integers(1, 3))
    slices: list[Obj] = []
    nodes: list[Obj] = []
    for index in range(node_count):
        node = f"node-{'abc'[index]}"
        nodes.append({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        fitting_sizes = [n for n in (1, 2, 3, 4, 4, 5, 5, 6, 6) if n >= odds.min_devices]
        total = draw(st.sampled_from(fitting_sizes))
        pool_count = 2 if total >= 2 and draw(st.booleans()) else 1
        sizes = [total]
        if pool_count == 2:
            first = draw(st.integers(1, total - 1))
            sizes = [first, total - first]
        for number, size in enumerate(sizes):
            driver = draw(st.sampled_from(DRIVERS))
            slices.extend(_pool_slices(draw, node, driver, f"{node}-p{number}", size, odds))
    classes: list[Obj] = []
    for index in range(draw(st.integers(1, 3))):
        name = f"class-{index}"
        pick = _Picker(draw)
        spec: Obj = {"selectors": []}
        if pick.chance(odds.class_selector):
            expression = pick.choice(CLASS_SELECTORS)
            spec["selectors"].append({"cel": {"expression": expression}})
        if pick.chance(0.3):
            spec["config"] = [{"opaque": {"driver": GPU, "parameters": {"class": name}}}]
        classes.append({"metadata": {"name": name}, "spec": spec})
    return Cluster(slices, classes, nodes)


def _asks(pick: _Picker, class_names: list[str], *, sub: bool, odds: Odds = Odds()) -> Obj:
    """The fields an ``exactly`` request or a firstAvailable entry share."""
    ask: Obj = {"deviceClassName": pick.choice(class_names)}
    if pick.chance(odds.all_devices):
        ask["allocationMode"] = "All"
    elif pick.chance(0.5):
        ask["count"] = pick.choice((1, 1, 2))
    if pick.chance(odds.request_selector):
        ask["selectors"] = [{"cel": {"expression": pick.choice(REQUEST_SELECTORS)}}]
    if not sub and pick.chance(odds.admin_access):
        ask["adminAccess"] = True
    if pick.chance(odds.tolerations):
        ask["tolerations"] = [pick.choice(TOLERATIONS)]
    if pick.chance(odds.capacity_request):
        ask["capacity"] = {"requests": {"memory": pick.choice(("1Gi", "2Gi", "3Gi", "5Gi"))}}
    return ask


def _claim(
    draw: st.DrawFn, class_names: list[str], name: str, max_requests: int, odds: Odds = Odds()
) -> Obj:
    pick = _Picker(draw)
    requests: list[Obj] = []
    sizes = [n for n in (1, 1, 1, 2, 2, 3) if n <= max_requests]
    for index in range(pick.choice(sizes)):
        request = f"r{index}"
        if pick.chance(0.25):
            entries = [
                {"name": f"s{k}", **_asks(pick, class_names, sub=True, odds=odds)} for k in range(2)
            ]
            requests.append({"name": request, "firstAvailable": entries})
        else:
            exactly = _asks(pick, class_names, sub=False, odds=odds)
            requests.append({"name": request, "exactly": exactly})
    names = [r["name"] for r in requests]
    devices: Obj = {"requests": requests}
    if pick.chance(odds.constraint):
        kind = pick.choice(("matchAttribute", "distinctAttribute"))
        constraint: Obj = {kind: pick.choice(CONSTRAINT_ATTRIBUTES)}
        if pick.chance(0.5):
            constraint["requests"] = pick.subset(names)
        devices["constraints"] = [constraint]
    if pick.chance(0.2):
        config: Obj = {"opaque": {"driver": NIC, "parameters": {"claim": name}}}
        if pick.chance(0.5):
            config["requests"] = [pick.choice(names)]
        devices["config"] = [config]
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"devices": devices}}


@st.composite
def claims(
    draw: st.DrawFn,
    class_names: list[str],
    prefix: str = "claim",
    min_claims: int = 1,
    max_claims: int = 4,
    max_requests: int = 3,
    odds: Odds = Odds(),
) -> list[Obj]:
    """Claims without allocations; requests ``r0``..., firstAvailable entries ``s0``/``s1``."""
    count = draw(st.integers(min_claims, max_claims))
    return [_claim(draw, class_names, f"{prefix}-{n}", max_requests, odds) for n in range(count)]


@st.composite
def scenarios(
    draw: st.DrawFn,
    max_earlier: int = 2,
    max_pod_claims: int = 2,
    max_pod_requests: int = 3,
    odds: Odds = Odds(),
) -> Scenario:
    """A cluster, earlier claims to allocate first, and a pod (its claims and a node)."""
    cluster = draw(clusters(odds))
    class_names = [c["metadata"]["name"] for c in cluster.classes]
    earlier = draw(claims(class_names, "earlier", 0, max_earlier, odds=odds))
    pod: list[Obj] = []
    budget = max_pod_requests
    for number in range(draw(st.integers(1, max_pod_claims))):
        if budget == 0:
            break
        one = _claim(draw, class_names, f"pod-{number}", budget, odds)
        budget -= len(one["spec"]["devices"]["requests"])
        pod.append(one)
    node = draw(st.sampled_from(cluster.node_names))
    return Scenario(cluster, earlier, pod, node)


# --- partitioned GPUs under contention ------------------------------------------------------------
#
# The shapes above make every feature possible but rarely make them meet. These make them meet:
# each GPU is one counter set that a whole device, two halves and a shared device draw from, so
# a claim that takes part of a GPU decides what a later (often admin-access) claim may take.

TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
PART_CLASSES = (
    ("any-gpu", ()),
    ("whole-gpu", ('device.attributes["gpu.example.com"].type == "gpu"',)),
    ("part-gpu", ('device.attributes["gpu.example.com"].type != "gpu"',)),
)


def _part(pick: _Picker, name: str, kind: str, counter_set: str, mem: int, numa: int) -> Obj:
    device: Obj = {
        "name": name,
        "attributes": {
            "type": {"string": kind},
            "numa": {"int": numa},
            "model": {"string": "h100"},
            "ver": {"version": "1.2.0"},
        },
        "capacity": {"memory": {"value": f"{mem * 2}Gi"}},
        "consumesCounters": [{"counterSet": counter_set, "counters": {"mem": {"value": str(mem)}}}],
    }
    if kind == "shared":
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": "2Gi",
            "validRange": {"min": "1Gi", "max": f"{mem * 2}Gi", "step": "1Gi"},
        }
    if pick.chance(0.2):
        device["taints"] = [
            {"key": TAINT_KEY, "value": "yes", "effect": pick.choice(TAINT_EFFECTS)}
        ]
    return device


@st.composite
def partitioned_clusters(draw: st.DrawFn) -> Cluster:
    """One or two nodes, each with one pool of one or two partitionable GPUs."""
    slices: list[Obj] = []
    nodes: list[Obj] = []
    for index in range(draw(st.integers(1, 2))):
        node = f"node-{'ab'[index]}"
        nodes.append({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        pick = _Picker(draw)
        devices: list[Obj] = []
        counter_sets: list[Obj] = []
        for gpu in range(pick.choice((2, 2, 2, 1))):
            counter_set = f"gpu-{gpu}"
            counter_sets.append({"name": counter_set, "counters": {"mem": {"value": "4"}}})
            whole = _part(pick, f"gpu-{gpu}", "gpu", counter_set, 4, gpu)
            parts = [_part(pick, f"gpu-{gpu}-half-0", "mig", counter_set, 2, gpu)]
            if pick.chance(0.6):
                parts.append(_part(pick, f"gpu-{gpu}-half-1", "mig", counter_set, 2, gpu))
            if pick.chance(0.6):
                parts.append(_part(pick, f"gpu-{gpu}-shared", "shared", counter_set, 2, gpu))
            # Which comes first decides what a claim for any GPU takes: the whole GPU, or a part
            # that leaves room for the next claim.
            devices.extend([*parts, whole] if pick.chance(0.5) else [whole, *parts])
        slices.append(
            {
                "metadata": {"name": f"{node}-gpus"},
                "spec": {
                    "driver": GPU,
                    "pool": {"name": f"{node}-gpus", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": node,
                    "sharedCounters": counter_sets,
                    "devices": devices,
                },
            }
        )
    classes: list[Obj] = [
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for name, expressions in PART_CLASSES
    ]
    return Cluster(slices, classes, nodes)


def _contending_ask(pick: _Picker, *, sub: bool) -> Obj:
    ask: Obj = {"deviceClassName": pick.choice([name for name, _ in PART_CLASSES])}
    if pick.chance(0.08):
        ask["allocationMode"] = "All"
    elif pick.chance(0.15):
        ask["count"] = 2
    if not sub and pick.chance(0.4):
        ask["adminAccess"] = True
    if pick.chance(0.3):
        ask["tolerations"] = [pick.choice(TOLERATIONS)]
    if pick.chance(0.2):
        ask["capacity"] = {"requests": {"memory": pick.choice(("1Gi", "3Gi", "6Gi"))}}
    return ask


@st.composite
def contending_claims(draw: st.DrawFn, count: tuple[int, int] = (3, 4)) -> list[Obj]:
    """Claims for `partitioned_clusters`: admin access, taints and shares are common."""
    found: list[Obj] = []
    for number in range(draw(st.integers(*count))):
        pick = _Picker(draw)
        requests: list[Obj] = []
        for index in range(pick.choice((1, 1, 2))):
            if pick.chance(0.2):
                entries = [{"name": f"s{k}", **_contending_ask(pick, sub=True)} for k in range(2)]
                requests.append({"name": f"r{index}", "firstAvailable": entries})
            else:
                requests.append({"name": f"r{index}", "exactly": _contending_ask(pick, sub=False)})
        devices: Obj = {"requests": requests}
        if len(requests) > 1 and pick.chance(0.3):
            devices["constraints"] = [{"matchAttribute": f"{GPU}/numa"}]
        found.append(
            {
                "metadata": {"namespace": "default", "name": f"claim-{number}"},
                "spec": {"devices": devices},
            }
        )
    return found
