"""The node's locks: per GPU in a fixed order, per claim only while used."""

from __future__ import annotations

import asyncio

from kubeletplugin.prepare.locks import ClaimLocks, GpuLocks


async def _enter(locks: GpuLocks, minors: list[int]) -> None:
    async with locks.held(minors):
        pass


async def test_gpus_are_locked_in_ascending_order_whatever_order_they_come_in() -> None:
    # A claim on GPUs 2 and 1 that finds GPU 1 busy waits there holding nothing, so it cannot
    # hold GPU 2 against a claim that holds GPU 1 and wants GPU 2 (no deadlock).
    locks = GpuLocks()
    async with locks.held([1]):
        waiting = asyncio.create_task(_enter(locks, [2, 1]))
        await asyncio.wait_for(_enter(locks, [2]), 1)
        assert not waiting.done()
    await asyncio.wait_for(waiting, 1)


async def test_one_gpu_is_held_by_one_caller_at_a_time() -> None:
    locks = GpuLocks()
    async with locks.held([0]):
        waiting = asyncio.create_task(_enter(locks, [0]))
        await asyncio.wait_for(_enter(locks, [1]), 1)
        assert not waiting.done()
    await asyncio.wait_for(waiting, 1)


async def test_a_repeated_call_for_a_claim_waits_and_no_lock_outlives_its_users() -> None:
    locks = ClaimLocks()
    events: list[str] = []
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def call(name: str) -> None:
        async with locks.held("uid-1"):
            events.append(f"{name} in")
            first_in.set()
            await release.wait()
            events.append(f"{name} out")

    first = asyncio.create_task(call("first"))
    second = asyncio.create_task(call("second"))
    await first_in.wait()  # the second, scheduled before this wakes, is waiting for the lock
    assert events == ["first in"] and len(locks) == 1
    release.set()
    await asyncio.gather(first, second)
    assert events == ["first in", "first out", "second in", "second out"]
    assert len(locks) == 0
