"""Scored mode: among valid solutions on a node, prefer the one that wastes least.

A solution's score, compared lexicographically (lower is better):

1. `preference`: which `firstAvailable` alternative each request uses — the user's order wins;
2. `topology`: for each topology attribute in priority order (NVLink domain, PCIe root, NUMA
   node), how many extra groups the chosen devices span (0 when all share one value);
3. `steer`: when a cross-node score (the simulator's fragmentation index) named the devices it
   wants, how many picks are not among them;
4. `loss`: fragmentation — the summed weight of free devices that each pick makes impossible
   (devices sharing counters with it that fit before and no longer fit after), as a share of the
   weight of all devices sharing counters with it. A device's weight is the share of its counter
   set it consumes, so blocking a whole GPU costs the most, a
   placement that splits a large free MIG block costs more than one that fills a small hole, and
   a GPU already partly used is cheaper to use than a fresh one;
5. `positions`: the device order, so ties go to what first-fit would have chosen. Among shared
   (consumable-capacity) devices of equal loss, the one the share fills best is tried first.

The search is bounded: first-fit runs first (it is complete and decides whether the node fits, so
scored mode never fails where first-fit succeeds, and fatal errors surface exactly as upstream).
Then a depth-first search visits candidates best-first, trying at most `branching` candidates per
slot (each slot looks at no more than `max_candidates_per_slot` feasible devices), stopping after
`max_solutions` complete solutions or `max_steps` candidate checks; the first-fit solution is
always among those compared. Across nodes, `Placer` searches nodes most-loaded first and stops
after `max_fitting_nodes` nodes that fit.

Caches, by lifetime:
- `ScoringCaches`, kept with the snapshot (`snapshot.caches`): each device's topology values,
  counter neighbourhood and its shape, and losses by (shape, free room). All follow from the
  snapshot's devices and counters, which never change, or (losses) from their key alone, so
  nothing is invalidated: they go with the snapshot (losses are emptied when very many);
- `Usage.derived` (usage.py): a counter group's free room and its devices' losses under the
  usage alone, dropped when a counter of the group changes;
- `FragmentationModel._rooms`: free room under one search state at one version.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from dra_driver.allocator.claims import ALL, Alternative, ClaimPlan
from dra_driver.allocator.devices import Device
from dra_driver.allocator.errors import AllocationError
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.search import (
    CandidateIndex,
    Pick,
    SearchBudgetError,
    SearchState,
    all_devices,
    attribute_of,
)
from dra_driver.allocator.snapshot import ClusterSnapshot, NodeView
from dra_driver.allocator.usage import Usage


@dataclass(frozen=True, slots=True)
class ScoringPolicy:
    topology_attributes: tuple[str, ...] = (
        "nvlinkDomain",
        "resource.kubernetes.io/pcieRoot",
        "numaNode",
    )
    """Bare names are looked up in each device's driver domain."""
    max_fitting_nodes: int = 4
    max_solutions: int = 8
    branching: int = 3
    max_steps: int = 3000
    max_candidates_per_slot: int = 64


@dataclass(frozen=True, slots=True, order=True)
class SolutionScore:
    preference: tuple[int, ...]
    topology: tuple[int, ...]
    steer: int = 0
    """Picks outside the devices a cross-node score asked for (0 when it asked for none)."""
    loss: float = 0.0
    positions: tuple[int, ...] = field(default=())


def _topology_value(device: Device, name: str) -> object | None:
    found = attribute_of(device, name)
    if found is None or found[1] in ("", None):
        return None
    return found


_Values = tuple[object | None, ...]
"""A device's value of each topology attribute, in priority order (None: it has none)."""


def topology_table(snapshot: ClusterSnapshot, names: tuple[str, ...]) -> dict[int, _Values]:
    """Device id → its values of the topology attributes `names`, filled as asked (`values_of`):
    the search compares them for every pair of candidate and pick."""
    tables = snapshot.caches.of(ScoringCaches).topology
    found = tables.get(names)
    if found is None:
        found = tables[names] = {}
    return found


def values_of(table: dict[int, _Values], device: Device, names: tuple[str, ...]) -> _Values:
    found = table.get(device.id)
    if found is None:
        found = table[device.id] = tuple(_topology_value(device, n) for n in names)
    return found


