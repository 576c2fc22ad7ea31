"""Idle devices in the controller, against the embedded API server through the real client:
the `Idle` conditions a kubelet plugin would write are written into the claims' status here.
Reclaim evicts idle pods first; a queue with `idleReclaim` lends pods idle long enough even
within its guarantee; a queue without it keeps them; and a claim whose device status alone
changes does not make the controller decide its waiting pods again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from dra_driver.device_status import idle_condition, idleness, with_condition
from localcluster.apiserver import ApiServer
from localcluster.crds import bundled_definitions
from tests.integration.allocation.harness import (
    DRIVER,
    GROUP,
    VERSION,
    Cluster,
    eventually,
    manual_controller,
)
from tests.unit.controller.test_queues import (
    condition,
    gated,
    gpu_pod,
    known,
    make_cluster,
    passes,
    queue,
    queue_status,
    read_pod,
)

LONG_AGO = timedelta(hours=2)


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    """A client of a server that serves the chart's GpuQueue CRD."""
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        for crd in bundled_definitions():
            client.CustomObjectsApi(api_client).create_cluster_custom_object(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", crd
            )
        yield api_client


def read_claim(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    found: Any = cluster.objects.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", name
    )
    return dict(found)


def set_idle(cluster: Cluster, namespace: str, name: str, idle: bool, ago: timedelta) -> None:
    """What the kubelet plugin writes on a transition: `Idle` on every device of the claim,
    through the status subresource."""
    claim = read_claim(cluster, namespace, name)
    entries = list((claim.get("status") or {}).get("devices") or [])
    since = datetime.now(UTC) - ago
    for result in claim["status"]["allocation"]["devices"]["results"]:
        key = (result["driver"], result["pool"], result["device"])
        entries = with_condition(entries, key, idle_condition(idle, since, "test"))
    claim["status"]["devices"] = entries
    cluster.objects.replace_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", name, claim
    )


async def idleness_seen(daemon: ControllerDaemon, namespace: str, name: str, idle: bool) -> None:
    def seen() -> bool:
        claim = daemon.view.claims.get((namespace, name)) or {}
        states = idleness(claim)
        return bool(states) and all(s.idle == idle for s in states.values())

    await eventually(seen, what=f"{namespace}/{name}'s idleness in the view")


async def placed(
    cluster: Cluster, api: client.ApiClient, *names: str, priorities: dict[str, int] | None = None
) -> ControllerDaemon:
    """Queue a's pods placed (a controller driven pass by pass, returned running)."""
    for name in names:
        gpu_pod(cluster, "qa", name, priority=(priorities or {}).get(name, 0))
    daemon = await manual_controller(api, settle_s=0.0)
    await known(daemon, *(("qa", n) for n in names))
    await passes(daemon)
    assert not any(gated(cluster, "qa", n) for n in names)
    return daemon


def events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[str]:
    return [
        e.message
        for e in cluster.core.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.reason == reason
    ]


async def b1_waits(daemon: ControllerDaemon, cluster: Cluster) -> None:
    gpu_pod(cluster, "qb", "b1")
    await known(daemon, ("qb", "b1"))
    await passes(daemon)


async def test_reclaim_evicts_the_idle_borrowed_pod_and_keeps_the_busy_one(
    server: ApiServer, api: client.ApiClient
) -> None:
    # a holds three GPUs with a guarantee of one: a2 and a3 are borrowed. By priority and age
    # a3 (the newest) would go; a2 is idle, a3 busy: a2 goes.
    cluster = make_cluster(server, api, "H100-SXM5-80GB:3")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1", "a2", "a3")
    try:
        set_idle(cluster, "qa", "a2", True, LONG_AGO)
        set_idle(cluster, "qa", "a3", False, LONG_AGO)
        await idleness_seen(daemon, "qa", "a2", True)
        await idleness_seen(daemon, "qa", "a3", False)
        await b1_waits(daemon, cluster)
        await eventually(lambda: read_pod(cluster, "qa", "a2") is None, what="a2 evicted")
        assert read_pod(cluster, "qa", "a3") is not None
        assert read_pod(cluster, "qa", "a1") is not None
        (message,) = events(cluster, "qa", "a2", "Reclaimed")
        assert "its GPUs were idle for 2h" in message
        assert "queue b reclaims the GPUs it is guaranteed, for pod qb/b1" in message
    finally:
        daemon.stop_watches()


