"""Allocate the unallocated claims of a file one at a time, in file order, as a scheduler would.

Claims that already carry `status.allocation` count as in use. Each later claim sees the usage
left by the earlier ones. In first-fit mode nodes are tried in name order and the first node that
fits (or raises a fatal error) decides — the kube-scheduler's answer for one claim at a time.

When the file holds Pods, the claims no pod uses are allocated first (as above), then the pods
are placed by the simulation engine in arrival order: a pod needs room for its CPU and memory
requests as well as for its claims, which is what decides where real workloads land. A pod with a
departure time gives its node resources and claims back before any later arrival.

In scored mode the pods are weighed by the input's pods, all of them known from the start; by a
workload profile (`--workload FILE`, as the controller weighs by its `--workload-profile`); or,
with `--workload learned`, by what the controller would have learned from the pods decided before
each one (`dra_driver.simulation.workload_source`, the controller's own rule), starting from the
profile in the controller's ConfigMap when the input holds it; the pods are then decided in
creation order, as the controller decides pods created one at a time.

When the file also holds GpuQueue objects, the pods are replayed through queues instead
(`dra_driver.simulation.queued`): a pod that cannot be placed waits in its queue and is decided
again whenever the cluster changes, in the controller's order and within its limits, with
reclaim; the outcome then carries a per-queue report.

With report points (`--report`), the GPU allocation report of
`dra_driver.simulation.allocation_report` is read as the replay passes them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

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
from dra_driver.simulation.allocation_report import AllocationReport, ReportPoint, ReportRow
from dra_driver.simulation.pods import ARRIVAL, DEPARTURE, key_of, pod_claims, seconds
from dra_driver.simulation.profile import workload_of_profile
from dra_driver.simulation.queue_report import QueueReport, build_report
from dra_driver.simulation.queued import QueuedReplay
from dra_driver.simulation.replay import Cluster, PodPlacement, PodPolicy, workload_of
from dra_driver.simulation.workload import Workload
from dra_driver.simulation.workload_source import WorkloadSource
from dra_driver.workload_profile import ProfileEntry, stored_profile

LEARNED: Final = "learned"
"""`--workload learned`: weigh each pod by what the controller would have learned before it."""

WorkloadChoice = Sequence[ProfileEntry] | Literal["learned"] | None
"""What scored placement weighs by: a profile, the controller's learning, or (None) the input's
pods."""


def learns(profile: WorkloadChoice) -> bool:
    """Whether the controller's learning is replayed (`--workload learned`)."""
    return isinstance(profile, str) and profile == LEARNED


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
    report: list[ReportRow] | None = None
    """Only when report points were asked for: one row per point, in the order given."""


Progress = Callable[[float, int], None]
"""(the replay's time now, events left): called as a queued replay advances."""


class Simulation:
    """The state of one run; `explain` reuses it to replay the claims before the one asked about."""

    def __init__(
        self,
        objects: ClusterObjects,
        mode: AllocationMode,
        profile: WorkloadChoice = None,
    ) -> None:
        self.objects = objects
        self.profile = profile
        """A workload profile to weigh by (`--workload`), or `LEARNED`, instead of the input's
        pods."""
        self.learned: WorkloadSource | None = None
        """With `LEARNED`: the controller's learning, replayed (made by `input_workload`)."""
        self.warnings: list[str] = []
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
    objects: ClusterObjects,
    mode: AllocationMode,
    progress: Progress | None = None,
    report: Sequence[ReportPoint] = (),
    profile: WorkloadChoice = None,
    warnings: list[str] | None = None,
) -> Outcomes:
    """Claims no pod uses first, in file order, then the pods; InputError for malformed input,
    or for share points in `report` when the input publishes no GPUs. `profile`: the workload
    to weigh by instead of the input's pods (`LEARNED`: as the controller learns it); its
    entries left out (a class the input lacks) are added to `warnings`."""
    run = Simulation(objects, mode, profile)
    if warnings is not None:
        run.warnings = warnings
    by_key = {claim_key(claim): claim for claim in objects.claims}
    used = claims_used_by_pods(objects, by_key)
    reader: AllocationReport | None = None
    if report:
        try:
            reader = AllocationReport(run.snapshot, run.usage, report)
        except ValueError as err:
            raise InputError(f"--report {err}") from None
        reader.read_shares(0.0)  # what the input holds already may reach a point
    outcomes = Outcomes()
    seen: set[str] = set()
    for claim in pending_claims(objects):
        key = claim_key(claim)
        if key in seen:
            raise InputError(f"ResourceClaim {key} appears twice in the input")
        seen.add(key)
        if key not in used:
            outcome = run.allocate(claim)
            outcomes.claims.append(outcome)
            if reader is not None:
                reader.arrive(reader.units.asked([claim]), outcome.allocated)
                reader.read_shares(0.0)
    if objects.queues:
        _replay_queued(run, objects, mode, by_key, outcomes, progress, reader)
    else:
        _place_pods(run, objects, mode, by_key, outcomes, reader)
    if reader is not None:
        outcomes.report = reader.rows()
    return outcomes