def topology_spread(
    picks: Sequence[Pick], policy: ScoringPolicy, snapshot: ClusterSnapshot | None = None
) -> tuple[int, ...]:
    names = policy.topology_attributes
    if len(picks) < 2:  # one group or none: nothing spreads
        return (0,) * len(names)
    table = topology_table(snapshot, names) if snapshot is not None else None
    spread: list[int] = []
    for i, name in enumerate(names):
        groups: set[object] = set()
        for pick in picks:
            if table is not None:
                value = values_of(table, pick.device, names)[i]
            else:
                value = _topology_value(pick.device, name)
            groups.add(value if value is not None else ("alone", pick.device.id))
        spread.append(max(len(groups) - 1, 0))
    return tuple(spread)


_Taking = tuple[tuple[int, float], ...]
"""(counter, amount) a device takes, counters numbered within its neighbourhood."""
_Mates = tuple[tuple[_Taking, float], ...]
"""What each mate takes, and its weight."""
_PoolShape = tuple[tuple[tuple[tuple[int, Number], ...], ...], tuple[Number, ...]]
"""Each device's (counter, amount) consumption, in order, and the pool's counter totals."""


@dataclass(frozen=True, slots=True)
class _Neighbourhood:
    """A device's counter neighbourhood: the counters it or any device sharing one consumes.

    `shape` identifies the neighbourhood's structure up to renaming (which counters each device
    takes, how much, what it weighs), so equal GPUs on different nodes share loss computations.
    """

    counters: tuple[int, ...]
    shape: int
    taking: _Taking
    mates: _Mates


@dataclass(slots=True)
class ScoringCaches:
    """What scoring works out from one snapshot, kept with it (`snapshot.caches`).

    Keyed by device id, pool index or the snapshot's own structures, all fixed for the
    snapshot's life, so entries never go stale and are never dropped one by one.
    """

    MAX_LOSSES = 200_000
    """`losses` is emptied past this many entries (memory)."""

    neighbourhoods: dict[int, _Neighbourhood] = field(default_factory=dict)
    """Device id → its counter neighbourhood."""
    shapes: dict[tuple[_Taking, _Mates, tuple[float, ...]], int] = field(default_factory=dict)
    """A neighbourhood's structure (what the device takes, its mates, the counters' totals)
    → its shape number: equal GPUs on different nodes share one."""
    shape_parts: dict[int, tuple[_Taking, _Mates]] = field(default_factory=dict)
    """Shape number → one shared copy of its structure (memory: a few dozen shapes)."""
    losses: dict[tuple[int, tuple[float, ...]], float] = field(default_factory=dict)
    """(shape, free room of its counters) → fragmentation loss; a function of the key alone.
    Emptied past `MAX_LOSSES` entries."""
    counter_users: dict[int, dict[int, list[Device]]] = field(default_factory=dict)
    """Pool index → counter → the pool's devices consuming it."""
    pool_templates: dict[int, int] = field(default_factory=dict)
    """Pool index → the first pool of the same shape (see `FragmentationModel._template`)."""
    pool_shapes: dict[_PoolShape, int] = field(default_factory=dict)
    """A pool's shape (each device's consumption, the counters' totals) → its first pool."""
    counter_groups: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    """One shared tuple per group of counters, so its id can key free room."""
    topology: dict[tuple[str, ...], dict[int, _Values]] = field(default_factory=dict)
    """Topology attribute names → device id → its values (`topology_table`)."""


