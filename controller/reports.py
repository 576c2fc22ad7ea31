"""Telling a waiting pod why it waits (an Event and our condition), off the allocation path.

A pass that decides hundreds of pods (a starved queue's arrival, a burst bigger than the
cluster) finds most of them waiting, and each report is two API calls. Sent inside the pass,
they held up its writes, evictions and gate lifts, and so every pod behind them; and a pod placed
a pass later had its "cannot allocate" sent just before its "allocated", two calls more that told
nobody anything. So the pass only hands reports here, and they go out a few at a time while the
allocation work goes on:

* a reason the same as the pod's last one is not reported again;
* the newest reason for a pod wins: one not yet sent is replaced, never queued behind;
* a pod's first reason goes out at once, a changed one at most every `interval_s` after the last
  (while a queue reclaims, or capacity comes and goes, a pod's reason can change every pass:
  "evicting these for you", then "waiting for their devices", or "no node fits" and "the free
  GPUs are held for other queues" in turns);
* a pod whose gate is about to come off drops what was not sent yet, and waits for a report
  already on the wire, so that "allocated" is always the pod's last word (`settle`);
* the "allocated" condition is written only over a "cannot allocate" that was actually sent;
* reports give way to the allocation work: while a pass runs, evictions go out or gates come
  off (`busy`), and until that work has stayed stopped for `pause_s`, a report waits, up to
  `hold_back_s` from when it was queued. The API server and the controller's one core serve
  both, and each report made the writes that place pods a little later: while a starved queue
  reclaimed on 100 nodes, its pods' reasons (an Event and a condition each, then an "allocated"
  condition over it) cost it about 0.7 s of its 6 s. Held back, many of those pods are placed
  before their report's turn comes, and it is dropped. The pause must last: passes that follow
  one another as pods come in leave gaps of tens of milliseconds, and reports (and the reclaim
  victims' Events, which wait the same way) that went out in those gaps still took the writes'
  place.

Everything here runs on the event loop's thread; the API calls run in its executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import structlog
from kubernetes import client

from controller.informer import Key, Obj, key_of
from controller.kube_calls import ControllerApi

log = structlog.get_logger(__name__)

#: Reports in flight at once: few, so that the pass's own calls are never queued behind them
#: in the API threads.
REPORT_CONCURRENCY = 4
#: How long a report waits for the allocation work to pause before it goes anyway.
HOLD_BACK_S = 5.0
#: How long the allocation work must have stopped to count as paused: passes that follow one
#: another as a starved queue's pods come in leave gaps of a few tens of milliseconds.
PAUSE_S = 0.25


class Reporter:
    def __init__(
        self,
        api: ControllerApi,
        condition_type: str,
        *,
        interval_s: float = 10.0,
        concurrency: int = REPORT_CONCURRENCY,
        hold_back_s: float = HOLD_BACK_S,
        pause_s: float = PAUSE_S,
    ) -> None:
        self.api = api
        self._interval_s = interval_s
        self._hold_back_s = hold_back_s
        self._pause_s = pause_s
        self._busy = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._pausing: asyncio.TimerHandle | None = None
        """Sets `_quiet` once the work has stopped for `pause_s`."""
        self._condition_type = condition_type
        self._concurrency = concurrency
        self._limit: asyncio.Semaphore | None = None
        self._reasons: dict[Key, str] = {}
        """Pod → the last reason handed in (sent or not), so that one that stays is reported
        once."""
        self._newest: dict[Key, tuple[Obj, str]] = {}
        """Pod → the newest report not yet sent (the pod as last seen, and the reason)."""
        self._shown: set[Key] = set()
        """Pods whose condition now says they cannot be allocated (a report was sent)."""
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        """Pod → the task sending its reports, from the first one queued to the last sent."""
        self._on_wire: set[Key] = set()
        """Pods whose report is being sent at this moment."""
        self._sent_at: dict[Key, float] = {}
        """Pod → when its last report was sent (monotonic seconds)."""

    def report(self, pod: Obj, reason: str) -> bool:
        """Queue why `pod` waits (it replaces a reason of the same pod not yet sent); False when
        it is the reason the pod was last reported to wait for, which is not sent again."""
        key = key_of(pod)
        if self._reasons.get(key) == reason:
            return False
        self._reasons[key] = reason
        self._newest[key] = (pod, reason)
        if key not in self._tasks:
            self._tasks[key] = asyncio.ensure_future(self._send(key))
        return True

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Allocation work under way: reports wait while inside (see the module docstring)."""
        self._busy += 1
        self._quiet.clear()
        if self._pausing is not None:
            self._pausing.cancel()
            self._pausing = None
        try:
            yield
        finally:
            self._busy -= 1
            if not self._busy:
                self._pausing = asyncio.get_running_loop().call_later(
                    self._pause_s, self._quiet.set
                )

    async def until_quiet(self) -> None:
        """Wait for the allocation work to pause, at most the hold-back time: for work that
        may go later (reports, the victims' Events), not for another task's result."""
        if not self._quiet.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), self._hold_back_s)

    def pending(self) -> int:
        """Pods with a report queued or being sent."""
        return len(self._tasks)

    async def settle(self, key: Key) -> bool:
        """Before the pod's gate comes off: drop its unsent report and wait for one being sent.
        Whether the pod's condition says it cannot be allocated (so "allocated" must follow)."""
        self._newest.pop(key, None)
        task = self._tasks.get(key)
        if task is not None:
            if key in self._on_wire:
                await asyncio.wait([task])
            else:
                task.cancel()  # waiting for its turn: nothing of it was sent
                self._tasks.pop(key, None)
        return key in self._shown

    def forget(self, key: Key) -> None:
        """The pod is gone or no longer ours to report on."""
        self._reasons.pop(key, None)
        self._newest.pop(key, None)
        self._shown.discard(key)
        self._sent_at.pop(key, None)

    async def drain(self) -> None:
        """Wait until every queued report was sent (tests; a clean stop)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    def cancel(self) -> None:
        """Drop every queued report and what was reported (stepping down, stopping: the next
        leader reports afresh); those on the wire finish."""
        self._reasons.clear()
        self._newest.clear()
        self._shown.clear()
        self._sent_at.clear()
        for key, task in list(self._tasks.items()):
            if key not in self._on_wire:
                task.cancel()
                self._tasks.pop(key, None)

    async def _send(self, key: Key) -> None:
        if self._limit is None:
            self._limit = asyncio.Semaphore(self._concurrency)
        try:
            await self.until_quiet()  # a report that waited its longest goes anyway
            while key in self._newest:
                sent_at = self._sent_at.get(key)
                if sent_at is not None:
                    # A pacing delay, not a wait for another task: a changed reason waits
                    # out the interval, and whatever is newest then is what goes.
                    await asyncio.sleep(max(0.0, sent_at + self._interval_s - time.monotonic()))
                    if key not in self._newest:
                        return
                async with self._limit:
                    newest = self._newest.pop(key, None)
                    if newest is None:
                        return  # settled or forgotten while it waited for its turn
                    pod, reason = newest
                    self._on_wire.add(key)
                    try:
                        await self._send_one(pod, reason)
                    finally:
                        self._on_wire.discard(key)
                        self._sent_at[key] = time.monotonic()
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    async def _send_one(self, pod: Obj, reason: str) -> None:
        key = key_of(pod)
        try:
            await asyncio.to_thread(
                self.api.post_pod_event, pod, "Warning", "FailedAllocation", reason
            )
            await set_condition(self.api, self._condition_type, pod, False, "Unallocatable", reason)
        except (client.ApiException, OSError) as err:
            log.warning("cannot report why a pod waits", pod=key, error=str(err))
            return
        self._shown.add(key)


async def set_condition(
    api: ControllerApi, condition_type: str, pod: Obj, ok: bool, reason: str, message: str
) -> None:
    """Our condition on the pod, and only ours: the strategic merge keys conditions by type, so
    the others stay as their writers left them (resending our cached copies could revert newer
    ones)."""
    mine = {
        "type": condition_type,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        await asyncio.to_thread(api.patch_pod_conditions, pod, [mine])
    except client.ApiException as err:
        log.info("cannot set the pod condition", pod=key_of(pod), status=err.status)