def claims_used_by_pods(objects: ClusterObjects, claims: Mapping[str, Any]) -> set[str]:
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


def input_workload(
    run: Simulation, objects: ClusterObjects, claims: Mapping[str, Mapping[str, Any]]
) -> Workload:
    """Every pod of the input, each once: the workload the scored mode weighs by; or the
    profile given instead (as the controller weighs by its configured profile); or, with
    `LEARNED`, the controller's learned workload as it stood before the input's pods: the
    counts of its ConfigMap in the input, or none (`run.learned` then counts the pods as they
    are decided)."""
    profile = run.profile
    if isinstance(profile, str):  # LEARNED
        source = WorkloadSource()
        kept = stored_profile(objects.configmaps)
        if kept is not None:
            source.restore(kept)
        workload = source.workload_for(run.snapshot)
        run.warnings += [f"learned workload entry left out: {why}" for why in source.skipped]
        run.learned = source
        return workload
    if profile is not None:
        workload, skipped = workload_of_profile(run.snapshot, profile)
        run.warnings += [f"workload profile entry left out: {why}" for why in skipped]
        return workload
    templates = {key_of(t): t for t in objects.templates}

    def with_claims() -> Iterator[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
        for pod in objects.pods:
            try:
                yield pod, pod_claims(pod, claims, templates)
            except InputError:
                continue  # placing the pod says why

    return workload_of(run.snapshot, with_claims())


def pod_arrivals(
    pods: list[dict[str, Any]], *, by_creation: bool = False
) -> list[tuple[float, float | None, dict[str, Any]]]:
    """(arrival, departure, pod) in arrival order; file order among equal arrivals, and a pod
    without the arrival annotation arrives at 0. `by_creation`: equal arrivals in creation
    order instead (`metadata.creationTimestamp`, then namespace and name: the order in which
    the controller decides pods created one at a time). InputError for a pod given twice."""
    timed = []
    seen: set[str] = set()
    for pod in pods:
        key = key_of(pod)
        if key in seen:
            raise InputError(f"Pod {key} appears twice in the input")
        seen.add(key)
        arrival = seconds(pod, ARRIVAL) or 0.0
        departure = seconds(pod, DEPARTURE)
        if departure is not None and departure < arrival:
            raise InputError(f"Pod {key}: {DEPARTURE} is before {ARRIVAL}")
        timed.append((arrival, departure, pod))
    if by_creation:
        timed.sort(key=lambda t: (t[0], *creation_order(t[2])))
    else:
        timed.sort(key=lambda t: t[0])
    return timed


def creation_order(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(creationTimestamp, namespace, name): a pod without a creation time comes first."""
    meta = pod.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
    )


def arrivals_of(
    run: Simulation, objects: ClusterObjects
) -> list[tuple[float, float | None, dict[str, Any]]]:
    """The input's pods in the order the replay decides them (`pod_arrivals`): in creation
    order among equal arrivals when the controller's learning is replayed."""
    return pod_arrivals(objects.pods, by_creation=learns(run.profile))


class PodReplay:
    """Pods placed when they arrive or never; a pod's departure gives its room back before any
    later arrival. `explain` drives it up to the pod it is asked about."""

    def __init__(
        self,
        run: Simulation,
        objects: ClusterObjects,
        mode: AllocationMode,
        claims: Mapping[str, Mapping[str, Any]],
        *,
        keep_candidates: bool = False,
    ) -> None:
        self.claims = claims
        self.templates = {key_of(t): t for t in objects.templates}
        self.cluster = Cluster(
            run.snapshot,
            objects.nodes,
            PodPolicy(mode.value),
            usage=run.usage,
            keep_candidates=keep_candidates,
            workload=input_workload(run, objects, claims),
        )
        self.learned = run.learned
        self._leaving: list[tuple[float, int, PodPlacement]] = []
        self._order = itertools.count()

    def release_until(self, time: float) -> None:
        """Let every pod due to leave at or before `time` go."""
        while self._leaving and self._leaving[0][0] <= time:
            self.cluster.release_pod(heapq.heappop(self._leaving)[2])

    def claims_of(self, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return pod_claims(pod, self.claims, self.templates)

    def place(
        self, pod: Mapping[str, Any], own: list[Mapping[str, Any]], departure: float | None
    ) -> PodPlacement:
        """Raises AllocationError as the allocator does for a fatal claim. The controller's
        learning, when it is replayed, counts the pod as the controller counts it."""
        if self.learned is None:
            placement = self.cluster.place_pod(pod, own)
        else:
            placement = self.learned.decide(
                key_of(pod), pod, own, lambda retry: self.cluster.place_pod(pod, own, retry=retry)
            )
        if placement.node is not None and departure is not None:
            heapq.heappush(self._leaving, (departure, next(self._order), placement))
        return placement


def _place_pods(
    run: Simulation,
    objects: ClusterObjects,
    mode: AllocationMode,
    claims: Mapping[str, Mapping[str, Any]],
    outcomes: Outcomes,
    report: AllocationReport | None,
) -> None:
    if not objects.pods:
        if report is not None:
            for number, time in report.due_times(None):
                report.read(number, time)
        return
    replay = PodReplay(run, objects, mode, claims)
    for arrival, departure, pod in arrivals_of(run, objects):
        if report is not None:
            for number, time in report.due_times(arrival):
                replay.release_until(time)
                report.read(number, time)
        replay.release_until(arrival)
        own = replay.claims_of(pod)
        placed = _place_one(replay, pod, own, departure, outcomes)
        if report is not None:
            report.arrive(report.units.asked(own), placed)
            report.read_shares(arrival)
    if report is not None:
        for number, time in report.due_times(None):
            replay.release_until(time)
            report.read(number, time)


def _place_one(
    replay: PodReplay,
    pod: Mapping[str, Any],
    own: list[Mapping[str, Any]],
    departure: float | None,
    outcomes: Outcomes,
) -> bool:
    """Place one pod and note its outcome and its claims'; whether it was placed."""
    key = key_of(pod)
    namespace, name = key.split("/", 1)
    try:
        placement = replay.place(pod, own, departure)
    except AllocationError as err:
        outcomes.pods.append(PodOutcome(namespace, name, None, str(err)))
        outcomes.claims += [_claim_outcome(c, None, None, str(err)) for c in own]
        return False
    outcomes.pods.append(PodOutcome(namespace, name, placement.node, placement.reason))
    if placement.node is None or placement.allocations is None:
        why = f"pod {key} not placed: {placement.reason}"
        outcomes.claims += [_claim_outcome(c, None, None, why) for c in own]
        return False
    for claim, allocation in zip(own, placement.allocations, strict=True):
        outcomes.claims.append(_claim_outcome(claim, placement.node, allocation, None))
    return True


def _replay_queued(
    run: Simulation,
    objects: ClusterObjects,
    mode: AllocationMode,
    claims: Mapping[str, Mapping[str, Any]],
    outcomes: Outcomes,
    progress: Progress | None,
    report: AllocationReport | None,
) -> None:
    """The pods through the file's GpuQueues (see `dra_driver.simulation.queued`)."""
    cluster = Cluster(
        run.snapshot,
        objects.nodes,
        PodPolicy(mode.value),
        usage=run.usage,
        workload=input_workload(run, objects, claims),
    )
    replay = QueuedReplay(cluster, QueueTree.build(objects.queues), learned=run.learned)
    for claim in objects.claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            replay.add_claim_usage(claim_key(claim).split("/", 1)[0], allocation)
    for outcome in outcomes.claims:
        if outcome.allocation is not None:
            replay.add_claim_usage(outcome.namespace, outcome.allocation)
    templates = {key_of(t): t for t in objects.templates}
    arrivals: list[float] = []
    for arrival, departure, pod in arrivals_of(run, objects):
        arrivals.append(arrival)
        replay.add_pod(pod, pod_claims(pod, claims, templates), key_of(pod), arrival, departure)
    if report is None:
        for now in replay.steps():
            if progress is not None:
                progress(now, replay.events_left)
    else:
        _queued_with_report(replay, arrivals, report, progress)
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


def _queued_with_report(
    replay: QueuedReplay,
    arrivals: Sequence[float],
    report: AllocationReport,
    progress: Progress | None,
) -> None:
    """Advance the queued replay, reading report points after the decisions of each event time:
    pods that arrive together are decided together, so a share point is read once all of them
    were. An evicted pod that comes back is the same demand, so it does not arrive again."""
    asks = [report.units.asked(job.claims) for job in replay.jobs]
    lone = report.waiting
    arrived = 0

    def waiting() -> float:
        jobs = replay.jobs[:arrived]
        left = (job.placement is None and not job.finished for job in jobs)
        return lone + sum(ask for ask, waits in zip(asks[:arrived], left, strict=True) if waits)

    report.waiting_now = waiting
    for number, time in report.due_times(replay.next_time):
        report.read(number, time)
    for now in replay.steps():
        if progress is not None:
            progress(now, replay.events_left)
        while arrived < len(arrivals) and arrivals[arrived] <= now:
            report.arrived += asks[arrived]
            arrived += 1
        report.read_shares(now)
        for number, time in report.due_times(replay.next_time):
            report.read(number, time)
    for number, time in report.due_times(None):
        report.read(number, time)


def _claim_outcome(
    claim: Mapping[str, Any],
    node: str | None,
    allocation: dict[str, Any] | None,
    reason: str | None,
) -> ClaimOutcome:
    namespace, name = claim_key(claim).split("/", 1)
    return ClaimOutcome(namespace, name, allocation is not None, node, allocation, reason)
