"""Queues in the allocation loop: the order gated pods are decided in, the check each decision
must pass before it is written, reclaim, and holds on freed devices.

Usage is counted from claims, not pods: every allocated claim (ours, the kube-scheduler's, and
our own decisions not written yet) counts for the queue of its namespace, once, however many pods
share it, so a queue is charged for exactly the GPUs its namespaces hold.

A pass decides units (a pod, or a gang) one at a time, always from the queue that comes next
(`Ledger.order_key`), each against the usage left by the ones before. A decision that would take
its queue past a limit, or past its guarantee into capacity reserved for a queue short of its
guarantee, is dropped and the pod waits with the reason.

Reclaim: when a single pod of a queue short of its guarantee (and with `reclaim: Borrowed`)
cannot be placed, pods on borrowed capacity are chosen (`dra_driver.queues.reclaim`) by trying,
node by node, whether freeing their claims lets the pod's claims be allocated there, through the
allocator itself; when none would, pods of queues above their guarantee that keep it without
them (`BorrowedUnits.surplus`: borrowed halves of GPUs may free no whole one). The chosen pods
are evicted, and a *hold* keeps the devices they free for the pod that asked: until it is
placed, or the hold time passes, every other decision sees those devices as taken. A victim's
gang goes whole.

A waiting gang is reclaimed for as a whole (`dra_driver.queues.gang_reclaim`, with the members
placed on trial by `controller.gang_trial`): victims are chosen so that every member fits at
once, on as many nodes as it takes, and only when the whole gang then fits within its queue's
guarantee and every limit. Each member gets a hold on the devices freed on its node; the gang
is decided again as one unit, so all its holds end together.

Idleness: each running pod carries when all its devices went idle (`device_status.idle_since`
over its claims as the view has them), so reclaim evicts idle pods first. A queue with
`spec.idleReclaim.after` also lends its pods idle that long: when a single pod of another
queue finds no room (and reclaim of borrowed capacity, where its queue may reclaim, found
nothing), those pods may be evicted for it even within their queue's guarantee, with the same
trial of the freed devices and the waiting pod's queue admission checked with them gone.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from controller.decide import Decision, NoRoom, Outcome, Unallocatable, decide
from controller.gang_trial import ViewGangTrial, usable_nodes
from controller.gangs import GangError, gang_of
from controller.informer import Key, Obj, key_of
from controller.node_load import FINISHED_PHASES
from controller.view import ClusterView, allocation_of
from dra_driver.allocator.result import allocation_node
from dra_driver.device_status import idle_since
from dra_driver.durations import format_duration
from dra_driver.queues import (
    RECLAIM_BORROWED,
    ZERO,
    Amounts,
    Ledger,
    QueueSpec,
    QueueTree,
    Running,
    Unit,
    choose_victims,
)
from dra_driver.queues.amounts import allocation_amounts, capacity
from dra_driver.queues.gang_reclaim import GangVictims, choose_gang_victims
from dra_driver.queues.reclaim import BorrowedUnits, choose_reclaim
from dra_driver.queues.spec import format_gpu, pod_priority

log = structlog.get_logger(__name__)

#: How long a waiting pod that keeps failing the same way keeps its explanation.
EXPLAIN_EVERY_S = 30.0


@dataclass(slots=True)
class Hold:
    """Devices freed by evictions, kept for the pod they were freed for."""

    pod: Key
    queue: str
    node: str
    claims: dict[Key, Obj]
    """Victims' claims → the allocations they held (the devices kept)."""
    victims: set[Key]
    until: float
    gang: str | None = None
    """The gang the pod waits in: its mates hold the rest of what was freed for it."""
    standing: str = ""
    """Where the pod's queue stood when the victims were chosen, for the reason the pod waits
    while the hold lasts: the reason stays the same from pass to pass (the queue's usage moves
    with every pod placed), so it is reported once rather than once a pass."""