class FragmentationModel:
    """Fragmentation loss of taking a device, cached by neighbourhood shape and free room."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.caches = caches = snapshot.caches.of(ScoringCaches)
        # The tables the loops use, one attribute look-up away.
        self._hoods = caches.neighbourhoods
        self._shapes = caches.shapes
        self._shape_parts = caches.shape_parts
        self._losses = caches.losses
        self._counter_users = caches.counter_users
        # Free room per neighbourhood, valid for one state at one version: ranking a slot's
        # candidates asks for the same GPU's room dozens of times between two picks.
        self._rooms: dict[tuple[int, int], tuple[float, ...]] = {}
        self._rooms_at: tuple[int, int] = (0, -1)

    def _weight(self, device: Device) -> float:
        totals = self.snapshot.pools[device.pool_index].counter_totals
        return sum(float(amount / totals[c]) for c, amount in device.consumes if totals[c])

    def _users(self, pool_index: int) -> dict[int, list[Device]]:
        found = self._counter_users.get(pool_index)
        if found is None:
            found = {}
            for d in self.snapshot.pools[pool_index].devices:
                for counter, _ in d.consumes:
                    found.setdefault(counter, []).append(d)
            self._counter_users[pool_index] = found
        return found

    def _template(self, pool_index: int) -> int:
        """The first pool whose devices consume the same counters, in the same order, of the
        same totals: its neighbourhoods are this pool's too (counter indices are per pool), so
        a cluster of equal nodes works them out once rather than once per node."""
        templates = self.caches.pool_templates
        found = templates.get(pool_index)
        if found is None:
            pool = self.snapshot.pools[pool_index]
            shape = (tuple(d.consumes for d in pool.devices), tuple(pool.counter_totals))
            found = self.caches.pool_shapes.setdefault(shape, pool_index)
            templates[pool_index] = found
        return found

    def neighbourhood(self, device: Device) -> _Neighbourhood:
        found = self._hoods.get(device.id)
        if found is None:
            pool = self.snapshot.pool_of(device)
            template = self._template(pool.index)
            if template != pool.index:
                position = device.id - pool.devices[0].id
                if 0 <= position < len(pool.devices) and pool.devices[position] is device:
                    twin = self.snapshot.pools[template].devices[position]
                    found = self._hoods[device.id] = self.neighbourhood(twin)
                    return found
            mine = {counter for counter, _ in device.consumes}
            users = self._users(pool.index)
            seen: set[int] = {device.id}
            mates: list[Device] = []
            for counter in sorted(mine):
                for d in users.get(counter, ()):
                    if d.id not in seen:
                        seen.add(d.id)
                        mates.append(d)
            counters = sorted(mine | {c for d in mates for c, _ in d.consumes})
            where = {c: i for i, c in enumerate(counters)}

            def local(d: Device) -> tuple[tuple[int, float], ...]:
                return tuple(sorted((where[c], float(a)) for c, a in d.consumes))

            taking = local(device)
            mate_shapes = tuple(sorted((local(d), self._weight(d)) for d in mates))
            totals = tuple(float(pool.counter_totals[c]) for c in counters)
            shape = self._shapes.setdefault((taking, mate_shapes, totals), len(self._shapes))
            # Equal shapes share one copy of their structure: 124,000 devices, a few dozen shapes.
            taking, mate_shapes = self._shape_parts.setdefault(shape, (taking, mate_shapes))
            # One tuple per counter group, so devices of one GPU share their room (see `loss`).
            group = tuple(counters)
            group = self.caches.counter_groups.setdefault(group, group)
            found = _Neighbourhood(group, shape, taking, mate_shapes)
            self._hoods[device.id] = found
        return found

    def warm(self) -> None:
        """Work out every device's neighbourhood now rather than on first use.

        A controller does this when it builds a snapshot, so the first claims after a start or
        a failover cost what later ones do (each neighbourhood is computed once per snapshot).
        """
        for device in self.snapshot.devices:
            if device.consumes:
                self.neighbourhood(device)

    def loss(self, state: SearchState, device: Device) -> float:
        """Weight of mates that fit now and would not fit once `device` is taken."""
        if not device.consumes or state.usage.in_use(device) or device.id in state.picked:
            return 0.0
        pool = device.pool_index
        if not state.counter_delta:
            # Nothing picked draws on counters: the loss is the one under `usage` alone, kept
            # with the usage until a counter of the neighbourhood changes (Usage.derived), so
            # every search on the node, and the next ones until a pick lands on this GPU,
            # share it.
            hood = self.neighbourhood(device)
            derived = state.usage.derived_for(pool, hood.counters)
            found = derived.get(device.id)
            if found is None:
                found = derived[device.id] = self._loss(state, hood, pool, derived)
            return cast(float, found)
        return self._loss(state, self.neighbourhood(device), pool, None)

    def _loss(
        self,
        state: SearchState,
        hood: _Neighbourhood,
        pool: int,
        free: dict[object, Any] | None,
    ) -> float:
        """`loss` worked out for a device of neighbourhood `hood`; `free` is the
        neighbourhood's `Usage.derived_for` when nothing is picked."""
        at = (id(state), state.version)
        if at != self._rooms_at:
            self._rooms.clear()
            self._rooms_at = at
        # The counters tuple lives as long as the snapshot's neighbourhoods: its id is stable.
        room_key = (pool, id(hood.counters))
        room = self._rooms.get(room_key)
        if room is None:
            if free is not None:
                room = free.get(room_key)
            if room is None:
                delta = state.counter_delta
                totals = self.snapshot.pools[pool].counter_totals
                used = state.usage.counters.get(pool)
                room = tuple(
                    float(
                        totals[c] - (used[c] if used is not None else 0) - delta.get((pool, c), 0)
                    )
                    for c in hood.counters
                )
                if free is not None:
                    free[room_key] = room
            self._rooms[room_key] = room
        key = (hood.shape, room)
        found = self._losses.get(key)
        if found is not None:
            return found
        after = list(room)
        for index, amount in hood.taking:
            after[index] -= amount
        lost = 0.0
        for consumes, weight in hood.mates:
            if all(room[i] >= a for i, a in consumes) and not all(
                after[i] >= a for i, a in consumes
            ):
                lost += weight
        # As a share of everything the neighbourhood offers, so GPUs that publish more
        # placements (an H100 against an A30) do not look costlier for the same harm.
        offered = sum(weight for _, weight in hood.mates)
        lost = lost / offered if offered else 0.0
        if len(self._losses) > ScoringCaches.MAX_LOSSES:
            self._losses.clear()
        self._losses[key] = lost
        return lost


