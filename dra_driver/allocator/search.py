"""The depth-first search over claims → requests → device slots, on one node.

`FirstFitSearch` walks candidates in device order and returns the first complete solution: the
answer the kube-scheduler's allocator gives. `ScoredSearch` (scoring.py) walks the same space in
another order. Both share the checks in `SearchState`, which applies a pick and undoes it exactly
(in-use marks, counter and capacity consumption), so a rejected branch leaves no trace.

Caches: `CandidateLists`, kept with the snapshot (`snapshot.caches`): per node and selector
chain, the node's devices whose verdict is not false. Verdicts and a node's devices are fixed
for a snapshot, so a list is only dropped with the snapshot; what is in use is checked during
the search, never baked into a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dra_driver.allocator.capacity import large_enough, share_demand
from dra_driver.allocator.claims import (
    ALL,
    MAX_RESULTS_PER_CLAIM,
    Alternative,
    ClaimPlan,
    Toleration,
)
from dra_driver.allocator.devices import Device, Taint
from dra_driver.allocator.errors import AllocationError
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.snapshot import ClusterSnapshot, NodeView
from dra_driver.allocator.usage import Usage
from dra_driver.allocator.verdicts import SelectorFailure, Verdict
from dra_driver.cel import CompiledSelector

DEFAULT_MAX_STEPS = 1_000_000
"""Candidate checks before first-fit gives up on a node; far above any real claim's need."""

Candidates = list[tuple[Device, Verdict]]


@dataclass(slots=True)
class Pick:
    claim: int
    alternative: Alternative
    device: Device
    share: dict[str, Number] | None
    consumed_counters: bool
    loss: float = 0.0


class SearchBudgetError(Exception):
    """The step budget ran out; the node is reported as not fitting, with that reason."""


def tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists":
            if not tol.key or tol.key == taint.key:
                return True
        elif tol.key == taint.key and tol.value == taint.value:
            return True
    return False


def untolerated_taint(device: Device, alternative: Alternative) -> Taint | None:
    for taint in device.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerated(
            taint, alternative.tolerations
        ):
            return taint
    return None


@dataclass(slots=True)
class CandidateLists:
    """One snapshot's candidate lists, filled by `CandidateIndex`."""

    by_chain: dict[tuple[str, tuple[str, ...]], Candidates] = field(default_factory=dict)
    """(node, the chain's selector expressions) → (device, verdict) in the node's device order."""


