"""Replaying pods through GPU queues: waiting, fair admission, limits and reclaim over time.

Without queues a replay places each pod when it arrives or never. With queues, a pod that does
not fit (or that its queue may not take now) waits in its queue, and every time the cluster
changes (an arrival, a departure) the waiting pods are decided again in the controller's order:
the queue that comes next (`Ledger.order_key`: below its guarantee first, then the lowest
weighted dominant share, the default queue last), within a queue higher priority first, then
earlier arrival. A placement that would take a queue past a limit, or past its guarantee into
capacity held for a queue short of its guarantee, is undone and the pod keeps waiting
(`Ledger.refusal`). This mirrors `controller/queueing.py`, with the replay's allocator in place
of the controller's.

Reclaim: a waiting pod of a queue short of its guarantee, with `reclaim: Borrowed`, that fits no
node (or that an ancestor's limit holds back) evicts pods on borrowed capacity, or, where
those free nothing it can use, pods of queues that keep their guarantee without them
(`choose_reclaim`, `BorrowedUnits.surplus`), asking the replay's allocator whether the pod
fits a node once the candidates are released, and only when the pod then stays within its
guarantee and every limit, as the controller does. The controller keeps the freed devices for
the pod (a hold) until it is placed; a replay has no delay between the two, so the pod is
placed on the chosen node at once.

Time: a pod's `departure` minus its `arrival` is how long it runs once placed (its run time), so
a pod that waited leaves that much later. An evicted pod comes back at once as a new pod of the
same name, as a Job's controller would make one, with the run time it had left; it waits in its
queue like any arrival, and its queueing delay counts from its return.

Gangs: pods with the controller's gang labels (`<driver>/gang`, `<driver>/gang-size`) are
decided together once all members wait, each member on its own node if need be, all placed or
none. A waiting gang reclaims as the controller does (`choose_gang_victims`): victims such that
every member fits at once, or none; the members are then placed on the nodes that trial chose.
A victim's gang is evicted whole and comes back whole.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import AllocationError, ClusterSnapshot
from dra_driver.controller_names import default_gang_label, default_gang_size_label
from dra_driver.queues import (
    RECLAIM_BORROWED,
    ZERO,
    Amounts,
    Ledger,
    QueueTree,
    Running,
    borrowed_units,
)
from dra_driver.queues.amounts import allocation_amounts, capacity
from dra_driver.queues.gang_reclaim import choose_gang_victims, gang_admissible
from dra_driver.queues.reclaim import BorrowedUnits, choose_reclaim
from dra_driver.queues.spec import pod_priority
from dra_driver.simulation.replay import Cluster, PodPlacement
from dra_driver.simulation.workload_source import WorkloadSource

_DEPART = 0
_ARRIVE = 1
"""Event kinds, in the order they are handled at one time: departures free room first."""


@dataclass(slots=True)
class Job:
    """One pod of the replay, from its first arrival to its end."""

    key: str
    pod: Mapping[str, Any]
    claims: list[Mapping[str, Any]]
    queue: str
    priority: int
    order: int
    """Position in arrival order: breaks ties between equal arrival times."""
    run: float | None
    """Seconds it still has to run once placed; None runs to the end of the replay."""
    arrived: float
    """Its (latest) arrival: the first one, or its return after an eviction."""
    placement: PodPlacement | None = None
    placed_at: float = 0.0
    amounts: Amounts = ZERO
    token: int = 0
    """Changes with every placement, so a departure planned for an evicted run is ignored."""
    tried: bool = False
    reason: str | None = None
    """Why it waits, or why it can never be placed (`failed`)."""
    failed: bool = False
    finished: bool = False
    evictions: int = 0
    last_node: str | None = None
    last_allocations: list[dict[str, Any]] | None = None
    gang: str | None = None
    """`namespace/name` of its gang; its members are decided and evicted together."""
    gang_size: int = 1

    @property
    def created(self) -> str:
        """A creation stamp that sorts as arrivals do (what reclaim compares as age)."""
        return f"{self.arrived:020.6f}/{self.order:09d}"

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass(frozen=True, slots=True)
class Eviction:
    time: float
    pod: str
    queue: str
    by_pod: str
    by_queue: str
    node: str


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What every queue held (its own pods and its descendants') after the events of `time`."""

    time: float
    used: dict[str, Amounts]


