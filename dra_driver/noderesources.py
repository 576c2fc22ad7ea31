"""A pod's CPU, memory and other node resources, and whether they fit a node, as the
kube-scheduler's NodeResourcesFit plugin decides it.

The controller chooses a gated pod's node itself (the allocation's node selector pins the pod), so
it must not pick a node the kube-scheduler would refuse for lack of CPU or memory: the pod would
stay Pending there while holding its GPUs. This module mirrors the scheduler's arithmetic:

- a pod's effective requests are `PodRequests` of `k8s.io/component-helpers/resource` (used by
  `computePodResourceRequest` in `pkg/scheduler/framework/plugins/noderesources/fit.go`): the sum
  of the regular containers and the restartable ("sidecar") init containers, or, if larger per
  resource, what any init container needs while it runs (its own requests plus the sidecars
  started before it); pod-level `spec.resources.requests` replace the containers' cpu, memory and
  hugepages when set; `spec.overhead` is added last;
- what a node has is its `status.allocatable`, less the requests of the pods already there;
- `fitsRequest` of the same file: the pod count is always checked ("Too many pods"), every other
  resource only when the pod requests a non-zero amount of it, and an extended resource the node
  does not publish has nothing free.

Quantities are whole numbers in canonical units: millicores for cpu, bytes for memory, storage and
hugepages, plain counts for the rest; like the scheduler's `MilliValue`/`Value`, a fraction is
rounded up. The module reads plain JSON objects and imports nothing of the controller or the
local cluster, so both (and offline tools) share one definition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.errors import ConfigError
from api.quantity import parse_quantity

Obj = Mapping[str, Any]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"

#: Resources checked first, in the scheduler's order; the others follow by name.
_FIRST = (CPU, MEMORY, EPHEMERAL_STORAGE)

#: Resources a pod-level `spec.resources` may set (besides every `hugepages-*`).
_POD_LEVEL = frozenset({CPU, MEMORY})

_BINARY_UNITS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20))


def _counted(name: str) -> bool:
    """Whether the scheduler accounts `name` for a pod: cpu, memory, ephemeral storage and its
    "scalar" resources (hugepages, extended and `kubernetes.io/`-prefixed ones, all of which
    carry a slash or the hugepages prefix). Other names (e.g. `storage`) it ignores."""
    return name in _FIRST or name.startswith(HUGEPAGES_PREFIX) or "/" in name


def _pod_level(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith(HUGEPAGES_PREFIX)


class Resources(Mapping[str, int]):
    """An immutable resource list: name → amount in canonical units; absent means zero.

    Zero amounts are dropped, so a request of "0" for an extended resource is the same as none
    (the scheduler skips zero requests too).
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = values.items() if isinstance(values, Mapping) else values
        self._values: dict[str, int] = {k: v for k, v in items if v != 0}

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(frozenset(self._values.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._values == other._values
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self._values!r})"

    def amount(self, name: str) -> int:
        return self._values.get(name, 0)

    def __add__(self, other: Mapping[str, int]) -> Resources:
        total = dict(self._values)
        for name, value in other.items():
            total[name] = total.get(name, 0) + value
        return Resources(total)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        rest = dict(self._values)
        for name, value in other.items():
            rest[name] = rest.get(name, 0) - value
        return Resources(rest)

    def maximum(self, other: Mapping[str, int]) -> Resources:
        """Per resource, the larger of the two."""
        top = dict(self._values)
        for name, value in other.items():
            top[name] = max(top.get(name, 0), value)
        return Resources(top)


EMPTY = Resources()


def amount_of(name: str, quantity: object) -> int | None:
    """`quantity` (a string such as "1500m" or "2Gi", or a JSON number) in `name`'s canonical
    unit, rounded up; None when it is not a quantity. The API server refuses such values, so
    they come only from objects written without it; they are skipped rather than stopping
    every decision on the node."""
    if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
        return None
    try:
        value = parse_quantity(str(quantity)).value
    except ConfigError:
        return None
    if name == CPU:
        value *= 1000
    return math.ceil(value)


def parse_list(items: object, keep: Callable[[str], bool] = _counted) -> Resources:
    """A `ResourceList` object (name → quantity) as Resources, keeping the names `keep` accepts."""
    if not isinstance(items, Mapping):
        return EMPTY
    values: dict[str, int] = {}
    for name, quantity in items.items():
        if not keep(str(name)):
            continue
        amount = amount_of(str(name), quantity)
        if amount is not None:
            values[str(name)] = amount
    return Resources(values)


def container_requests(container: Obj) -> Resources:
    """A container's requests; a resource with a limit and no request requests its limit, as the
    API server's defaulting (`SetDefaults_Container`) writes it into stored pods."""
    resources = container.get("resources") or {}
    limits = parse_list(resources.get("limits"))
    requests = parse_list(resources.get("requests"))
    written = resources.get("requests")
    named = set(written) if isinstance(written, Mapping) else set()
    return requests + {k: v for k, v in limits.items() if k not in named}


