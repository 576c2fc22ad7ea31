"""The allocation loop: gated pods in, allocated claims and lifted gates out.

One pass takes every queued pod (or gang) and decides all of them against the view; marks the
claims it will allocate with our finalizer; re-checks the decisions once the claims watch has
brought those writes back (then the view holds every claim change committed before them); writes
the allocations; re-checks once more the same way; and holds the written decisions for the settle
time, after which a last check against the view lets their gates come off. Passes batch
naturally: while one pass writes, new pods queue up for the next.

A pass starts by deallocating the claims released since the last one and waiting for the watch
to bring those writes back, so the devices they free are used in the same pass. After deciding,
its writes and the gate lifts of earlier decisions that settled go out at once; its evictions
and the reports of why pods wait (`controller.reports`) go on in the background, so a pass that
reclaims for hundreds of pods neither holds up the pods it placed nor the next pass, which
deallocates what the first victims released.

The re-checks are what keeps this controller from double-booking against the kube-scheduler,
which allocates other pods' claims from the same devices and never coordinates with us. The check
before writing catches what the view had not seen when it decided; the checks after writing and
after the settle time catch an allocation that landed after that (the later writer withdraws:
the gate is still on, so no pod has started). Deallocation runs in the same loop before the
decisions, so it never races with a decision about the same claim; only a claim being deleted
that nothing of ours still needs is let go as its deletion arrives (no decision can take it up).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
import urllib3
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.allocation_metrics import AllocationMetrics
from controller.config import ControllerConfig
from controller.decide import Decision, NotYet, Unallocatable, no_room
from controller.evictions import VictimEvents, carry_out_all
from controller.gangs import GangError, GangId, gang_of, members
from controller.informer import Event, Key, Obj, key_of, resource_version
from controller.kube_calls import ControllerApi
from controller.queue_metrics import QueueMetrics
from controller.queue_status import QueueStatusWriter
from controller.queueing import QueueKeeper, QueuePass, QueueSettings, Reclaim
from controller.reconciler_state import ReconcilerState
from controller.reports import Reporter, set_condition
from controller.view import ClusterView, allocation_of
from controller.writer import ClaimWriter, NotLeaderError
from dra_driver.device_status import idle_since
from dra_driver.pod_claims import known_claim_names

log = structlog.get_logger(__name__)

#: Writes of one pass in flight at once (each is a few HTTP calls).
WRITE_CONCURRENCY = 16
#: Deleted claims let go at once, at most this many at a time (`_finalize_now`).
FINALIZE_CONCURRENCY = 8
#: When a pass finds the last GpuQueue status round still under way, the next round is due this
#: much later.
QUEUE_WRITE_RETRY_S = 0.5
#: The shortest time between the starts of two passes.
BATCH_WINDOW_S = 0.05
#: How long a re-check waits for the claims watch to deliver our own write before it lists.
WATCH_CATCH_UP_S = 2.0
TERMINAL_PHASES = ("Succeeded", "Failed")


def condition_type(driver_name: str) -> str:
    return f"{driver_name}/DevicesAllocated"


class Reconciler:
    def __init__(
        self,
        config: ControllerConfig,
        view: ClusterView,
        api: ControllerApi,
        metrics: AllocationMetrics,
        is_leader: Callable[[], bool] = lambda: True,
        queue_metrics: QueueMetrics | None = None,
    ) -> None:
        self.config = config
        self.view = view
        self.api = api
        self.metrics = metrics
        self.queue_metrics = queue_metrics or QueueMetrics(CollectorRegistry())
        self.queues = QueueKeeper(
            QueueSettings(
                driver_name=config.driver_name,
                finalizer=config.finalizer,
                gang_label=config.gang_label,
                gang_size_label=config.gang_size_label,
                default_queue=config.default_queue,
                hold_s=config.reclaim_hold_s,
            ),
            view,
        )
        self.queue_status = QueueStatusWriter(api)
        self.writer = ClaimWriter(api, config.finalizer, is_leader)
        self._is_leader = is_leader
        self.state = ReconcilerState()
        """Everything the loop keeps between and within passes (see `ReconcilerState`)."""
        self.reports = Reporter(
            api, condition_type(config.driver_name), interval_s=config.report_interval_s
        )
        """Why waiting pods wait, sent off the pass's path (see `controller.reports`)."""
        self.victim_events = VictimEvents(api, self.reports.until_quiet)
        """Why each reclaim victim went, posted when the allocation work pauses."""
        self._running: set[asyncio.Task[None]] = set()
        """Work passes left running: evictions being carried out, gate lifts that came due."""
        self._timers: set[asyncio.TimerHandle] = set()
        """Gate lifts to start when the settle time of a pass's decisions is over."""
        self._lifts: set[asyncio.Task[None]] = set()
        """The gate lifts those timers started that are still under way."""
        self._wake = asyncio.Event()
        self.passes = 0
        self._queue_write: asyncio.Task[None] | None = None
        """The GpuQueue status round under way, if any."""
        self._finalizing: set[Key] = set()
        """Deleted claims being let go outside the passes (`_finalize_now`)."""
        self._finalize_slots = asyncio.Semaphore(FINALIZE_CONCURRENCY)

    # --- events ------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Apply a watch event to the view and queue the work it causes."""
        before = self.view.generation
        old_claims: list[str] = []
        if event.resource == "pods" and event.old is not None:
            old_claims = _claim_refs(event.old)
        status_only = self.view.device_status_only(event)
        self.view.apply(event)
        due = event.resource == "resourceclaims" and self._idle_due(event.key, event.obj)
        if status_only:
            # A plugin's device conditions (Idle): no allocation, reservation or deletion
            # moved, so nothing is deallocated or decided again for it; the view keeps the
            # claim for reclaim, and `_idle_due` has the waiting pods decided again when its
            # idleness may let them evict under a queue's idleReclaim (the loop is woken to
            # take the new deadline into account).
            if due and self.state.waiting:
                self._wake.set()
            return
        if event.resource == "pods":
            self._pod_changed(event, old_claims)
        elif event.resource == "resourceclaims":
            if not self._finalize_now(event):
                self.state.dealloc.add(event.key)
            for pod in self.view.users.get(event.key, ()):
                if self._gated(self.view.pods.get(pod)):
                    self.state.queue.setdefault(pod)
        if self.view.generation != before and self.state.waiting:
            self._wake.set()
        if self.state.queue or self.state.dealloc:
            self._wake.set()

    def _pod_changed(self, event: Event, old_claims: list[str]) -> None:
        namespace = event.key[0]
        for name in {*old_claims, *_claim_refs(event.obj)}:
            self.state.dealloc.add((namespace, name))
        pod = None if event.kind == "DELETED" else event.obj
        # A gang member's change does not queue its mates: a gated member that changes is
        # queued, and its unit is the whole gang (`_units`); a deletion changes the view's
        # generation, which queues the mates that wait (`run_pass`).
        if self._gated(pod):
            self.state.seen_at.setdefault(event.key, time.monotonic())
            self.state.queue.setdefault(event.key)
        else:
            self._forget_pod(event.key)
        self.metrics.pending.set(len(self.state.seen_at))

    def _idle_due(self, key: Key, claim: Obj) -> bool:
        """When the claim's devices are all idle and its queue has `idleReclaim`, note the
        moment they will have been idle long enough (waiting pods are decided again then);
        whether one was noted."""
        if not self.view.objects["gpuqueues"] or key not in self.view.claims:
            return False
        since = idle_since([claim], self.config.driver_name)
        if since is None:
            return False
        tree = self.queues.tree()
        spec = tree.queues.get(tree.queue_for(key[0]))
        if spec is None or spec.idle_reclaim_after_s is None:
            return False
        wait = spec.idle_reclaim_after_s - (datetime.now(UTC) - since).total_seconds()
        heapq.heappush(self.state.idle_due, time.monotonic() + max(0.0, wait))
        return True

    def _forget_pod(self, key: Key) -> None:
        """A pod no longer gated (allocated, deleted, its gate taken off by someone else)."""
        self.state.queue.pop(key, None)
        self.state.waiting.pop(key, None)
        self.reports.forget(key)
        self.state.seen_at.pop(key, None)

    def _gated_pods(self) -> list[Obj]:
        """The gated pods the loop is waiting on, as the view has them now."""
        found = (self.view.pods.get(k) for k in self.state.seen_at)
        return [p for p in found if p is not None and self._gated(p)]

    def _gated(self, pod: Obj | None) -> bool:
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        return any(g.get("name") == self.config.gate_name for g in gates)

    # --- the loop ----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile until `stop` is set or leadership is lost."""
        log.info("allocation loop started", gate=self.config.gate_name, mode=self.view.mode)
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await self._loop(stop, stopped)
        finally:
            stopped.cancel()
            self.reports.cancel()
            self._stop_background()
        log.info("allocation loop stopped")

    async def _loop(self, stop: asyncio.Event, stopped: asyncio.Future[Any]) -> None:
        while not stop.is_set() and self._is_leader():
            woken: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
            deadline = self.next_deadline()
            timeout = self.config.resync_s
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - time.monotonic()))
            await asyncio.wait(
                [woken, stopped], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            woken.cancel()
            if time.monotonic() - self.state.last_resync >= self.config.resync_s:
                self.state.last_resync = time.monotonic()
                self.resync()
            # Passes at most every BATCH_WINDOW_S: the two fresh reads of every claim are then
            # shared by all pods that arrived meanwhile, instead of paid per pod under a steady
            # stream of arrivals; a lone pod waits at most the window.
            gap = self.state.last_pass + BATCH_WINDOW_S - time.monotonic()
            if gap > 0:
                await asyncio.wait([stopped], timeout=gap)
            self._wake.clear()
            if stop.is_set() or not self._is_leader():
                break
            self.state.last_pass = time.monotonic()
            try:
                await self.run_pass()
            except NotLeaderError:
                break
            except Exception as err:  # one bad pass must not end the controller
                log.exception("allocation pass failed", error=str(err))
                self._recover()
                await asyncio.sleep(1.0)

    def wake(self) -> None:
        self._wake.set()

    def _recover(self) -> None:
        """After a failed pass: its unfinished decisions are dropped and their pods decided
        again (what was written is found in the claims then), and every gated pod looked at."""
        settling = {id(d) for _, d in self.state.settling}
        for decision in self.state.in_flight:
            if id(decision) not in settling:
                self._retry(decision)
        self.state.in_flight = []
        self.resync()

    def resync(self) -> None:
        """Look at every gated pod again (the safety net behind event-driven retries)."""
        for key, pod in self.view.pods.items():
            if self._gated(pod):
                self.state.seen_at.setdefault(key, time.monotonic())
                self.state.queue.setdefault(key)
        self._wake.set()

    def take_over(self) -> None:
        """On becoming leader: look at every gated pod and every claim of ours afresh."""
        self.resync()
        for key, claim in self.view.claims.items():
            if self.config.finalizer in (claim["metadata"].get("finalizers") or []):
                self.state.dealloc.add(key)
        self.reports.cancel()  # what the last term reported is reported afresh
        self._wake.set()

    def step_down(self) -> None:
        """On losing the lead: decisions not yet written are no longer ours to make, and
        written ones still settling are left to the next leader (their claims are allocated and
        reserved for still-gated pods, which it finishes)."""
        self.state.settling.clear()
        self.state.held.clear()  # the next leader finds them colliding and holds them in turn
        self.reports.cancel()
        for key in list(self.view.assumed):
            self.view.forget(key)

    async def run_pass(self) -> None:
        with self.reports.busy():  # reports wait for a pause in the allocation work
            await self._pass()

    async def _pass(self) -> None:
        # Claims released since the last pass are deallocated first, and the watch brings the
        # view up to those writes, so the pods waiting for their devices (reclaim's, above all)
        # are decided in this pass rather than the next one.
        started = time.monotonic()
        await self._release_held()
        dealloc = len(self.state.dealloc)
        freed = await self._deallocate()
        if freed:
            await self.view.claims_caught_up(freed, WATCH_CATCH_UP_S)
        idle_came_due = False
        while self.state.idle_due and self.state.idle_due[0] <= time.monotonic():
            heapq.heappop(self.state.idle_due)
            idle_came_due = True
        for key, generation in list(self.state.waiting.items()):
            moved = idle_came_due or generation != self.view.generation
            if moved and not self.queues.nothing_freed_yet(key):
                self.state.queue.setdefault(key)
        keys = list(self.state.queue)  # the queue pass orders the units (see `queueing`)
        self.state.queue.clear()
        steps: dict[str, float] = {"dealloc_s": round(time.monotonic() - started, 3)}
        mark = time.monotonic()

        def step(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            steps[name] = round(now - mark, 3)
            mark = now

        decisions, reclaims = self._decide(self._units(keys))
        step("decide_s")
        self.state.in_flight = decisions
        reports = self.reports.pending()
        now = time.monotonic()
        settled = sum(1 for at, _ in self.state.settling if at <= now)
        if reclaims:
            # Carried out while this pass writes and the next ones run: a starved queue's pass
            # evicts for hundreds of pods, and the pods decided meanwhile, and the claims its
            # victims release, need not wait for all of them (the victims are marked as being
            # evicted, so no later pass chooses them again).
            self._background(
                self._busy(
                    carry_out_all(
                        reclaims, self.api, self.queues, self.queue_metrics, self.victim_events
                    )
                )
            )
        await _all(self._write_all(decisions), self._lift_settled())
        step("writes_s")
        self.state.in_flight = []
        await self._lift_settled()  # what came due meanwhile
        if self._lifts:  # and what a timer started meanwhile: a pass ends with its due lifts done
            await asyncio.wait(list(self._lifts))
        step("lift_s")
        await self._withdraw_stale()
        await self._report_queues()
        step("queues_s")
        self.passes += 1
        log.debug(
            "allocation pass",
            pods=len(keys),
            decisions=len(decisions),
            evictions=sum(len(r.victims) for r in reclaims),
            reports=reports,
            settled=settled,
            dealloc_candidates=dealloc,
            **steps,
        )

    def _stop_background(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in list(self._running):
            task.cancel()

    def _background(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(_log_failure)
        return task

    async def _busy(self, work: Awaitable[None]) -> None:
        """Allocation work off the pass: reports wait for it as for a pass."""
        with self.reports.busy():
            await work

    async def drain(self) -> None:
        """Wait for the work a pass leaves running: evictions and reports (tests, and the
        end of the loop)."""
        while self._running:
            await asyncio.wait(list(self._running))
        await self.victim_events.drain()
        await self.reports.drain()

    async def _lift_settled(self) -> None:
        """Gates off for decisions that stayed clear of other allocations for the settle time."""
        now = time.monotonic()
        due = [d for at, d in self.state.settling if at <= now]
        self.state.settling = [(at, d) for at, d in self.state.settling if at > now]
        pods = {key_of(p) for d in due for p in d.pods} - self.state.lifting
        self.state.lifting |= pods
        try:
            ready = []
            for decision in due:
                if self._still_fits(decision, "settled"):
                    ready.append(decision)
                else:
                    await self._withdraw(decision)
            limit = asyncio.Semaphore(WRITE_CONCURRENCY)
            await asyncio.gather(*(self._lift(d, limit) for d in ready))
        finally:
            self.state.lifting -= pods
            if pods & self.state.queue.keys():
                self._wake.set()

    def next_deadline(self) -> float | None:
        due = [at for at, _ in self.state.settling]
        if self.queue_status.due is not None:
            due.append(self.queue_status.due)
        due.extend(h.until for h in self.queues.holds.values())
        if self.state.idle_due and self.state.waiting:
            due.append(self.state.idle_due[0])
        return min(due, default=None)

    async def _report_queues(self) -> None:
        """Queue gauges and GpuQueue status, from the usage after this pass."""
        # The pass's own ledger, with its admissions and evictions, saves a second count.
        ledger, self.state.pass_ledger = self.state.pass_ledger or self.queues.ledger(), None
        pending = self.queues.pending_by_queue(self._gated_pods())
        idle = self.queues.idle_gpus()
        self.queue_metrics.update(ledger, pending, idle)
        # Written off the pass's path (a write per queue that changed, one after another, held
        # a pass up by a tenth of a second under load), one round at a time: a round still
        # under way leaves this one to the next pass, which the status's due time brings on.
        if self._queue_write is not None and not self._queue_write.done():
            self.queue_status.due = time.monotonic() + QUEUE_WRITE_RETRY_S
            return
        self._queue_write = self._background(
            self.queue_status.write(dict(self.view.objects["gpuqueues"]), ledger, pending, idle)
        )

    def _units(self, keys: Iterable[Key]) -> list[list[Obj]]:
        """The pods to decide, one list per decision: a pod alone, or a gang's gated members."""
        units: list[list[Obj]] = []
        gangs_done: set[GangId] = set()
        settling = {key_of(p) for _, d in self.state.settling for p in d.pods}
        held = {key_of(p) for pods in self.state.held.values() for p in pods}
        for key in keys:
            pod = self.view.pods.get(key)
            if not self._gated(pod):
                self._forget_pod(key)
                continue
            if key in self.state.lifting:
                self.state.queue.setdefault(key)  # decided, if at all, once its lift is over
                continue
            if key in settling:
                continue  # written; its gate comes off when the settle time is over
            if key in held:
                continue  # queued again when its held claim is withdrawn (`_release_held`)
            assert pod is not None
            try:
                gang = gang_of(pod, self.config.gang_label, self.config.gang_size_label)
            except GangError as err:
                self._failed([pod], Unallocatable(str(err)))
                continue
            if gang is None:
                units.append([pod])
                continue
            gang_id, size = gang
            if gang_id in gangs_done:
                continue
            gangs_done.add(gang_id)
            everyone = members(gang_id, self.view.pods.values(), self.config.gang_label)
            gated = [p for p in everyone if self._gated(p)]
            if len(everyone) < size:
                self._failed(gated, NotYet(f"gang {gang_id} has {len(everyone)} of {size} pods"))
            elif len(everyone) > size:
                self._failed(
                    gated,
                    Unallocatable(
                        f"gang {gang_id} has {len(everyone)} pods but its size label says {size}"
                    ),
                )
            elif gated:
                units.append(gated)
        return units

    def _decide(self, units: list[list[Obj]]) -> tuple[list[Decision], list[Reclaim]]:
        """Every unit in queue order (see `queueing`), each against what the ones before took."""
        order = QueuePass.start(self.queues, units, self._gated_pods())
        decisions = []
        try:
            for pods in order:
                outcome = order.decide(pods)
                if isinstance(outcome, Decision):
                    refusal = order.admit(pods, outcome)
                    if refusal is None:
                        decisions.append(outcome)
                        continue
                    for key in list(outcome.allocations):
                        self.view.forget(key)
                    # A queue within its guarantee held back by an ancestor's limit that
                    # siblings reached by borrowing reclaims from them as for devices.
                    outcome = Unallocatable(
                        order.failed(pods, Unallocatable(refusal), lacks_room=False)
                    )
                elif isinstance(outcome, Unallocatable):
                    outcome = Unallocatable(order.failed(pods, outcome))
                self._failed(pods, outcome)
        finally:
            order.finish()
        self.state.pass_ledger = order.ledger
        return decisions, order.reclaims

    async def _write_all(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        limit = asyncio.Semaphore(WRITE_CONCURRENCY)
        marked = await asyncio.gather(*(self._mark(d, limit) for d in decisions))
        ready = [d for d, rv in zip(decisions, marked, strict=True) if rv is not None]
        await self._fresh(max((rv or 0 for rv in marked), default=0))
        ready = [d for d in ready if self._still_fits(d, "before-write")]
        written = await asyncio.gather(*(self._write(d, limit) for d in ready))
        done = [d for d, rv in zip(ready, written, strict=True) if rv is not None]
        if not done:
            return
        if any(d.allocations for d in done):
            await self._fresh(max(rv or 0 for rv in written))
        settle_at = time.monotonic() + self.config.settle_s
        for decision in done:
            if self._still_fits(decision, "after-write"):
                self.state.settling.append((settle_at, decision))
            else:
                await self._withdraw(decision)
        # Their gates come off when the settle time is over, not when a pass next gets to it:
        # a pass deciding hundreds of pods would hold them up for its whole length.
        timer = asyncio.get_running_loop().call_later(self.config.settle_s, self._settle_time_over)
        self._timers.add(timer)

    def _settle_time_over(self) -> None:
        now = asyncio.get_running_loop().time()
        self._timers = {t for t in self._timers if not t.cancelled() and t.when() > now}
        task = self._background(self._busy(self._lift_due()))
        self._lifts.add(task)
        task.add_done_callback(self._lifts.discard)

    async def _lift_due(self) -> None:
        try:
            await self._lift_settled()
        except NotLeaderError:
            return  # stepping down leaves settling decisions to the next leader
        except Exception as err:  # as for a failed pass: look at every gated pod again
            log.exception("lifting gates failed", error=str(err))
            self.resync()

    async def _fresh(self, own_write_rv: int) -> None:
        """Bring the view's claims up to now: through the watch when it carries one of our own
        writes (everything committed before that write then arrived too), else by listing."""
        if own_write_rv and await self.view.claims_caught_up(own_write_rv, WATCH_CATCH_UP_S):
            return
        fresh, listed_at = await _pass_call(self.api.list_claims)
        self.view.refresh_claims(fresh, listed_at)

    def _still_fits(self, decision: Decision, stage: str) -> bool:
        for key, allocation in decision.allocations.items():
            claim = self.view.claims.get(key)
            current = allocation_of(claim)
            if claim is None:
                why: str | None = "the claim was deleted"
            elif current is not None and current != allocation:
                why = "the claim was allocated by someone else"
            else:
                why = self.view.conflict(key, allocation)
            if why is not None:
                self.metrics.conflicts.labels(stage).inc()
                log.info(
                    "decision dropped: the cluster changed",
                    claim=f"{key[0]}/{key[1]}",
                    stage=stage,
                    reason=why,
                )
                self._retry(decision)
                return False
        # Claims allocated by an earlier attempt of ours (the pod is still gated) must be as
        # clear of other allocations as new ones: a withdrawal that did not get through, or an
        # allocator that wrote late, is found here and undone before the gate comes off.
        for key in decision.claims:
            claim = self.view.claims.get(key)
            current = allocation_of(claim)
            if key in decision.allocations or claim is None or current is None:
                continue
            if self.config.finalizer not in (claim["metadata"].get("finalizers") or []):
                continue  # not ours to question (a claim shared with a running pod)
            why = self.view.conflict(key, current)
            if why is not None:
                self.metrics.conflicts.labels(stage).inc()
                log.info("earlier allocation collides; withdrawing it", claim=key, reason=why)
                self.state.stale[key] = list(decision.pods)
                self._retry(decision)
                return False
        why = self._room_lost(decision)
        if why is not None:
            self.metrics.conflicts.labels(stage).inc()
            log.info("decision dropped: the node has no room left", stage=stage, reason=why)
            self._retry(decision)
            return False
        return True

    def _room_lost(self, decision: Decision) -> str | None:
        """Why a node the decision chose has no room left for its pods (the kube-scheduler may
        have bound other pods there meanwhile), or None. Only pods the decision allocated
        something for are checked: the others' claims were on their node already."""
        allocating = {key_of(p) for k in decision.allocations for p in decision.claims.get(k, ())}
        by_node: dict[str, list[Obj]] = {}
        for pod in decision.pods:
            node = decision.nodes.get(key_of(pod))
            if node is not None and key_of(pod) in allocating:
                by_node.setdefault(node, []).append(pod)
        for node, pods in by_node.items():
            lacking = self.view.lacking(pods, [node])
            if lacking:
                return no_room(lacking)
        return None

    async def _withdraw_stale(self) -> None:
        stale, self.state.stale = self.state.stale, {}
        for key, pods in stale.items():
            try:
                await self._let_go(key, pods)
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
                log.info("withdrawal failed; the pod's next attempt retries it", error=str(err))

    async def _let_go(self, key: Key, pods: list[Obj]) -> None:
        """Withdraw our allocation of claim `key` for `pods`, or hold it while another claim
        holds one of its devices too.

        kube-scheduler keeps the devices allocated by every claim as a set of device IDs: a
        claim allocated adds its devices, a claim deallocated or deleted removes them. Two
        claims holding one device (the two allocators decided at the same moment) are one
        entry there; withdrawing ours would remove it while theirs still holds the device,
        and kube-scheduler would hand the device out again. So ours keeps the device, its
        pods gated and told why, until every other holder has let it go; withdrawn then, the
        set is right again and the pods are decided afresh. A collision on counters or on a
        share is not held: those are not in that set."""
        allocation = allocation_of(self.view.claims.get(key))
        holders = self._other_holders(key, allocation)
        if not holders:
            await _pass_call(self.writer.withdraw, key, pods)
            return
        self.state.held[key] = list(pods)
        self.metrics.held.set(len(self.state.held))
        names = ", ".join(f"{k[0]}/{k[1]}" for k in holders)
        log.info("colliding allocation held until the device is free", claim=key, holders=names)
        for pod in pods:
            if self._gated(self.view.pods.get(key_of(pod))):
                self.reports.report(
                    pod,
                    f"claim {key[0]}/{key[1]} was allocated a device that claim {names} was "
                    "given at the same moment by another allocator; it keeps the device, "
                    "unused, until that claim lets it go, and the pod is placed again then",
                )

    def _other_holders(self, key: Key, allocation: Obj | None) -> list[Key]:
        """The claims, other than ours being held themselves, that hold a device of
        `allocation` whole."""
        if allocation is None:
            return []
        return [k for k in self.view.holders(key, allocation) if k not in self.state.held]

    async def _release_held(self) -> None:
        """Withdraw the held claims (`_let_go`) whose devices no other claim holds now, and
        decide their pods again."""
        for key, pods in list(self.state.held.items()):
            allocation = allocation_of(self.view.claims.get(key))
            if self._other_holders(key, allocation):
                continue
            if allocation is not None:
                try:
                    done = await _pass_call(self.writer.withdraw, key, pods)
                except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
                    log.info("withdrawal failed; will retry", claim=key, error=str(err))
                    continue
                if done is None:
                    continue
                log.info("held allocation withdrawn: the device is free", claim=key)
                await self._fresh(done)
            del self.state.held[key]
            self.state.dealloc.add(key)  # a deleted claim's finalizer can go now
            for pod in pods:
                self.state.queue.setdefault(key_of(pod))
        self.metrics.held.set(len(self.state.held))

    def _retry(self, decision: Decision) -> None:
        for key in list(decision.allocations):
            self.view.forget(key)
        for pod in decision.pods:
            self.state.queue.setdefault(key_of(pod))
        self._wake.set()

    async def _mark(self, decision: Decision, limit: asyncio.Semaphore) -> int | None:
        """Finalizers on the claims the decision allocates; the newest resourceVersion written
        (0 when nothing needed writing), None when it failed and the pods are decided again."""
        newest = 0
        async with limit:
            try:
                for key in decision.allocations:
                    claim = self.view.claims.get(key)
                    if claim is None:
                        raise LookupError(f"claim {key[0]}/{key[1]} is gone")
                    result = await _pass_call(self.writer.mark, claim)
                    if result is not None:
                        self.view.refresh_claims_one(result)
                        newest = max(newest, resource_version(result))
            except NotLeaderError:
                raise
            except (client.ApiException, LookupError, urllib3.exceptions.HTTPError, OSError) as err:
                self._write_failed(decision, err)
                return None
        return newest

    def _write_failed(self, decision: Decision, err: Exception) -> None:
        self.metrics.conflicts.labels("write").inc()
        log.info(
            "writing a decision failed; deciding again",
            status=getattr(err, "status", None),
            error=str(err),
        )
        self._retry(decision)

    async def _write(self, decision: Decision, limit: asyncio.Semaphore) -> int | None:
        """Allocations and reservations; the newest resourceVersion written, None on failure
        (then whatever of the decision was written is withdrawn)."""
        newest = 0
        async with limit:
            written: list[Key] = []
            try:
                for key, pods in decision.claims.items():
                    claim = self.view.claims.get(key)
                    if claim is None:
                        raise LookupError(f"claim {key[0]}/{key[1]} is gone")
                    allocation = decision.allocations.get(key)
                    result = await _pass_call(self.writer.allocate, claim, allocation, pods)
                    self.view.refresh_claims_one(result)
                    newest = max(newest, resource_version(result))
                    written.append(key)
                self.metrics.allocations.inc(len(decision.allocations))
                return newest
            except NotLeaderError:
                raise
            except (client.ApiException, LookupError, urllib3.exceptions.HTTPError, OSError) as err:
                await self._undo(decision, written)
                self._write_failed(decision, err)
                return None

    async def _undo(self, decision: Decision, written: list[Key]) -> None:
        for key in written:
            if key in decision.allocations:
                await self._let_go(key, list(decision.pods))

    async def _withdraw(self, decision: Decision) -> None:
        await self._undo(decision, list(decision.allocations))

    async def _lift(self, decision: Decision, limit: asyncio.Semaphore) -> None:
        async with limit:
            for pod in decision.pods:
                key = key_of(pod)
                reported = await self.reports.settle(key)  # "allocated" comes last
                current = self.view.pods.get(key, pod)
                started = self.state.seen_at.get(key)
                try:
                    await _pass_call(self.writer.lift_gate, current, self.config.gate_name)
                except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
                    if getattr(err, "status", None) == 404:
                        continue
                    log.info("lifting a gate failed; trying again", pod=key, error=str(err))
                    self.state.queue.setdefault(key)
                    self._wake.set()
                    continue
                if reported:
                    await set_condition(
                        self.api,
                        condition_type(self.config.driver_name),
                        current,
                        True,
                        "Allocated",
                        "devices are allocated",
                    )
                if started is not None:
                    self.metrics.latency.observe(time.monotonic() - started)
                self._forget_pod(key)
                log.info("pod allocated", pod=f"{key[0]}/{key[1]}", node=decision.nodes.get(key))
            self.metrics.pending.set(len(self.state.seen_at))

    # --- pods that cannot be allocated -------------------------------------------------------

    def _failed(self, pods: list[Obj], outcome: NotYet | Unallocatable) -> None:
        self.metrics.failures.inc(isinstance(outcome, Unallocatable))
        for pod in pods:
            key = key_of(pod)
            self.state.waiting[key] = self.view.generation
            if isinstance(outcome, NotYet) or not self.reports.report(pod, outcome.reason):
                continue
            log.info("pod cannot be allocated", pod=f"{key[0]}/{key[1]}", reason=outcome.reason)

    # --- deallocation ------------------------------------------------------------------------

    async def _deallocate(self) -> int:
        """Deallocate the candidates nobody uses; the newest resourceVersion of the writes that
        freed devices (0 when none did)."""
        candidates, self.state.dealloc = self.state.dealloc, set()
        freed = 0
        unused = []
        for key in sorted(candidates):
            claim = self.view.claims.get(key)
            if key in self._finalizing:
                continue  # being let go already
            if claim is not None and self._unused(key, claim):
                unused.append((key, claim))
        limit = asyncio.Semaphore(WRITE_CONCURRENCY)

        async def deallocate(key: Key, claim: Obj) -> None:
            nonlocal freed
            async with limit:
                freed = max(freed, await self._release(key, claim, _pass_call) or 0)

        # Several at once: reclaim releases hundreds of claims together, and the pods they
        # were evicted for are decided only once the view has them released.
        await asyncio.gather(*(deallocate(k, c) for k, c in unused))
        return freed

    async def _release(
        self, key: Key, claim: Obj, call: Callable[..., Awaitable[int]]
    ) -> int | None:
        """Deallocate one claim (`call` runs the write on some threads); the resourceVersion
        of the write that freed its devices (0: none), or None when the API server refused it
        and the claim waits for the next pass."""
        try:
            written = await call(self.writer.deallocate, claim)
        except client.ApiException as err:
            if err.status == 404:
                return 0
            log.info("deallocation failed; will retry", claim=key, status=err.status)
            self.state.dealloc.add(key)
            return None
        if allocation_of(claim) is not None:
            self.metrics.deallocations.inc()
            log.info("claim deallocated", claim=f"{key[0]}/{key[1]}")
        return written

    def _finalize_now(self, event: Event) -> bool:
        """Let a deleted claim go at once, outside the passes, when nothing of ours still
        needs it: unreserved, not assumed, in no decision being written. Whatever the next
        pass decides cannot touch it (a pod whose claim is being deleted is not decided), so
        it need not wait for the pass that would deallocate it, nor hold that pass up: reclaim
        releases hundreds of such claims, and the pods they were evicted for wait for each.
        True when the claim is being let go (or already was)."""
        key = event.key
        if key in self._finalizing:
            return True
        claim = None if event.kind == "DELETED" else self.view.claims.get(key)
        if claim is None or not claim["metadata"].get("deletionTimestamp"):
            return False
        if not self._is_leader() or not self._unused(key, claim):
            return False
        if any(key in d.claims for d in self.state.in_flight) or any(
            key in d.claims for _, d in self.state.settling
        ):
            return False
        self._finalizing.add(key)
        self._background(self._finalize(key, claim))
        return True

    async def _finalize(self, key: Key, claim: Obj) -> None:
        try:
            async with self._finalize_slots:
                if await self._release(key, claim, asyncio.to_thread) is None:
                    self._wake.set()
        except NotLeaderError:
            return  # the new leader's first pass deallocates it
        except (urllib3.exceptions.HTTPError, OSError) as err:
            log.info("deallocation failed; will retry", claim=key, error=str(err))
            self.state.dealloc.add(key)
            self._wake.set()
        finally:
            self._finalizing.discard(key)

    def _unused(self, key: Key, claim: Obj) -> bool:
        """Ours, not reserved, not held (`_let_go`), and no live pod waits for it (a deleted
        claim waits for no one)."""
        if self.config.finalizer not in (claim["metadata"].get("finalizers") or []):
            return False
        if key in self.state.held:
            return False
        if key in self.view.assumed:
            return False
        if (claim.get("status") or {}).get("reservedFor"):
            return False
        if claim["metadata"].get("deletionTimestamp"):
            return True
        for pod_key in self.view.users.get(key, ()):
            pod = self.view.pods.get(pod_key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                return False
        return True


T = TypeVar("T")

#: The pass's own API calls (marks, allocations, gate lifts, withdrawals, deallocations) run on
#: these threads, not the loop's default ones: evictions, reports, queue status and deleted
#: claims go on in the background by the hundred while a starved queue reclaims, and a pass
#: whose writes waited behind them in one pool took half a second for a single claim.
_PASS_CALLS = ThreadPoolExecutor(WRITE_CONCURRENCY, thread_name_prefix="pass-calls")


async def _pass_call(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the pass's threads (with this task's context, as `asyncio.to_thread`)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _PASS_CALLS, functools.partial(context.run, fn, *args)
    )


async def _all(*steps: Awaitable[None]) -> None:
    """Run the steps at once and wait for every one of them; then raise the first failure
    (losing the lead first, which ends the loop rather than a pass)."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in sorted(failures, key=lambda f: not isinstance(f, NotLeaderError)):
        raise failure


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background work failed", error=str(task.exception()))


def _claim_refs(pod: Obj | None) -> list[str]:
    return [] if pod is None else known_claim_names(pod)
