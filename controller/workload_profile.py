"""The workload the controller's scored placement weighs by: configured, or learned.

A cluster admin may configure a profile (`--workload-profile`, the format of
`dra_driver.simulation.profile`): the placement then weighs by it, and nothing is learned. Without
one, every pod the controller places is counted once, by its requests and the specs of its claims,
and the placement weighs by the pods counted so far (FGD's target workload is the pods a cluster
runs). The counts are kept in a ConfigMap (`ProfileStore` in `workload_store.py`) so a restart or
a new leader goes on from them.

Counts are kept as profile entries rather than as shapes because a shape is worked out against
the cluster's DeviceClasses: when the allocator's snapshot is rebuilt, the workload is made again
from the entries (`workload_for`). The number of entries is bounded (`MAX_ENTRIES`): beyond it the
least counted go, so a cluster whose pods all differ cannot grow the ConfigMap without end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from controller.informer import Key
from dra_driver.allocator import AllocationError, ClusterSnapshot, InputError
from dra_driver.simulation.profile import shape_of_entry, workload_of_profile
from dra_driver.simulation.workload import Workload
from dra_driver.workload_profile import ProfileEntry, entry_of

log = structlog.get_logger(__name__)

MAX_ENTRIES = 256
"""Learned entries kept; a ConfigMap holds at most 1 MiB, and 256 entries of a few claims each
stay far below it."""


class WorkloadSource:
    def __init__(self, configured: Sequence[ProfileEntry] | None = None) -> None:
        self.configured = None if configured is None else list(configured)
        self.learned: dict[str, ProfileEntry] = {}
        """Entry key → the entry, its weight the number of pods counted."""
        self.counted: set[Key] = set()
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
        learned counts, which the pods placed from now on add to."""
        if self.configured is not None:
            workload, self.skipped = workload_of_profile(snapshot, self.configured)
        else:
            workload, self.skipped = Workload(), []
            for i, entry in enumerate(self.learned.values()):
                try:
                    workload.observe(shape_of_entry(snapshot, entry), int(entry.weight))
                except (InputError, AllocationError) as err:
                    self.skipped.append(f"shapes[{i}]: {err}")
            if workload.seen:
                workload.publish()
        if self.skipped:
            log.warning(
                "workload profile entries left out",
                source=self.source,
                skipped=len(self.skipped),
                first=self.skipped[0],
            )
        return workload

    def count(
        self,
        pod: Key,
        body: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        shape: object = None,
    ) -> None:
        """Count a pod placed for the first time (a configured profile counts nothing).
        `shape`: the pod's shape key as the placer worked it out; a pod of a shape counted
        before adds to that shape's entry without writing its claims out again (the entry's
        key is JSON of every spec, most of the cost of counting a pod), so pods whose specs
        differ in what no shape reads share one entry."""
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

    def forget_pod(self, pod: Key) -> None:
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
