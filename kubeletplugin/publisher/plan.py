"""What to write so the API server holds exactly the node's pool, without a long-incomplete pool.

Schedulers use only a pool's highest generation and skip it while the number of slices at that
generation differs from `resourceSliceCount`. So:

- when the set of slice names is unchanged, slices are updated in place at the same generation:
  the pool stays complete after every single write;
- when slices appear or disappear, the generation goes up by one and every slice is written at the
  new generation (updates and creates first, deletions of slices no longer wanted last): the pool
  is incomplete only between the first and the last of those writes;
- slices of the pool that are not wanted (names no longer published) are deleted; wanted ones left
  at a stale generation by an interrupted run are rewritten at the new one.

The plan is pure data, so its rules are tested without an API server; the publisher executes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeOwner:
    """The Node that owns the slices, so they are garbage-collected with it."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
        }


@dataclass(slots=True)
class PublishPlan:
    generation: int
    creates: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    """Complete objects carrying the resourceVersion they replace (optimistic concurrency)."""
    deletes: list[tuple[str, str]] = field(default_factory=list)
    """(name, resourceVersion) of slices to delete once creates and updates are done."""

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _pool(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    pool: Mapping[str, Any] = obj.get("spec", {}).get("pool", {})
    return pool


def _generation(obj: Mapping[str, Any]) -> int:
    value = _pool(obj).get("generation", 0)
    return value if isinstance(value, int) else 0


def _stamped(
    desired: Mapping[str, Any], generation: int, count: int, owner: NodeOwner | None
) -> dict[str, Any]:
    obj = copy.deepcopy(dict(desired))
    obj.setdefault("apiVersion", "resource.k8s.io/v1")
    obj.setdefault("kind", "ResourceSlice")
    pool = obj["spec"]["pool"]
    pool["generation"] = generation
    pool["resourceSliceCount"] = count
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [owner.reference()]
    return obj


_TaintKey = tuple[Any, Any, Any, Any]


def _taint_key(device: Mapping[str, Any], taint: Mapping[str, Any]) -> _TaintKey:
    return (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))


def _stored_taint_times(existing: Sequence[Mapping[str, Any]]) -> dict[_TaintKey, str]:
    """When the server first stored each taint (key, value and effect on a device), over all
    of the pool's slices, so that a device keeps its taint's time when it moves to another
    slice."""
    times: dict[_TaintKey, str] = {}
    for obj in existing:
        for device in obj.get("spec", {}).get("devices") or []:
            for taint in device.get("taints") or []:
                if taint.get("timeAdded"):
                    times[_taint_key(device, taint)] = taint["timeAdded"]
    return times


def _keep_taint_times(wanted: dict[str, Any], times: Mapping[_TaintKey, str]) -> None:
    """Give each wanted taint the `timeAdded` the server stored for it. The server stamps a
    taint written without one (`SetDefaults_DeviceTaint`); without this every round would
    differ from what is stored, rewrite the slice and restart the clock that a NoExecute
    toleration counts from."""
    for device in wanted.get("spec", {}).get("devices") or []:
        for taint in device.get("taints") or []:
            stored = times.get(_taint_key(device, taint))
            if "timeAdded" not in taint and stored is not None:
                taint["timeAdded"] = stored


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Equal where we write: spec and owner references (the server adds the rest)."""
    return current.get("spec") == wanted.get("spec") and (
        current["metadata"].get("ownerReferences") == wanted["metadata"].get("ownerReferences")
    )


def plan_publication(
    desired: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    owner: NodeOwner | None = None,
) -> PublishPlan:
    """`desired`: the builder's slices for one pool; `existing`: that pool's slices as stored."""
    names = [_name(d) for d in desired]
    if len(set(names)) != len(names):
        raise ValueError(f"desired slices repeat a name: {sorted(names)}")
    current_generation = max((_generation(e) for e in existing), default=0)
    by_name = {_name(obj): obj for obj in existing}  # names are unique in the API server
    in_place = set(names) == set(by_name) and all(
        _generation(o) == current_generation and _pool(o).get("resourceSliceCount") == len(names)
        for o in by_name.values()
    )
    generation = current_generation if in_place and existing else current_generation + 1
    plan = PublishPlan(generation)
    times = _stored_taint_times(existing)
    for wanted_raw in desired:
        wanted = _stamped(wanted_raw, generation, len(desired), owner)
        _keep_taint_times(wanted, times)
        current = by_name.get(_name(wanted))
        if current is None:
            plan.creates.append(wanted)
        elif not _same(current, wanted):
            wanted["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            plan.updates.append(wanted)
    wanted_names = set(names)
    for name, obj in sorted(by_name.items()):
        if name not in wanted_names:
            plan.deletes.append((name, str(obj["metadata"].get("resourceVersion", ""))))
    return plan
