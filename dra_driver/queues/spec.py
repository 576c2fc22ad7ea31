"""A GpuQueue object read into numbers, with an error that names the object and the field.

The CRD schema and its CEL rules reject most bad specs at the API server, but the controller
cannot rely on that (a cluster may run an older chart, or a queue may have been written before a
rule existed), so every field is checked again here and a bad queue is reported, never trusted.

Amounts are floats: `gpu` counts GPU-equivalents (a MIG device or a share is a fraction of one)
and `memory` bytes, and both only feed comparisons and shares, never counters that must add up
exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from api.errors import ConfigError
from api.quantity import parse_quantity
from dra_driver.durations import parse_go_duration

GROUP: Final = "gpu.dra-driver.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "gpuqueues"
KIND: Final = "GpuQueue"
RESOURCES: Final = ("gpu", "memory")
RECLAIM_BORROWED: Final = "Borrowed"
RECLAIM_NEVER: Final = "Never"
LENDING_ALLOWED: Final = "Allowed"
LENDING_NEVER: Final = "Never"
MAX_WEIGHT: Final = 10_000
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class QueueSpecError(ValueError):
    """A GpuQueue whose spec cannot be used; the message names the queue and the field."""


@dataclass(frozen=True, slots=True)
class Amounts:
    """GPU-equivalents and GPU memory (bytes) held or asked for."""

    gpu: float = 0.0
    memory: float = 0.0

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.gpu + other.gpu, self.memory + other.memory)

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(self.gpu - other.gpu, self.memory - other.memory)

    def get(self, resource: str) -> float:
        return self.gpu if resource == "gpu" else self.memory

    def is_zero(self) -> bool:
        return self.gpu <= _EPSILON and self.memory <= _EPSILON

    def within(self, other: Amounts) -> bool:
        """No resource more than `other`'s."""
        return self.gpu <= other.gpu + _EPSILON and self.memory <= other.memory + _EPSILON


ZERO: Final = Amounts()
#: Sums of fractions (1/7 of a GPU, seven times) must compare equal to the whole.
_EPSILON: Final = 1e-9


@dataclass(frozen=True, slots=True)
class Bounds:
    """Per resource an amount, or nothing: a guarantee of nothing, or no limit."""

    gpu: float | None = None
    memory: float | None = None

    def get(self, resource: str) -> float | None:
        return self.gpu if resource == "gpu" else self.memory

    def items(self) -> list[tuple[str, float]]:
        return [(r, v) for r in RESOURCES if (v := self.get(r)) is not None]

    def is_empty(self) -> bool:
        return self.gpu is None and self.memory is None

    def exceeded(self, amounts: Amounts) -> list[str]:
        """The resources of which `amounts` holds more than these bounds allow."""
        return [r for r, bound in self.items() if amounts.get(r) > bound + _EPSILON]

    def covers(self, amounts: Amounts) -> bool:
        """Every bounded resource of `amounts` is within its bound (nothing bounded: False)."""
        return not self.is_empty() and not self.exceeded(amounts)

    def short_of(self, amounts: Amounts) -> bool:
        """Some bounded resource is under its bound and none is over: room left within it."""
        if self.is_empty() or self.exceeded(amounts):
            return False
        return any(amounts.get(r) < bound - _EPSILON for r, bound in self.items())

    def excess(self, amounts: Amounts) -> Amounts | None:
        """What `amounts` holds beyond these bounds, per bounded resource (the others without
        end), or None when it holds no more than some bound (or nothing is bounded)."""
        if self.is_empty():
            return None
        spare = {}
        for resource, bound in self.items():
            left = amounts.get(resource) - bound
            if left <= _EPSILON:
                return None
            spare[resource] = left
        return Amounts(spare.get("gpu", math.inf), spare.get("memory", math.inf))

    def deficit(self, amounts: Amounts) -> Amounts:
        """What `amounts` lacks to reach these bounds (zero where reached or unbounded)."""
        gpu = max(0.0, (self.gpu or 0.0) - amounts.gpu)
        memory = max(0.0, (self.memory or 0.0) - amounts.memory)
        return Amounts(gpu, memory)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    namespaces: tuple[str, ...] = ()
    parent: str | None = None
    guaranteed: Bounds = field(default_factory=Bounds)
    limit: Bounds = field(default_factory=Bounds)
    weight: float = 1.0
    reclaim: str = RECLAIM_BORROWED
    created: str = ""
    """creationTimestamp: the older of two queues naming one namespace keeps it."""
    last: bool = False
    """Served after every other queue at equal standing (the default queue)."""
    idle_reclaim_after_s: float | None = None
    """`spec.idleReclaim.after` in seconds: pods whose devices have all been idle this long may
    be evicted for other queues' waiting pods even within the guarantee (None: never)."""
    lending: str = LENDING_ALLOWED
    """`spec.lending`: Never keeps the GPUs of this queue's pods, and of every queue below it,
    closed to best-effort borrowers however long they idle (the kubelet plugins read it; the
    controller does not)."""


