"""Queues in the controller's passes, against the embedded API server through the real client:
the order pods are decided in, limits, guarantee protection, reclaim by eviction with the freed
devices held for the pod that asked, and each GpuQueue's status."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.view import allocation_of
from dra_driver.allocator.result import allocation_node
from dra_driver.queues import GROUP as QGROUP
from dra_driver.queues import PLURAL as QPLURAL
from dra_driver.queues import VERSION as QVERSION
from localcluster.apiserver import ApiServer
from localcluster.crds import bundled_definitions
from tests.integration.allocation.harness import (
    DRIVER,
    GATE,
    GROUP,
    VERSION,
    Cluster,
    eventually,
    manual_controller,
)

RECLAIMED = f"{DRIVER}/Reclaimed"


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        for crd in bundled_definitions():  # the chart's GpuQueue CRD, as the chart installs it
            client.CustomObjectsApi(api_client).create_cluster_custom_object(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", crd
            )
        yield api_client


def make_cluster(server: ApiServer, api: client.ApiClient, gpus: str) -> Cluster:
    made = Cluster(server, api)
    made.add_classes()
    made.add_nodes(1, gpus=gpus)
    for namespace in ("qa", "qb"):
        made.core.create_namespace({"metadata": {"name": namespace}})
    return made


def queue(api: client.ApiClient, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": f"{QGROUP}/{QVERSION}",
        "kind": "GpuQueue",
        "metadata": {"name": name},
        "spec": spec,
    }
    client.CustomObjectsApi(api).create_cluster_custom_object(QGROUP, QVERSION, QPLURAL, body)


def get_queue(api: client.ApiClient, name: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
        QGROUP, QVERSION, QPLURAL, name
    )
    return dict(found)


def gpu_pod(
    cluster: Cluster,
    namespace: str,
    name: str,
    labels: dict[str, str] | None = None,
    gpus: int = 1,
    **spec: Any,
) -> None:
    """A gated pod with its own claim for `gpus` whole GPUs."""
    request = {"deviceClassName": "gpu.dra-driver.dev", "count": gpus}
    claimed_pod(cluster, namespace, name, request, labels, **spec)


def claimed_pod(
    cluster: Cluster,
    namespace: str,
    name: str,
    request: dict[str, Any],
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> None:
    """A gated pod with its own claim, of one request."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }
    cluster.objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", claim
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "schedulingGates": [{"name": GATE}],
            **spec,
        },
    }
    cluster.core.create_namespaced_pod(namespace, pod)


def read_pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = cluster.core.read_namespaced_pod(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return dict(cluster.api.sanitize_for_serialization(found))


def gated(cluster: Cluster, namespace: str, name: str) -> bool:
    pod = read_pod(cluster, namespace, name)
    assert pod is not None, f"pod {namespace}/{name} is gone"
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


def condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    pod = read_pod(cluster, namespace, name)
    assert pod is not None
    return next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind),
        None,
    )


def allocated_device(cluster: Cluster, namespace: str, name: str) -> str | None:
    found: Any = cluster.objects.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", name
    )
    allocation = (found.get("status") or {}).get("allocation")
    return None if not allocation else str(allocation["devices"]["results"][0]["device"])


async def passes(daemon: ControllerDaemon, count: int = 1) -> None:
    """Each pass with what it leaves running (evictions, reports), and the gate lifts of what
    it decided once the settle time is over."""
    for _ in range(count):
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        due = daemon.reconciler.next_deadline()
        if due is not None and daemon.reconciler.state.settling:
            await eventually(lambda d=due: time.monotonic() >= d, what="the settle time")
            await daemon.reconciler.run_pass()
            await daemon.reconciler.drain()


async def queue_status(
    daemon: ControllerDaemon, api: client.ApiClient, name: str, check: Any
) -> dict[str, Any]:
    """The queue's status once `check` holds: status writes wait out their interval, so
    passes run until it is written."""
    deadline = time.monotonic() + 10
    while True:
        status = get_queue(api, name).get("status") or {}
        if check(status):
            return dict(status)
        assert time.monotonic() < deadline, f"queue {name} status is {status}"
        due = daemon.reconciler.queue_status.due
        if due is not None:
            await eventually(lambda d=due: time.monotonic() >= d, what="the status interval")
        await daemon.reconciler.run_pass()