@dataclass(slots=True)
class Reclaim:
    """Evictions a pass decided on, carried out after it."""

    requester: Obj
    queue: str
    node: str
    victims: list[tuple[Obj, str]]
    """(pod, its queue)."""
    gang: str | None = None
    """Set when the reclaim is for a gang (`requester` is then its first member)."""
    holders: tuple[Key, ...] = ()
    """The pods whose holds keep what the victims free (the requester alone when empty)."""
    idle_for: dict[Key, float] = field(default_factory=dict)
    """Victims whose devices were all idle → for how many seconds, when chosen."""
    idle_reclaim: bool = False
    """The victims go under their queue's `idleReclaim` (within its guarantee), not as
    borrowed capacity."""

    @property
    def asker(self) -> str:
        if self.gang is not None:
            return f"gang {self.gang}"
        meta = self.requester["metadata"]
        return f"pod {meta['namespace']}/{meta['name']}"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    driver_name: str
    finalizer: str
    gang_label: str
    gang_size_label: str
    default_queue: str = "default"
    hold_s: float = 60.0


@dataclass(frozen=True, slots=True)
class _SeenRunning:
    """A pod's `Running` entry (None: not an eviction candidate) and the objects it was made
    from."""

    pod: Obj
    tree: QueueTree
    builds: int
    claim_keys: tuple[Key, ...]
    claims: tuple[Obj, ...]
    entry: Running | None


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


