"""GpuQueues that refuse to lend, as the plugin reads them: which namespaces refuse, how often the
queues are listed, and that a failed list keeps the last answer."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any, cast

import structlog.testing
from kubernetes import client

from api.device_type import DeviceType
from dra_driver.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from kubeletplugin.daemon import PluginConfig, PluginDaemon
from kubeletplugin.lending.lender import Lender, LendingSettings, Phase
from kubeletplugin.lending.node import NodeLending
from kubeletplugin.lending.queues import QueueLending, refusing_namespaces
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.telemetry.attribution import ClaimPods, attribute
from tests.unit.lending.test_lender import POD_OF, Clock, _sample

GIB = 1 << 30


def queue(name: str, created: str = "2025-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def claim(uid: str, namespace: str, kind: DeviceType = DeviceType.GPU) -> ClaimRecord:
    device = "gpu-0-lent" if kind is DeviceType.OPPORTUNISTIC else "gpu-0"
    record = DeviceRecord(("req",), "node-1", device, (f"x={uid}",), device_type=kind, minor=0)
    return ClaimRecord(uid, namespace, uid, ClaimState.PREPARE_COMPLETED, (record,))


class Queues:
    """A stand-in for the API: the objects a list returns now, or the error it raises."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self.objects: list[Mapping[str, Any]] = list(objects)
        self.error: Exception | None = None
        self.calls = 0

    def __call__(self) -> Iterable[Mapping[str, Any]]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return list(self.objects)


def claims(*records: ClaimRecord) -> dict[str, ClaimRecord]:
    return {r.uid: r for r in records}


async def settle(lending: QueueLending, records: Mapping[str, ClaimRecord]) -> frozenset[str]:
    """One sample's view: start the list it calls for, wait for it, and the refusing claims."""
    lending.refresh(records)
    await lending.flush()
    return lending.refusing(records)


def test_a_queue_that_says_never_refuses_for_its_namespaces_and_those_below_it() -> None:
    objects = [
        queue("org", lending="Never", namespaces=["org-shared"]),
        queue("team", parent="org", namespaces=["team-a", "team-b"]),
        queue("sub", parent="team", namespaces=["sub"]),
        queue("open", lending="Allowed", namespaces=["open"]),
        queue("plain", namespaces=["plain"]),
        queue("private", lending="Never", namespaces=["private"]),
    ]
    assert refusing_namespaces(objects) == {"org-shared", "team-a", "team-b", "sub", "private"}


def test_namespaces_go_to_the_queue_the_controller_gives_them() -> None:
    # The older of two queues naming a namespace keeps it; the newer one is invalid, and an
    # invalid queue (here a bad lending value, or a missing parent) refuses nothing: its
    # namespaces fall to the default queue, which lends.
    objects = [
        queue("old", "2025-01-01T00:00:00Z", namespaces=["shared"]),
        queue("new", "2025-02-01T00:00:00Z", lending="Never", namespaces=["shared", "mine"]),
        queue("bad", lending="Sometimes", namespaces=["bad"]),
        queue("orphan", parent="gone", lending="Never", namespaces=["orphan"]),
        queue("below-bad", parent="bad", namespaces=["below-bad"]),
    ]
    assert refusing_namespaces(objects) == frozenset()
    assert refusing_namespaces([]) == frozenset()


async def test_queues_are_listed_again_only_after_the_interval_or_for_a_new_owner() -> None:
    clock = Clock()
    api = Queues(queue("private", lending="Never", namespaces=["private"]))
    lending = QueueLending(api, every_s=30.0, clock=clock)
    # A node that holds no owner claim lists nothing; a borrower's claim calls for no list.
    assert await settle(lending, {}) == frozenset()
    borrower = claims(claim("b", "private", DeviceType.OPPORTUNISTIC))
    assert await settle(lending, borrower) == frozenset()
    assert api.calls == 0
    held = claims(claim("p", "private"), claim("o", "other"))
    assert await settle(lending, held) == {"p"}
    assert api.calls == 1
    # Every sample within the interval uses that list.
    api.objects = []
    for clock.now in (1.0, 10.0, 29.9):
        assert await settle(lending, held) == {"p"}
    assert api.calls == 1
    clock.now = 30.0
    assert await settle(lending, held) == frozenset()
    assert api.calls == 2
    # An owner prepared since the last list is listed for at once, however recent that was.
    api.objects = [queue("late", lending="Never", namespaces=["late"])]
    clock.now = 31.0
    assert await settle(lending, {**held, **claims(claim("l", "late"))}) == {"l"}
    assert api.calls == 3
    # One that goes calls for nothing.
    clock.now = 32.0
    assert await settle(lending, held) == frozenset()
    assert api.calls == 3