async def known(daemon: ControllerDaemon, *pods: tuple[str, str]) -> None:
    """The pods and their claims are in the controller's view (they come on two watches: a pass
    run while a pod's claim is still on its way only finds the pod waiting for it)."""

    def seen() -> bool:
        found = [daemon.view.pods.get(p) for p in pods]
        return all(pod is not None and daemon.view.pod_claims(pod) is not None for pod in found)

    await eventually(seen, what="pods and their claims in view")


def release_claims_of_gone_pods(cluster: Cluster, namespace: str) -> None:
    """What kubelet and the resourceclaim controller do once a pod is gone: drop it from its
    claims' `reservedFor`."""
    live = {p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items}
    found: Any = cluster.objects.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims"
    )
    for claim in found["items"]:
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        kept = [r for r in reserved if r["uid"] in live]
        if kept != reserved:
            cluster.objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "resourceclaims",
                claim["metadata"]["name"],
                {"status": {"reservedFor": kept or None}},
            )


async def a_borrows_two(cluster: Cluster, api: client.ApiClient) -> ControllerDaemon:
    """Queue a's pods a1 and a2 placed (a controller driven pass by pass, returned running)."""
    gpu_pod(cluster, "qa", "a1")
    gpu_pod(cluster, "qa", "a2")
    daemon = await manual_controller(api, settle_s=0.0)
    await known(daemon, ("qa", "a1"), ("qa", "a2"))
    await passes(daemon)
    assert not gated(cluster, "qa", "a1") and not gated(cluster, "qa", "a2")
    return daemon


async def gone_and_released(daemon: ControllerDaemon, cluster: Cluster, name: str) -> None:
    """Pod qa/`name` was evicted; kubelet and the claim controller let it go, and the view has
    seen its claim released."""
    await eventually(lambda: read_pod(cluster, "qa", name) is None, what=f"{name} evicted")
    release_claims_of_gone_pods(cluster, "qa")
    await eventually(
        lambda: daemon.view.claims[("qa", name)].get("status", {}).get("reservedFor") is None,
        what=f"{name}'s claim released in the view",
    )


async def test_a_victims_event_waits_for_the_allocation_work_to_pause(
    server: ApiServer, api: client.ApiClient
) -> None:
    """The eviction goes at once; the Event saying why waits while allocation work goes on
    (here: held open by the test), as the waiting pods' reports do."""
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await a_borrows_two(cluster, api)
    reconciler = daemon.reconciler

    def reasons() -> list[str | None]:
        return [e.reason for e in cluster.core.list_namespaced_event("qa").items]

    try:
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        with reconciler.reports.busy():
            await reconciler.run_pass()
            while reconciler._running:  # the evictions the pass left running, all done
                await asyncio.wait(list(reconciler._running))
            assert read_pod(cluster, "qa", "a2") is None
            assert reconciler.victim_events.waiting() == 1
            assert "Reclaimed" not in reasons()
        await reconciler.drain()
        assert "Reclaimed" in reasons()
    finally:
        daemon.stop_watches()