class QueueKeeper:
    """The queue state that outlives a pass: the tree, holds, pods being evicted."""

    def __init__(self, settings: QueueSettings, view: ClusterView) -> None:
        self.settings = settings
        self.view = view
        self._tree: QueueTree | None = None
        self._tree_revision = -1
        self._amounts: dict[Key, tuple[int, Obj, Amounts]] = {}
        """Claim → (snapshot build, the allocation, what it counts), computed once each."""
        self._capacity: tuple[int, Amounts] | None = None
        self._devices: tuple[int, dict[tuple[str, str], Amounts]] = (-1, {})
        """What each whole device counts, for the snapshot build it was computed on."""
        self.holds: dict[Key, Hold] = {}
        self.evicting: dict[Key, str] = {}
        """Pods we asked to evict → the queue that reclaimed; dropped once they are gone."""
        self.spared: dict[Key, float] = {}
        """Pods whose eviction a PodDisruptionBudget refused → when to consider them again."""
        self.explained: dict[Key, tuple[float, str, str]] = {}
        """Waiting pod (a unit's first) → when its failure was last explained, the reason
        without the explanation, and with it."""
        self._seen_running: dict[Key, _SeenRunning] = {}
        """Pod → its `Running` entry and what it was made from: every pass reads every pod,
        and most did not change since the last one."""

    # --- the tree and the ledger -------------------------------------------------------------

    def tree(self) -> QueueTree:
        if self._tree is None or self._tree_revision != self.view.queue_revision:
            default = QueueSpec(name=self.settings.default_queue, last=True)
            self._tree = QueueTree.build(self.view.objects["gpuqueues"].values(), default)
            self._tree_revision = self.view.queue_revision
            for name, why in sorted(self._tree.problems.items()):
                log.warning("queue ignored", queue=name, reason=why)
        return self._tree

    def queue_of(self, pod: Mapping[str, Any]) -> str:
        return self.tree().queue_for(str((pod.get("metadata") or {}).get("namespace") or ""))

    def claim_amounts(self, key: Key, allocation: Obj) -> Amounts:
        self.view.placer()  # the snapshot is current
        builds = self.view.snapshot_builds
        cached = self._amounts.get(key)
        if cached is not None and cached[0] == builds and cached[1] is allocation:
            return cached[2]
        if self._devices[0] != builds:
            self._devices = (builds, {})
        amounts = allocation_amounts(
            self.view.snapshot, self.settings.driver_name, allocation, self._devices[1]
        )
        self._amounts[key] = (builds, allocation, amounts)
        return amounts

    def capacity(self) -> Amounts:
        self.view.placer()  # the snapshot is current
        if self._capacity is None or self._capacity[0] != self.view.snapshot_builds:
            total = capacity(self.view.snapshot, self.settings.driver_name)
            self._capacity = (self.view.snapshot_builds, total)
        return self._capacity[1]

    def ledger(self, waiting: Iterable[Obj] = ()) -> Ledger:
        tree = self.tree()
        ledger = Ledger(tree, self.capacity())
        claims = self.view.claims
        for key in list(self._amounts):
            if key not in claims and key not in self.view.assumed:
                del self._amounts[key]
        for key, claim in claims.items():
            allocation = allocation_of(claim) or self.view.assumed.get(key)
            if allocation is not None:
                ledger.add(tree.queue_for(key[0]), self.claim_amounts(key, allocation))
        for key, allocation in self.view.assumed.items():
            if key not in claims:
                ledger.add(tree.queue_for(key[0]), self.claim_amounts(key, allocation))
        for pod in waiting:
            ledger.waiting.add(self.queue_of(pod))
        return ledger

    def pending_by_queue(self, pods: Iterable[Obj]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pod in pods:
            queue = self.queue_of(pod)
            counts[queue] = counts.get(queue, 0) + 1
        return counts

    # --- pods that hold devices ----------------------------------------------------------------

    def running(self) -> list[Running]:
        """Pods we admitted that hold devices and could be evicted to free them."""
        found: list[Running] = []
        now = time.monotonic()
        for key in [k for k in self.evicting if k not in self.view.pods]:
            del self.evicting[key]
        for key in [k for k, t in self.spared.items() if t <= now]:
            del self.spared[key]
        seen = self._seen_running
        for key in [k for k in seen if k not in self.view.pods]:
            del seen[key]
        tree, builds = self.tree(), self.view.snapshot_builds
        for key, pod in self.view.pods.items():
            if key in self.evicting or key in self.spared:
                continue
            kept = seen.get(key)
            if kept is not None and self._unchanged(key, pod, tree, builds, kept):
                entry = kept.entry
            else:
                entry = self._running(key, pod)
                claims = self.view.pod_claims(pod)
                if claims is not None and self._own_claims(key, [key_of(c) for c in claims]):
                    seen[key] = _SeenRunning(
                        pod, tree, builds, tuple(key_of(c) for c in claims), tuple(claims), entry
                    )
                else:
                    seen.pop(key, None)
            if entry is not None:
                found.append(entry)
        return found

    def _unchanged(
        self, key: Key, pod: Obj, tree: QueueTree, builds: int, kept: _SeenRunning
    ) -> bool:
        """The pod's `Running` entry was made from these very objects (the view replaces an
        object on every change), and no other pod uses its claims."""
        if kept.pod is not pod or kept.tree is not tree or kept.builds != builds:
            return False
        claims = self.view.claims
        for claim_key, claim in zip(kept.claim_keys, kept.claims, strict=True):
            if claims.get(claim_key) is not claim:
                return False
        return self._own_claims(key, kept.claim_keys)

    def _own_claims(self, key: Key, claim_keys: Iterable[Key]) -> bool:
        """No other pod uses these claims: whether such a pod is still alive matters to the
        entry, and that is not in the objects compared."""
        users = self.view.users
        return all(user == key for claim in claim_keys for user in users.get(claim, ()))

    def _running(self, key: Key, pod: Obj) -> Running | None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            return None
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        if gates:
            return None
        claims = self.view.pod_claims(pod)
        if not claims:
            return None
        total = ZERO
        nodes: set[str] = set()
        ours = False
        for claim in claims:
            allocation = allocation_of(claim)
            if allocation is None:
                return None
            claim_key = key_of(claim)
            if any(
                user != key and self._alive(user) for user in self.view.users.get(claim_key, ())
            ):
                return None  # shared with another pod: evicting this one frees nothing
            ours = ours or self.settings.finalizer in (claim["metadata"].get("finalizers") or [])
            total = total + self.claim_amounts(claim_key, allocation)
            node = allocation_node(allocation)
            if node:
                nodes.add(node)
        if not ours or not nodes:
            return None
        gang = None
        try:
            found = gang_of(pod, self.settings.gang_label, self.settings.gang_size_label)
        except GangError:
            found = None
        if found is not None:
            gang = f"{found[0].namespace}/{found[0].name}"
        return Running(
            key=key,
            queue=self.queue_of(pod),
            nodes=frozenset(nodes),
            priority=pod_priority(pod),
            created=_created(pod),
            amounts=total,
            gang=gang,
            idle_since=idle_since(claims, self.settings.driver_name),
        )

    def idle_gpus(self) -> dict[str, float]:
        """Per queue (its descendants' included, as `used`), the GPU-equivalents of allocated
        claims whose devices of this driver are all idle. Counted per claim, as usage is: a
        claim without device conditions (most of them) costs a dictionary look-up."""
        tree = self.tree()
        own: dict[str, float] = {}
        for key, claim in self.view.claims.items():
            if not (claim.get("status") or {}).get("devices"):
                continue
            allocation = allocation_of(claim)
            if allocation is None or idle_since([claim], self.settings.driver_name) is None:
                continue
            queue = tree.queue_for(key[0])
            own[queue] = own.get(queue, 0.0) + self.claim_amounts(key, allocation).gpu

        def total(name: str) -> float:
            return own.get(name, 0.0) + sum(total(child) for child in tree.children(name))

        return {name: total(name) for name in tree.queues}

    def _alive(self, key: Key) -> bool:
        pod = self.view.pods.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES

    # --- holds -----------------------------------------------------------------------------------

    def nothing_freed_yet(self, pod: Key) -> bool:
        """The pod waits on its hold and none of the claims its victims held has been released:
        what was freed for it is not there yet, so deciding it again would search every node
        to fail as it did. While a queue reclaims for hundreds of pods, that was most of each
        pass's deciding. (Room freed elsewhere meanwhile waits until its own victims go or the
        hold ends; a gang is decided as a whole and always again.)"""
        hold = self.holds.get(pod)
        if hold is None or hold.gang is not None or not hold.claims:
            return False
        return all(allocation_of(self.view.claims.get(key)) is not None for key in hold.claims)

    def expire_holds(self, gated: set[Key]) -> None:
        now = time.monotonic()
        for key in [k for k in self.explained if k not in gated]:
            del self.explained[key]
        for key, hold in list(self.holds.items()):
            if hold.until <= now or key not in gated:
                log.info("hold released", pod=f"{key[0]}/{key[1]}", node=hold.node)
                del self.holds[key]


@dataclass(slots=True)
class QueuePass:
    """One pass's decisions in queue order (see the module docstring)."""

    keeper: QueueKeeper
    ledger: Ledger
    pending: dict[str, list[list[Obj]]]
    reclaims: list[Reclaim] = field(default_factory=list)
    _borrowed_units: BorrowedUnits | None = None
    """Pods that could be evicted, found once per pass when reclaim first needs them."""
    _running: list[Running] | None = None
    """The pods that hold devices, read once per pass when reclaim first needs them."""
    _idle_candidates: list[Unit] | None = None
    """Units of queues with `idleReclaim` idle long enough, found once per pass."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    """The pass's wall-clock time, against which idleness is measured."""
    _applied: dict[Key, list[tuple[Obj, str]]] = field(default_factory=dict)
    """Hold → the allocations recorded for it in the allocator's usage during this pass."""
    _unexplained: set[Key] = field(default_factory=set)
    """Pods whose failed decision was not explained yet (see `decide`)."""
    _claim_keys: dict[Key, list[Key]] = field(default_factory=dict)
    """Running pod → its claims, read once per pass for reclaim's trials."""
    _no_room: dict[tuple[str, str, tuple[Key, ...]], int] = field(default_factory=dict)
    """(claims' specs, node, pods freed) → `_changes` when a reclaim trial found no room there:
    the cheap "not if these go" for the next waiting pod of the same shape, which would try the
    same candidates in the same order. (Node usage versions cannot tell: every trial bumps
    them, though it leaves the usage as it was.)"""
    _changes: int = 0
    """Counts what changed the allocator's usage in this pass: decisions, holds released."""
    _nowhere: NoRoom = field(default_factory=NoRoom)
    """Searches of this pass that found no node, and where room was given back since."""

    @classmethod
    def start(
        cls, keeper: QueueKeeper, units: Sequence[list[Obj]], gated: Iterable[Obj]
    ) -> QueuePass:
        gated = list(gated)
        keeper.expire_holds({key_of(p) for p in gated})
        ledger = keeper.ledger(gated)
        pending: dict[str, list[list[Obj]]] = {}
        for unit in units:
            pending.setdefault(keeper.queue_of(unit[0]), []).append(unit)
        for queue_units in pending.values():
            queue_units.sort(
                key=lambda u: (
                    -max(pod_priority(p) for p in u),
                    min(_created(p) for p in u),
                    key_of(u[0]),
                )
            )
        this = cls(keeper, ledger, pending)
        this._apply_holds()
        return this

    def _apply_holds(self) -> None:
        view = self.keeper.view
        placer = view.placer()
        for pod, hold in self.keeper.holds.items():
            applied: list[tuple[Obj, str]] = []
            for claim, allocation in hold.claims.items():
                if view.recorded(claim) is allocation or view.recorded(claim) == allocation:
                    continue  # the victim still holds it: taken anyway
                node = allocation_node(allocation) or "*"
                placer.record(allocation, node)
                applied.append((allocation, node))
            self._applied[pod] = applied

    def _release_hold(self, pod: Key) -> None:
        placer = self.keeper.view.placer()
        for allocation, node in self._applied.pop(pod, []):
            placer.release(allocation, node)
            self._changes += 1
            self._nowhere.freed([node])

    def finish(self) -> None:
        for pod in list(self._applied):
            self._release_hold(pod)

    def __iter__(self) -> Iterator[list[Obj]]:
        while True:
            queue = self.ledger.next_queue(q for q, units in self.pending.items() if units)
            if queue is None:
                return
            unit = self.pending[queue].pop(0)
            for pod in unit:
                self._release_hold(key_of(pod))
            yield unit

    # --- a decision ----------------------------------------------------------------------------

    def decide(self, pods: Sequence[Obj]) -> Outcome:
        """`decide`, without the allocator's explanation of a failure unless it is shown: the
        explanation (one more search of a few nodes, with reasons) costs more than the failing
        search itself, for every waiting pod in every pass. A pod that may reclaim shows
        reclaim's outcome instead (explained only when reclaim cannot help, `_explained`); a
        pod that failed the same way within `EXPLAIN_EVERY_S` keeps its last explanation."""
        view = self.keeper.view
        with unexplained(view):
            outcome = decide(view, pods, self._nowhere)
        if isinstance(outcome, Decision):
            self._changes += 1
        if not isinstance(outcome, Unallocatable):
            return outcome
        self._unexplained.update(key_of(p) for p in pods)
        queue = self.keeper.queue_of(pods[0])
        spec = self.ledger.tree.queues[queue]
        if spec.reclaim == RECLAIM_BORROWED and self.ledger.short_of_guarantee(queue):
            return outcome
        return Unallocatable(self._explained(pods, outcome))

    def _explained(self, pods: Sequence[Obj], outcome: Unallocatable) -> str:
        """The reason the pods did not fit, with the allocator's explanation."""
        keys = [key_of(p) for p in pods]
        if not any(key in self._unexplained for key in keys):
            return outcome.reason
        self._unexplained.difference_update(keys)
        now = time.monotonic()
        last = self.keeper.explained.get(keys[0])
        if last is not None and last[1] == outcome.reason and now - last[0] < EXPLAIN_EVERY_S:
            return last[2]
        again = decide(self.keeper.view, pods)
        if isinstance(again, Decision):  # nothing changed since it failed: not expected
            self._changes += 1
            for key in again.allocations:
                self.keeper.view.forget(key)
            return outcome.reason
        self.keeper.explained[keys[0]] = (now, outcome.reason, again.reason)
        return again.reason

    # --- after a decision ----------------------------------------------------------------------

    def admit(self, pods: Sequence[Obj], decision: Decision) -> str | None:
        """None when the queue may take what the decision allocates (it is then counted),
        else why not."""
        queue = self.keeper.queue_of(pods[0])
        asks = ZERO
        for key, allocation in decision.allocations.items():
            asks = asks + self.keeper.claim_amounts(key, allocation)
        refusal = self.ledger.refusal(queue, asks)
        if refusal is not None:
            return refusal
        self.ledger.add(queue, asks)
        for pod in pods:
            self.keeper.holds.pop(key_of(pod), None)
        return None

    def failed(self, pods: Sequence[Obj], outcome: Unallocatable, lacks_room: bool = True) -> str:
        """The reason the pods wait, after trying reclaim for them. `lacks_room` is False when
        the pods were refused by their queue's admission (a limit, capacity held for others)
        rather than for want of devices: idle pods are evicted only to make room."""
        queue = self.keeper.queue_of(pods[0])
        self.ledger.waiting.add(queue)
        pod = pods[0]
        spec = self.ledger.tree.queues[queue]
        idle_allowed = lacks_room and spec.reclaim == RECLAIM_BORROWED
        if not self.ledger.short_of_guarantee(queue):
            if idle_allowed and len(pods) > 1:
                return self._gang_failed(pods, queue, outcome, f"queue {queue}", borrowed=False)
            if idle_allowed:
                hold = self.keeper.holds.get(key_of(pod))
                if hold is not None:
                    return _waiting_for(f"queue {queue}", hold)
                idle = self._idle_reclaim(pod, queue, f"queue {queue}")
                if idle is not None:
                    return idle
            return self._explained(pods, outcome)
        used = self.ledger.used(queue)
        standing = f"queue {queue} is below its guarantee ({_standing(used, spec)})"
        if spec.reclaim != RECLAIM_BORROWED:
            return (
                f"{outcome.reason}; {standing} but its reclaim policy is {spec.reclaim}: "
                "waiting for devices to be freed"
            )
        if len(pods) > 1:
            return self._gang_failed(pods, queue, outcome, standing, idle_allowed=idle_allowed)
        hold = self.keeper.holds.get(key_of(pod))
        if hold is not None:  # reclaimed already: wait for what it frees, until the hold ends
            return _waiting_for(standing, hold)
        chosen = self._victims(pod, queue)
        if chosen is None:
            idle = self._idle_reclaim(pod, queue, standing) if idle_allowed else None
            if idle is not None:
                return idle
            why = self._explained(pods, outcome)
            return f"{why}; {standing} but no pod on borrowed capacity would make room"
        node, units = chosen
        self._evict(pod, queue, node, units, idle_reclaim=False, standing=standing)
        names = ", ".join(f"{p.key[0]}/{p.key[1]}" for u in units for p in u.pods)
        return f"{standing}: evicting {names} (borrowed capacity) to make room on node {node}"

    def _idle_reclaim(self, pod: Obj, queue: str, standing: str) -> str | None:
        """Evict pods of queues with `idleReclaim` whose devices have been idle long enough,
        even within their guarantee, when that makes room for `pod` (see the module
        docstring); the reason the pod waits then, or None when nothing would make room."""
        units = self._idle_units(queue)
        if not units:
            return None
        chosen = self._victims(pod, queue, units=units, within_guarantee=False)
        if chosen is None:
            return None
        node, picked = chosen
        self._evict(pod, queue, node, picked, idle_reclaim=True, standing=standing)
        names = ", ".join(
            f"{p.key[0]}/{p.key[1]} (queue {p.queue}, idle for {self._idle_text(p)})"
            for u in picked
            for p in u.pods
        )
        return f"{standing}: evicting idle {names} to make room on node {node}"

    def _idle_text(self, pod: Running) -> str:
        assert pod.idle_since is not None
        return format_duration((self.now - pod.idle_since).total_seconds())

    def running(self) -> list[Running]:
        if self._running is None:
            self._running = self.keeper.running()
        return self._running

    def _idle_units(self, requester: str) -> list[Unit]:
        """Units of other queues with `idleReclaim` whose pods have all been idle at least
        that queue's `after` (a gang only when every running member has), not being evicted."""
        if self._idle_candidates is None:
            self._idle_candidates = self._idle_eligible()
        evicting = self.keeper.evicting
        return [
            u
            for u in self._idle_candidates
            if all(p.queue != requester and p.key not in evicting for p in u.pods)
        ]

    def _idle_eligible(self) -> list[Unit]:
        queues = self.ledger.tree.queues
        if all(spec.idle_reclaim_after_s is None for spec in queues.values()):
            return []  # the usual case: no queue lends its idle pods, nothing to read

        def eligible(pod: Running) -> bool:
            spec = queues.get(pod.queue)
            if spec is None or spec.idle_reclaim_after_s is None or pod.idle_since is None:
                return False
            return (self.now - pod.idle_since).total_seconds() >= spec.idle_reclaim_after_s

        units: list[Unit] = []
        gangs: dict[str, list[Running]] = {}
        for pod in self.running():
            if pod.gang is None:
                if eligible(pod):
                    units.append(Unit((pod,)))
            else:
                gangs.setdefault(pod.gang, []).append(pod)
        for members in gangs.values():
            if all(eligible(m) for m in members):
                units.append(Unit(tuple(sorted(members, key=lambda p: p.key))))
        return units

    def _evict(
        self,
        pod: Obj,
        queue: str,
        node: str,
        units: Sequence[Unit],
        *,
        idle_reclaim: bool,
        standing: str,
    ) -> None:
        """Record the victims as being evicted, hold what they free for `pod`, and queue the
        evictions for after the pass."""
        victims = [p for u in units for p in u.pods]
        claims: dict[Key, Obj] = {}
        view = self.keeper.view
        for victim in victims:
            self.keeper.evicting[victim.key] = queue
            self.ledger.remove(victim.queue, victim.amounts)
            body = view.pods[victim.key]
            for claim in view.pod_claims(body) or []:
                allocation = allocation_of(claim)
                if allocation is not None:
                    claims[key_of(claim)] = allocation
        self.keeper.holds[key_of(pod)] = Hold(
            pod=key_of(pod),
            queue=queue,
            node=node,
            claims=claims,
            victims={v.key for v in victims},
            until=time.monotonic() + self.keeper.settings.hold_s,
            standing=standing,
        )
        self.reclaims.append(
            Reclaim(
                pod,
                queue,
                node,
                [(view.pods[v.key], v.queue) for v in victims],
                idle_for=self._idle_for(victims),
                idle_reclaim=idle_reclaim,
            )
        )

    def _idle_for(self, victims: Iterable[Running]) -> dict[Key, float]:
        return {
            v.key: (self.now - v.idle_since).total_seconds()
            for v in victims
            if v.idle_since is not None
        }

    def _lenders(self) -> BorrowedUnits:
        if self._borrowed_units is None:  # once per pass: every pod's claims are read for it
            self._borrowed_units = BorrowedUnits(self.ledger, self.running())
        return self._borrowed_units

    def _borrowed(self, queue: str) -> list[Unit]:
        return self._lenders().units(queue, self.keeper.evicting)

    def _gang_failed(
        self,
        pods: Sequence[Obj],
        queue: str,
        outcome: Unallocatable,
        standing: str,
        *,
        borrowed: bool = True,
        idle_allowed: bool = True,
    ) -> str:
        """Reclaim for a waiting gang (see the module docstring), or why the gang waits:
        borrowed capacity first (only while the gang's queue is short of its guarantee,
        `borrowed`), then pods that queues with `idleReclaim` lend for being idle long enough."""
        gang = _gang_name(pods[0], self.keeper.settings)
        holds = [h for p in pods if (h := self.keeper.holds.get(key_of(p))) is not None]
        if holds:
            evicted = {v for h in holds for v in h.victims}
            held_on = ", ".join(sorted({h.node for h in holds}))
            return (
                f"gang {gang}: {holds[0].standing or standing}: waiting for the devices of "
                f"{len(evicted)} evicted "
                f"pod(s) on node(s) {held_on}"
            )
        view, driver = self.keeper.view, self.keeper.settings.driver_name
        choice: GangVictims | str = "its queue is not short of its guarantee"
        if borrowed:
            trial = ViewGangTrial(view, self.ledger, queue, driver, pods)
            choice = choose_gang_victims(self._borrowed(queue), len(pods), trial)
        idle = False
        if isinstance(choice, str) and idle_allowed and (units := self._idle_units(queue)):
            idle_trial = ViewGangTrial(view, self.ledger, queue, driver, pods, False)
            lent = choose_gang_victims(units, len(pods), idle_trial)
            if not isinstance(lent, str):
                choice, trial, idle = lent, idle_trial, True
        if isinstance(choice, str):
            why = self._explained(pods, outcome)
            if not borrowed:
                return why
            return (
                f"{why}; {standing} but evicting pods on borrowed capacity would not make room "
                f"for the whole gang {gang} ({choice}): nothing is evicted"
            )
        victims = choice.pods
        nodes = trial.nodes(victims)
        view = self.keeper.view
        claims: dict[str, dict[Key, Obj]] = {}
        for victim in victims:
            self.keeper.evicting[victim.key] = queue
            self.ledger.remove(victim.queue, victim.amounts)
            for claim in view.pod_claims(view.pods[victim.key]) or []:
                allocation = allocation_of(claim)
                if allocation is not None:
                    where = allocation_node(allocation) or "*"
                    claims.setdefault(where, {})[key_of(claim)] = allocation
        until = time.monotonic() + self.keeper.settings.hold_s
        keys = [key_of(p) for p in pods]
        # Each member holds what was freed on its node; the last, what was freed elsewhere.
        for key in keys:
            node = nodes.get(key, "")
            kept = claims.pop(node, {})
            if key == keys[-1]:
                for rest in claims.values():
                    kept.update(rest)
            self.keeper.holds[key] = Hold(
                pod=key,
                queue=queue,
                node=node,
                claims=kept,
                victims={v.key for v in victims},
                until=until,
                gang=gang,
                standing=standing,
            )
        where = ", ".join(sorted(set(nodes.values())))
        self.reclaims.append(
            Reclaim(
                pods[0],
                queue,
                where,
                [(view.pods[v.key], v.queue) for v in victims],
                gang=gang,
                holders=tuple(keys),
                idle_for=self._idle_for(victims),
                idle_reclaim=idle,
            )
        )
        if idle:
            names = ", ".join(
                f"{v.key[0]}/{v.key[1]} (queue {v.queue}, idle for {self._idle_text(v)})"
                for v in victims
            )
            what = f"evicting idle {names}"
        else:
            names = ", ".join(f"{v.key[0]}/{v.key[1]}" for v in victims)
            what = f"evicting {names} (borrowed capacity)"
        return (
            f"gang {gang}: {standing}: {what} to make room for its {len(pods)} members on "
            f"node(s) {where}"
        )

    def _victims(
        self,
        pod: Obj,
        queue: str,
        units: Sequence[Unit] | None = None,
        within_guarantee: bool = True,
    ) -> tuple[str, list[Unit]] | None:
        """The node and units to evict so `pod` fits: `units` when given, else borrowed
        units and then the lenders' surplus (`choose_reclaim`). With `within_guarantee` the pod
        must also keep its queue within its guarantee (reclaim only gives a queue back what it
        was promised); either way its queue must be able to take it, with the victims gone,
        under every limit."""
        view = self.keeper.view
        claims = view.pod_claims(pod) or []
        missing = [c for c in claims if allocation_of(c) is None and key_of(c) not in view.assumed]
        if not missing:
            return None
        if not (self._borrowed(queue) if units is None else units):
            return None  # nobody to choose from
        spec = self.ledger.tree.queues[queue]
        used = self.ledger.used(queue)
        claim_keys = self._claim_keys

        def claims_of(running: Running) -> list[Key]:
            keys = claim_keys.get(running.key)
            if keys is None:
                body = view.pods[running.key]
                keys = claim_keys[running.key] = [key_of(c) for c in view.pod_claims(body) or []]
            return keys

        shape = json.dumps([c.get("spec") for c in missing], sort_keys=True)

        def fits(node: str, freed: Sequence[Running]) -> bool:
            if view.lacking([pod], [node], freed=[r.key for r in freed]):
                return False
            trial = (shape, node, tuple(sorted(r.key for r in freed)))
            if self._no_room.get(trial) == self._changes:
                return False  # claims like these did not fit there with these gone, as it is
            with view.without(k for r in freed for k in claims_of(r)), unexplained(view):
                placer = view.placer()
                placement = placer.place(missing, nodes=[node])
                if placement.allocations is None:
                    self._no_room[trial] = self._changes
                    return False
                asks = ZERO
                for allocation in placement.allocations:
                    asks = asks + allocation_amounts(
                        view.snapshot, self.keeper.settings.driver_name, allocation
                    )
                    placer.release(allocation, allocation_node(allocation) or "*")
            if within_guarantee and not spec.guaranteed.covers(used + asks):
                return False
            # Room on the devices is not enough when an ancestor's limit, reached by
            # siblings that borrowed, holds the pod back: the victims must free that too.
            for victim in freed:
                self.ledger.remove(victim.queue, victim.amounts)
            try:
                return self.ledger.refusal(queue, asks) is None
            finally:
                for victim in freed:
                    self.ledger.add(victim.queue, victim.amounts)

        # Only nodes the pod may run on (its selectors and tolerations, and the node of a claim
        # it holds already), as for a gang's members: victims elsewhere free nothing it can use.
        usable = set(usable_nodes(view, pod, claims))

        def fits_usable(node: str, freed: Sequence[Running]) -> bool:
            return node in usable and fits(node, freed)

        if units is None:
            return choose_reclaim(self._lenders(), queue, fits_usable, self.keeper.evicting)
        return choose_victims(units, fits_usable)


@contextlib.contextmanager
def unexplained(view: ClusterView) -> Iterator[None]:
    """The allocator's failures without their per-node explanation, while inside."""
    placer = view.placer()
    before = placer.explain_failures
    placer.explain_failures = False
    try:
        yield
    finally:
        placer.explain_failures = before


def _gang_name(pod: Obj, settings: QueueSettings) -> str:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(settings.gang_label) or meta["name"]
    return f"{meta.get('namespace')}/{name}"


def _waiting_for(standing: str, hold: Hold) -> str:
    return (
        f"{hold.standing or standing}: waiting for the devices of {len(hold.victims)} evicted "
        f"pod(s) on node {hold.node}"
    )


def _standing(used: Amounts, spec: QueueSpec) -> str:
    guaranteed = spec.guaranteed.gpu
    if guaranteed is None:
        return "memory"
    return f"holds {format_gpu(used.gpu)} of {format_gpu(guaranteed)} guaranteed GPUs"
