"""Allocating one pod's claims: on a given node, or on the best node of the cluster.

`allocate_on_node` is the unit the kube-scheduler works in (one node, all claims of a pod).
`Placer` adds the choice of node: name order in first-fit mode (what `simulate` promises), a
ranked, bounded choice in scored mode. It also remembers which claim shapes did not fit which node
at which usage version, so a full node is skipped in O(1) until something on it changes.

Caches, all on a `Placer` (for its snapshot and usage), each checked against usage's node versions
or change log (usage.py) rather than dropped: claim signature → the nodes it did not fit and at
which versions (`_unfit`); how many leading nodes are known not to fit, in name order
(`_cursor`) and in load order (`_ranked_cursor`, also lowered when nodes move in the ranking);
(signature, node) → the scored solution found there (`_fits`); nodes kept sorted by load.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator.claims import EXACT_COUNT, ClaimPlan, check_result_limit, plan_claim
from dra_driver.allocator.devices import Device
from dra_driver.allocator.errors import AllocationError
from dra_driver.allocator.explain import explain_node
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.result import build_allocation
from dra_driver.allocator.scoring import ScoringPolicy, SolutionScore, scored_solution
from dra_driver.allocator.search import (
    DEFAULT_MAX_STEPS,
    CandidateIndex,
    FirstFitSearch,
    Pick,
    SearchBudgetError,
    SearchState,
)
from dra_driver.allocator.snapshot import ClusterSnapshot, collector_paused
from dra_driver.allocator.usage import Usage
from dra_driver.cel import CelCompileError


class AllocationMode(enum.StrEnum):
    FIRST_FIT = "first-fit"
    SCORED = "scored"


@dataclass(frozen=True, slots=True)
class NodeResult:
    node: str
    allocations: list[dict[str, Any]] | None
    reason: str | None = None
    score: SolutionScore | None = None
    first_fit: SolutionScore | None = None
    """Scored mode: the score of first fit's solution on the node, which `score` beats or
    equals (`explain` shows why the devices chosen won over first fit's)."""


def warm_class_verdicts(snapshot: ClusterSnapshot, nodes: Sequence[str] | None = None) -> None:
    """Evaluate every DeviceClass's selectors on every device of the nodes, ahead of claims.

    A controller does this as slices and classes arrive, so a claim's allocation costs set
    look-ups. Class selectors that do not compile are left for the claims that use them to
    report. Runtime errors are stored as verdicts and raised only where the search meets them.
    """
    with collector_paused():  # lists of candidates only: nothing cyclic to collect meanwhile
        _warm(snapshot, nodes)


def _warm(snapshot: ClusterSnapshot, nodes: Sequence[str] | None) -> None:
    index = CandidateIndex(snapshot)
    chains = []
    for device_class in snapshot.classes.values():
        try:
            chains.append(tuple(snapshot.cel.compile(e) for e in device_class.selectors))
        except CelCompileError:
            continue
    for node in nodes if nodes is not None else snapshot.node_names():
        view = snapshot.view(node)
        for chain in chains:
            index.for_chain(view, chain)


def search_node(
    snapshot: ClusterSnapshot,
    usage: Usage,
    plans: Sequence[ClaimPlan],
    node: str,
    mode: AllocationMode,
    policy: ScoringPolicy,
    max_steps: int = DEFAULT_MAX_STEPS,
    prefer: frozenset[int] = frozenset(),
) -> NodeResult:
    solution = _solve(snapshot, usage, plans, node, mode, policy, max_steps, prefer)
    if solution.picks is None:
        return NodeResult(node, None, solution.reason)
    allocations = _allocations(snapshot, plans, solution.picks, node)
    return NodeResult(node, allocations, score=solution.score, first_fit=solution.first_fit)


def take_preferred(
    snapshot: ClusterSnapshot,
    usage: Usage,
    plans: Sequence[ClaimPlan],
    node: str,
    prefer: frozenset[int],
    policy: ScoringPolicy,
) -> list[dict[str, Any]] | None:
    """What `search_node(..., SCORED, prefer=prefer)` allocates, without the search, for pods
    that ask for a single device (one claim, one request, no `firstAvailable`, one device) and
    were steered to a single one; None when that shortcut does not apply (search instead).

    Why it is the same answer: with one pick, every solution has the same preference and
    topology, and the preferred device is the only one that does not count against `steer`,
    so it beats first fit's solution and every other candidate, whatever their losses, as long
    as the scored search sees it: it must pass the checks, be among the first
    `max_candidates_per_slot` candidates, and no candidate before it may have a verdict that
    is not plainly true (first fit would stop on its error). The shared pod placer chooses a
    device for every pod, so this is most of its decisions; `test_take_preferred` compares the
    two on random usage."""
    if len(plans) != 1 or len(prefer) != 1 or plans[0].constraints:
        return None
    requests = plans[0].requests
    if len(requests) != 1 or len(requests[0].alternatives) != 1:
        return None
    alt = requests[0].alternatives[0]
    if alt.mode != EXACT_COUNT or alt.count != 1 or alt.admin_access:
        return None
    (wanted,) = prefer
    view = snapshot.view(node)
    state = SearchState(snapshot, usage, plans, view, CandidateIndex(snapshot))
    device: Device | None = None
    for position, (candidate, verdict) in enumerate(state.index.candidates(view, alt)):
        if verdict is not True or position >= policy.max_candidates_per_slot:
            return None
        if candidate.id == wanted:
            device = candidate
            break
    if device is None or state.skipped_before_selectors(0, alt, device, ()):
        return None
    pick = state.check_pick(0, alt, device)
    if pick is None:
        return None
    return _allocations(snapshot, plans, [pick], node)


@dataclass(frozen=True, slots=True)
class _Solution:
    """The devices chosen on one node (None: the claims do not fit, for `reason`)."""

    picks: list[Pick] | None
    reason: str | None = None
    score: SolutionScore | None = None
    first_fit: SolutionScore | None = None


def _solve(
    snapshot: ClusterSnapshot,
    usage: Usage,
    plans: Sequence[ClaimPlan],
    node: str,
    mode: AllocationMode,
    policy: ScoringPolicy,
    max_steps: int = DEFAULT_MAX_STEPS,
    prefer: frozenset[int] = frozenset(),
) -> _Solution:
    view = snapshot.view(node)
    state = SearchState(snapshot, usage, plans, view, CandidateIndex(snapshot), max_steps)
    try:
        picks = FirstFitSearch(state).run()
    except SearchBudgetError:
        return _Solution(None, f"gave up after {max_steps} candidate checks")
    if picks is None:
        return _Solution(None, "the claims do not fit")
    if mode is AllocationMode.SCORED:
        picks, score, first_fit = scored_solution(
            snapshot, usage, plans, view, CandidateIndex(snapshot), picks, policy, prefer
        )
        return _Solution(picks, score=score, first_fit=first_fit)
    return _Solution(picks)


_StoredPick = tuple[int, int, int, Device, dict[str, Number] | None, bool, float]
"""(claim, request, alternative, device, share, consumed counters, loss): a pick without the
plan objects, so it can be replayed for another pod whose claims have the same signature."""


def _stored(plans: Sequence[ClaimPlan], picks: Sequence[Pick]) -> list[_StoredPick]:
    where = {
        id(alt): (r, a)
        for plan in plans
        for r, request in enumerate(plan.requests)
        for a, alt in enumerate(request.alternatives)
    }
    stored: list[_StoredPick] = []
    for p in picks:
        r, a = where[id(p.alternative)]
        stored.append((p.claim, r, a, p.device, p.share, p.consumed_counters, p.loss))
    return stored


def _replayed(plans: Sequence[ClaimPlan], stored: Sequence[_StoredPick]) -> list[Pick]:
    picks: list[Pick] = []
    for claim, r, a, device, share, consumed, loss in stored:
        alt = plans[claim].requests[r].alternatives[a]
        share_copy = dict(share) if share is not None else None
        picks.append(Pick(claim, alt, device, share_copy, consumed, loss))
    return picks


def _allocations(
    snapshot: ClusterSnapshot, plans: Sequence[ClaimPlan], picks: Sequence[Pick], node: str
) -> list[dict[str, Any]]:
    return [
        build_allocation(snapshot, plan, [p for p in picks if p.claim == i], node)
        for i, plan in enumerate(plans)
    ]


def allocate_on_node(
    snapshot: ClusterSnapshot,
    usage: Usage,
    claims: Sequence[Mapping[str, Any]],
    node: str,
    mode: AllocationMode = AllocationMode.FIRST_FIT,
    *,
    policy: ScoringPolicy | None = None,
) -> NodeResult:
    """Allocate all `claims` (one pod's) on `node`; `usage` is not changed.

    Raises AllocationError for fatal errors (a selector failing at runtime, All over a pool in
    flux); returns a result without allocations when the claims simply do not fit.
    """
    plans = [plan_claim(snapshot, claim) for claim in claims]
    check_result_limit(plans)
    result = search_node(snapshot, usage, plans, node, mode, policy or ScoringPolicy())
    if result.allocations is None:
        return NodeResult(node, None, explain_node(snapshot, usage, plans, node).summary())
    return result


@dataclass(frozen=True, slots=True)
class Placement:
    node: str | None
    allocations: list[dict[str, Any]] | None
    reason: str | None
    nodes_searched: int


NODE_KEY_TERMS = ("prefer", "preference", "topology", "loss", "load", "node")
"""What scored mode ranks nodes by, in order (lower wins): outside the preferred nodes, the
solution's `firstAvailable` preference, topology spread and fragmentation loss, the busier node
(load negated), the name."""


@dataclass(frozen=True, slots=True)
class Compared:
    """A node where the claims fit, and its key (`NODE_KEY_TERMS`; empty in first-fit mode)."""

    result: NodeResult
    key: tuple[object, ...]


@dataclass(slots=True)
class Comparison:
    order: list[str]
    """The nodes in the order they were searched."""
    searched: int = 0
    fitting: list[Compared] = field(default_factory=list)
    """In search order; scored mode stops after `max_fitting_nodes` of them."""
    looked_at: int = 0
    """How many nodes of `order` the search reached: those after them were not tried."""

    @property
    def winner(self) -> NodeResult | None:
        if not self.fitting:
            return None
        return min(self.fitting, key=lambda c: c.key).result


class Placer:
    """Chooses a node for one pod's claims and records the allocation in `usage`."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        usage: Usage,
        mode: AllocationMode = AllocationMode.FIRST_FIT,
        *,
        policy: ScoringPolicy | None = None,
        nodes: Sequence[str] | None = None,
        explain_failures: bool = True,
    ) -> None:
        self.snapshot = snapshot
        self.usage = usage
        self.mode = mode
        self.policy = policy or ScoringPolicy()
        self.nodes = list(nodes) if nodes is not None else snapshot.node_names()
        self.explain_failures = explain_failures
        self._unfit: dict[str, tuple[int, dict[str, int]]] = {}
        """Signature → (usage's "*" version, node → the node's usage version) at which the
        claims did not fit there: one look-up per node passed, for the hundreds a pod passes."""
        self._cursor: dict[str, tuple[Usage, int, int, int]] = {}
        """First-fit over the placer's own nodes: signature → (usage, changes epoch, changes
        seen, n) where the first n nodes were all known not to fit. Nodes that changed since
        lower n; the scan then starts at n instead of walking hundreds of full nodes."""
        self._position = {name: i for i, name in enumerate(self.nodes)}
        self._ranked: list[tuple[int, str]] | None = None
        self._ranked_names: list[str] = []
        """Scored mode: the placer's nodes as (-load, name), kept sorted as loads change, so
        ranking them for a pod is a copy rather than a sort."""
        self._moves: list[int] = []
        """Scored mode: for each move of a node within `_ranked`, the lower of its old and new
        rank; only ranks from there on shifted. Cleared when long, which `_moves_epoch` records."""
        self._moves_epoch = 0
        self._ranked_cursor: dict[str, tuple[Usage, int, int, int, int, int]] = {}
        """Scored mode, over the placer's own ranked nodes: signature → (usage, changes epoch,
        changes seen, moves epoch, moves seen, n) where the first n ranked nodes were all known
        not to fit. The busiest nodes are full and rank first; without this every pod would walk
        past them one by one."""
        self._fits: dict[tuple[str, str], tuple[tuple[int, int], _Solution, list[_StoredPick]]]
        self._fits = {}
        """Scored mode: (signature, node) → the solution found at that node's usage version.
        Most nodes compared for a pod are not the one it goes to; the next pod of the same
        shape finds them unchanged and reuses their solution instead of searching again."""
        self.node_load: dict[str, int] = {}

    def place(
        self,
        claims: Sequence[Mapping[str, Any]],
        *,
        nodes: Sequence[str] | None = None,
        prefer: Collection[str] = (),
    ) -> Placement:
        """Allocate `claims` together on one node of `nodes` (default: the placer's nodes).

        In scored mode, nodes in `prefer` (where a gang's other members went) are tried first,
        then the busiest nodes, so a gang stays together and free nodes stay free.
        """
        plans = [plan_claim(self.snapshot, claim) for claim in claims]
        check_result_limit(plans)
        candidates = self.nodes if nodes is None else list(nodes)
        chosen: dict[str, list[Pick]] = {}
        comparison = self._compare(plans, candidates, prefer, chosen)
        best = comparison.winner
        if best is None or best.allocations is None:
            return Placement(None, None, self._reason(plans, candidates), comparison.searched)
        allocations = best.allocations
        if best.node in chosen:
            allocations = _allocations(self.snapshot, plans, chosen[best.node], best.node)
        for allocation in allocations:
            self.record(allocation, best.node)
        return Placement(best.node, allocations, None, comparison.searched)

    def compare(
        self, plans: Sequence[ClaimPlan], candidates: Sequence[str], prefer: Collection[str] = ()
    ) -> Comparison:
        """Search the nodes as `place` does, recording nothing: the nodes that fit, what they
        were compared by, and the winner (`explain` shows this)."""
        return self._compare(plans, candidates, prefer, None)

    def _compare(
        self,
        plans: Sequence[ClaimPlan],
        candidates: Sequence[str],
        prefer: Collection[str],
        chosen: dict[str, list[Pick]] | None,
    ) -> Comparison:
        """`compare`; with `chosen` (scored mode), a fitting node's result has no allocations
        built (an empty list) and its picks go to `chosen`: only the winner's are written."""
        signature = "|".join(p.signature for p in plans)
        ranked_cursor = False
        if self.mode is AllocationMode.FIRST_FIT:
            order = list(candidates)
        elif not prefer and candidates is self.nodes and len(self._position) == len(self.nodes):
            self._ranking()
            order = list(self._ranked_names)
            ranked_cursor = True
        else:
            order = sorted(
                candidates, key=lambda n: (n not in prefer, -self.node_load.get(n, 0), n)
            )
        comparison = Comparison(order)
        start = 0
        cursor = self.mode is AllocationMode.FIRST_FIT and candidates is self.nodes
        if cursor:
            start = self._known_unfit(signature)
        elif ranked_cursor:
            start = self._known_unfit_ranked(signature)
        first_fitting: int | None = None
        reached = len(order)
        # Usage does not change while nodes are compared: read the versions directly.
        versions = self.usage.node_versions
        everywhere = versions["*"]
        found = self._unfit.get(signature)
        if found is None or found[0] != everywhere:
            found = self._unfit[signature] = (everywhere, {})
        unfit = found[1]
        index = start - 1
        for index in range(start, len(order)):
            node = order[index]
            if unfit.get(node) == versions[node]:
                continue
            comparison.searched += 1
            version = (versions[node], everywhere)
            result = self._search(plans, signature, node, version, chosen)
            if result.allocations is None:
                unfit[node] = version[0]
                continue
            if self.mode is AllocationMode.FIRST_FIT:
                comparison.fitting.append(Compared(result, ()))
                reached = index
                break
            key = (result.node not in prefer, *self._node_key(result))
            comparison.fitting.append(Compared(result, key))
            if first_fitting is None:
                first_fitting = index
            if len(comparison.fitting) >= self.policy.max_fitting_nodes:
                break
        comparison.looked_at = index + 1
        if cursor:
            usage = self.usage
            self._cursor[signature] = (
                usage,
                usage.changes_epoch,
                len(usage.changes),
                reached,
            )
        elif ranked_cursor:
            usage = self.usage
            self._ranked_cursor[signature] = (
                usage,
                usage.changes_epoch,
                len(usage.changes),
                self._moves_epoch,
                len(self._moves),
                len(order) if first_fitting is None else first_fitting,
            )
        return comparison

    def _known_unfit(self, signature: str) -> int:
        """How many of the first nodes are still known not to fit `signature` (see `_cursor`):
        those that did not change since the last scan, up to the first that did."""
        found = self._cursor.get(signature)
        usage = self.usage
        if found is None:
            return 0
        owner, epoch, seen, known = found
        if owner is not usage or epoch != usage.changes_epoch or seen > len(usage.changes):
            return 0
        position = self._position
        for name in usage.changes[seen:]:
            index = position.get(name)
            if index is None:  # "*", or a node the placer does not know: start over
                return 0
            known = min(known, index)
        return known

    def _known_unfit_ranked(self, signature: str) -> int:
        """`_known_unfit` over the ranked nodes: the known prefix ends at the rank of any node
        that changed since (a node's rank is stable unless it or one ranked before it moved)
        and at the lowest rank any move touched."""
        found = self._ranked_cursor.get(signature)
        usage = self.usage
        if found is None:
            return 0
        owner, epoch, seen, moves_epoch, moves_seen, known = found
        if owner is not usage or epoch != usage.changes_epoch or seen > len(usage.changes):
            return 0
        if moves_epoch != self._moves_epoch or moves_seen > len(self._moves):
            return 0
        for rank in self._moves[moves_seen:]:
            known = min(known, rank)
        ranked = self._ranked
        assert ranked is not None
        load = self.node_load
        for name in usage.changes[seen:]:
            if name not in self._position:  # "*", or a node the placer does not know
                return 0
            known = min(known, bisect.bisect_left(ranked, (-load.get(name, 0), name)))
        return known

    def _search(
        self,
        plans: Sequence[ClaimPlan],
        signature: str,
        node: str,
        version: tuple[int, int],
        chosen: dict[str, list[Pick]] | None = None,
    ) -> NodeResult:
        """`search_node`, answered from `_fits` when the node has not changed since (scored)."""
        if self.mode is not AllocationMode.SCORED:
            return search_node(self.snapshot, self.usage, plans, node, self.mode, self.policy)
        cached = self._fits.get((signature, node))
        if cached is not None and cached[0] == version:
            solution = cached[1]
            picks = _replayed(plans, cached[2])
        else:
            solution = _solve(self.snapshot, self.usage, plans, node, self.mode, self.policy)
            if solution.picks is None:
                return NodeResult(node, None, solution.reason)
            picks = solution.picks
            if len(self._fits) >= 100_000:
                self._fits.clear()
            self._fits[(signature, node)] = (version, solution, _stored(plans, picks))
        if chosen is not None:
            chosen[node] = picks
            allocations: list[dict[str, Any]] = []
        else:
            allocations = _allocations(self.snapshot, plans, picks, node)
        return NodeResult(node, allocations, score=solution.score, first_fit=solution.first_fit)

    def _node_key(self, result: NodeResult) -> tuple[object, ...]:
        """Across nodes: the solution's score without device positions, then the busier node."""
        score = result.score
        assert score is not None
        load = self.node_load.get(result.node, 0)
        return (score.preference, score.topology, score.loss, -load, result.node)

    def _ranking(self) -> list[tuple[int, str]]:
        if self._ranked is None:
            self._ranked = sorted((-self.node_load.get(n, 0), n) for n in self.nodes)
            self._ranked_names = [name for _, name in self._ranked]
        return self._ranked

    def _load_changed(self, node: str, before: int) -> None:
        ranked = self._ranked
        if ranked is None or node not in self._position:
            return
        old = bisect.bisect_left(ranked, (-before, node))
        del ranked[old]
        del self._ranked_names[old]
        entry = (-self.node_load[node], node)
        new = bisect.bisect_left(ranked, entry)
        ranked.insert(new, entry)
        self._ranked_names.insert(new, node)
        if len(self._moves) >= 4096:
            self._moves.clear()
            self._moves_epoch += 1
        self._moves.append(min(old, new))

    def record(self, allocation: Mapping[str, Any], node: str) -> None:
        self.usage.record(self.snapshot, allocation)
        before = self.node_load.get(node, 0)
        self.node_load[node] = before + _result_count(allocation)
        self._load_changed(node, before)

    def release(self, allocation: Mapping[str, Any], node: str) -> None:
        self.usage.release(self.snapshot, allocation)
        before = self.node_load.get(node, 0)
        self.node_load[node] = before - _result_count(allocation)
        self._load_changed(node, before)

    def _reason(self, plans: Sequence[ClaimPlan], nodes: Sequence[str]) -> str:
        if not nodes:
            return "no node to try: none is known, or all are unschedulable"
        if not self.explain_failures:
            return "no node fits"
        lines = []
        shown = nodes[:3]
        for node in shown:
            lines.append(
                f"{node}: {explain_node(self.snapshot, self.usage, plans, node).summary()}"
            )
        more = len(nodes) - len(shown)
        tail = f"; and {more} more node(s)" if more > 0 else ""
        return f"no node fits ({len(nodes)} tried): " + "; ".join(lines) + tail


def _result_count(allocation: Mapping[str, Any]) -> int:
    return len((allocation.get("devices") or {}).get("results") or [])


__all__ = [
    "NODE_KEY_TERMS",
    "AllocationError",
    "AllocationMode",
    "Compared",
    "Comparison",
    "NodeResult",
    "Placement",
    "Placer",
    "allocate_on_node",
    "search_node",
]