class ScoredSearch:
    def __init__(
        self, state: SearchState, policy: ScoringPolicy, prefer: frozenset[int] = frozenset()
    ) -> None:
        self.state = state
        self.policy = policy
        self.prefer = prefer
        self.model = FragmentationModel(state.snapshot)
        self.solutions: list[tuple[SolutionScore, list[Pick]]] = []
        self.choices: list[int] = []

    def run(self) -> None:
        with contextlib.suppress(SearchBudgetError):
            self._request(0, 0)

    def _done(self) -> bool:
        return len(self.solutions) >= self.policy.max_solutions

    def _record(self) -> None:
        picks = list(self.state.picks)
        self.solutions.append(
            (score_of(self.state, picks, tuple(self.choices), self.policy, self.prefer), picks)
        )

    def _request(self, claim: int, request: int) -> None:
        plans = self.state.plans
        if request == len(plans[claim].requests):
            if claim + 1 == len(plans):
                self._record()
            else:
                self._request(claim + 1, 0)
            return
        for index, alt in enumerate(plans[claim].requests[request].alternatives):
            if self._done():
                return
            self.choices.append(index)
            if alt.mode == ALL:
                self._take_all(claim, request, alt)
            else:
                self._slot(claim, request, alt, 0, [])
            self.choices.pop()

    def _ranked(self, claim: int, alt: Alternative, slot_picks: list[Pick]) -> list[Pick]:
        """The best `branching` picks for the slot, checked and with their loss noted.

        Each is taken in a state equal to this one (the picks before it are undone exactly),
        so its checks and loss would come out the same: `_slot` applies it as it is."""
        state = self.state
        ranked: list[tuple[tuple[int, ...], int, float, float, int, Pick]] = []
        candidates = state.index.candidates(state.view, alt)
        topology = self.policy.topology_attributes
        # With nothing picked yet, no candidate mismatches anything: skip the look-ups.
        alone = (0,) * len(topology)
        prefer = self.prefer
        loss_of = self.model.loss
        limit = self.policy.max_candidates_per_slot
        table = topology_table(state.snapshot, topology)
        # `skipped_before_selectors` for the common pick, without the call per candidate.
        plain = not alt.admin_access
        exclusive = state.usage.exclusive
        shares = state.usage.shares
        allocating = state.allocating
        for position, (device, verdict) in enumerate(candidates):
            if verdict is not True:
                continue
            if plain and not device.allow_multiple:
                did = device.id
                if did in exclusive or did in shares or did in allocating:
                    continue
            elif state.skipped_before_selectors(claim, alt, device, slot_picks):
                continue
            pick = state.check_pick(claim, alt, device)
            if pick is None:
                continue
            left = 1.0 if pick.share is None else _share_left(state.usage, device, pick.share)
            mismatch = alone
            if state.picks:
                mine = values_of(table, device, topology)
                theirs = [values_of(table, p.device, topology) for p in state.picks]
                mismatch = tuple(
                    sum(1 for t in theirs if (v := t[i]) is None or v != value)
                    for i, value in enumerate(mine)
                )
            steer = int(bool(prefer) and device.id not in prefer)
            pick.loss = loss_of(state, device)
            ranked.append((mismatch, steer, pick.loss, left, position, pick))
            if len(ranked) >= limit:
                break
        ranked.sort(key=lambda r: r[:5])
        return [r[5] for r in ranked[: self.policy.branching]]

    def _slot(
        self, claim: int, request: int, alt: Alternative, slot: int, slot_picks: list[Pick]
    ) -> None:
        if slot == alt.count:
            self._request(claim, request + 1)
            return
        state = self.state
        for pick in self._ranked(claim, alt, slot_picks):
            if self._done():
                return
            # What `try_pick` would count for checking it again.
            state.steps += 1
            if state.steps > state.max_steps:
                raise SearchBudgetError
            state.apply(pick)
            slot_picks.append(pick)
            self._slot(claim, request, alt, slot + 1, slot_picks)
            slot_picks.pop()
            state.undo(pick)

    def _pick(self, claim: int, alt: Alternative, device: Device) -> Pick | None:
        """Take `device`, noting the fragmentation it causes (measured before it is taken)."""
        loss = self.model.loss(self.state, device)
        pick = self.state.try_pick(claim, alt, device)
        if pick is not None:
            pick.loss = loss
        return pick

    def _take_all(self, claim: int, request: int, alt: Alternative) -> None:
        state = self.state
        applied: list[Pick] = []
        try:
            members = all_devices(state, state.plans[claim], alt)
        except AllocationError:  # the first-fit pass has already raised anything fatal
            return
        for device in members:
            if state.skipped_before_selectors(claim, alt, device, applied):
                break
            pick = self._pick(claim, alt, device)
            if pick is None:
                break
            applied.append(pick)
        else:
            if members:
                self._request(claim, request + 1)
        for pick in reversed(applied):
            state.undo(pick)


