"""Carrying out reclaim against a recording API: each victim is told why, then evicted; a
PodDisruptionBudget's refusal spares the pod and tells the waiting pod; a pod gone already or a
broken connection is let go, and the next victim is still tried."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.evictions import (
    REASON,
    VictimEvents,
    carry_out,
    carry_out_all,
    reclaimed_condition,
)
from controller.informer import Key, Obj
from controller.queue_metrics import QueueMetrics
from controller.queueing import Hold, QueueKeeper, QueueSettings, Reclaim
from controller.view import ClusterView
from dra_driver.allocator import AllocationMode

DRIVER = "gpu.example.com"
SETTINGS = QueueSettings(
    driver_name=DRIVER, finalizer="f", gang_label="g", gang_size_label="s", hold_s=90.0
)


def pod(namespace: str, name: str) -> Obj:
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"}}


class Api:
    """Records the calls; `fail` maps (call, pod name) to the error that call raises."""

    def __init__(self, **fail: BaseException) -> None:
        self.fail = fail
        self.calls: list[tuple[Any, ...]] = []

    def _call(self, what: str, target: Obj, *args: Any) -> None:
        name = target["metadata"]["name"]
        self.calls.append((what, name, *args))
        error = self.fail.get(f"{what}_{name}")
        if error is not None:
            raise error

    def post_pod_event(self, target: Obj, kind: str, reason: str, text: str) -> None:
        self._call("event", target, kind, reason, text)

    def patch_pod_conditions(self, target: Obj, conditions: list[Obj]) -> None:
        self._call("conditions", target, conditions)

    def evict_pod(self, target: Obj) -> None:
        self._call("evict", target)


def keeper() -> QueueKeeper:
    return QueueKeeper(SETTINGS, ClusterView(AllocationMode.FIRST_FIT))


def metrics() -> QueueMetrics:
    return QueueMetrics(CollectorRegistry())


def evictions(found: QueueMetrics, victim_queue: str) -> float:
    value: float = found.evictions.labels(queue="b", victim_queue=victim_queue)._value.get()
    return value


def reclaim(*victims: tuple[str, str], **extra: Any) -> Reclaim:
    return Reclaim(
        requester=pod("qb", "b1"),
        queue="b",
        node="node-1",
        victims=[(pod("qa", name), queue) for name, queue in victims],
        **extra,
    )


def refused(status: int) -> client.ApiException:
    return client.ApiException(status=status, reason="Too Many Requests")


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local time nine hours ahead of UTC, so a time written in local time shows."""
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
async def test_each_victim_is_marked_then_evicted_then_told_in_an_event() -> None:
    api, keep, counted = Api(), keeper(), metrics()
    before = time.time()
    await carry_out(reclaim(("a1", "a"), ("a2", "lender")), api, keep, counted)  # type: ignore[arg-type]
    why = (
        "evicted: queue b reclaims the GPUs it is guaranteed, for pod qb/b1; "
        "this pod ran on capacity queue {} had borrowed"
    )
    # The condition before the eviction (the pod's own record), victim after victim; each
    # Event after its eviction, off the critical path: the next victim need not wait for it.
    calls = [c[:2] for c in api.calls]
    assert [c for c in calls if c[0] != "event"] == [
        ("conditions", "a1"),
        ("evict", "a1"),
        ("conditions", "a2"),
        ("evict", "a2"),
    ]
    for name in ("a1", "a2"):
        assert calls.index(("evict", name)) < calls.index(("event", name))
    events = {c[1]: c[2:] for c in api.calls if c[0] == "event"}
    assert events == {
        "a1": ("Warning", "Reclaimed", why.format("a")),
        "a2": ("Warning", "Reclaimed", why.format("lender")),
    }
    (condition,) = api.calls[0][2]
    stamp = condition.pop("lastTransitionTime")
    assert condition == {
        "type": f"{DRIVER}/Reclaimed",
        "status": "True",
        "reason": REASON,
        "message": why.format("a"),
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(before - 1)) <= stamp
    assert stamp <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    assert reclaimed_condition(DRIVER) == f"{DRIVER}/Reclaimed"
    assert (evictions(counted, "a"), evictions(counted, "lender")) == (1, 1)


async def test_a_gangs_victims_are_told_the_gang() -> None:
    api = Api()
    await carry_out(reclaim(("a1", "a"), gang="qb/trainers"), api, keeper(), metrics())  # type: ignore[arg-type]
    (event,) = [c for c in api.calls if c[0] == "event"]
    assert "for gang qb/trainers;" in event[4]


async def test_a_pod_gone_already_is_let_go_and_the_next_one_evicted() -> None:
    api, keep, counted = Api(evict_a1=refused(404)), keeper(), metrics()
    keep.evicting = {("qa", "a1"): "b", ("qa", "a2"): "b"}
    await carry_out(reclaim(("a1", "a"), ("a2", "a")), api, keep, counted)  # type: ignore[arg-type]
    assert ("evict", "a2") in api.calls
    assert keep.evicting == {("qa", "a2"): "b"}
    assert keep.spared == {}
    assert evictions(counted, "a") == 1  # a2 only
    assert not any(c[0] == "event" and c[1] == "b1" for c in api.calls)


