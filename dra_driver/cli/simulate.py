"""Allocate the unallocated claims of a file one at a time, in file order, as a scheduler would.

Claims that already carry `status.allocation` count as in use. Each later claim sees the usage
left by the earlier ones. In first-fit mode nodes are tried in name order and the first node that
fits (or raises a fatal error) decides — the kube-scheduler's answer for one claim at a time.

When the file holds Pods, the claims no pod uses are allocated first (as above), then the pods
are placed by the simulation engine in arrival order: a pod needs room for its CPU and memory
requests as well as for its claims, which is what decides where real workloads land. A pod with a
departure time gives its node resources and claims back before any later arrival.

When the file also holds GpuQueue objects, the pods are replayed through queues instead
(`dra_driver.simulation.queued`): a pod that cannot be placed waits in its queue and is decided
again whenever the cluster changes, in the controller's order and within its limits, with
reclaim; the outcome then carries a per-queue report.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator import (
    AllocationError,
    AllocationMode,
    ClusterSnapshot,
    InputError,
    Placer,
    Usage,
)
from dra_driver.allocator.claims import claim_key
from dra_driver.allocator.result import allocation_node
from dra_driver.cli.inputs import ClusterObjects
from dra_driver.queues import QueueTree
from dra_driver.simulation.pods import ARRIVAL, DEPARTURE, key_of, pod_claims, seconds
from dra_driver.simulation.queue_report import QueueReport, build_report
from dra_driver.simulation.queued import QueuedReplay
from dra_driver.simulation.replay import Cluster, PodPlacement, PodPolicy


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    namespace: str
    name: str
    allocated: bool
    node: str | None
    allocation: dict[str, Any] | None
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "allocated": self.allocated,
            "node": self.node,
            "allocation": self.allocation,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class PodOutcome:
    namespace: str
    name: str
    node: str | None
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.node,
            "reason": self.reason,
        }


@dataclass(slots=True)
class Outcomes:
    claims: list[ClaimOutcome] = field(default_factory=list)
    """The claims no pod uses, in file order, then each placed pod's claims in arrival order."""
    pods: list[PodOutcome] = field(default_factory=list)
    queues: QueueReport | None = None
    """Only when the input holds GpuQueue objects."""


Progress = Callable[[float, int], None]
"""(the replay's time now, events left): called as a queued replay advances."""


class Simulation:
    """The state of one run; `explain` reuses it to replay the claims before the one asked about."""

    def __init__(self, objects: ClusterObjects, mode: AllocationMode) -> None:
        self.objects = objects
        self.snapshot = ClusterSnapshot.build(objects.slices, objects.classes, objects.nodes)
        self.usage = Usage()
        self.placer = Placer(
            self.snapshot, self.usage, mode, nodes=self.snapshot.schedulable_node_names()
        )
        for claim in objects.claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                node = allocation_node(allocation) or ""
                self.placer.record(allocation, node)

    def allocate(self, claim: Mapping[str, Any]) -> ClaimOutcome:
        meta = claim.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name"))
        try:
            placement = self.placer.place([claim])
        except AllocationError as err:
            return ClaimOutcome(namespace, name, False, None, None, err.message)
        if placement.allocations is None:
            return ClaimOutcome(namespace, name, False, None, None, placement.reason)
        return ClaimOutcome(namespace, name, True, placement.node, placement.allocations[0], None)


def pending_claims(objects: ClusterObjects) -> list[dict[str, Any]]:
    return [c for c in objects.claims if not (c.get("status") or {}).get("allocation")]


def simulate(objects: ClusterObjects, mode: AllocationMode) -> list[ClaimOutcome]:
    """Raises InputError for malformed objects (the message names object and field)."""
    return simulate_all(objects, mode).claims


def simulate_all(
    objects: ClusterObjects, mode: AllocationMode, progress: Progress | None = None
) -> Outcomes:
    """Claims no pod uses first, in file order, then the pods; InputError for malformed input."""
    run = Simulation(objects, mode)
    by_key = {claim_key(claim): claim for claim in objects.claims}
    used = _claims_used_by_pods(objects, by_key)
    outcomes = Outcomes()
    seen: set[str] = set()
    for claim in pending_claims(objects):
        key = claim_key(claim)
        if key in seen:
            raise InputError(f"ResourceClaim {key} appears twice in the input")
        seen.add(key)
        if key not in used:
            outcomes.claims.append(run.allocate(claim))
    if objects.queues:
        _replay_queued(run, objects, mode, by_key, outcomes, progress)
    elif objects.pods:
        _place_pods(run, objects, mode, by_key, outcomes)
    return outcomes


