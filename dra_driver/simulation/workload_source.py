"""The workload the scored placement weighs by as the controller holds it: configured, or learned.

A cluster admin may configure a profile (the controller's `--workload-profile`, the format of
`dra_driver.workload_profile`): the placement then weighs by it, and nothing is learned. Without
one, every pod the controller decides is counted once, by its requests and the specs of its
claims, and the placement weighs by the pods counted so far (FGD's target workload is the pods a
cluster runs). The controller keeps the counts in a ConfigMap (`controller/workload_store.py`) so
a restart or a new leader goes on from them.

When the learned weights move is one rule, kept here and in `workload.Workload` for both the
controller and `simulate --workload learned`, which replays it:

- a pod is counted the first time it is decided (`decide`, `count_unsearched`): its shape goes
  into the workload in use before it is ranked, so the first pod weighs by itself alone;
- the workload in use is refreshed (weighs by every pod counted in it) when its count of pods
  doubles, then every 2,048 pods (`workload.next_refresh`);
- it is made again from every count (`workload_for`), which refreshes it too, when the
  cluster's slices, classes or nodes change (the controller's allocator snapshot is rebuilt)
  and when counts are taken back from the ConfigMap (`restore`).

`simulate`'s input does not change while it replays, so there only the count rule refreshes:
it starts from the ConfigMap's counts when its input holds the ConfigMap, and decides the pods
one at a time as the controller does.

Counts are kept as profile entries rather than as shapes because a shape is worked out against
the cluster's DeviceClasses: when the snapshot is rebuilt, the workload is made again from the
entries. The number of entries is bounded (`MAX_ENTRIES`): beyond it the least counted go, so a
cluster whose pods all differ cannot grow the ConfigMap without end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from dra_driver.allocator import AllocationError, ClusterSnapshot, InputError
from dra_driver.simulation.profile import shape_of_entry, workload_of_profile
from dra_driver.simulation.replay import PodPlacement
from dra_driver.simulation.workload import PodShape, Workload
from dra_driver.workload_profile import ProfileEntry, entry_of

MAX_ENTRIES = 256
"""Learned entries kept; a ConfigMap holds at most 1 MiB, and 256 entries of a few claims each
stay far below it."""

PodKey = Hashable
"""What names a pod: the controller's (namespace, name), `simulate`'s "namespace/name"."""


class WorkloadSource:
    def __init__(self, configured: Sequence[ProfileEntry] | None = None) -> None:
        self.configured = None if configured is None else list(configured)
        self.learned: dict[str, ProfileEntry] = {}
        """Entry key → the entry, its weight the number of pods counted."""
        self.counted: set[PodKey] = set()
        """Pods counted already: a pod that waits is decided again and again, and counts once."""
        self.revision = 0
        """Bumped whenever the learned counts change (the store writes when it moved)."""
        self.epoch = 0
        """Bumped when counts come back from the store: the workload in use is made again."""
        self._entry_of_shape: dict[object, str] = {}
        """Shape key → the key of the learned entry pods of that shape are counted in."""
        self.skipped: list[str] = []
        """Why entries were left out of the last workload made (a class that does not exist)."""

    @property
    def source(self) -> str:
        return "configured" if self.configured is not None else "learned"

    def pods(self) -> int:
        """Pods the workload holds: counted ones, or the configured profile's entries."""
        if self.configured is not None:
            return len(self.configured)
        return int(sum(e.weight for e in self.learned.values()))

    def workload_for(self, snapshot: ClusterSnapshot) -> Workload:
        """The workload over this snapshot's classes: the configured profile, fixed; or the
        learned counts, weighed at once, which the pods decided from now on add to. Entries
        left out are in `skipped`."""
        if self.configured is not None:
            workload, self.skipped = workload_of_profile(snapshot, self.configured)
            return workload
        workload, self.skipped = Workload(), []
        for i, entry in enumerate(self.learned.values()):
            try:
                workload.observe(shape_of_entry(snapshot, entry), int(entry.weight))
            except (InputError, AllocationError) as err:
                self.skipped.append(f"shapes[{i}]: {err}")
        if workload.seen:
            workload.publish()
        return workload

    def decide(
        self,
        pod: PodKey,
        body: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        place: Callable[[bool], PodPlacement],
    ) -> PodPlacement:
        """Place the pod with `place(retry)` and count it. `retry` says it was counted before,
        so the placer leaves its shape out of the workload in use (`Cluster.place_pod`): it
        goes in the first time, before the pod is ranked. Nothing is counted when `place`
        raises (claims that cannot be planned)."""
        placement = place(pod in self.counted)
        self.count(pod, body, claims, placement.shape.key)
        return placement

    def count_unsearched(
        self,
        pod: PodKey,
        body: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        shape: PodShape,
        workload: Callable[[], Workload],
    ) -> None:
        """Count the pod as `decide` would have, where its search was skipped for being bound
        to fail: the learned workload must not miss the pods that wait. `workload`: the one in
        use, asked for only when the pod was not counted before."""
        if pod not in self.counted:
            workload().observe(shape)
        self.count(pod, body, claims, shape.key)

    def count(
        self,
        pod: PodKey,
        body: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        shape: object = None,
    ) -> None:
        """Count a pod decided for the first time in the learned entries (a configured profile
        counts nothing). `shape`: the pod's shape key as the placer worked it out; a pod of a
        shape counted before adds to that shape's entry without writing its claims out again
        (the entry's key is JSON of every spec, most of the cost of counting a pod), so pods
        whose specs differ in what no shape reads share one entry."""
        if pod in self.counted:
            return
        self.counted.add(pod)
        if self.configured is not None:
            return
        key = self._entry_of_shape.get(shape) if shape is not None else None
        found = self.learned.get(key) if key is not None else None
        if found is None or key is None:
            entry = entry_of(body, claims)
            key = entry.key  # JSON of every spec: worked out once per shape, not per pod
            found = self.learned.get(key) or dataclasses.replace(entry, weight=0.0)
            if shape is not None:
                self._entry_of_shape[shape] = key
        self.learned[key] = dataclasses.replace(found, weight=found.weight + 1)
        if len(self.learned) > MAX_ENTRIES:
            least = min(self.learned, key=lambda k: self.learned[k].weight)
            del self.learned[least]
        self.revision += 1

    def forget_pod(self, pod: PodKey) -> None:
        self.counted.discard(pod)

    def restore(self, entries: Sequence[ProfileEntry]) -> None:
        """Take the counts kept before (the store's ConfigMap, at the start of a term): they
        replace what this replica holds, which the last leader's counts include or, on a
        replica that never led, is nothing."""
        self.learned = {}
        self._entry_of_shape = {}
        for entry in entries:
            found = self.learned.get(entry.key)
            weight = entry.weight + (0.0 if found is None else found.weight)
            self.learned[entry.key] = dataclasses.replace(entry, weight=weight)
        self.revision += 1
        self.epoch += 1