async def test_a_queue_below_its_guarantee_reclaims_the_newest_borrowed_pod(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await a_borrows_two(cluster, api)
    try:
        # The queue gauges after the pass: two GPUs used by queue a, the second one borrowed.
        assert daemon.queue_metrics.used.labels("a", "gpu")._value.get() == 2
        assert daemon.queue_metrics.borrowed.labels("a", "gpu")._value.get() == 1
        freed = allocated_device(cluster, "qa", "a2")
        assert freed is not None

        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        # a2 is the borrowed one (a1 came first and fits the guarantee): evicted, with why.
        gpu_pod(cluster, "qa", "a3")  # arrives while a2 goes: the GPU is held for b1
        await gone_and_released(daemon, cluster, "a2")
        assert read_pod(cluster, "qa", "a1") is not None
        reasons = [e.reason for e in cluster.core.list_namespaced_event("qa").items]
        assert "Reclaimed" in reasons
        evictions = daemon.queue_metrics.evictions.labels(queue="b", victim_queue="a")
        assert evictions._value.get() == 1
        assert gated(cluster, "qb", "b1")

        # One pass deallocates a2's claim and, once the view has it free, gives the held GPU
        # to b1, even though a new pod of queue a arrived first and would take it otherwise.
        await known(daemon, ("qa", "a3"))
        await passes(daemon)
        assert allocation_of(daemon.view.claims[("qa", "a2")]) is None
        assert not gated(cluster, "qb", "b1")
        assert allocated_device(cluster, "qb", "b1") == freed
        assert gated(cluster, "qa", "a3")
        await queue_status(daemon, api, "b", lambda s: s.get("used", {}).get("gpu") == "1")
    finally:
        daemon.stop_watches()


async def test_a_pass_writes_its_decisions_while_its_evictions_are_still_going_out(
    server: ApiServer, api: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three GPUs: a holds two (one borrowed), one is free. b1 takes the free one and b2 reclaims
    # a2, in the same pass; neither b1's allocation nor the end of the pass waits for a2's
    # eviction to be answered (the next pass need not wait for it either).
    cluster = make_cluster(server, api, "H100-SXM5-80GB:3")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "2"})
    daemon = await a_borrows_two(cluster, api)
    controller_api = daemon.reconciler.api
    evict = controller_api.evict_pod
    answer = threading.Event()

    def slow_eviction(pod: Any) -> None:
        answer.wait(30)  # the API server answers once the test has looked
        evict(pod)

    monkeypatch.setattr(controller_api, "evict_pod", slow_eviction)
    try:
        gpu_pod(cluster, "qb", "b1")
        gpu_pod(cluster, "qb", "b2")
        await known(daemon, ("qb", "b1"), ("qb", "b2"))
        running = asyncio.ensure_future(daemon.reconciler.run_pass())
        try:
            await eventually(
                lambda: allocated_device(cluster, "qb", "b1") is not None,
                timeout=10,
                what="b1's claim written while a2's eviction is unanswered",
            )
            assert read_pod(cluster, "qa", "a2") is not None
            await asyncio.wait_for(running, 10)  # the pass is over; the eviction is not
            assert read_pod(cluster, "qa", "a2") is not None
        finally:
            answer.set()
            await running
        await daemon.reconciler.drain()
        assert read_pod(cluster, "qa", "a2") is None
        assert ("qb", "b2") in daemon.reconciler.queues.holds
    finally:
        daemon.stop_watches()


async def test_a_borrowed_gang_is_reclaimed_whole(server: ApiServer, api: client.ApiClient) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"])
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    gang = {f"{DRIVER}/gang": "g", f"{DRIVER}/gang-size": "2"}
    gpu_pod(cluster, "qa", "g1", labels=gang)
    gpu_pod(cluster, "qa", "g2", labels=gang)
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, ("qa", "g1"), ("qa", "g2"))
        await passes(daemon)
        assert not gated(cluster, "qa", "g1") and not gated(cluster, "qa", "g2")
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        # One GPU would do for b1, but the gang's members only run together: both go.
        await eventually(
            lambda: read_pod(cluster, "qa", "g1") is None and read_pod(cluster, "qa", "g2") is None,
            what="the whole gang evicted",
        )
        evictions = daemon.queue_metrics.evictions.labels(queue="b", victim_queue="a")
        assert evictions._value.get() == 2
    finally:
        daemon.stop_watches()


