"""Reports of why pods wait: sent off the pass's path, newest first, paced, never after
"allocated"."""

from __future__ import annotations

import asyncio
import threading
import time

from controller.informer import Obj
from controller.reports import Reporter

CONDITION = "gpu.dra-driver.dev/DevicesAllocated"


def pod(name: str) -> Obj:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}


class Api:
    """Records Events and conditions; an Event of a pod named in `blocked` waits for `release`."""

    def __init__(self, *blocked: str) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.blocked = set(blocked)
        self.release = threading.Event()
        self.on_wire = threading.Event()

    def post_pod_event(self, target: Obj, kind: str, reason: str, text: str) -> None:
        if target["metadata"]["name"] in self.blocked:
            self.on_wire.set()
            self.release.wait(10)
        self.calls.append(("event", target["metadata"]["name"], text))

    def patch_pod_conditions(self, target: Obj, conditions: list[Obj]) -> None:
        (condition,) = conditions
        self.calls.append(("condition", target["metadata"]["name"], condition["message"]))


def reporter(
    api: Api, interval_s: float = 10.0, hold_back_s: float = 5.0, pause_s: float = 0.01
) -> Reporter:
    return Reporter(  # type: ignore[arg-type]
        api, CONDITION, interval_s=interval_s, hold_back_s=hold_back_s, pause_s=pause_s
    )


async def test_the_first_reason_goes_out_at_once_with_its_event_then_its_condition() -> None:
    api = Api()
    reports = reporter(api)
    reports.report(pod("p"), "no room")
    await reports.drain()
    assert api.calls == [("event", "p", "no room"), ("condition", "p", "no room")]
    assert await reports.settle(("default", "p"))  # "allocated" must follow


async def test_a_reason_replaced_before_it_was_sent_is_never_sent() -> None:
    api = Api()
    reports = reporter(api)
    reports.report(pod("p"), "first")
    reports.report(pod("p"), "second")  # before the loop ran the first
    await reports.drain()
    assert [c[2] for c in api.calls] == ["second", "second"]


async def test_a_changed_reason_waits_out_the_interval() -> None:
    api = Api()
    reports = reporter(api, interval_s=0.3)
    reports.report(pod("p"), "first")
    await reports.drain()
    sent = time.monotonic()
    reports.report(pod("p"), "second")
    reports.report(pod("p"), "third")  # while the second waits: only the newest goes
    await reports.drain()
    assert time.monotonic() - sent >= 0.3
    assert [c[2] for c in api.calls if c[0] == "event"] == ["first", "third"]


async def test_a_pod_allocated_before_its_report_went_out_is_told_nothing() -> None:
    api = Api()
    reports = reporter(api, interval_s=0.3)
    reports.report(pod("p"), "first")
    await reports.drain()
    reports.report(pod("p"), "second")  # waits out the interval
    assert await reports.settle(("default", "p"))  # its gate comes off meanwhile
    await reports.drain()
    assert [c[2] for c in api.calls if c[0] == "event"] == ["first"]
    # A pod never told it waits needs no "allocated" either.
    reports.report(pod("q"), "no room")
    assert not await reports.settle(("default", "q"))
    await reports.drain()
    assert not [c for c in api.calls if c[1] == "q"]


async def test_settle_waits_for_a_report_on_the_wire() -> None:
    api = Api("p")
    reports = reporter(api)
    reports.report(pod("p"), "no room")
    await asyncio.wait_for(asyncio.to_thread(api.on_wire.wait, 10), 10)
    settling = asyncio.ensure_future(reports.settle(("default", "p")))
    await asyncio.sleep(0)  # let it start: it must not finish while the Event is on the wire
    assert not settling.done()
    api.release.set()
    assert await settling  # the report landed: "allocated" follows it
    assert [c[0] for c in api.calls] == ["event", "condition"]


async def test_a_forgotten_pod_is_reported_afresh_at_once() -> None:
    api = Api()
    reports = reporter(api, interval_s=60.0)
    reports.report(pod("p"), "first")
    await reports.drain()
    reports.forget(("default", "p"))  # deleted; a new pod of that name comes
    reports.report(pod("p"), "again")
    await asyncio.wait_for(reports.drain(), 5)
    assert [c[2] for c in api.calls if c[0] == "event"] == ["first", "again"]


async def test_cancel_drops_what_was_not_sent() -> None:
    api = Api()
    reports = reporter(api, interval_s=60.0)
    reports.report(pod("p"), "first")
    await reports.drain()
    reports.report(pod("p"), "second")
    reports.cancel()  # stepping down
    await asyncio.wait_for(reports.drain(), 5)
    assert [c[2] for c in api.calls if c[0] == "event"] == ["first"]
    assert reports.pending() == 0


async def test_reports_wait_while_allocation_work_goes_on() -> None:
    api = Api()
    reports = reporter(api)
    with reports.busy():
        reports.report(pod("p"), "no room")
        reports.report(pod("q"), "no room")
        for _ in range(20):  # turns of the loop, in which nothing may be sent
            await asyncio.sleep(0)
        assert api.calls == []
        # Placed while its report waited: dropped, and no "allocated" needs to follow.
        assert not await reports.settle(("default", "p"))
    await asyncio.wait_for(reports.drain(), 5)  # the work paused: the rest goes
    assert [c[:2] for c in api.calls] == [("event", "q"), ("condition", "q")]


async def test_a_report_held_back_its_longest_goes_anyway() -> None:
    api = Api()
    reports = reporter(api, hold_back_s=0.2)
    with reports.busy():
        queued = time.monotonic()
        reports.report(pod("p"), "no room")
        await asyncio.wait_for(reports.drain(), 5)
        assert time.monotonic() - queued >= 0.2
    assert [c[:2] for c in api.calls] == [("event", "p"), ("condition", "p")]


async def test_reports_wait_until_the_work_has_stayed_paused() -> None:
    """Passes that follow one another leave short gaps: a gap is not yet a pause."""
    api = Api()
    reports = reporter(api, pause_s=60.0)
    with reports.busy():
        reports.report(pod("p"), "no room")
    for _ in range(20):  # turns of the loop after the work stopped: not paused for long yet
        await asyncio.sleep(0)
    assert api.calls == []
    reports.cancel()


async def test_reports_go_once_the_pause_has_lasted() -> None:
    api = Api()
    reports = reporter(api, pause_s=0.1)
    with reports.busy():
        reports.report(pod("p"), "no room")
    stopped = time.monotonic()
    await asyncio.wait_for(reports.drain(), 5)
    assert time.monotonic() - stopped >= 0.1
    assert [c[:2] for c in api.calls] == [("event", "p"), ("condition", "p")]