class CandidateIndex:
    """Per node and selector chain: the devices whose verdict is not false, in device order."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self._lists = snapshot.caches.of(CandidateLists).by_chain

    def candidates(self, view: NodeView, alternative: Alternative) -> Candidates:
        split = alternative.class_selector_count
        return self.for_chain(view, alternative.selectors[:split], alternative.selectors[split:])

    def for_chain(
        self,
        view: NodeView,
        class_part: tuple[CompiledSelector, ...],
        request_part: tuple[CompiledSelector, ...] = (),
    ) -> Candidates:
        """Class verdicts are listed once per node; request selectors only filter that list."""
        key = (view.name, tuple(s.expression for s in class_part + request_part))
        found = self._lists.get(key)
        if found is not None:
            return found
        evaluator = self.snapshot.evaluator
        if request_part:
            base = self.for_chain(view, class_part)
            found = evaluator.filter_list(
                request_part, base, (view.name, key[1][: len(class_part)])
            )
        else:
            found = evaluator.filter(class_part, ((device, True) for device in view.devices))
        self._lists[key] = found
        return found


def selector_error(
    plan: ClaimPlan, alternative: Alternative, device: Device, f: SelectorFailure
) -> AllocationError:
    return AllocationError(
        plan.key,
        f"request {alternative.result_name}: selector {f.expression!r} failed on device "
        f"{device.driver}/{device.name}: {f.message}",
    )


class SearchState:
    """The allocation being built on one node: picks, and what they consume on top of `usage`."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        usage: Usage,
        plans: Sequence[ClaimPlan],
        view: NodeView,
        index: CandidateIndex,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        self.snapshot = snapshot
        self.usage = usage
        self.plans = plans
        self.view = view
        self.index = index
        self.picks: list[Pick] = []
        self.picked: dict[int, int] = {}
        """Non-admin picks of this allocation: what consumes counters and capacity."""
        self.allocating: dict[int, int] = {}
        """Every pick of this allocation, admin ones included."""
        self.claim_devices: list[dict[int, int]] = [{} for _ in plans]
        self.counter_delta: dict[tuple[int, int], Number] = {}
        self.capacity_delta: dict[int, dict[str, Number]] = {}
        self.steps = 0
        self.max_steps = max_steps
        self.version = 0
        """Bumped by every apply and undo, so what is derived from the state can be cached."""

    # --- checks -------------------------------------------------------------------------------

    def skipped_before_selectors(
        self, claim: int, alt: Alternative, device: Device, slot_picks: Sequence[Pick]
    ) -> bool:
        """In use, or picked already: skipped before any selector runs (as upstream does).

        A device with multiple allocations is only skipped for a later slot of the same request;
        admin access ignores other claims' use but not this claim's own picks; anything else
        needs a device nobody uses and nothing in this allocation picked, admin picks included.
        """
        if device.allow_multiple:
            return any(p.device is device for p in slot_picks)
        if alt.admin_access:
            return device.id in self.claim_devices[claim]
        return (
            device.id in self.usage.exclusive
            or device.id in self.usage.shares
            or device.id in self.allocating
        )

    def counts_counters(self, alt: Alternative, device: Device) -> bool:
        """Whether this pick must find room for the device's counters (upstream allocateDevice).

        Upstream skips the counter check only for a device with multiple allocations whose
        capacity some share already holds; everything else is checked, admin access included.
        An admin pick of a device that another claim holds therefore needs the counters a second
        time: the scheduler refuses a whole GPU to admin access while a part of it is in use.
        """
        if device.allow_multiple:
            return not self.usage.in_use(device) and device.id not in self.allocating
        if alt.admin_access:
            return True
        return not self.usage.in_use(device) and device.id not in self.picked

    def counters_fit(self, device: Device) -> bool:
        """Room for the device's counters, in a pool whose counters are not over-committed.

        Upstream (checkAvailableCounters) compares every counter of the pool, not only the
        device's: once what is in use exceeds any counter of a pool (its slices shrank, or two
        allocators raced), no device there that draws counters can be allocated.
        """
        pool = device.pool_index
        usage = self.usage
        if pool in usage.over_committed:
            return False
        totals = self.snapshot.pools[pool].counter_totals
        used = usage.counters.get(pool)
        delta = self.counter_delta
        if not delta:  # nothing picked yet draws on counters: the common first pick
            if used is None:
                return all(amount <= totals[counter] for counter, amount in device.consumes)
            for counter, amount in device.consumes:
                if used[counter] + amount > totals[counter]:
                    return False
            return True
        for counter, amount in device.consumes:
            taken = (used[counter] if used is not None else 0) + delta.get((pool, counter), 0)
            if taken + amount > totals[counter]:
                return False
        return True

    def constraint_holds(self, claim: int, alt: Alternative, device: Device) -> bool:
        for constraint in self.plans[claim].constraints:
            if not constraint.covers(alt):
                continue
            name = constraint.match_attribute or constraint.distinct_attribute
            assert name is not None
            value = attribute_of(device, name)
            if value is None:
                return False
            for pick in self.picks:
                if pick.claim != claim or not constraint.covers(pick.alternative):
                    continue
                other = attribute_of(pick.device, name)
                if constraint.match_attribute is not None:
                    if other != value:
                        return False
                elif other == value:
                    return False
        return True

    def try_pick(self, claim: int, alt: Alternative, device: Device) -> Pick | None:
        """All post-selector checks; applies the pick and returns it, or None (nothing changed)."""
        pick = self.check_pick(claim, alt, device)
        if pick is not None:
            self.apply(pick)
        return pick

    def check_pick(self, claim: int, alt: Alternative, device: Device) -> Pick | None:
        """The checks of `try_pick` (one step of the budget), without applying the pick: ranking
        candidates only needs to know which would fit, and with what share."""
        self.steps += 1
        if self.steps > self.max_steps:
            raise SearchBudgetError
        if device.taints and untolerated_taint(device, alt) is not None:
            return None
        share: dict[str, Number] | None = None
        if device.allow_multiple:
            # Admin access included: upstream gives an admin pick of such a device a share too,
            # which must fit what is left and which later picks of this allocation count.
            share = share_demand(device, alt.capacity)
            if share is None or not self.share_fits(device, share):
                return None
        elif alt.capacity and not large_enough(device, alt.capacity):
            return None
        if not device.consumes:
            consume = False
        elif device.allow_multiple or alt.admin_access:
            consume = self.counts_counters(alt, device)
        else:  # `counts_counters` for the common pick, without the call
            did = device.id
            usage = self.usage
            consume = not (did in usage.exclusive or did in usage.shares or did in self.picked)
        if consume and not self.counters_fit(device):
            return None
        if self.plans[claim].constraints and not self.constraint_holds(claim, alt, device):
            return None
        return Pick(claim, alt, device, share, consume)

    def constraint_is_why(self, claim: int, alt: Alternative, device: Device) -> bool:
        """Whether a constraint rejects a device that passes the checks upstream makes first.

        Upstream (allocateDevice) checks counters, then taints, then constraints, and treats a
        constraint that refuses a member of an `All` set as a fatal error: the claim asks for
        something that can never be satisfied on that node.
        """
        state_ok = not device.taints or untolerated_taint(device, alt) is None
        if state_ok and device.consumes and self.counts_counters(alt, device):
            state_ok = self.counters_fit(device)
        return (
            state_ok
            and bool(self.plans[claim].constraints)
            and not self.constraint_holds(claim, alt, device)
        )

    def share_fits(self, device: Device, share: dict[str, Number]) -> bool:
        consumed = self.usage.consumed_capacity.get(device.id, {})
        delta = self.capacity_delta.get(device.id, {})
        for name, amount in share.items():
            if consumed.get(name, 0) + delta.get(name, 0) + amount > device.capacity[name].value:
                return False
        return True

    # --- apply / undo -------------------------------------------------------------------------

    def apply(self, pick: Pick) -> None:
        device = pick.device
        self.version += 1
        self.picks.append(pick)
        if not pick.alternative.admin_access:
            self.picked[device.id] = self.picked.get(device.id, 0) + 1
        self.allocating[device.id] = self.allocating.get(device.id, 0) + 1
        mine = self.claim_devices[pick.claim]
        mine[device.id] = mine.get(device.id, 0) + 1
        if pick.consumed_counters:
            for counter, amount in device.consumes:
                key = (device.pool_index, counter)
                self.counter_delta[key] = self.counter_delta.get(key, 0) + amount
        if pick.share is not None:
            delta = self.capacity_delta.setdefault(device.id, {})
            for name, amount in pick.share.items():
                delta[name] = delta.get(name, 0) + amount

    def undo(self, pick: Pick) -> None:
        popped = self.picks.pop()
        assert popped is pick, "picks are undone in reverse order"
        device = pick.device
        self.version += 1
        if not pick.alternative.admin_access:
            self.picked[device.id] -= 1
            if not self.picked[device.id]:
                del self.picked[device.id]
        self.allocating[device.id] -= 1
        if not self.allocating[device.id]:
            del self.allocating[device.id]
        mine = self.claim_devices[pick.claim]
        mine[device.id] -= 1
        if not mine[device.id]:
            del mine[device.id]
        if pick.consumed_counters:
            for counter, amount in device.consumes:
                key = (device.pool_index, counter)
                self.counter_delta[key] -= amount
                if not self.counter_delta[key]:
                    del self.counter_delta[key]
        if pick.share is not None:
            delta = self.capacity_delta[device.id]
            for name, amount in pick.share.items():
                delta[name] -= amount
            if not any(delta.values()):
                del self.capacity_delta[device.id]

    def results_of(self, claim: int) -> int:
        return sum(1 for p in self.picks if p.claim == claim)