EvictionHook = Callable[[Eviction, Sequence[Running], Ledger], None]
"""Called before each eviction with the pods that were running and the ledger then."""


@dataclass(slots=True)
class QueuedReplay:
    """The replay's state; iterate `steps()` to advance it event time by event time."""

    cluster: Cluster
    tree: QueueTree
    base: dict[str, Amounts] = field(default_factory=dict)
    """Queue → what claims no pod uses hold there (never waiting, never evicted)."""
    jobs: list[Job] = field(default_factory=list)
    waiting: list[Job] = field(default_factory=list)
    running: dict[str, Job] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)
    delays: dict[str, list[float]] = field(default_factory=dict)
    """Queue → seconds from arrival to placement, one per placement."""
    timeline: list[UsageRow] = field(default_factory=list)
    on_evict: EvictionHook | None = None
    learned: WorkloadSource | None = None
    """The controller's learning, replayed (`simulate --workload learned`): each pod is counted
    in the cluster's workload as the controller counts it."""
    gang_label: str = default_gang_label(DEFAULT_DRIVER_NAME)
    gang_size_label: str = default_gang_size_label(DEFAULT_DRIVER_NAME)
    _events: list[tuple[float, int, int, Job, int]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)
    _capacity: Amounts = ZERO
    _drivers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        snapshot = self.cluster.snapshot
        self._drivers = tuple(sorted({pool.driver for pool in snapshot.pools}))
        total = ZERO
        for driver in self._drivers:
            total = total + capacity(snapshot, driver)
        self._capacity = total

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.cluster.snapshot

    def amounts(self, allocations: Sequence[Mapping[str, Any]]) -> Amounts:
        """What allocations take from a queue, counting every driver's devices."""
        total = ZERO
        for allocation in allocations:
            for driver in self._drivers:
                total = total + allocation_amounts(self.snapshot, driver, allocation)
        return total

    def add_claim_usage(self, namespace: str, allocation: Mapping[str, Any]) -> None:
        queue = self.tree.queue_for(namespace)
        self.base[queue] = self.base.get(queue, ZERO) + self.amounts([allocation])

    def add_pod(
        self,
        pod: Mapping[str, Any],
        claims: list[Mapping[str, Any]],
        key: str,
        arrival: float,
        departure: float | None,
    ) -> None:
        """Pods must be added in arrival order."""
        job = Job(
            key=key,
            pod=pod,
            claims=claims,
            queue=self.tree.queue_for(key.split("/", 1)[0]),
            priority=pod_priority(pod),
            order=len(self.jobs),
            run=None if departure is None else departure - arrival,
            arrived=arrival,
        )
        labels = (pod.get("metadata") or {}).get("labels") or {}
        gang = labels.get(self.gang_label)
        if gang:
            raw = labels.get(self.gang_size_label)
            try:
                job.gang, job.gang_size = f"{job.namespace}/{gang}", int(str(raw))
            except ValueError:
                job.reason, job.failed = f"label {self.gang_size_label}={raw!r} is no size", True
            if job.gang_size < 1:
                job.reason, job.failed = f"label {self.gang_size_label}={raw!r} is below 1", True
        self.jobs.append(job)
        if not job.failed:
            self._push(arrival, _ARRIVE, job)

    def _push(self, time: float, kind: int, job: Job) -> None:
        heapq.heappush(self._events, (time, kind, next(self._seq), job, job.token))

    @property
    def events_left(self) -> int:
        return len(self._events)

    @property
    def next_time(self) -> float | None:
        """When the next event is due; None when none is left. Until then the state that
        `steps()` last yielded holds (a report reads time points from it)."""
        return self._events[0][0] if self._events else None

    # --- the timeline -----------------------------------------------------------------------

    def steps(self) -> Iterator[float]:
        """Handle every event of the next time (departures, then arrivals), decide the waiting
        pods until nothing changes, and yield that time."""
        while self._events:
            now = self._events[0][0]
            while self._events and self._events[0][0] == now:
                _, kind, _, job, token = heapq.heappop(self._events)
                if kind == _DEPART:
                    if token == job.token and job.placement is not None:
                        self._stop(job)
                        job.finished = True
                else:
                    job.arrived = now
                    self.waiting.append(job)
            # Each pass decides every waiting pod once; a pass changes the state only by
            # placing or evicting, and there are finitely many pods to place.
            for _ in range(len(self.jobs) + 2):
                if not self._pass(now):
                    break
            self._record(now)
            yield now

    def ledger(self) -> Ledger:
        ledger = Ledger(self.tree, self._capacity)
        for queue, amounts in self.base.items():
            ledger.add(queue, amounts)
        for job in self.running.values():
            ledger.add(job.queue, job.amounts)
        return ledger

    def _units(self) -> dict[str, list[list[Job]]]:
        """Waiting pods by queue, as units (a pod, or a gang once all its members wait) in the
        controller's order within a queue."""
        pending: dict[str, list[list[Job]]] = {}
        gangs: dict[str, list[Job]] = {}
        for job in self.waiting:
            if job.gang is None:
                pending.setdefault(job.queue, []).append([job])
            else:
                gangs.setdefault(job.gang, []).append(job)
        for members in gangs.values():
            if len(members) == members[0].gang_size:
                members.sort(key=lambda j: j.name)
                pending.setdefault(members[0].queue, []).append(members)
            else:
                for job in members:
                    job.reason = f"gang {job.gang} has {len(members)} of {job.gang_size} pods"
        for units in pending.values():
            units.sort(
                key=lambda u: (
                    -max(j.priority for j in u),
                    min(j.arrived for j in u),
                    min(j.order for j in u),
                )
            )
        return pending

    def _pass(self, now: float) -> bool:
        changed = False
        ledger = self.ledger()
        ledger.waiting = {job.queue for job in self.waiting}
        pending = self._units()
        while True:
            queue = ledger.next_queue(q for q, units in pending.items() if units)
            if queue is None:
                return changed
            unit = pending[queue].pop(0)
            placements = self._place(unit)
            if placements is None:
                continue  # never placeable
            if isinstance(placements, str):
                for job in unit:
                    job.reason = placements
                changed = self._reclaim(now, unit, ledger) or changed
                continue
            if self._admit(now, unit, placements, ledger):
                changed = True
            else:  # held back by a limit: reclaim as the controller does (siblings borrowed)
                changed = self._reclaim(now, unit, ledger) or changed

    def _decide(self, job: Job) -> PodPlacement:
        """The job's placement now; its shape counts in a learned workload the first time it is
        decided (through the controller's own counting when that is replayed)."""
        if self.learned is None:
            return self.cluster.place_pod(job.pod, job.claims, retry=job.tried)
        return self.learned.decide(
            job.key,
            job.pod,
            job.claims,
            lambda retry: self.cluster.place_pod(job.pod, job.claims, retry=retry),
        )

    def _place(self, unit: Sequence[Job]) -> list[PodPlacement] | str | None:
        """Every member placed (each on its node), or why not with nothing placed; None when
        the input makes a member unplaceable for good (then the unit is given up)."""
        placed: list[PodPlacement] = []
        for job in unit:
            try:
                placement = self._decide(job)
            except AllocationError as err:
                for done in placed:
                    self.cluster.release_pod(done)
                for member in unit:
                    member.reason, member.failed = str(err), True
                    self.waiting.remove(member)
                return None
            job.tried = True
            if placement.node is None or placement.allocations is None:
                for done in placed:
                    self.cluster.release_pod(done)
                prefix = "" if len(unit) == 1 else f"gang member {job.key}: "
                return f"{prefix}{placement.reason}"
            placed.append(placement)
        return placed

    def _admit(
        self, now: float, unit: Sequence[Job], placements: Sequence[PodPlacement], ledger: Ledger
    ) -> bool:
        asks = ZERO
        for placement in placements:
            asks = asks + self.amounts(placement.allocations or [])
        refusal = ledger.refusal(unit[0].queue, asks)
        if refusal is not None:
            for placement in placements:
                self.cluster.release_pod(placement)
            for job in unit:
                job.reason = refusal
            return False
        ledger.add(unit[0].queue, asks)
        for job, placement in zip(unit, placements, strict=True):
            self.waiting.remove(job)
            job.placement, job.placed_at = placement, now
            job.amounts = self.amounts(placement.allocations or [])
            job.last_node, job.last_allocations = placement.node, placement.allocations
            job.reason = None
            job.token += 1
            self.running[job.key] = job
            self.delays.setdefault(job.queue, []).append(now - job.arrived)
            if job.run is not None:
                self._push(now + job.run, _DEPART, job)
        return True

    def _stop(self, job: Job) -> None:
        assert job.placement is not None
        self.cluster.release_pod(job.placement)
        del self.running[job.key]
        job.placement, job.amounts = None, ZERO

    # --- reclaim ------------------------------------------------------------------------------

    def running_pods(self) -> list[Running]:
        return [
            Running(
                key=(job.namespace, job.name),
                queue=job.queue,
                nodes=frozenset({job.placement.node or ""}),
                priority=job.priority,
                created=job.created,
                amounts=job.amounts,
                gang=job.gang,
            )
            for job in self.running.values()
            if job.placement is not None
        ]

    def fits(self, job: Job, ledger: Ledger) -> Callable[[str, Sequence[Running]], bool]:
        """Whether `job` would fit `node` with `freed` gone, and stay within its guarantee."""
        spec = self.tree.queues[job.queue]
        used = ledger.used(job.queue)

        def fits(node: str, freed: Sequence[Running]) -> bool:
            placements = [self._job(r).placement for r in freed]
            released = [p for p in placements if p is not None]
            for placement in released:
                self.cluster.release_pod(placement)
            try:
                allocations = self.cluster.fits_on(node, job.pod, job.claims)
            finally:
                for placement in reversed(released):
                    self.cluster.restore_pod(placement)
            if allocations is None:
                return False
            asks = self.amounts(allocations)
            if not spec.guaranteed.covers(used + asks):
                return False
            for victim in freed:  # an ancestor's limit must allow the pod once they are gone
                ledger.remove(victim.queue, victim.amounts)
            try:
                return ledger.refusal(job.queue, asks) is None
            finally:
                for victim in freed:
                    ledger.add(victim.queue, victim.amounts)

        return fits

    def _job(self, running: Running) -> Job:
        return self.running[f"{running.key[0]}/{running.key[1]}"]

    def _reclaim(self, now: float, unit: Sequence[Job], ledger: Ledger) -> bool:
        job = unit[0]
        if not ledger.short_of_guarantee(job.queue):
            return False
        spec = self.tree.queues[job.queue]
        if spec.reclaim != RECLAIM_BORROWED:
            for member in unit:
                member.reason = f"{member.reason}; queue {job.queue} is below its guarantee but "
                member.reason += f"its reclaim policy is {spec.reclaim}"
            return False
        if len(unit) > 1:
            return self._reclaim_gang(now, unit, ledger)
        running = self.running_pods()
        chosen = choose_reclaim(BorrowedUnits(ledger, running), job.queue, self.fits(job, ledger))
        if chosen is None:
            job.reason = f"{job.reason}; no pod on borrowed capacity would make room"
            return False
        node, victims = chosen
        for victim in (pod for unit in victims for pod in unit.pods):
            self._evict(now, victim, job.key, job.queue, node, running, ledger)
        placement = self.cluster.place_on(node, job.pod, job.claims)
        if placement.node is not None:
            self._admit(now, [job], [placement], ledger)
        return True

    def _reclaim_gang(self, now: float, unit: Sequence[Job], ledger: Ledger) -> bool:
        queue, gang = unit[0].queue, unit[0].gang
        running = self.running_pods()
        trial = _ReplayGangTrial(self, unit, ledger)
        choice = choose_gang_victims(borrowed_units(ledger, running, queue), len(unit), trial)
        if isinstance(choice, str):
            for job in unit:
                job.reason = f"{job.reason}; evicting would not make room for gang {gang}: {choice}"
            return False
        nodes = trial.nodes(choice.pods)
        for victim in choice.pods:
            where = sorted(victim.nodes)[0] if victim.nodes else ""
            self._evict(now, victim, f"gang {gang}", queue, where, running, ledger)
        placements: list[PodPlacement] = []
        for job, node in zip(unit, nodes, strict=True):
            placement = self.cluster.place_on(node, job.pod, job.claims)
            if placement.node is None:  # the trial placed it there: a first-fit difference
                for done in placements:
                    self.cluster.release_pod(done)
                for member in unit:
                    member.reason = f"gang {gang}: {placement.reason} after reclaim"
                return True
            placements.append(placement)
        self._admit(now, unit, placements, ledger)
        return True

    def _evict(
        self,
        now: float,
        victim: Running,
        by_pod: str,
        by_queue: str,
        node: str,
        running: Sequence[Running],
        ledger: Ledger,
    ) -> None:
        evicted = self._job(victim)
        record = Eviction(now, evicted.key, evicted.queue, by_pod, by_queue, node)
        if self.on_evict is not None:
            self.on_evict(record, running, ledger)
        self.evictions.append(record)
        self._stop(evicted)
        ledger.remove(evicted.queue, victim.amounts)
        evicted.evictions += 1
        if evicted.run is not None:
            evicted.run = max(0.0, evicted.run - (now - evicted.placed_at))
        evicted.arrived = now
        evicted.order = len(self.jobs) + len(self.evictions)
        evicted.reason = f"evicted at {now:g}s for {by_pod} of queue {by_queue}"
        self.waiting.append(evicted)

    def _record(self, now: float) -> None:
        ledger = self.ledger()
        used = {name: ledger.used(name) for name in self.tree.queues}
        if self.timeline and self.timeline[-1].used == used:
            return
        self.timeline.append(UsageRow(now, used))