def _sidecar(container: Obj) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_requests(pod: Obj) -> Resources:
    """The pod's effective requests, as the scheduler's `computePodResourceRequest` computes them
    through `PodRequests` (see the module docstring for the rules)."""
    spec = pod.get("spec") or {}
    total = EMPTY
    for container in spec.get("containers") or []:
        total += container_requests(container)
    sidecars = EMPTY
    init_peak = EMPTY
    for container in spec.get("initContainers") or []:
        own = container_requests(container)
        if _sidecar(container):
            # A sidecar keeps running beside the regular containers, and beside every init
            # container started after it.
            total += own
            sidecars += own
            running = sidecars
        else:
            running = own + sidecars
        init_peak = init_peak.maximum(running)
    total = total.maximum(init_peak)
    pod_level = (spec.get("resources") or {}).get("requests")
    if isinstance(pod_level, Mapping) and any(_pod_level(str(n)) for n in pod_level):
        level = parse_list(pod_level, keep=_pod_level)
        values = dict(total)
        for name in pod_level:
            if _pod_level(str(name)):
                values[str(name)] = level.amount(str(name))
        total = Resources(values)
    return total + parse_list(spec.get("overhead"))


def node_allocatable(node: Obj) -> Resources | None:
    """What the node offers to pods (`status.allocatable`, with its `pods` count), or None when
    it publishes none. A kubelet always publishes it when it registers; a Node object written
    by hand may not, and then this module has nothing to check against."""
    allocatable = (node.get("status") or {}).get("allocatable")
    if not isinstance(allocatable, Mapping):
        return None
    return parse_list(allocatable, keep=lambda name: name == PODS or _counted(name))


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What the pods on a node take: their summed requests and how many they are (every pod
    counts against the node's `pods`, including one that requests nothing)."""

    requested: Resources = EMPTY
    pods: int = 0

    def plus(self, requests: Resources) -> NodeUsage:
        return NodeUsage(self.requested + requests, self.pods + 1)

    def minus(self, requests: Resources) -> NodeUsage:
        return NodeUsage(self.requested - requests, self.pods - 1)


def usage_of(pods: Iterable[Obj]) -> NodeUsage:
    usage = NodeUsage()
    for pod in pods:
        usage = usage.plus(pod_requests(pod))
    return usage


def free_on(node: Obj, pods_on_node: Iterable[Obj]) -> Resources | None:
    """What is left of the node's allocatable after `pods_on_node` (the `pods` entry is the
    number of pods that may still come), or None when the node publishes no allocatable."""
    allocatable = node_allocatable(node)
    if allocatable is None:
        return None
    usage = usage_of(pods_on_node)
    return allocatable - usage.requested - {PODS: usage.pods}


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource the pod asks more of than the node has left."""

    resource: str
    asks: int
    free: int
    """What is left (never below zero); for `pods`, how many more pods the node admits."""

    def __str__(self) -> str:
        if self.resource == PODS:
            return "too many pods (the node admits no more)"
        asks, free = render(self.resource, self.asks), render(self.resource, self.free)
        if asks == free:  # rounding hid the difference: show exact amounts
            asks, free = str(self.asks), str(self.free)
        return f"insufficient {self.resource} (asks {asks}, {free} free)"


def insufficient(
    requests: Resources, allocatable: Resources, used: NodeUsage = NodeUsage()
) -> list[Shortfall]:
    """The resources for which a pod with `requests` does not fit a node offering `allocatable`
    whose pods already take `used`; empty when it fits. The rules of the scheduler's
    `fitsRequest`: the pod count is always checked; any other resource only when requested, and
    one the node does not offer has none free."""
    shortfalls: list[Shortfall] = []
    pods_free = allocatable.amount(PODS) - used.pods
    if pods_free < 1:
        shortfalls.append(Shortfall(PODS, 1, max(pods_free, 0)))
    names = [n for n in _FIRST if n in requests]
    names += sorted(n for n in requests if n not in _FIRST)
    for name in names:
        asks = requests[name]
        if asks <= 0:
            continue
        free = allocatable.amount(name) - used.requested.amount(name)
        if asks > free:
            shortfalls.append(Shortfall(name, asks, max(free, 0)))
    return shortfalls


def render(resource: str, amount: int) -> str:
    """An amount for people: cpu in cores (as written in pod specs), byte-valued resources in a
    binary unit, counts as they are."""
    if resource == CPU:
        return _decimal(Decimal(amount) / 1000)
    if resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith(HUGEPAGES_PREFIX):
        return _bytes(amount)
    return str(amount)


def _decimal(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _bytes(amount: int) -> str:
    for suffix, size in _BINARY_UNITS:
        if amount >= size:
            if amount % size == 0:
                return f"{amount // size}{suffix}"
            return f"{_decimal(round(Decimal(amount) / size, 1))}{suffix}"
    return str(amount)
