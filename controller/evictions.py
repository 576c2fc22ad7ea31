"""Carrying out reclaim: tell each victim why, then evict it through the Eviction API.

A victim evicted under its queue's `idleReclaim` is told how long its GPUs were idle and which
queue's pod waits; an idle victim of ordinary reclaim is told how long too.

The condition goes first, so the pod's own record says which queue took its devices before it
is gone (as the kube-scheduler sets `DisruptionTarget` before it preempts); the Event follows
the eviction, off the path to the freed devices (Events outlive their pod): it is posted beside
the next evictions, a few at a time, rather than before them. A
PodDisruptionBudget that forbids the eviction (429) spares the pod for the hold time and tells
the waiting pod; a pod already gone (404) needs nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

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
    reclaims: Sequence[Reclaim], api: ControllerApi, keeper: QueueKeeper, metrics: QueueMetrics
) -> None:
    """Every reclaim of a pass, several at once: a queue that arrives starved reclaims for
    hundreds of pods in one pass, and one after another their calls would hold the pass up
    for seconds. The victims of one reclaim still go in order. The victims' Events go out
    beside the evictions, a few at a time, and do not hold up the next eviction."""
    limit = asyncio.Semaphore(EVICT_CONCURRENCY)
    events = _Events(api)

    async def one(reclaim: Reclaim) -> None:
        async with limit:
            await carry_out(reclaim, api, keeper, metrics, events)

    try:
        await asyncio.gather(*(one(r) for r in reclaims))
    finally:
        await events.drain()


class _Events:
    """The victims' Events of one round of evictions, posted in the background."""

    def __init__(self, api: ControllerApi) -> None:
        self._api = api
        self._limit = asyncio.Semaphore(EVENT_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, victim: Obj, message: str) -> None:
        task = asyncio.ensure_future(self._post(victim, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, victim: Obj, message: str) -> None:
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
    events: _Events | None = None,
) -> None:
    asker = reclaim.asker
    own = events is None
    events = events or _Events(api)
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