async def test_reclaim_never_evicts_nothing_and_says_why(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"}, reclaim="Never")
    daemon = await a_borrows_two(cluster, api)
    try:
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        assert read_pod(cluster, "qa", "a2") is not None
        found = condition(cluster, "qb", "b1", f"{DRIVER}/DevicesAllocated")
        assert found is not None and found["status"] == "False"
        assert "reclaim policy is Never" in found["message"]
        assert "queue b is below its guarantee" in found["message"]
    finally:
        daemon.stop_watches()


async def test_pods_within_the_guarantee_are_never_evicted(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "2"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await a_borrows_two(cluster, api)
    try:
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        assert read_pod(cluster, "qa", "a1") is not None
        assert read_pod(cluster, "qa", "a2") is not None
        found = condition(cluster, "qb", "b1", f"{DRIVER}/DevicesAllocated")
        assert found is not None
        assert "no pod on borrowed capacity would make room" in found["message"]
        # Reclaim could not help: the allocator's explanation is made and shown after all.
        assert "no node fits (1 tried): node-1:" in found["message"]
        assert "already allocated" in found["message"]
    finally:
        daemon.stop_watches()


async def test_across_organisations_a_team_inside_its_organisations_guarantee_keeps_its_pods(
    server: ApiServer, api: client.ApiClient
) -> None:
    # Team a holds a GPU past its own guarantee, but its organisation holds only its own two:
    # team b of another organisation, short of its guarantee, finds nothing borrowed.
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    queue(api, "org-x", guaranteed={"gpu": "2"})
    queue(api, "a", parent="org-x", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "org-y", guaranteed={"gpu": "1"})
    queue(api, "b", parent="org-y", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await a_borrows_two(cluster, api)
    try:
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        assert read_pod(cluster, "qa", "a1") is not None
        assert read_pod(cluster, "qa", "a2") is not None
        found = condition(cluster, "qb", "b1", f"{DRIVER}/DevicesAllocated")
        assert found is not None
        assert "no pod on borrowed capacity would make room" in found["message"]
    finally:
        daemon.stop_watches()


def half_pod(cluster: Cluster, namespace: str, name: str, priority: int = 0) -> None:
    """A gated pod with its own claim for a 3g.40gb MIG slice: half of an H100."""
    request = {
        "deviceClassName": "mig.dra-driver.dev",
        "selectors": [
            {"cel": {"expression": 'device.attributes["gpu.dra-driver.dev"].profile == "3g.40gb"'}}
        ],
    }
    claimed_pod(cluster, namespace, name, request, priority=priority)


async def test_when_borrowed_halves_free_no_whole_gpu_the_lenders_surplus_goes(
    server: ApiServer, api: client.ApiClient
) -> None:
    """Queues a and b, each guaranteed half a GPU, hold a whole one each as MIG halves laid
    out crosswise: gpu-0 holds a's protected half and b's borrowed one, gpu-1 the other two.
    Queue c, owed a GPU, waits for a whole one: the borrowed halves alone would free half of
    each GPU, so one half of each lender's on one GPU goes, and both still hold their half."""
    cluster = make_cluster(server, api, "H100-SXM5-80GB:2")
    cluster.core.create_namespace({"metadata": {"name": "qc"}})
    for name, spaces, half in (("a", ["qa"], "0.5"), ("b", ["qb"], "0.5"), ("c", ["qc"], "1")):
        queue(api, name, namespaces=spaces, guaranteed={"gpu": half})
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        # One at a time, so that they pack in this order; priority makes a1 and b1 protected.
        for namespace, name, priority in (
            ("qa", "a1", 1),
            ("qb", "b2", 0),
            ("qb", "b1", 1),
            ("qa", "a2", 0),
        ):
            half_pod(cluster, namespace, name, priority)
            await known(daemon, (namespace, name))
            await passes(daemon)
            assert not gated(cluster, namespace, name)
        gpus = {
            name: str(allocated_device(cluster, f"q{name[0]}", name)).split("-mig-")[0]
            for name in ("a1", "b2", "b1", "a2")
        }
        assert gpus == {"a1": "gpu-0", "b2": "gpu-0", "b1": "gpu-1", "a2": "gpu-1"}

        gpu_pod(cluster, "qc", "c1")
        await known(daemon, ("qc", "c1"))
        await passes(daemon)
        for namespace, name in (("qa", "a2"), ("qb", "b1")):
            await eventually(
                lambda n=namespace, p=name: read_pod(cluster, n, p) is None, what=f"{name} evicted"
            )
            release_claims_of_gone_pods(cluster, namespace)
        assert read_pod(cluster, "qa", "a1") is not None
        assert read_pod(cluster, "qb", "b2") is not None
        await eventually(
            lambda: all(
                daemon.view.claims[k].get("status", {}).get("reservedFor") is None
                for k in (("qa", "a2"), ("qb", "b1"))
            ),
            what="the victims' claims released in the view",
        )
        await passes(daemon)
        assert not gated(cluster, "qc", "c1")
        assert allocated_device(cluster, "qc", "c1") == "gpu-1"
    finally:
        daemon.stop_watches()


async def test_a_queue_below_its_guarantee_goes_first_and_limits_hold(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:4")
    queue(api, "a", namespaces=["qa"], limit={"gpu": "2"})
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "1"})
    # Queue a's pods come first in time, but b is below its guarantee: b1 is decided first.
    for name in ("a1", "a2", "a3"):
        gpu_pod(cluster, "qa", name)
    gpu_pod(cluster, "qb", "b1")
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, ("qa", "a1"), ("qa", "a2"), ("qa", "a3"), ("qb", "b1"))
        await passes(daemon)
        assert not gated(cluster, "qb", "b1")
        assert not gated(cluster, "qa", "a1") and not gated(cluster, "qa", "a2")
        assert gated(cluster, "qa", "a3")
        found = condition(cluster, "qa", "a3", f"{DRIVER}/DevicesAllocated")
        assert found is not None and "would pass its gpu limit" in found["message"]
        status = await queue_status(daemon, api, "a", lambda s: s.get("used", {}).get("gpu") == "2")
        assert status["borrowed"]["gpu"] == "2"
        assert status["pending"] == 1
    finally:
        daemon.stop_watches()


async def test_a_bad_queue_is_reported_and_ignored(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster = make_cluster(server, api, "H100-SXM5-80GB:1")
    queue(api, "orphan", namespaces=["qa"], parent="missing", guaranteed={"gpu": "1"})
    gpu_pod(cluster, "qa", "a1")
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, ("qa", "a1"))
        await passes(daemon)
        assert not gated(cluster, "qa", "a1")  # served by the default queue
        status = await queue_status(daemon, api, "orphan", lambda s: bool(s.get("conditions")))
        conditions = status["conditions"]
        valid = next(c for c in conditions if c["type"] == "Valid")
        assert valid["status"] == "False"
        assert "spec.parent" in valid["message"] and "missing does not exist" in valid["message"]
    finally:
        daemon.stop_watches()


def test_the_controller_calls_the_queue_resource_the_crd_defines() -> None:
    from controller import kube_calls

    assert (kube_calls.QUEUE_GROUP, kube_calls.QUEUE_VERSION, kube_calls.QUEUES) == (
        QGROUP,
        QVERSION,
        QPLURAL,
    )


async def test_a_team_held_back_by_its_organisations_limit_reclaims_from_a_sibling(
    server: ApiServer, api: client.ApiClient
) -> None:
    # A free GPU is not enough: the organisation's limit of 2 is reached by team a, which
    # borrowed team b's idle share. Team b (within its guarantee) gets it back by reclaim.
    cluster = make_cluster(server, api, "H100-SXM5-80GB:3")
    queue(api, "org", guaranteed={"gpu": "2"}, limit={"gpu": "2"})
    queue(api, "a", parent="org", namespaces=["qa"], guaranteed={"gpu": "1"})
    queue(api, "b", parent="org", namespaces=["qb"], guaranteed={"gpu": "1"})
    daemon = await a_borrows_two(cluster, api)
    try:
        gpu_pod(cluster, "qb", "b1")
        await known(daemon, ("qb", "b1"))
        await passes(daemon)
        await gone_and_released(daemon, cluster, "a2")
        assert read_pod(cluster, "qa", "a1") is not None
        await passes(daemon, 3)
        assert not gated(cluster, "qb", "b1")
    finally:
        daemon.stop_watches()


async def two_nodes_lent(server: ApiServer, api: client.ApiClient) -> tuple[Cluster, Any]:
    """2 nodes x 8 H100; queues a and b guaranteed 8 each; 16 one-GPU pods of queue a placed,
    alternately pinned to the two nodes, so the 8 borrowed ones (the newest) are 4 per node."""
    cluster = Cluster(server, api)
    cluster.add_classes()
    cluster.add_nodes(2)
    for namespace in ("qa", "qb"):
        cluster.core.create_namespace({"metadata": {"name": namespace}})
    queue(api, "a", namespaces=["qa"], guaranteed={"gpu": "8"}, reclaim="Borrowed")
    queue(api, "b", namespaces=["qb"], guaranteed={"gpu": "8"}, reclaim="Borrowed")
    names = [f"a{i:02d}" for i in range(1, 17)]
    for index, name in enumerate(names):
        node = f"node-{index % 2 + 1}"
        gpu_pod(cluster, "qa", name, nodeSelector={"kubernetes.io/hostname": node})
    daemon = await manual_controller(api, settle_s=0.0)
    await known(daemon, *(("qa", n) for n in names))
    await passes(daemon)
    assert not any(gated(cluster, "qa", n) for n in names)
    return cluster, daemon


def trainers(cluster: Cluster, **spec: Any) -> None:
    """Queue b's gang of two pods, each asking for 4 GPUs on one node."""
    gang = {f"{DRIVER}/gang": "trainers", f"{DRIVER}/gang-size": "2"}
    for name in ("t0", "t1"):
        gpu_pod(cluster, "qb", name, labels=gang, gpus=4, **spec)


def held_devices(cluster: Cluster) -> list[tuple[str, str]]:
    """Every (pool, device) that an allocated claim holds, once per claim that holds it."""
    held = []
    for namespace in ("qa", "qb"):
        found: Any = cluster.objects.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourceclaims"
        )
        for claim in found["items"]:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                held.append((result["pool"], result["device"]))
    return held