def _claims_used_by_pods(objects: ClusterObjects, claims: Mapping[str, Any]) -> set[str]:
    """Keys of the ResourceClaims pods name directly. Each must be pending and used by one pod
    only: the engine allocates a pod's claims with the pod, and a claim shared between pods or
    allocated before would need the pod pinned to that claim's node, which it does not model."""
    used: dict[str, str] = {}
    for pod in objects.pods:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = entry.get("resourceClaimName") if isinstance(entry, Mapping) else None
            if not name:
                continue
            key = f"{namespace}/{name}"
            if key in used:
                raise InputError(
                    f"Pod {key_of(pod)}: ResourceClaim {key} is also used by Pod {used[key]}; "
                    "simulate does not place pods that share a claim"
                )
            claim = claims.get(key)
            if claim is not None and (claim.get("status") or {}).get("allocation"):
                raise InputError(
                    f"Pod {key_of(pod)}: ResourceClaim {key} is already allocated; simulate "
                    "places only pods whose claims are pending"
                )
            used[key] = key_of(pod)
    return set(used)


def _arrivals(pods: list[dict[str, Any]]) -> list[tuple[float, float | None, dict[str, Any]]]:
    """(arrival, departure, pod) in arrival order; file order among equal arrivals, and a pod
    without the arrival annotation arrives at 0."""
    timed = []
    for pod in pods:
        arrival = seconds(pod, ARRIVAL) or 0.0
        departure = seconds(pod, DEPARTURE)
        if departure is not None and departure < arrival:
            raise InputError(f"Pod {key_of(pod)}: {DEPARTURE} is before {ARRIVAL}")
        timed.append((arrival, departure, pod))
    timed.sort(key=lambda t: t[0])
    return timed


def _place_pods(
    run: Simulation,
    objects: ClusterObjects,
    mode: AllocationMode,
    claims: Mapping[str, Mapping[str, Any]],
    outcomes: Outcomes,
) -> None:
    cluster = Cluster(run.snapshot, objects.nodes, PodPolicy(mode.value), usage=run.usage)
    templates = {key_of(t): t for t in objects.templates}
    seen: set[str] = set()
    leaving: list[tuple[float, int, PodPlacement]] = []
    for order, (arrival, departure, pod) in enumerate(_arrivals(objects.pods)):
        key = key_of(pod)
        if key in seen:
            raise InputError(f"Pod {key} appears twice in the input")
        seen.add(key)
        while leaving and leaving[0][0] <= arrival:
            cluster.release_pod(heapq.heappop(leaving)[2])
        own = pod_claims(pod, claims, templates)
        namespace, name = key.split("/", 1)
        try:
            placement = cluster.place_pod(pod, own)
        except AllocationError as err:
            outcomes.pods.append(PodOutcome(namespace, name, None, str(err)))
            outcomes.claims += [_claim_outcome(c, None, None, str(err)) for c in own]
            continue
        outcomes.pods.append(PodOutcome(namespace, name, placement.node, placement.reason))
        if placement.node is None or placement.allocations is None:
            why = f"pod {key} not placed: {placement.reason}"
            outcomes.claims += [_claim_outcome(c, None, None, why) for c in own]
            continue
        for claim, allocation in zip(own, placement.allocations, strict=True):
            outcomes.claims.append(_claim_outcome(claim, placement.node, allocation, None))
        if departure is not None:
            heapq.heappush(leaving, (departure, order, placement))


def _replay_queued(
    run: Simulation,
    objects: ClusterObjects,
    mode: AllocationMode,
    claims: Mapping[str, Mapping[str, Any]],
    outcomes: Outcomes,
    progress: Progress | None,
) -> None:
    """The pods through the file's GpuQueues (see `dra_driver.simulation.queued`)."""
    cluster = Cluster(run.snapshot, objects.nodes, PodPolicy(mode.value), usage=run.usage)
    replay = QueuedReplay(cluster, QueueTree.build(objects.queues))
    for claim in objects.claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            replay.add_claim_usage(claim_key(claim).split("/", 1)[0], allocation)
    for outcome in outcomes.claims:
        if outcome.allocation is not None:
            replay.add_claim_usage(outcome.namespace, outcome.allocation)
    templates = {key_of(t): t for t in objects.templates}
    seen: set[str] = set()
    for arrival, departure, pod in _arrivals(objects.pods):
        key = key_of(pod)
        if key in seen:
            raise InputError(f"Pod {key} appears twice in the input")
        seen.add(key)
        replay.add_pod(pod, pod_claims(pod, claims, templates), key, arrival, departure)
    for now in replay.steps():
        if progress is not None:
            progress(now, replay.events_left)
    for job in replay.jobs:
        namespace, name = job.namespace, job.name
        if job.last_node is None or job.last_allocations is None:
            why = job.reason or "not placed"
            if not job.failed:
                why = f"still waiting in queue {job.queue} at the end: {why}"
            outcomes.pods.append(PodOutcome(namespace, name, None, why))
            outcomes.claims += [_claim_outcome(c, None, None, why) for c in job.claims]
            continue
        outcomes.pods.append(PodOutcome(namespace, name, job.last_node, None))
        for made, allocation in zip(job.claims, job.last_allocations, strict=True):
            outcomes.claims.append(_claim_outcome(made, job.last_node, allocation, None))
    outcomes.queues = build_report(replay)


def _claim_outcome(
    claim: Mapping[str, Any],
    node: str | None,
    allocation: dict[str, Any] | None,
    reason: str | None,
) -> ClaimOutcome:
    namespace, name = claim_key(claim).split("/", 1)
    return ClaimOutcome(namespace, name, allocation is not None, node, allocation, reason)