async def test_an_owner_no_list_knew_of_refuses_until_one_is_back() -> None:
    gate = threading.Event()
    objects: list[Mapping[str, Any]] = []

    def slow() -> list[Mapping[str, Any]]:
        gate.wait(timeout=30)
        return objects

    lending = QueueLending(slow, clock=Clock())
    held = claims(claim("o", "open"))
    try:
        lending.refresh(held)
        lending.refresh(held)  # one list at a time
        assert lending.refusing(held) == {"o"}
    finally:
        gate.set()
    await lending.flush()
    assert lending.refusing(held) == frozenset()
    await lending.stop()


async def test_a_failed_list_keeps_the_last_answer_and_is_logged_once() -> None:
    clock = Clock()
    api = Queues(queue("private", lending="Never", namespaces=["private"]))
    lending = QueueLending(api, every_s=30.0, clock=clock)
    held = claims(claim("p", "private"))
    assert await settle(lending, held) == {"p"}
    api.error = client.ApiException(status=503, reason="Service Unavailable")
    with structlog.testing.capture_logs() as logs:
        for clock.now in (30.0, 60.0, 90.0):
            assert await settle(lending, held) == {"p"}
    assert api.calls == 4
    (failed,) = logs
    assert failed["log_level"] == "warning" and "(503)" in failed["error"]
    assert failed["refusing"] == ["private"]
    # The queue gone and the API back: the new answer, and one line to say so.
    api.error, api.objects = None, []
    with structlog.testing.capture_logs() as logs:
        clock.now = 120.0
        assert await settle(lending, held) == frozenset()
    assert [e["event"] for e in logs] == ["GpuQueues listed again"]


async def test_without_the_crd_no_queue_refuses_and_owners_still_lend() -> None:
    clock = Clock()
    api = Queues()
    api.error = client.ApiException(status=404, reason="Not Found")
    lending = QueueLending(api, clock=clock)
    held = claims(claim("p", "private"))
    with structlog.testing.capture_logs() as logs:
        assert await settle(lending, held) == frozenset()
        clock.now = 30.0
        assert await settle(lending, held) == frozenset()
    assert api.calls == 2
    assert [e["error"] for e in logs] == ["the GpuQueue CRD is not installed (404)"]


async def test_a_refusing_queue_keeps_its_owners_gpu_closed_on_the_node() -> None:
    clock = Clock()
    lender = Lender(LendingSettings(10.0, 5.0, 4 * GIB), "gpu.dra-driver.dev", clock)
    api = Queues(queue("private", lending="Never", namespaces=["default"]))
    queues = QueueLending(api, clock=clock)
    node = NodeLending(
        lender,
        cast(Any, None),
        cast(Any, None),
        PluginMetrics(),
        "node-1",
        1.0,
        lambda: None,
        "test",
        queues,
    )
    node.lent_minors = (0,)
    records = claims(claim("owner", "default"))
    pods = {"owner": ClaimPods(("o",), frozenset({"pod-o"}))}
    sample = _sample(0.0, None)

    async def observe() -> Phase | None:
        attributed = attribute(sample, records.values(), pods, POD_OF.__getitem__)
        await node(sample, records, attributed, pods, POD_OF.__getitem__)
        await queues.flush()
        return lender.phase(0)

    for clock.now in (0.0, 10.0, 100.0):
        assert await observe() is Phase.CLOSED
    # The queue lends again: the next list says so, and the GPU opens once its owner has
    # idled for lend_after from then, as after an owner's own refusal.
    api.objects = []
    for clock.now in (130.0, 131.0):
        assert await observe() is Phase.CLOSED
    clock.now = 141.0
    assert await observe() is Phase.OPEN
    assert api.calls == 3
    await node.stop()


def test_only_a_node_that_lends_reads_queues() -> None:
    def lending(lend_after_s: float | None) -> NodeLending | None:
        daemon = SimpleNamespace(
            config=PluginConfig(node_name="node-1", lend_after_s=lend_after_s),
            backend=None,
            api=client.ApiClient(),
            metrics=PluginMetrics(),
            _taints_changed=lambda: None,
        )
        return PluginDaemon._lending(cast(Any, daemon))

    assert lending(None) is None
    node = lending(60.0)
    assert node is not None and node._queues is not None