async def test_a_waiting_gang_reclaims_across_two_nodes(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster, daemon = await two_nodes_lent(server, api)
    try:
        started = time.monotonic()
        trainers(cluster)
        await known(daemon, ("qb", "t0"), ("qb", "t1"))
        await passes(daemon)
        # 4 borrowed pods per node: neither node alone can take the gang, both together can.
        evicted = [f"a{i:02d}" for i in range(9, 17)]
        await eventually(
            lambda: all(read_pod(cluster, "qa", n) is None for n in evicted),
            what="the 8 borrowed pods evicted",
        )
        kept = [f"a{i:02d}" for i in range(1, 9)]
        assert all(read_pod(cluster, "qa", n) is not None for n in kept)
        found = condition(cluster, "qb", "t0", f"{DRIVER}/DevicesAllocated")
        assert found is not None and "gang qb/trainers" in found["message"]
        assert "node(s) node-1, node-2" in found["message"]
        events = [e.message for e in cluster.core.list_namespaced_event("qa").items]
        assert any("for gang qb/trainers" in (m or "") for m in events)
        gpu_pod(cluster, "qa", "a17")  # arrives while they go: the freed GPUs are held
        await known(daemon, ("qa", "a17"))
        await passes(daemon)
        found = condition(cluster, "qb", "t1", f"{DRIVER}/DevicesAllocated")
        assert found is not None
        assert (
            "waiting for the devices of 8 evicted pod(s) on node(s) node-1, node-2"
            in (found["message"])
        )
        release_claims_of_gone_pods(cluster, "qa")
        await eventually(
            lambda: all(
                daemon.view.claims[("qa", n)].get("status", {}).get("reservedFor") is None
                for n in evicted
            ),
            what="the victims' claims released in the view",
        )
        # One pass deallocates the victims' claims and, once the view has them free, places
        # the gang on their devices.
        await passes(daemon)
        assert all(allocation_of(daemon.view.claims[("qa", n)]) is None for n in evicted)
        assert not gated(cluster, "qb", "t0") and not gated(cluster, "qb", "t1")
        assert time.monotonic() - started < 30
        assert gated(cluster, "qa", "a17")
        nodes = {
            allocation_node(allocation_of(daemon.view.claims[("qb", n)]) or {})
            for n in ("t0", "t1")
        }
        assert nodes == {"node-1", "node-2"}
        held = held_devices(cluster)
        assert len(held) == 16 and len(set(held)) == 16  # 8 of a and the gang's 8, none twice
        assert all(read_pod(cluster, "qa", n) is not None for n in kept)
        evictions = daemon.queue_metrics.evictions.labels(queue="b", victim_queue="a")
        assert evictions._value.get() == 8
    finally:
        daemon.stop_watches()


async def test_a_gang_that_would_not_fit_after_reclaim_evicts_nothing_and_says_why(
    server: ApiServer, api: client.ApiClient
) -> None:
    cluster, daemon = await two_nodes_lent(server, api)
    try:
        # Both members must run on node-1, where only 4 GPUs are borrowed.
        trainers(cluster, nodeSelector={"kubernetes.io/hostname": "node-1"})
        await known(daemon, ("qb", "t0"), ("qb", "t1"))
        await passes(daemon)
        found = condition(cluster, "qb", "t1", f"{DRIVER}/DevicesAllocated")
        assert found is not None and found["status"] == "False"
        assert "would not make room for the whole gang qb/trainers" in found["message"]
        assert "even with every pod on borrowed capacity evicted" in found["message"]
        assert "nothing is evicted" in found["message"]
        assert daemon.reconciler.queues.evicting == {}
        assert all(read_pod(cluster, "qa", f"a{i:02d}") is not None for i in range(1, 17))
    finally:
        daemon.stop_watches()