def parse_queue(obj: Mapping[str, Any]) -> QueueSpec:
    """The queue an API object describes; QueueSpecError names the object and the field."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise QueueSpecError(f"{KIND}: metadata.name is missing")
    name = str(meta["name"])
    spec = obj.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise QueueSpecError(f"{KIND} {name}: spec: expected an object")

    def bad(where: str, message: str) -> QueueSpecError:
        return QueueSpecError(f"{KIND} {name}: spec.{where}: {message}")

    namespaces = spec.get("namespaces") or []
    if not isinstance(namespaces, list):
        raise bad("namespaces", "expected a list of namespace names")
    for index, namespace in enumerate(namespaces):
        if not isinstance(namespace, str) or not _LABEL.fullmatch(namespace) or len(namespace) > 63:
            raise bad(f"namespaces[{index}]", f"{namespace!r} is not a namespace name")
    if len(set(namespaces)) != len(namespaces):
        raise bad("namespaces", "a namespace is listed twice")
    parent = spec.get("parent")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise bad("parent", f"expected the name of another {KIND}, got {parent!r}")
    if parent == name:
        raise bad("parent", "a queue cannot be its own parent")
    guaranteed = _bounds(spec.get("guaranteed"), "guaranteed", bad)
    limit = _bounds(spec.get("limit"), "limit", bad)
    for resource, bound in limit.items():
        floor = guaranteed.get(resource)
        if floor is not None and bound < floor:
            raise bad(f"limit.{resource}", "is below the guarantee of the same resource")
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise bad("weight", f"expected a number, got {weight!r}")
    if not 0 < weight <= MAX_WEIGHT or not math.isfinite(weight):
        raise bad("weight", f"must be above 0 and at most {MAX_WEIGHT}, got {weight}")
    reclaim = spec.get("reclaim", RECLAIM_BORROWED)
    if reclaim not in (RECLAIM_BORROWED, RECLAIM_NEVER):
        raise bad("reclaim", f"must be {RECLAIM_BORROWED} or {RECLAIM_NEVER}, got {reclaim!r}")
    idle_after = _idle_reclaim(spec.get("idleReclaim"), bad)
    lending = spec.get("lending", LENDING_ALLOWED)
    if lending not in (LENDING_ALLOWED, LENDING_NEVER):
        raise bad("lending", f"must be {LENDING_ALLOWED} or {LENDING_NEVER}, got {lending!r}")
    return QueueSpec(
        name=name,
        namespaces=tuple(namespaces),
        parent=parent,
        guaranteed=guaranteed,
        limit=limit,
        weight=float(weight),
        reclaim=str(reclaim),
        created=str(meta.get("creationTimestamp") or ""),
        idle_reclaim_after_s=idle_after,
        lending=str(lending),
    )


def _idle_reclaim(raw: object, bad: Any) -> float | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise bad("idleReclaim", 'expected an object such as {after: "30m"}')
    unknown = sorted(set(raw) - {"after"})
    if unknown:
        raise bad(f"idleReclaim.{unknown[0]}", "unknown field; idleReclaim has only after")
    if "after" not in raw:
        raise bad("idleReclaim.after", 'is required, a duration such as "30m"')
    after = raw["after"]
    if not isinstance(after, str):
        raise bad("idleReclaim.after", f'expected a duration such as "30m", got {after!r}')
    try:
        seconds = parse_go_duration(after)
    except ValueError as err:
        raise bad("idleReclaim.after", str(err)) from None
    if seconds <= 0:
        raise bad("idleReclaim.after", f"must be above 0, got {after!r}")
    return seconds


def _bounds(raw: object, where: str, bad: Any) -> Bounds:
    if raw is None:
        return Bounds()
    if not isinstance(raw, Mapping):
        raise bad(where, "expected an object with gpu and/or memory")
    unknown = sorted(set(raw) - set(RESOURCES))
    if unknown:
        raise bad(f"{where}.{unknown[0]}", "unknown resource; a queue counts gpu and memory")
    values: dict[str, float] = {}
    for resource in RESOURCES:
        if resource in raw:
            values[resource] = _quantity(raw[resource], f"{where}.{resource}", bad)
    return Bounds(values.get("gpu"), values.get("memory"))


def _quantity(raw: object, where: str, bad: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise bad(where, f'expected a quantity such as "8" or "640Gi", got {raw!r}')
    try:
        value = parse_quantity(str(raw), where).value
    except ConfigError as err:
        raise bad(where, err.problems[0].message) from None
    if value < 0:
        raise bad(where, f"must not be negative, got {raw}")
    return float(value)


def pod_priority(pod: Mapping[str, Any]) -> int:
    """`spec.priority` as the admission controller resolved it (0 when absent): the order of
    pods inside a queue, and which pods are protected by its guarantee."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def format_gpu(value: float) -> str:
    """GPU-equivalents for status and tables: whole numbers plain, fractions to 2 places."""
    rounded = round(value, 2)
    return str(int(rounded)) if rounded == int(rounded) else f"{rounded:.2f}"


def format_memory(value: float) -> str:
    """Bytes as a quantity a reader can compare with the spec (Gi when it divides)."""
    gib = value / 2**30
    if abs(gib - round(gib)) < 1e-6:
        return f"{round(gib)}Gi"
    return f"{round(value / 2**20)}Mi"