@dataclass(slots=True)
class _ReplayGangTrial:
    """`GangTrial` over the replay's cluster: members placed as the replay places pods,
    victims' placements released while they count as gone."""

    replay: QueuedReplay
    unit: Sequence[Job]
    ledger: Ledger
    placed: dict[int, PodPlacement] = field(default_factory=dict)
    released: dict[str, PodPlacement] = field(default_factory=dict)
    why: dict[int, str] = field(default_factory=dict)

    def place(self, member: int, freed: Sequence[Running], node: str | None = None) -> bool:
        self._free(freed)
        job = self.unit[member]
        cluster = self.replay.cluster
        if node is None:
            placement = cluster.place_pod(job.pod, job.claims, retry=True)
        else:
            placement = cluster.place_on(node, job.pod, job.claims)
        if placement.node is None:
            self.why[member] = f"gang member {job.key}: {placement.reason}"
            return False
        self.placed[member] = placement
        return True

    def unplace(self, member: int) -> None:
        placement = self.placed.pop(member, None)
        if placement is not None:
            self.replay.cluster.release_pod(placement)

    def admissible(self, freed: Sequence[Running]) -> str | None:
        asks = ZERO
        for placement in self.placed.values():
            asks = asks + self.replay.amounts(placement.allocations or [])
        return gang_admissible(self.ledger, self.unit[0].queue, asks, freed)

    def lacking(self, member: int) -> str:
        return self.why.get(member, "")

    def reset(self) -> None:
        for member in list(self.placed):
            self.unplace(member)
        self._free(())

    def nodes(self, freed: Sequence[Running]) -> list[str]:
        """The node of each member with `freed` gone (every member fits then)."""
        found: list[str] = []
        self.reset()
        try:
            for member in range(len(self.unit)):
                if self.place(member, freed):
                    found.append(self.placed[member].node or "")
        finally:
            self.reset()
        return found

    def _free(self, freed: Sequence[Running]) -> None:
        cluster = self.replay.cluster
        wanted = {f"{r.key[0]}/{r.key[1]}" for r in freed}
        for key in [k for k in self.released if k not in wanted]:
            cluster.restore_pod(self.released.pop(key))
        for key in wanted:
            job = self.replay.running.get(key)
            if key not in self.released and job is not None and job.placement is not None:
                cluster.release_pod(job.placement)
                self.released[key] = job.placement