async def test_idle_reclaim_evicts_a_long_idle_pod_within_its_queues_guarantee(
    server: ApiServer, api: client.ApiClient
) -> None:
    # a is within its guarantee of two: nothing is borrowed. a1 has been idle for two hours,
    # past a's idleReclaim.after of 30m; a2 only for ten minutes (and, of lower priority, would
    # go first were it idle long enough).
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "2"}, idleReclaim={"after": "30m"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1", "a2", priorities={"a1": 10})
    try:
        set_idle(cluster, "qa", "a1", True, LONG_AGO)
        set_idle(cluster, "qa", "a2", True, timedelta(minutes=10))
        await idleness_seen(daemon, "qa", "a1", True)
        await idleness_seen(daemon, "qa", "a2", True)
        await b1_waits(daemon, cluster)
        await eventually(lambda: read_pod(cluster, "qa", "a1") is None, what="a1 evicted")
        assert read_pod(cluster, "qa", "a2") is not None
        (message,) = events(cluster, "qa", "a1", "Reclaimed")
        assert message.startswith("evicted: its GPUs were idle for 2h"), message
        assert "queue a lends GPUs idle that long (idleReclaim)" in message
        assert "pod qb/b1 of queue b waits for them" in message
        waiting = condition(cluster, "qb", "b1", f"{DRIVER}/DevicesAllocated")
        assert waiting is not None
        assert "evicting idle qa/a1 (queue a, idle for 2h" in waiting["message"]
        evictions = daemon.queue_metrics.evictions.labels(queue="b", victim_queue="a")
        assert evictions._value.get() == 1
    finally:
        daemon.stop_watches()


async def test_a_queue_without_idle_reclaim_keeps_its_idle_pods_within_its_guarantee(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "2"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1", "a2")
    try:
        set_idle(cluster, "qa", "a1", True, LONG_AGO)
        set_idle(cluster, "qa", "a2", True, LONG_AGO)
        await idleness_seen(daemon, "qa", "a1", True)
        await idleness_seen(daemon, "qa", "a2", True)
        await b1_waits(daemon, cluster)
        assert read_pod(cluster, "qa", "a1") is not None
        assert read_pod(cluster, "qa", "a2") is not None
        assert not daemon.reconciler.queues.evicting
        found = condition(cluster, "qb", "b1", f"{DRIVER}/DevicesAllocated")
        assert found is not None
        assert "no pod on borrowed capacity would make room" in found["message"]
        # Both of a's GPUs are idle: its status and gauge say so.
        await queue_status(daemon, api, "a", lambda s: s.get("idle") == {"gpu": "2"})
        assert daemon.queue_metrics.idle.labels("a")._value.get() == 2
        assert daemon.queue_metrics.idle.labels("b")._value.get() == 0
    finally:
        daemon.stop_watches()


async def test_a_device_status_write_reaches_the_view_without_deciding_waiting_pods_again(
    server: ApiServer, api: client.ApiClient
) -> None:
    # b1 waits (a is within its guarantee, without idleReclaim). The plugin marks a1 idle:
    # the view has the condition, but nothing moved that a decision reads.
    cluster = make_cluster(server, api, "H100-SXM5-80GB:1")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1")
    try:
        await b1_waits(daemon, cluster)
        # The watch brings back b1's own condition (which queues it); one more pass decides it
        # again, and reports nothing new.
        await eventually(
            lambda: any(
                c["type"] == f"{DRIVER}/DevicesAllocated"
                for c in daemon.view.pods[("qb", "b1")].get("status", {}).get("conditions") or []
            ),
            what="b1's condition in the view",
        )
        await daemon.reconciler.run_pass()
        state = daemon.reconciler.state
        assert ("qb", "b1") in state.waiting and not state.queue
        generation = daemon.view.generation
        set_idle(cluster, "qa", "a1", True, LONG_AGO)
        await idleness_seen(daemon, "qa", "a1", True)
        assert daemon.view.generation == generation
        assert not state.queue and not state.dealloc
        assert not state.idle_due  # a's queue has no idleReclaim: nothing to wait for
        running = daemon.reconciler.queues.running()
        assert [r.idle_since is not None for r in running] == [True]
    finally:
        daemon.stop_watches()


async def test_waiting_pods_are_decided_again_when_an_idle_pod_has_been_idle_long_enough(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:1")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"}, idleReclaim={"after": "2s"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1")
    try:
        await b1_waits(daemon, cluster)
        reconciler = daemon.reconciler
        generation = daemon.view.generation
        set_idle(cluster, "qa", "a1", True, timedelta(0))  # idle from now: not long enough
        await idleness_seen(daemon, "qa", "a1", True)
        assert daemon.view.generation == generation
        (due,) = reconciler.state.idle_due  # when a1 will have been idle for 2s
        deadline = reconciler.next_deadline()
        assert deadline is not None and deadline <= due
        assert due > time.monotonic()
        await reconciler.run_pass()  # before the time: b1 is not decided again
        assert read_pod(cluster, "qa", "a1") is not None
        await eventually(lambda: time.monotonic() >= due, what="a1 idle for 2s")
        await reconciler.run_pass()
        await eventually(lambda: read_pod(cluster, "qa", "a1") is None, what="a1 evicted")
    finally:
        daemon.stop_watches()


@pytest.mark.parametrize(
    ("after", "accepted"), [("30m", True), ("1h30m", True), ("0s", False), ("soon", False)]
)
def test_the_crd_checks_idle_reclaim_after(
    server: ApiServer, api: client.ApiClient, after: str, accepted: bool
) -> None:
    if accepted:
        queue(api, "a", namespaces=["qa"], idleReclaim={"after": after})
        return
    with pytest.raises(client.ApiException) as err:
        queue(api, "a", namespaces=["qa"], idleReclaim={"after": after})
    assert err.value.status == 422
    assert "idleReclaim.after" in str(err.value.body)


async def test_idle_reclaim_respects_a_pod_disruption_budget_and_says_so(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:1")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"}, idleReclaim={"after": "30m"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    gpu_pod(cluster, "qa", "a1", labels={"app": "kept"})
    budget = {
        "metadata": {"name": "kept", "namespace": "qa"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kept"}}},
    }
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget("qa", budget)
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, ("qa", "a1"))
        await passes(daemon)
        # Running and ready, as kubelet would report it: a pending pod ignores budgets.
        ready = {"type": "Ready", "status": "True"}
        status = {"status": {"phase": "Running", "conditions": [ready]}}
        cluster.core.patch_namespaced_pod_status("a1", "qa", status)
        set_idle(cluster, "qa", "a1", True, LONG_AGO)
        await idleness_seen(daemon, "qa", "a1", True)
        await b1_waits(daemon, cluster)
        # The budget refused (429): a1 runs on, is spared for the hold time, and b1 is told.
        assert read_pod(cluster, "qa", "a1") is not None
        assert ("qa", "a1") in daemon.reconciler.queues.spared
        (blocked,) = events(cluster, "qb", "b1", "ReclaimBlocked")
        assert "could not evict pod qa/a1 for pod qb/b1" in blocked
        assert "PodDisruptionBudget" in blocked
        evictions = daemon.queue_metrics.evictions.labels(queue="b", victim_queue="a")
        assert evictions._value.get() == 0
    finally:
        daemon.stop_watches()


async def test_idle_reclaim_makes_room_for_a_waiting_gang_within_the_lenders_guarantee(
    server: ApiServer, api: client.ApiClient
) -> None:
    # a holds all four GPUs, within its guarantee of four: nothing is borrowed. a1 and a2 have
    # been idle for two hours, past a's idleReclaim.after of 30m; a3 only for ten minutes; a4
    # is busy. b's gang of two one-GPU pods can only run together: a1 and a2 go, whole. Two
    # GPUs are more than b's guarantee of one: what idle pods free is lent, not owed, so b's
    # guarantee does not bound it (reclaim of borrowed capacity would stop there).
    cluster = make_cluster(server, api, "H100-SXM5-80GB:4")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "4"}, idleReclaim={"after": "30m"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await placed(cluster, api, "a1", "a2", "a3", "a4")
    try:
        set_idle(cluster, "qa", "a1", True, LONG_AGO)
        set_idle(cluster, "qa", "a2", True, LONG_AGO)
        set_idle(cluster, "qa", "a3", True, timedelta(minutes=10))
        set_idle(cluster, "qa", "a4", False, LONG_AGO)
        for name, idle in (("a1", True), ("a2", True), ("a3", True), ("a4", False)):
            await idleness_seen(daemon, "qa", name, idle)
        gang = {f"{DRIVER}/gang": "g", f"{DRIVER}/gang-size": "2"}
        gpu_pod(cluster, "qb", "g1", labels=gang)
        gpu_pod(cluster, "qb", "g2", labels=gang)
        await known(daemon, ("qb", "g1"), ("qb", "g2"))
        await passes(daemon)
        await eventually(
            lambda: read_pod(cluster, "qa", "a1") is None and read_pod(cluster, "qa", "a2") is None,
            what="a1 and a2 evicted",
        )
        assert read_pod(cluster, "qa", "a3") is not None
        assert read_pod(cluster, "qa", "a4") is not None
        (message,) = events(cluster, "qa", "a1", "Reclaimed")
        assert "queue a lends GPUs idle that long (idleReclaim)" in message
        waiting = condition(cluster, "qb", "g1", f"{DRIVER}/DevicesAllocated")
        assert waiting is not None
        assert "gang qb/g" in waiting["message"]
        # Both victims named; in which order depends on whether a2 was created in a later
        # second than a1 (the newer goes first), which this test does not control.
        assert "evicting idle qa/a" in waiting["message"]
        for name in ("a1", "a2"):
            assert f"qa/{name} (queue a, idle for 2h" in waiting["message"]
    finally:
        daemon.stop_watches()