def attribute_of(device: Device, name: str) -> tuple[str, object] | None:
    """Fully qualified lookup, then the bare id when the domain is the device's driver."""
    found = device.attribute(name)
    if found is None and "/" not in name:
        found = device.attribute(f"{device.driver}/{name}")
    return found


class FirstFitSearch:
    """Upstream order: the first complete solution of the depth-first search."""

    def __init__(self, state: SearchState) -> None:
        self.state = state

    def run(self) -> list[Pick] | None:
        self._check_all_requests()
        if self._request(0, 0):
            return list(self.state.picks)
        return None

    def _check_all_requests(self) -> None:
        """Upstream sets up every `All` alternative before searching, reached or not: a node
        with a pool in flux, or a selector failing on one of the node's devices, is fatal."""
        state = self.state
        for plan in state.plans:
            for request in plan.requests:
                for alt in request.alternatives:
                    if alt.mode != ALL:
                        continue
                    if state.view.unusable:
                        pool = state.view.unusable[0]
                        raise AllocationError(
                            plan.key,
                            f"request {alt.result_name} asks for all devices, but {pool.problem}",
                        )
                    all_devices(state, plan, alt)

    def _request(self, claim: int, request: int) -> bool:
        plans = self.state.plans
        if request == len(plans[claim].requests):
            return claim + 1 == len(plans) or self._request(claim + 1, 0)
        for alt in plans[claim].requests[request].alternatives:
            if alt.mode == ALL:
                if self._take_all(claim, request, alt):
                    return True
            elif self._slot(claim, request, alt, 0, 0, []):
                return True
        return False

    def _check_limit(self, claim: int, extra: int) -> None:
        if self.state.results_of(claim) + extra > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                self.state.plans[claim].key,
                f"needs more than the {MAX_RESULTS_PER_CLAIM} devices a claim may hold",
            )

    def _slot(
        self,
        claim: int,
        request: int,
        alt: Alternative,
        slot: int,
        start: int,
        slot_picks: list[Pick],
    ) -> bool:
        if slot == alt.count:
            return self._request(claim, request + 1)
        if slot == 0:
            self._check_limit(claim, alt.count)
        state = self.state
        candidates = state.index.candidates(state.view, alt)
        # `skipped_before_selectors` for the common pick, without the call per candidate.
        plain = not alt.admin_access
        exclusive = state.usage.exclusive
        shares = state.usage.shares
        allocating = state.allocating
        for position in range(start, len(candidates)):
            device, verdict = candidates[position]
            if plain and not device.allow_multiple:
                did = device.id
                if did in exclusive or did in shares or did in allocating:
                    continue
            elif state.skipped_before_selectors(claim, alt, device, slot_picks):
                continue
            if verdict is not True:
                assert isinstance(verdict, SelectorFailure)
                raise selector_error(state.plans[claim], alt, device, verdict)
            pick = state.try_pick(claim, alt, device)
            if pick is None:
                continue
            slot_picks.append(pick)
            if self._slot(claim, request, alt, slot + 1, position + 1, slot_picks):
                return True
            slot_picks.pop()
            state.undo(pick)
        return False

    def _take_all(self, claim: int, request: int, alt: Alternative) -> bool:
        state = self.state
        members = all_devices(state, state.plans[claim], alt)
        if not members:
            return False
        self._check_limit(claim, len(members))
        applied: list[Pick] = []
        ok = True
        for device in members:
            if state.skipped_before_selectors(claim, alt, device, applied):
                ok = False
                break
            pick = state.try_pick(claim, alt, device)
            if pick is None:
                if state.constraint_is_why(claim, alt, device):
                    raise AllocationError(
                        state.plans[claim].key,
                        f"request {alt.result_name} asks for all devices, but device "
                        f"{device.driver}/{device.name} breaks a constraint of the claim",
                    )
                ok = False
                break
            applied.append(pick)
        if ok and self._request(claim, request + 1):
            return True
        for pick in reversed(applied):
            state.undo(pick)
        return False


def all_devices(state: SearchState, plan: ClaimPlan, alt: Alternative) -> list[Device]:
    """Every selectable device of the node whose capacity fits the request.

    Selectors run on all devices, in use or not. As upstream's validateDeviceRequest does, a
    device whose capacity cannot serve the request (against what earlier claims consume, not
    this allocation's picks) is left out of the set rather than making the request fail.
    """
    members: list[Device] = []
    for device, verdict in state.index.candidates(state.view, alt):
        if verdict is not True:
            assert isinstance(verdict, SelectorFailure)
            raise selector_error(plan, alt, device, verdict)
        if capacity_serves(state.usage, device, alt):
            members.append(device)
    return members


def capacity_serves(usage: Usage, device: Device, alt: Alternative) -> bool:
    """The capacity check of an `All` member, made before the search against `usage` only."""
    if not device.allow_multiple:
        return not alt.capacity or large_enough(device, alt.capacity)
    share = share_demand(device, alt.capacity)
    if share is None:
        return False
    consumed = usage.consumed_capacity.get(device.id, {})
    return all(
        consumed.get(name, 0) + amount <= device.capacity[name].value
        for name, amount in share.items()
    )
