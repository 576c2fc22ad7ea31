"""Choosing node and devices for one pod, or for a whole gang, from the controller's view.

A decision is tentative: its allocations are *assumed* in the view (so the next decision does not
take the same devices) until they are written and confirmed, or forgotten. Pods whose claims are
partly allocated already (a claim shared with a running pod, or a write that got halfway before a
failover) are pinned to that node, so a pod never ends up with claims on two nodes.

Only nodes with room for the pod's CPU, memory and other requests (the kube-scheduler's
NodeResourcesFit, see `dra_driver.noderesources`) are offered to the allocator; a gang's members
must fit on their nodes together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.informer import Key, Obj, key_of
from controller.view import ClusterView, allocation_of
from dra_driver.allocator import AllocationError, AllocationMode, InputError
from dra_driver.allocator.result import allocation_node
from dra_driver.noderesources import Shortfall
from dra_driver.simulation.workload import PodShape


@dataclass(slots=True)
class Decision:
    pods: list[Obj]
    allocations: dict[Key, Obj] = field(default_factory=dict)
    """Claims this decision allocates → their new `status.allocation`."""
    claims: dict[Key, list[Obj]] = field(default_factory=dict)
    """Every claim of the pods → the pods that must be in its `reservedFor`."""
    nodes: dict[Key, str | None] = field(default_factory=dict)
    """Pod → the node its claims are on."""


@dataclass(frozen=True, slots=True)
class NotYet:
    """The pods cannot be decided yet (claims missing, gang incomplete): no Event, just wait."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unallocatable:
    """No node and devices fit, or the input is wrong: the pods get an Event and a condition."""

    reason: str


Outcome = Decision | NotYet | Unallocatable


@dataclass(slots=True)
class _Failure:
    reason: str | None
    shape: PodShape
    freed_before: int
    """How many entries `NoRoom.freed_on` had when the search failed."""


@dataclass(slots=True)
class NoRoom:
    """What found no node in one pass: a pod like one of these finds none either, except on
    a node where room was given back since. The placer's search is the same for every pod of
    a spec (its claims' names aside) and the same claim specs, among the same nodes, and
    decisions only take room: its failure holds on every node but those the owner says were
    freed (`freed`), and there a search of those nodes alone finds what a search of all would
    (the placer ranks each node on its own, and the others still have no room). While a queue
    reclaims, every pass decides again the hundreds of pods that wait, most of them copies of
    a few specs, and each pod placed on a released hold freed room on one node: a full search
    of every node per waiting pod, otherwise.

    Keyed by (JSON of the pod's spec without its claims and gates and of the specs of the
    claims it needs, the nodes with room for its requests)."""

    failed: dict[tuple[str, tuple[str, ...]], _Failure] = field(default_factory=dict)
    freed_on: list[str] = field(default_factory=list)
    """Nodes where room was given back during the pass, in order."""

    def freed(self, nodes: Iterable[str]) -> None:
        """Room was given back on `nodes` ("*": devices of no one node, anywhere)."""
        for node in nodes:
            if node == "*":
                self.failed.clear()
            self.freed_on.append(node)

    def where(self, failure: _Failure, nodes: Sequence[str]) -> list[str]:
        """The nodes of `nodes` where room was given back since `failure`."""
        since = set(self.freed_on[failure.freed_before :])
        return [n for n in nodes if n in since]

    def remember(
        self, trial: tuple[str, tuple[str, ...]], reason: str | None, shape: PodShape
    ) -> None:
        self.failed[trial] = _Failure(reason, shape, len(self.freed_on))


