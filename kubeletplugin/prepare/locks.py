"""The two kinds of lock the node takes.

A lock per physical GPU serialises the changes that touch the same GPU (MIG instances, its
time-slice setting, its MPS daemon); a lock per claim UID makes a repeated call for a claim wait
for the first one and then return its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field


class GpuLocks:
    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def held(self, minors: Iterable[int]) -> AsyncIterator[None]:
        # Always in ascending order, so two claims spanning the same GPUs cannot deadlock.
        async with contextlib.AsyncExitStack() as stack:
            for minor in sorted(set(minors)):
                await stack.enter_async_context(self._locks.setdefault(minor, asyncio.Lock()))
            yield


@dataclass(slots=True)
class _ClaimLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ClaimLocks:
    def __init__(self) -> None:
        self._locks: dict[str, _ClaimLock] = {}

    @contextlib.asynccontextmanager
    async def held(self, uid: str) -> AsyncIterator[None]:
        """One operation per claim at a time; the lock lives only while someone holds or waits
        for it, so a node that sees many claims over months does not keep one per claim."""
        entry = self._locks.setdefault(uid, _ClaimLock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[uid]

    def __len__(self) -> int:
        """How many claims have a lock now (held or waited for)."""
        return len(self._locks)
