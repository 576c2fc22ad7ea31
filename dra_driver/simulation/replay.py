"""Placing pods one at a time on a simulated cluster: node resources and claims together.

A pod goes to a node only where its requests fit what is left (the scheduler's NodeResourcesFit,
via the ledger) and all its claims fit the node's devices (the allocator). Policies:

- `first-fit`: the first node in node order where both fit — what a simple scheduler does, and
  for claims the kube-scheduler's answer;
- `best-fit`: the node that leaves least free device room, then least free CPU (a baseline);
- `scored`: the node and devices that increase the workload's expected fragmentation least
  (fragindex.py), devices then chosen by the allocator's scored mode steered to those devices;
  equal increases go to a fixed pseudo-random order of the nodes (tie_order.py).

Scored and best-fit never fail a pod first fit would place at that moment: when no ranked node
takes it, first fit is tried.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dra_driver.allocator import (
    AllocationError,
    AllocationMode,
    ClusterSnapshot,
    InputError,
    Placer,
    ScoringPolicy,
    Usage,
)
from dra_driver.allocator.claims import ClaimPlan, check_result_limit, plan_claim
from dra_driver.allocator.placement import search_node, take_preferred
from dra_driver.noderesources import CPU, MEMORY, NodeUsage, Resources, pod_requests
from dra_driver.simulation.fragindex import Choice, FragmentationIndex, Objective
from dra_driver.simulation.ledger import NodeResourceLedger, asked
from dra_driver.simulation.ranking import NodeTable
from dra_driver.simulation.tie_order import Ties, spread_order
from dra_driver.simulation.workload import PodShape, Workload, shape_of


def workload_of(
    snapshot: ClusterSnapshot,
    pods: Iterable[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> Workload:
    """The shapes of these pods (with their claims), by their share of the pods: the workload
    to weigh by when every pod to come is known in advance (`simulate`'s input, a trace).
    Weights learned while pods arrive rest on the pods seen so far, and on one seed of the
    openb gpuspec20 trace those of its first 2,048 arrivals cost 5.8 points of allocation
    (docs/performance/traces.md). A pod whose claims cannot be planned is left out here; placing it
    reports why."""
    shapes = []
    for pod, claims in pods:
        try:
            plans = [plan_claim(snapshot, claim) for claim in claims]
            shapes.append(shape_of(pod_requests(pod), plans))
        except (InputError, AllocationError):
            continue
    return Workload.of(shapes)


def plan_pod(
    snapshot: ClusterSnapshot, requests: Resources, claims: Sequence[Mapping[str, Any]]
) -> tuple[list[ClaimPlan], PodShape]:
    """The plans of a pod's claims and the pod's shape; InputError / AllocationError as the
    allocator raises them (a pod whose claims cannot be planned has no shape: it is counted in
    no workload)."""
    plans = [plan_claim(snapshot, claim) for claim in claims]
    check_result_limit(plans)
    return plans, shape_of(requests, plans)


class PodPolicy(enum.StrEnum):
    FIRST_FIT = "first-fit"
    BEST_FIT = "best-fit"
    SCORED = "scored"


@dataclass(slots=True)
class PodPlacement:
    node: str | None
    allocations: list[dict[str, Any]] | None
    reason: str | None
    requests: Resources
    shape: PodShape
    choice: Choice | None = None
    candidates: list[Choice] = field(default_factory=list)
    """Scored mode: the best evaluation per distinct node state, best first (for explain)."""


class Cluster:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        nodes: Sequence[Mapping[str, Any]],
        policy: PodPolicy,
        *,
        usage: Usage | None = None,
        scoring: ScoringPolicy | None = None,
        keep_candidates: bool = False,
        ties: Ties = Ties.SPREAD,
        workload: Workload | None = None,
        placer: Placer | None = None,
    ) -> None:
        """`ties`: which node scored mode picks among equal points (tie_order.py); with
        `Ties.SPREAD` the scored policy takes nodes in `spread_order` wherever it would take
        them in name order (ties, the node standing for nodes in equal states, its first-fit
        fallback); the other policies keep name order. `workload`: the shapes the score
        weighs by, when they are known in advance; else they are learned as pods arrive.
        `placer`: the allocator's placer to record allocations through, over `usage` (the
        controller's, so that its per-node counts stay right); else one of its own."""
        self.snapshot = snapshot
        self.usage = usage or Usage()
        self.policy = policy
        self.scoring = scoring or ScoringPolicy()
        self.ledger = NodeResourceLedger(nodes)
        self.nodes = snapshot.schedulable_node_names()
        known = set(self.nodes)
        self.nodes += [n for n in self.ledger.allocatable if n not in known]
        if policy is PodPolicy.SCORED and ties is Ties.SPREAD:
            self.nodes = spread_order(self.nodes)
        self.placer = placer or Placer(
            snapshot, self.usage, AllocationMode.FIRST_FIT, nodes=self.nodes
        )
        self.workload = workload or Workload()
        self.index = FragmentationIndex(snapshot, self.usage, self.workload, (CPU, MEMORY))
        self.keep_candidates = keep_candidates
        self.ties = ties
        self._table: NodeTable | None = None

    @property
    def fuller_first(self) -> bool:
        """Equal points go to the fuller node (scored mode with `Ties.FULLER`)."""
        return self.policy is PodPolicy.SCORED and self.ties is Ties.FULLER

    def place_pod(
        self,
        pod: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        *,
        retry: bool = False,
        among: Iterable[str] | None = None,
        take: bool = True,
    ) -> PodPlacement:
        """Raises InputError / AllocationError as the allocator does for bad or fatal claims.

        `retry`: the pod was tried before (it waits in a queue), so its shape is not counted
        again in the workload the scored policy learns. `among`: the only nodes it may go to
        (all by default). `take=False` records the claims' allocations in the usage but leaves
        the pod's requests out of the ledger: the controller counts them itself once the
        decision is assumed (`set_used`)."""
        requests = pod_requests(pod)
        plans, shape = plan_pod(self.snapshot, requests, claims)
        if not retry:
            self.workload.observe(shape)
        asks = asked(requests)
        placement = PodPlacement(None, None, None, requests, shape)
        allowed = None if among is None else self.table.mask(among)
        if self.policy is not PodPolicy.FIRST_FIT:
            self._ranked(placement, claims, plans, asks, allowed)
        if placement.node is None:
            self._first_fit(placement, plans, asks, allowed)
        if placement.node is None:
            placement.reason = self._reason(requests, asks, allowed)
            return placement
        if take:
            self.ledger.take(placement.node, requests)
            self._regroup(placement.node)
        # Else the caller counts the pod itself and says so (`set_used`); the node's new device
        # usage is read from the usage's change log before the next ranking.
        return placement

    def set_used(self, node: str, used: NodeUsage) -> None:
        """What the pods on `node` request now, as the caller counts them (the controller's
        view of the pods on each node); its devices' usage is re-read too."""
        self.ledger.set_used(node, used)
        self._regroup(node)

    @property
    def table(self) -> NodeTable:
        """The nodes' free resources and states as arrays, made on first use from the ledger
        and usage the cluster has then."""
        if self._table is None:
            self._table = NodeTable(self.nodes, self.ledger, self.usage, self.index)
        return self._table

    def _regroup(self, node: str) -> None:
        """Move `node` to the group of its new state (groups list nodes in node order)."""
        if self._table is not None:
            self._table.moved(node)

    def _first_fit(
        self,
        placement: PodPlacement,
        plans: Sequence[ClaimPlan],
        asks: list[tuple[str, int]],
        allowed: NDArray[np.bool_] | None = None,
    ) -> None:
        """The first node in node order where requests and claims fit. A node where the claims
        did not fit is skipped until its device usage changes (as the Placer does)."""
        signature = "|".join(p.signature for p in plans)
        fitting = self.table.fitting(asks)
        if allowed is not None:
            fitting &= allowed
        if not plans:
            if fitting.any():
                placement.node, placement.allocations = self.nodes[int(fitting.argmax())], []
            return
        self.table.catch_up()
        unfit = self.table.unfit(signature)
        for i in (fitting & ~unfit).nonzero()[0].tolist():
            node = self.nodes[i]
            result = search_node(
                self.snapshot, self.usage, plans, node, AllocationMode.FIRST_FIT, self.scoring
            )
            if result.allocations is None:
                unfit[i] = True
                continue
            for allocation in result.allocations:
                self.placer.record(allocation, node)
            placement.node, placement.allocations = node, result.allocations
            return

    def _ranked(
        self,
        placement: PodPlacement,
        claims: Sequence[Mapping[str, Any]],
        plans: Sequence[ClaimPlan],
        asks: list[tuple[str, int]],
        allowed: NDArray[np.bool_] | None = None,
    ) -> None:
        """Every node is considered: one evaluation per group of nodes in equal states (the
        group's first node in node order stands for it, as first fit would pick it)."""
        objective = (
            Objective.FRAGMENTATION if self.policy is PodPolicy.SCORED else Objective.BEST_FIT
        )
        ranked: Iterable[Choice] = self.table.ranked(
            placement.shape,
            asks,
            placement.requests.amount(CPU),
            objective,
            self.fuller_first,
            allowed,
        )
        if self.keep_candidates:
            ranked = placement.candidates = list(ranked)
        for choice in ranked:
            if not claims:
                placement.node, placement.allocations, placement.choice = choice.node, [], choice
                return
            prefer = frozenset(choice.devices)
            scored = self.policy is PodPolicy.SCORED
            allocations = (
                take_preferred(self.snapshot, self.usage, plans, choice.node, prefer, self.scoring)
                if scored
                else None
            )
            if allocations is None:
                mode = AllocationMode.SCORED if scored else AllocationMode.FIRST_FIT
                allocations = search_node(
                    self.snapshot, self.usage, plans, choice.node, mode, self.scoring, prefer=prefer
                ).allocations
            if allocations is not None:
                for allocation in allocations:
                    self.placer.record(allocation, choice.node)
                placement.node, placement.allocations = choice.node, allocations
                placement.choice = choice
                return

    def _reason(
        self,
        requests: Resources,
        asks: list[tuple[str, int]],
        allowed: NDArray[np.bool_] | None = None,
    ) -> str:
        if not self.nodes:
            return "no node to try: none is known, or all are unschedulable"
        fits = self.table.fitting(asks)
        fitting = int((fits if allowed is None else fits & allowed).sum())
        if fitting:
            return f"claims do not fit any of the {fitting} node(s) with room for the pod"
        counts: dict[str, int] = {}
        for node in self.nodes:
            for shortfall in self.ledger.shortfalls(node, requests):
                what = shortfall.split(" (")[0]
                counts[what] = counts.get(what, 0) + 1
        parts = [f"{what} on {n} node(s)" for what, n in sorted(counts.items())]
        return "; ".join(parts) or "no node fits"

    def fits_on(
        self, node: str, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """The allocations the pod's claims would get on `node` now, if its requests fit there
        too; nothing is recorded (reclaim asks this with victims released)."""
        if not self.ledger.fits(node, asked(pod_requests(pod))):
            return None
        plans = [plan_claim(self.snapshot, claim) for claim in claims]
        if not plans:
            return []
        return search_node(
            self.snapshot, self.usage, plans, node, AllocationMode.FIRST_FIT, self.scoring
        ).allocations

    def place_on(
        self, node: str, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
    ) -> PodPlacement:
        """Place the pod on `node` (first fit there) or nowhere: where reclaim made room."""
        requests = pod_requests(pod)
        plans = [plan_claim(self.snapshot, claim) for claim in claims]
        placement = PodPlacement(None, None, None, requests, shape_of(requests, plans))
        allocations = self.fits_on(node, pod, claims)
        if allocations is None:
            placement.reason = f"the pod no longer fits node {node}"
            return placement
        for allocation in allocations:
            self.placer.record(allocation, node)
        placement.node, placement.allocations = node, allocations
        self.ledger.take(node, requests)
        self._regroup(node)
        return placement

    def restore_pod(self, placement: PodPlacement) -> None:
        """Take again what `release_pod` gave back (a reclaim trial that is undone)."""
        if placement.node is None:
            return
        for allocation in placement.allocations or []:
            self.placer.record(allocation, placement.node)
        self.ledger.take(placement.node, placement.requests)
        self._regroup(placement.node)

    def release_pod(self, placement: PodPlacement) -> None:
        if placement.node is None:
            return
        for allocation in placement.allocations or []:
            self.placer.release(allocation, placement.node)
        self.ledger.give_back(placement.node, placement.requests)
        self._regroup(placement.node)