def _pod_name(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


@dataclass(slots=True)
class _PodState:
    pod: Obj
    claims: list[Obj]
    missing: list[Obj]
    """Unallocated claims, deduplicated across the unit."""
    pinned: str | None
    nodes: list[str]
    """Eligible nodes with room for the pod."""
    lacking: dict[str, list[Shortfall]]
    """Eligible nodes without room for it → what they lack."""


def _pod_state(view: ClusterView, pod: Obj, taken: set[Key]) -> _PodState | Outcome:
    claims = view.pod_claims(pod)
    if claims is None:
        return NotYet(f"pod {_pod_name(pod)}: waiting for its ResourceClaims to be created")
    for claim in claims:
        if claim["metadata"].get("deletionTimestamp"):
            return Unallocatable(
                f"pod {_pod_name(pod)}: ResourceClaim {claim['metadata']['name']} is being deleted"
            )
    on_nodes = {allocation_node(a) for c in claims if (a := allocation_of(c)) is not None}
    on_nodes.discard(None)
    if len(on_nodes) > 1:
        return Unallocatable(
            f"pod {_pod_name(pod)}: its claims are already allocated on different nodes "
            f"({', '.join(sorted(n for n in on_nodes if n))})"
        )
    pinned = next(iter(on_nodes), None)
    eligible = view.eligibility(pod)
    nodes = [n for n in eligible.nodes if pinned is None or n == pinned]
    if not nodes:
        if pinned is not None and pinned not in eligible.nodes:
            why = eligible.rejected.get(pinned, "it is not a known node")
            return Unallocatable(
                f"pod {_pod_name(pod)}: its claims are allocated on node {pinned}, where it "
                f"may not run: {why}"
            )
        return Unallocatable(f"pod {_pod_name(pod)}: {eligible.reason()}")
    missing = []
    for claim in claims:
        key = key_of(claim)
        if allocation_of(claim) is None and key not in view.assumed and key not in taken:
            taken.add(key)
            missing.append(claim)
    lacking: dict[str, list[Shortfall]] = {}
    if missing:  # nothing left to allocate: the pod goes where its claims are anyway
        lacking = view.lacking([pod], nodes)
        nodes = [n for n in nodes if n not in lacking]
        if not nodes:
            if pinned is None:
                view.count_turned_away(pod, missing)  # a pod of the workload all the same
            return Unallocatable(f"pod {_pod_name(pod)}: {no_room(lacking)}")
    return _PodState(pod, claims, missing, pinned, nodes, lacking)


def no_room(lacking: Mapping[str, Sequence[Shortfall]]) -> str:
    """Why no node has room, for Events and the pod condition (a few nodes, by name)."""
    return f"no eligible node has room for the pod ({_lacking_text(lacking)})"


def _lacking_text(lacking: Mapping[str, Sequence[Shortfall]]) -> str:
    shown = sorted(lacking.items())[:3]
    text = "; ".join(f"node {node}: {', '.join(map(str, lack))}" for node, lack in shown)
    more = len(lacking) - len(shown)
    return f"{text}{f'; and {more} more' if more else ''}"


def _with_reason(reason: str | None, lacking: Mapping[str, Sequence[Shortfall]]) -> str:
    """The allocator's reason, plus the nodes left out for lack of CPU, memory or pod slots."""
    if not lacking:
        return str(reason)
    return f"{reason}; left out for lack of room: {_lacking_text(lacking)}"


def decide(view: ClusterView, pods: Sequence[Obj], nowhere: NoRoom | None = None) -> Outcome:
    """Allocate every unallocated claim of `pods` (one pod, or a gang's gated members).
    `nowhere`: the pass's searches that found nothing (a lone pod only), to skip a search
    bound to fail and to remember one that did."""
    taken: set[Key] = set()
    states: list[_PodState] = []
    for pod in pods:
        state = _pod_state(view, pod, taken)
        if not isinstance(state, _PodState):
            return state
        states.append(state)
    decision = Decision(list(pods))
    for state in states:
        for claim in state.claims:
            decision.claims.setdefault(key_of(claim), []).append(state.pod)
    try:
        if len(states) > 1 and _together(view, states, decision):
            return decision
        return _one_by_one(view, states, decision, nowhere if len(states) == 1 else None)
    except (AllocationError, InputError) as err:
        _release(view, decision)
        return Unallocatable(str(err))


def _together(view: ClusterView, states: Sequence[_PodState], decision: Decision) -> bool:
    """A gang on one node when it fits there: one search over all its claims scores topology
    (one NVLink domain) across the members, not just within each pod."""
    common = set(states[0].nodes)
    for state in states[1:]:
        common &= set(state.nodes)
    missing = [c for s in states for c in s.missing]
    if not common or not missing:
        return False
    common -= set(view.lacking([s.pod for s in states], common))
    if not common:
        return False
    placement = view.placer().place(missing, nodes=sorted(common))
    if placement.allocations is None or placement.node is None:
        return False
    _adopt(view, missing, placement.allocations, decision)
    for state in states:
        decision.nodes[key_of(state.pod)] = placement.node
    return True


def _one_by_one(
    view: ClusterView,
    states: Sequence[_PodState],
    decision: Decision,
    nowhere: NoRoom | None = None,
) -> Outcome:
    used: set[str] = set()
    for state in states:
        if not state.missing:
            decision.nodes[key_of(state.pod)] = state.pinned
            continue
        prefix = "" if len(states) == 1 else f"gang member {_pod_name(state.pod)}: "
        nodes = state.nodes
        lacking = dict(state.lacking)
        if used:  # the members placed so far count against their nodes now
            lacking.update(view.lacking([state.pod], nodes))
            nodes = [n for n in nodes if n not in lacking]
            if not nodes:
                _release(view, decision)
                return Unallocatable(f"{prefix}{no_room(lacking)}")
        node, allocations, reason = _place(view, state, nodes, used, nowhere)
        if allocations is None or node is None:
            _release(view, decision)
            return Unallocatable(f"{prefix}{_with_reason(reason, lacking)}")
        _adopt(view, state.missing, allocations, decision)
        decision.nodes[key_of(state.pod)] = node
        used.add(node)
    return decision


def _place(
    view: ClusterView,
    state: _PodState,
    nodes: Sequence[str],
    used: set[str],
    nowhere: NoRoom | None = None,
) -> tuple[str | None, list[Obj] | None, str | None]:
    """The pod's node and allocations. Scored mode asks the shared pod placer, which `simulate`
    runs too, unless the pod is pinned to a node already (its ranking would weigh the pod's own
    claims twice there). When it finds nothing, the allocator's placer is asked only while
    failures are explained: its answer says why per node (and should it find room after all,
    the pod takes it rather than waits)."""
    placer = view.placer()
    if view.mode is AllocationMode.SCORED and state.pinned is None:
        memo = None if placer.explain_failures else nowhere  # explained: searched for reasons
        trial, known, among = None, None, nodes
        if memo is not None and memo.failed:
            trial = (_fit_key(state), tuple(nodes))
            known = memo.failed.get(trial)
            if known is not None:
                among = memo.where(known, nodes)
                if not among:
                    view.count_unsearched(state.pod, state.missing, known.shape)
                    return None, None, known.reason
        found = view.place_pod(state.pod, state.missing, among)
        if found.node is not None and found.allocations is not None:
            return found.node, list(found.allocations), None
        reason = found.reason if known is None else known.reason
        if memo is not None:
            # Worked out only now when nothing had failed yet: a pass that places every pod
            # writes none of them out.
            memo.remember(trial or (_fit_key(state), tuple(nodes)), reason, found.shape)
        if not placer.explain_failures:
            return None, None, reason
    placement = placer.place(state.missing, nodes=nodes, prefer=used)
    return placement.node, placement.allocations, placement.reason


def _fit_key(state: _PodState) -> str:
    """What decides where the pod fits, in JSON: its spec without the names of its claims and
    its gates, and the specs of the claims it still needs."""
    spec = {
        k: v
        for k, v in (state.pod.get("spec") or {}).items()
        if k not in ("resourceClaims", "schedulingGates")
    }
    return json.dumps([spec, [c.get("spec") for c in state.missing]], sort_keys=True)


def _adopt(
    view: ClusterView, claims: Sequence[Obj], allocations: Sequence[Obj], decision: Decision
) -> None:
    """Move allocations the placer recorded into the view's assumptions, leaving the usage
    as the placer left it."""
    placer = view.placer()
    for claim, allocation in zip(claims, allocations, strict=True):
        if allocation_node(allocation) is not None:
            # Recorded under its node, where the view would record it: kept as it is.
            view.assume(key_of(claim), allocation, recorded=True)
        else:  # the view counts allocations that name no node under "*"
            placer.release(allocation, "*")
            view.assume(key_of(claim), allocation)
        decision.allocations[key_of(claim)] = allocation


def _release(view: ClusterView, decision: Decision) -> None:
    for key in list(decision.allocations):
        view.forget(key)
    decision.allocations.clear()
