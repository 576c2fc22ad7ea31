"""The shared wait: over once the condition holds; a failure names what it waited for."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.support.polling import eventually, wait_until


def test_waits_for_a_condition_another_thread_makes_true() -> None:
    done = threading.Event()
    threading.Timer(0.05, done.set).start()
    wait_until(done.is_set, "the timer")
    assert done.is_set()


def test_a_condition_never_met_fails_naming_what_was_awaited() -> None:
    with pytest.raises(AssertionError, match=r"^timed out after 0.1s waiting for the moon$"):
        wait_until(lambda: False, "the moon", timeout=0.1)


def test_without_words_the_failure_points_at_the_condition() -> None:
    with pytest.raises(
        AssertionError, match=r"waiting for the condition at .*test_polling.py:\d+$"
    ):
        wait_until(lambda: False, timeout=0.05)


async def test_the_loop_runs_between_looks() -> None:
    seen: list[int] = []

    async def later() -> None:
        seen.append(1)

    task = asyncio.create_task(later())
    await eventually(lambda: bool(seen), "a task on the same loop")
    await task


async def test_a_blocking_look_runs_in_a_thread_so_the_loop_goes_on() -> None:
    flag = threading.Event()
    looks: list[str] = []

    def look() -> bool:
        looks.append(threading.current_thread().name)
        return flag.wait(0.01)

    asyncio.get_running_loop().call_later(0.05, flag.set)
    await eventually(look, "the flag", in_thread=True)
    assert threading.main_thread().name not in looks


async def test_an_async_wait_that_times_out_names_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="waiting for nothing at all"):
        await eventually(lambda: False, "nothing at all", timeout=0.05)


async def test_a_coroutine_check_is_awaited_at_each_look() -> None:
    looks = 0

    async def third_look() -> bool:
        nonlocal looks
        looks += 1
        await asyncio.sleep(0)
        return looks == 3

    await eventually(third_look, "the third look")
    assert looks == 3
