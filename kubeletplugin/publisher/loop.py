"""Keeping the node's slices current: publish on request, on a timer, and after failures.

Publishing talks to the API server with the synchronous client, so it runs in a worker thread;
requests that arrive while a round runs collapse into one more round (only the newest state
matters). A failed round is retried with growing delays rather than given up: a node whose
slices are stale or missing cannot receive claims, so the loop keeps trying for as long as the
plugin runs. The timer catches changes nobody announced, such as a MIG device an administrator
created by hand.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from kubeletplugin.publisher.publisher import PublishError, PublishResult, SlicePublisher

log = structlog.get_logger(__name__)


class PublishLoop:
    def __init__(
        self,
        publisher: SlicePublisher,
        *,
        resync_s: float = 60.0,
        retry_s: float = 1.0,
        max_retry_s: float = 30.0,
    ) -> None:
        self._publisher = publisher
        self._resync_s = resync_s
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self._wanted = asyncio.Event()
        self._rounds = 0
        self._round_done = asyncio.Condition()
        self.last: PublishResult | None = None
        self.last_error: str | None = None

    def request(self) -> None:
        """Ask for a round soon (cheap, callable from the event loop at any time)."""
        self._wanted.set()

    async def publish_now(self) -> PublishResult:
        """One round, awaited: used at start-up so the plugin registers with slices in place."""
        result = await asyncio.to_thread(self._publisher.publish)
        await self._done(result, None)
        return result

    async def wait_rounds(self, count: int) -> None:
        """Wait until `count` rounds have finished since the loop began (tests use this)."""
        async with self._round_done:
            await self._round_done.wait_for(lambda: self._rounds >= count)

    @property
    def rounds(self) -> int:
        return self._rounds

    async def run(self, stop: asyncio.Event) -> None:
        delay = self._retry_s
        while not stop.is_set():
            stopper = asyncio.ensure_future(stop.wait())
            wanted = asyncio.ensure_future(self._wanted.wait())
            try:
                await asyncio.wait(
                    {stopper, wanted},
                    timeout=self._resync_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                stopper.cancel()
                wanted.cancel()
            if stop.is_set():
                return
            self._wanted.clear()
            try:
                result = await asyncio.to_thread(self._publisher.publish)
            except (PublishError, OSError) as err:
                log.error("publishing ResourceSlices failed", error=str(err), retry_in_s=delay)
                await self._done(None, str(err))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, self._max_retry_s)
                self._wanted.set()
                continue
            delay = self._retry_s
            await self._done(result, None)

    async def _done(self, result: PublishResult | None, error: str | None) -> None:
        if result is not None:
            self.last = result
        self.last_error = error
        async with self._round_done:
            self._rounds += 1
            self._round_done.notify_all()
