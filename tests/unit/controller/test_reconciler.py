"""The reconciler's pass against the embedded API server, through the real client, driven one
pass at a time: conflicts (409) and missing objects (404) on the way, retries, other controllers'
gates, and the re-check at the end of the settle time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from localcluster.apiserver import ApiServer
from tests.integration.allocation.harness import (
    GATE,
    GROUP,
    VERSION,
    Cluster,
    claim,
    eventually,
    manual_controller,
    pod,
)

OTHER_GATE = "quota.example.com/admission"


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(port=0) as running:
        yield running


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


@pytest.fixture
def cluster(server: ApiServer, api: client.ApiClient) -> Cluster:
    made = Cluster(server, api)
    made.add_classes()
    made.add_nodes(1, gpus="H100-SXM5-80GB:1")
    return made


def conflicts(daemon: ControllerDaemon, stage: str) -> float:
    value: float = daemon.metrics.conflicts.labels(stage)._value.get()
    return value


async def known(daemon: ControllerDaemon, *pods: str) -> None:
    await eventually(
        lambda: all(("default", p) in daemon.view.pods for p in pods), what="pods in view"
    )


async def settled(daemon: ControllerDaemon) -> None:
    due = daemon.reconciler.next_deadline()
    assert due is not None, "nothing is settling"
    await eventually(lambda: time.monotonic() >= due, what="the settle time")


class _Touching(ControllerApi):
    """Another writer changes the object between the controller's read and its write."""

    def __init__(self, inner: ControllerApi, api: client.ApiClient, method: str) -> None:
        self.__dict__.update(inner.__dict__)
        self._api = api
        self._method = method
        self.touched = 0

    def _touch(self, obj: Any, resource: str) -> None:
        meta = obj["metadata"]
        patch = {"metadata": {"labels": {"touched": "yes"}}}
        if resource == "pods":
            client.CoreV1Api(self._api).patch_namespaced_pod(meta["name"], "default", patch)
        else:
            client.CustomObjectsApi(self._api).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                resource,
                meta["name"],
                patch,
                _content_type="application/merge-patch+json",
            )
        self.touched += 1

    def patch_claim(self, claim: Any, metadata: Any) -> dict[str, Any]:
        if self._method == "patch_claim" and not self.touched:
            self._touch(claim, "resourceclaims")
        return super().patch_claim(claim, metadata)

    def patch_pod(self, pod: Any, spec: Any) -> dict[str, Any]:
        if self._method == "patch_pod" and not self.touched:
            self._touch(pod, "pods")
        return super().patch_pod(pod, spec)


def use(daemon: ControllerDaemon, calls: ControllerApi) -> None:
    daemon.reconciler.api = calls
    daemon.reconciler.writer.api = calls


async def test_a_conflict_while_marking_is_decided_again_next_pass(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.0)
    touching = _Touching(daemon.calls, api, "patch_claim")
    use(daemon, touching)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert touching.touched == 1
        assert conflicts(daemon, "write") == 1
        assert not cluster.get_claim("c").get("status", {}).get("allocation")
        assert cluster.gated("p")
        assert daemon.view.assumed == {}  # the failed decision holds nothing
        # The pod was queued again; the next pass reads the claim anew and succeeds.
        await eventually(
            lambda: daemon.view.claims[("default", "c")]["metadata"].get("labels"),
            what="the other write in the view",
        )
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        assert not cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_a_conflict_while_lifting_is_retried_and_other_gates_stay(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    body = pod("p", ["c"])
    body["spec"]["schedulingGates"] = [{"name": OTHER_GATE}, {"name": GATE}]
    cluster.create_pod(body)
    daemon = await manual_controller(api, settle_s=0.0)
    touching = _Touching(daemon.calls, api, "patch_pod")
    use(daemon, touching)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert touching.touched == 1
        assert cluster.gated("p")  # the lift met a 409 and is queued again
        assert cluster.get_claim("c")["status"]["allocation"]
        await eventually(
            lambda: daemon.view.pods[("default", "p")]["metadata"].get("labels", {}).get("touched"),
            what="the other write in the view",
        )
        for _ in range(3):
            if not cluster.gated("p"):
                break
            await daemon.reconciler.run_pass()
        assert not cluster.gated("p")
        assert cluster.get_pod("p")["spec"]["schedulingGates"] == [{"name": OTHER_GATE}]
    finally:
        daemon.stop_watches()


async def test_a_pod_deleted_during_the_settle_time_is_forgotten(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.3)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        cluster.core.delete_namespaced_pod("p", "default")
        await settled(daemon)
        await daemon.reconciler.run_pass()  # the lift gets a 404: not an error
        assert daemon.reconciler.next_deadline() is None
        assert ("default", "p") not in daemon.reconciler._queue
    finally:
        daemon.stop_watches()


async def test_a_claim_deleted_before_the_write_is_decided_again(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.0)

    class _Deleting(ControllerApi):
        def __init__(self, inner: ControllerApi) -> None:
            self.__dict__.update(inner.__dict__)

        def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
            cluster.objects.delete_namespaced_custom_object(
                GROUP, VERSION, "default", "resourceclaims", claim["metadata"]["name"]
            )
            return super().patch_claim_status(claim, status)

    use(daemon, _Deleting(daemon.calls))
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert conflicts(daemon, "write") == 1
        assert cluster.gated("p")
        assert daemon.view.assumed == {}
    finally:
        daemon.stop_watches()


async def test_an_allocation_landing_while_settling_is_withdrawn_before_the_gate_lifts(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    daemon = await manual_controller(api, settle_s=0.3)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        allocation = cluster.get_claim("ours")["status"]["allocation"]
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "theirs",
            {"status": {"allocation": allocation}},
        )
        await eventually(
            lambda: (daemon.view.claims[("default", "theirs")].get("status") or {}).get(
                "allocation"
            ),
            what="their allocation in the view",
        )
        await settled(daemon)
        await daemon.reconciler.run_pass()
        assert cluster.gated("p")
        assert "allocation" not in cluster.get_claim("ours").get("status", {})
        assert conflicts(daemon, "settled") == 1
    finally:
        daemon.stop_watches()
