"""Carrying out reclaim: tell each victim why, then evict it through the Eviction API.

A victim evicted under its queue's `idleReclaim` is told how long its GPUs were idle and which
queue's pod waits; an idle victim of ordinary reclaim is told how long too.

The condition goes first, so the pod's own record says which queue took its devices before it
is gone (as the kube-scheduler sets `DisruptionTarget` before it preempts); the Event follows
the eviction, off the path to the freed devices (Events outlive their pod): it waits, as the
waiting pods' reports do, for the allocation work to pause (at most the reports' hold-back
time), then goes a few at a time. Posted beside the evictions, the victims' Events of a starved
queue's arrival (one per victim, hundreds) competed with the writes that place its pods. A
PodDisruptionBudget that forbids the eviction (429) spares the pod for the hold time and tells
the waiting pod; a pod already gone (404) needs nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog
import urllib3
from kubernetes import client

from controller.informer import Obj, key_of
from controller.kube_calls import ControllerApi
from controller.queue_metrics import QueueMetrics
from controller.queueing import QueueKeeper, Reclaim
from dra_driver.durations import format_duration

log = structlog.get_logger(__name__)

REASON = "ReclaimedByQueue"
#: Reclaims of one pass carried out at once (two API calls per victim, one after the other).
EVICT_CONCURRENCY = 16
#: The victims' Events posted at once, beside the evictions.
EVENT_CONCURRENCY = 4


def reclaimed_condition(driver_name: str) -> str:
    return f"{driver_name}/Reclaimed"


async def carry_out_all(
    reclaims: Sequence[Reclaim],
    api: ControllerApi,
    keeper: QueueKeeper,
    metrics: QueueMetrics,
    events: VictimEvents | None = None,
) -> None:
    """Every reclaim of a pass, several at once: a queue that arrives starved reclaims for
    hundreds of pods in one pass, and one after another their calls would hold the pass up
    for seconds. The victims of one reclaim still go in order. The victims' Events go to
    `events` (the caller's, which it drains) and do not hold up the next eviction; without
    it, they go beside the evictions and are drained before this returns."""
    limit = asyncio.Semaphore(EVICT_CONCURRENCY)
    own = events is None
    posting = events or VictimEvents(api)

    async def one(reclaim: Reclaim) -> None:
        async with limit:
            await carry_out(reclaim, api, keeper, metrics, posting)

    try:
        await asyncio.gather(*(one(r) for r in reclaims))
    finally:
        if own:
            await posting.drain()


class VictimEvents:
    """The victims' Events, posted in the background; each waits for `ready` first (the
    allocation work to pause) when given."""

    def __init__(
        self, api: ControllerApi, ready: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._api = api
        self._ready = ready
        self._limit = asyncio.Semaphore(EVENT_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting = 0

    def post(self, victim: Obj, message: str) -> None:
        task = asyncio.ensure_future(self._post(victim, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def waiting(self) -> int:
        """Events waiting for `ready`."""
        return self._waiting

    async def _post(self, victim: Obj, message: str) -> None:
        if self._ready is not None:
            self._waiting += 1
            try:
                await self._ready()
            finally:
                self._waiting -= 1
        async with self._limit:
            try:
                await asyncio.to_thread(
                    self._api.post_pod_event, victim, "Warning", "Reclaimed", message
                )
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
                log.info("cannot post the eviction's Event", pod=key_of(victim), error=str(err))

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def carry_out(
    reclaim: Reclaim,
    api: ControllerApi,
    keeper: QueueKeeper,
    metrics: QueueMetrics,
    events: VictimEvents | None = None,
) -> None:
    asker = reclaim.asker
    own = events is None
    events = events or VictimEvents(api)
    try:
        for victim, victim_queue in reclaim.victims:
            message = _message(reclaim, victim, victim_queue)
            try:
                await asyncio.to_thread(
                    api.patch_pod_conditions, victim, [_condition(keeper, message)]
                )
                await asyncio.to_thread(api.evict_pod, victim)
            except client.ApiException as err:
                _refused(reclaim, victim, err, keeper)
                if err.status == 429:
                    await _tell_requester(reclaim, victim, api)
                continue
            except (urllib3.exceptions.HTTPError, OSError) as err:
                log.info("eviction failed; the next attempt chooses again", error=str(err))
                keeper.evicting.pop(key_of(victim), None)
                continue
            events.post(victim, message)
            metrics.evictions.labels(queue=reclaim.queue, victim_queue=victim_queue).inc()
            log.info(
                "pod evicted for reclaim",
                pod=f"{victim['metadata']['namespace']}/{victim['metadata']['name']}",
                queue=reclaim.queue,
                victim_queue=victim_queue,
                requester=asker,
                node=reclaim.node,
            )
    finally:
        if own:
            await events.drain()


def _message(reclaim: Reclaim, victim: Obj, victim_queue: str) -> str:
    """Why the victim goes: borrowed capacity its queue gives back, or (under its queue's
    `idleReclaim`) GPUs idle long enough while another queue's pod waits."""
    idle_for = reclaim.idle_for.get(key_of(victim))
    idle = "" if idle_for is None else f"its GPUs were idle for {format_duration(idle_for)}; "
    if reclaim.idle_reclaim:
        return (
            f"evicted: {idle}queue {victim_queue} lends GPUs idle that long (idleReclaim) and "
            f"{reclaim.asker} of queue {reclaim.queue} waits for them"
        )
    return (
        f"evicted: {idle}queue {reclaim.queue} reclaims the GPUs it is guaranteed, for "
        f"{reclaim.asker}; this pod ran on capacity queue {victim_queue} had borrowed"
    )


def _condition(keeper: QueueKeeper, message: str) -> Obj:
    return {
        "type": reclaimed_condition(keeper.settings.driver_name),
        "status": "True",
        "reason": REASON,
        "message": message,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _refused(reclaim: Reclaim, victim: Obj, err: client.ApiException, keeper: QueueKeeper) -> None:
    key = key_of(victim)
    keeper.evicting.pop(key, None)
    if err.status == 404:
        return  # gone already: its devices are free
    log.info("eviction refused", pod=key, status=err.status, reason=err.reason)
    keeper.spared[key] = time.monotonic() + keeper.settings.hold_s
    for holder in reclaim.holders or (key_of(reclaim.requester),):
        hold = keeper.holds.get(holder)
        if hold is None:
            continue
        hold.victims.discard(key)
        for claim in [c for c in hold.claims if c[0] == key[0]]:
            if key in keeper.view.users.get(claim, set()):
                del hold.claims[claim]


async def _tell_requester(reclaim: Reclaim, victim: Obj, api: ControllerApi) -> None:
    name = f"{victim['metadata']['namespace']}/{victim['metadata']['name']}"
    try:
        await asyncio.to_thread(
            api.post_pod_event,
            reclaim.requester,
            "Warning",
            "ReclaimBlocked",
            f"queue {reclaim.queue} could not evict pod {name} for {reclaim.asker}: its "
            "PodDisruptionBudget "
            "allows no disruption now",
        )
    except (client.ApiException, OSError) as err:
        log.info("cannot report a blocked reclaim", error=str(err))
