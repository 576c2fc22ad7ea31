"""Waiting, with a deadline, for a condition something else makes true.

The thing a test waits for happens in another process, another thread or another task (a daemon
writing to the API server, a watch catching up, a controller on the test's own event loop), so
no fixed sleep can be long enough on a loaded machine or short enough on an idle one. A test looks
again and again until the condition holds, and fails at a generous deadline naming what it waited
for; the short pause between looks only keeps the looking from hogging the CPU.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

TIMEOUT_S = 20.0
"""Long enough for a daemon on a loaded two-core machine; reached only when a test fails."""

INTERVAL_S = 0.02


def _describe(check: Callable[[], object], what: str) -> str:
    if what:
        return what
    code = getattr(check, "__code__", None)  # a lambda: where it is written says what it checks
    if code is None:
        return repr(check)
    return f"the condition at {code.co_filename}:{code.co_firstlineno}"


def _timed_out(check: Callable[[], object], what: str, timeout: float) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {_describe(check, what)}")


async def _look(check: Callable[[], bool | Awaitable[bool]], in_thread: bool) -> bool:
    if in_thread:
        return bool(await asyncio.to_thread(check))
    answer = check()
    return bool(await answer) if inspect.isawaitable(answer) else bool(answer)


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str = "",
    *,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    in_thread: bool = False,
) -> None:
    """Return once `check()` is true; raise AssertionError naming `what` after `timeout` seconds.

    Between looks the event loop runs, so tasks on it (a controller, an informer) make progress.
    `check` may be a coroutine function (a gRPC call). `in_thread` runs each look of a plain
    function in a worker thread: for a check that blocks (a request to the API server), so that
    the loop is not stalled while it waits for the answer.
    """
    deadline = time.monotonic() + timeout
    while not await _look(check, in_thread):
        if time.monotonic() > deadline:
            raise _timed_out(check, what, timeout)
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], bool],
    what: str = "",
    *,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
) -> None:
    """`eventually` for a test without an event loop: the condition is made true by a thread."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise _timed_out(check, what, timeout)
        time.sleep(interval)