def _share_left(usage: Usage, device: Device, share: dict[str, Number] | None) -> float:
    """The smallest fraction of a shared device's capacity left once `share` is taken (1 for a
    device that is not shared): filling the fullest device that fits keeps large rooms whole."""
    if share is None:
        return 1.0
    consumed = usage.consumed_capacity.get(device.id) or {}
    left = [
        1.0 - float((consumed.get(name, 0) + amount) / device.capacity[name].value)
        for name, amount in share.items()
        if name in device.capacity and device.capacity[name].value
    ]
    return min(left, default=1.0)


def score_of(
    state: SearchState,
    picks: Sequence[Pick],
    preference: tuple[int, ...],
    policy: ScoringPolicy,
    prefer: frozenset[int] = frozenset(),
) -> SolutionScore:
    positions = tuple(state.view.position[p.device.id] for p in picks)
    return SolutionScore(
        preference=preference,
        topology=topology_spread(picks, policy, state.snapshot),
        steer=sum(1 for p in picks if p.device.id not in prefer) if prefer else 0,
        loss=round(sum(p.loss for p in picks), 9),
        positions=positions,
    )


def _replay(state: SearchState, picks: Sequence[Pick], model: FragmentationModel) -> list[Pick]:
    """Re-apply first-fit's picks on a fresh state, noting each pick's loss as it happens."""
    replayed: list[Pick] = []
    for pick in picks:
        again = Pick(pick.claim, pick.alternative, pick.device, pick.share, pick.consumed_counters)
        again.loss = model.loss(state, pick.device)
        state.apply(again)
        replayed.append(again)
    return replayed


def _preference(plans: Sequence[ClaimPlan], picks: Sequence[Pick]) -> tuple[int, ...]:
    chosen: list[int] = []
    for claim, plan in enumerate(plans):
        for request in plan.requests:
            alt = next(
                (
                    p.alternative
                    for p in picks
                    if p.claim == claim and p.alternative.request == request.name
                ),
                None,
            )
            chosen.append(request.alternatives.index(alt) if alt is not None else 0)
    return tuple(chosen)


def scored_solution(
    snapshot: ClusterSnapshot,
    usage: Usage,
    plans: Sequence[ClaimPlan],
    view: NodeView,
    index: CandidateIndex,
    first_fit: list[Pick],
    policy: ScoringPolicy,
    prefer: frozenset[int] = frozenset(),
) -> tuple[list[Pick], SolutionScore, SolutionScore]:
    """(the best solution found, its score, the score of first fit's solution)."""
    model = FragmentationModel(snapshot)
    baseline_state = SearchState(snapshot, usage, plans, view, index)
    baseline = _replay(baseline_state, first_fit, model)
    first = score_of(baseline_state, baseline, _preference(plans, baseline), policy, prefer)
    best = (first, baseline)
    search = ScoredSearch(
        SearchState(snapshot, usage, plans, view, index, policy.max_steps), policy, prefer
    )
    search.run()
    for candidate in search.solutions:
        if candidate[0] < best[0]:
            best = candidate
    return _in_search_order(plans, view, best[1]), best[0], first


def _in_search_order(plans: Sequence[ClaimPlan], view: NodeView, picks: list[Pick]) -> list[Pick]:
    """Results as the search would list them: claims, requests in spec order, slots by device
    order. Scored mode finds a request's devices best-first; the set is what counts."""
    request_index = {
        (claim, request.name): i
        for claim, plan in enumerate(plans)
        for i, request in enumerate(plan.requests)
    }
    return sorted(
        picks,
        key=lambda p: (
            p.claim,
            request_index[(p.claim, p.alternative.request)],
            view.position[p.device.id],
        ),
    )
