"""A workload profile (`dra_driver.workload_profile`) as the shapes the scored placement weighs
by, worked out against the cluster's DeviceClasses now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocator import AllocationError, ClusterSnapshot, InputError
from dra_driver.allocator.claims import plan_claim
from dra_driver.simulation.workload import PodShape, Workload, shape_of
from dra_driver.workload_profile import ProfileEntry


def _claim(spec: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"profile-claim-{index}", "namespace": "default"},
        "spec": dict(spec),
    }


def shape_of_entry(snapshot: ClusterSnapshot, entry: ProfileEntry) -> PodShape:
    """The entry's shape against the cluster's classes; InputError / AllocationError when one
    of its claims cannot be planned there (a class that does not exist, say)."""
    plans = [plan_claim(snapshot, _claim(spec, i)) for i, spec in enumerate(entry.claims)]
    return shape_of(entry.requests, plans)


def workload_of_profile(
    snapshot: ClusterSnapshot, entries: Sequence[ProfileEntry]
) -> tuple[Workload, list[str]]:
    """The fixed workload of a profile, and why entries were left out (named by position)."""
    shapes: list[tuple[PodShape, float]] = []
    skipped: list[str] = []
    for i, entry in enumerate(entries):
        try:
            shapes.append((shape_of_entry(snapshot, entry), entry.weight))
        except (InputError, AllocationError) as err:
            skipped.append(f"shapes[{i}]: {err}")
    return Workload.weighted(shapes), skipped