@pytest.mark.parametrize(
    "error", [urllib3.exceptions.ProtocolError("reset"), OSError("unreachable")]
)
async def test_a_broken_connection_lets_the_pod_go_for_the_next_attempt(
    error: BaseException,
) -> None:
    api, keep, counted = Api(conditions_a1=error, conditions_a3=error), keeper(), metrics()
    # a3 was never recorded as being evicted (its reclaim is older than the last pass).
    keep.evicting = {("qa", "a1"): "b", ("qa", "a2"): "b"}
    victims = reclaim(("a1", "a"), ("a2", "a"), ("a3", "a"))
    await carry_out(victims, api, keep, counted)  # type: ignore[arg-type]
    assert ("evict", "a1") not in [c[:2] for c in api.calls]
    assert ("evict", "a2") in [c[:2] for c in api.calls]
    assert keep.evicting == {("qa", "a2"): "b"} and keep.spared == {}
    assert evictions(counted, "a") == 1


def hold(requester: Key, *victims: Key, claims: dict[Key, Obj] | None = None) -> Hold:
    return Hold(
        pod=requester,
        queue="b",
        node="node-1",
        claims=dict(claims or {}),
        victims=set(victims),
        until=time.monotonic() + 60,
    )


async def test_a_disruption_budget_spares_the_pod_and_the_waiting_pod_is_told() -> None:
    api, keep, counted = Api(evict_a1=refused(429)), keeper(), metrics()
    a1, a2 = ("qa", "a1"), ("qa", "a2")
    keep.evicting = {a1: "b", a2: "b"}
    # The hold keeps the claims of both victims; a1's claim goes from it, a2's stays, and so
    # does a claim in a1's namespace that a1 does not use.
    claims: dict[Key, Obj] = {("qa", "c1"): {}, ("qa", "c2"): {}, ("qa", "other"): {}}
    keep.holds[("qb", "b1")] = hold(("qb", "b1"), a1, a2, claims=claims)
    keep.view.users = {("qa", "c1"): {a1}, ("qa", "c2"): {a2}}
    start = time.monotonic()
    await carry_out(reclaim(("a1", "a"), ("a2", "a")), api, keep, counted)  # type: ignore[arg-type]
    assert a1 not in keep.evicting and a2 in keep.evicting
    assert start + 90 <= keep.spared[a1] <= time.monotonic() + 90
    assert set(keep.spared) == {a1}
    kept = keep.holds[("qb", "b1")]
    assert kept.victims == {a2}
    assert set(kept.claims) == {("qa", "c2"), ("qa", "other")}
    told = [c for c in api.calls if c[1] == "b1"]
    assert told == [
        (
            "event",
            "b1",
            "Warning",
            "ReclaimBlocked",
            "queue b could not evict pod qa/a1 for pod qb/b1: its PodDisruptionBudget allows "
            "no disruption now",
        )
    ]
    assert ("evict", "a2") in api.calls and evictions(counted, "a") == 1


async def test_a_refusal_for_a_gang_reaches_every_members_hold() -> None:
    api, keep = Api(evict_a1=refused(429)), keeper()
    a1 = ("qa", "a1")
    members = [("qb", "t0"), ("qb", "t1"), ("qb", "t2")]
    # t0 has no hold (placed already): the others' holds still lose the victim.
    for member in members[1:]:
        keep.holds[member] = hold(member, a1, ("qa", "a9"))
    await carry_out(
        reclaim(("a1", "a"), gang="qb/trainers", holders=tuple(members)),
        api,  # type: ignore[arg-type]
        keep,
        metrics(),
    )
    assert all(keep.holds[m].victims == {("qa", "a9")} for m in members[1:])
    assert ("qb", "t0") not in keep.holds


async def test_another_refusal_spares_the_pod_without_telling_the_waiting_pod() -> None:
    api, keep = Api(evict_a1=refused(500)), keeper()
    await carry_out(reclaim(("a1", "a")), api, keep, metrics())  # type: ignore[arg-type]
    assert set(keep.spared) == {("qa", "a1")}
    assert not any(c[1] == "b1" for c in api.calls)


@pytest.mark.parametrize("error", [refused(403), OSError("unreachable")])
async def test_a_failure_to_tell_the_waiting_pod_stops_nothing(error: BaseException) -> None:
    api, keep = Api(evict_a1=refused(429), event_b1=error), keeper()
    await carry_out(reclaim(("a1", "a"), ("a2", "a")), api, keep, metrics())  # type: ignore[arg-type]
    assert ("evict", "a2") in [c[:2] for c in api.calls]


async def test_every_reclaim_of_a_pass_is_carried_out() -> None:
    api, keep, counted = Api(), keeper(), metrics()
    reclaims = [reclaim((f"a{i}", "a")) for i in range(20)]
    await carry_out_all(reclaims, api, keep, counted)  # type: ignore[arg-type]
    assert sorted(c[1] for c in api.calls if c[0] == "evict") == sorted(f"a{i}" for i in range(20))
    assert evictions(counted, "a") == 20


async def test_the_victims_events_wait_until_ready_and_the_evictions_do_not() -> None:
    api, keep, counted = Api(), keeper(), metrics()
    ready = asyncio.Event()
    events = VictimEvents(api, ready.wait)  # type: ignore[arg-type]
    await carry_out_all([reclaim(("a1", "a"), ("a2", "a"))], api, keep, counted, events)  # type: ignore[arg-type]
    assert [c[:2] for c in api.calls if c[0] == "evict"] == [("evict", "a1"), ("evict", "a2")]
    assert [c for c in api.calls if c[0] == "event"] == []
    ready.set()
    await asyncio.wait_for(events.drain(), 5)
    assert [c[1] for c in api.calls if c[0] == "event"] == ["a1", "a2"]
