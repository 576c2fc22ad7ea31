"""The reconciler's pass against the embedded API server, through the real client, driven one
pass at a time: conflicts (409) and missing objects (404) on the way, retries, other controllers'
gates, and the re-check at the end of the settle time."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import datetime
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from controller.view import allocation_of
from dra_driver.checker.inputs import node_name_selector
from tests.integration.allocation.harness import (
    DRIVER,
    FINALIZER,
    GATE,
    GROUP,
    VERSION,
    Cluster,
    claim,
    eventually,
    held_until_theirs_lets_go,
    manual_controller,
    pod,
)

OTHER_GATE = "quota.example.com/admission"


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
    daemon.reconciler.reports.api = calls


@contextlib.asynccontextmanager
async def controlled(api: client.ApiClient, **overrides: Any) -> AsyncIterator[ControllerDaemon]:
    """The controller with its watches synced; a pass runs only when the test runs one."""
    daemon = await manual_controller(api, **overrides)
    try:
        yield daemon
    finally:
        daemon.stop_watches()


async def test_a_conflict_while_marking_is_decided_again_next_pass(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        touching = _Touching(daemon.calls, api, "patch_claim")
        use(daemon, touching)
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


async def test_a_conflict_while_lifting_is_retried_and_other_gates_stay(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    body = pod("p", ["c"])
    body["spec"]["schedulingGates"] = [{"name": OTHER_GATE}, {"name": GATE}]
    cluster.create_pod(body)
    async with controlled(api, settle_s=0.0) as daemon:
        touching = _Touching(daemon.calls, api, "patch_pod")
        use(daemon, touching)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        # The lift met a 409 (another writer changed the pod after the copy it started from):
        # it read the pod again and lifted in the same go, with no second decision and settle.
        assert touching.touched == 1
        assert not cluster.gated("p")
        assert cluster.get_pod("p")["spec"]["schedulingGates"] == [{"name": OTHER_GATE}]
        assert cluster.get_pod("p")["metadata"]["labels"]["touched"] == "yes"
        assert daemon.metrics.allocations._value.get() == 1
        assert ("default", "p") not in daemon.reconciler.state.queue


async def test_a_pod_deleted_during_the_settle_time_is_forgotten(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        cluster.core.delete_namespaced_pod("p", "default")
        await settled(daemon)
        await daemon.reconciler.run_pass()  # the lift gets a 404: not an error
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert daemon.reconciler.next_deadline() is None
        assert ("default", "p") not in daemon.reconciler.state.queue


async def test_a_pass_writes_while_every_default_thread_is_taken(
    cluster: Cluster, api: client.ApiClient
) -> None:
    """Evictions, reports and deleted claims run on the loop's default threads by the hundred
    while a queue reclaims; the pass's own writes must not queue behind them."""
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    loop = asyncio.get_running_loop()
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        busy = concurrent.futures.ThreadPoolExecutor(2)
        loop.set_default_executor(busy)
        release = threading.Event()
        blocked = [asyncio.ensure_future(asyncio.to_thread(release.wait)) for _ in range(4)]
        try:
            await asyncio.wait_for(daemon.reconciler.run_pass(), 20)
            assert cluster.get_claim("c")["status"]["allocation"]
            await asyncio.wait_for(daemon.reconciler.run_pass(), 20)  # the gate comes off
            assert not cluster.gated("p")
        finally:
            release.set()
            await asyncio.gather(*blocked)
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor())
            busy.shutdown()


async def test_a_claim_deleted_before_the_write_is_decided_again(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:

        class _Deleting(ControllerApi):
            def __init__(self, inner: ControllerApi) -> None:
                self.__dict__.update(inner.__dict__)

            def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
                cluster.objects.delete_namespaced_custom_object(
                    GROUP, VERSION, "default", "resourceclaims", claim["metadata"]["name"]
                )
                return super().patch_claim_status(claim, status)

        use(daemon, _Deleting(daemon.calls))
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert conflicts(daemon, "write") == 1
        assert cluster.gated("p")
        assert daemon.view.assumed == {}


async def test_an_allocation_landing_while_settling_keeps_the_gate_on_and_is_let_go_after_theirs(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    async with controlled(api, settle_s=0.3) as daemon:
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
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert conflicts(daemon, "settled") == 1
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="p")


class _LandingFirst(ControllerApi):
    """Another allocator gives our devices to the claim `theirs` just before our allocation is
    written; counts the lists of every claim (the fallback when the watch cannot vouch)."""

    def __init__(self, inner: ControllerApi, cluster: Cluster) -> None:
        self.__dict__.update(inner.__dict__)
        self._cluster = cluster
        self.landed = 0
        self.lists = 0

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        if claim["metadata"]["name"] == "ours" and status.get("allocation") and not self.landed:
            self.landed += 1
            self._cluster.objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                "default",
                "resourceclaims",
                "theirs",
                {"status": {"allocation": status["allocation"]}},
            )
        return super().patch_claim_status(claim, status)

    def list_claims(self) -> tuple[list[Any], int]:
        self.lists += 1
        return super().list_claims()


async def test_an_allocation_landing_during_the_write_is_found_at_once_and_held(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    async with controlled(api, settle_s=30.0) as daemon:
        landing = _LandingFirst(daemon.calls, cluster)
        use(daemon, landing)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert landing.landed == 1
        # Their write was committed before ours, so the watch that carries our write carries
        # theirs: the check after the write finds the collision without listing every claim,
        # holds our allocation and settles nothing.
        assert conflicts(daemon, "after-write") == 1
        assert conflicts(daemon, "settled") == 0
        assert landing.lists == 0
        assert cluster.get_claim("theirs")["status"]["allocation"]
        assert daemon.reconciler.next_deadline() is None
        assert daemon.view.assumed == {}
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="p")


def gpu_0_of_node_1() -> dict[str, Any]:
    """The allocation the controller gives a one-GPU claim on the test cluster's only GPU."""
    return {
        "devices": {
            "results": [{"request": "req", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}]
        },
        "nodeSelector": node_name_selector("node-1"),
    }


async def test_a_decision_made_on_a_lagging_view_is_checked_against_a_fresh_list_before_writing(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    marked = claim("ours")
    marked["metadata"]["finalizers"] = [FINALIZER]  # an earlier attempt of ours marked it
    cluster.create_claim(marked)
    async with controlled(api, settle_s=30.0) as daemon:
        landing = _LandingFirst(daemon.calls, cluster)
        use(daemon, landing)
        await eventually(
            lambda: ("default", "ours") in daemon.view.claims, what="the claims in the view"
        )
        # The claims watch lags: another allocator's allocation of the only GPU is not in the
        # view when the pass decides, and no mark of ours is written to wait for.
        for informer in daemon.informers:
            if informer.resource == "resourceclaims":
                informer.stop()
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "theirs",
            {"status": {"allocation": gpu_0_of_node_1()}},
        )
        cluster.create_pod(pod("p", ["ours"]))
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        # Nothing was written: a list of every claim found theirs before our write.
        assert landing.lists == 1
        assert conflicts(daemon, "before-write") == 1
        assert conflicts(daemon, "after-write") == 0
        assert "allocation" not in cluster.get_claim("ours").get("status", {})
        assert cluster.gated("p")


def failures(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.failures._value.get()
    return value


def our_condition(cluster: Cluster, name: str) -> dict[str, Any] | None:
    conditions = (cluster.get_pod(name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == f"{DRIVER}/DevicesAllocated"), None)


class _ServerError(ControllerApi):
    """The API server fails one claim patch with a 500: nothing changed, no event follows."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed = 0

    def patch_claim(self, claim: Any, metadata: Any) -> dict[str, Any]:
        if not self.failed:
            self.failed += 1
            raise client.ApiException(status=500, reason="Internal Server Error")
        return super().patch_claim(claim, metadata)


async def test_a_server_error_while_marking_is_decided_again_next_pass(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        failing = _ServerError(daemon.calls)
        use(daemon, failing)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert failing.failed == 1
        assert conflicts(daemon, "write") == 1
        assert cluster.gated("p")
        await daemon.reconciler.run_pass()  # no event brought it back: the retry did
        assert cluster.get_claim("c")["status"]["allocation"]
        assert not cluster.gated("p")


async def test_a_pod_that_cannot_be_allocated_is_reported_once_and_retried_on_change_only(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster
    cluster.create_pod(pod("p", ["big"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # reports go out after the pass
        assert failures(daemon) == 1
        (event,) = cluster.events_for("p")
        # What `kubectl describe pod` shows: a warning with the reason and the allocator's why.
        assert (event["type"], event["reason"]) == ("Warning", "FailedAllocation")
        assert "2" in event["message"] and "gpu.dra-driver.dev" in event["message"]
        found = our_condition(cluster, "p")
        assert found is not None and found["status"] == "False"
        assert found["reason"] == "Unallocatable"
        # Our own condition write changes the view: the pod is decided again, not reported again.
        await eventually(
            lambda: daemon.view.pods[("default", "p")].get("status", {}).get("conditions"),
            what="the condition in the view",
        )
        generation = daemon.view.generation
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        assert failures(daemon) == 2, (
            f"second pass: view generation {generation} -> {daemon.view.generation}, "
            f"waiting {daemon.reconciler.state.waiting}"
        )
        assert len(cluster.events_for("p")) == 1, cluster.events_for("p")
        # Nothing changed since: the pod waits without being decided again.
        generation = daemon.view.generation
        pod_version = daemon.view.pods[("default", "p")]["metadata"]["resourceVersion"]
        await daemon.reconciler.run_pass()
        assert failures(daemon) == 2, (
            f"third pass decided again: view generation {generation} -> "
            f"{daemon.view.generation}, pod resourceVersion {pod_version} -> "
            f"{daemon.view.pods[('default', 'p')]['metadata']['resourceVersion']}, "
            f"conditions {daemon.view.pods[('default', 'p')].get('status', {}).get('conditions')}"
        )


async def test_a_pod_allocated_after_waiting_gets_its_condition_turned_true(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("first"))
    cluster.create_claim(claim("second"))
    cluster.create_pod(pod("p1", ["first"]))
    cluster.create_pod(pod("p2", ["second"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p1", "p2")
        await daemon.reconciler.run_pass()  # one GPU: p1 gets it, p2 waits
        await daemon.reconciler.drain()  # p2's report goes out once the pass is over
        assert not cluster.gated("p1") and cluster.gated("p2")
        waiting = our_condition(cluster, "p2")
        assert waiting is not None and waiting["status"] == "False"
        # p1 finishes; kubelet lets its claim go; the controller deallocates it, p2 gets it.
        cluster.core.delete_namespaced_pod("p1", "default")
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "first", {"status": {"reservedFor": None}}
        )
        await eventually(
            lambda: (
                not daemon.view.claims[("default", "first")]["status"].get("reservedFor")
                and ("default", "p1") not in daemon.view.pods
            ),
            what="the release in the view",
        )
        for _ in range(3):
            await daemon.reconciler.run_pass()
            if not cluster.gated("p2"):
                break
        assert not cluster.gated("p2")
        found = our_condition(cluster, "p2")
        assert found is not None
        assert (found["status"], found["reason"]) == ("True", "Allocated")
        assert found["message"] == "devices are allocated"
        assert found["lastTransitionTime"] >= waiting["lastTransitionTime"]


async def test_the_condition_time_is_utc_whatever_the_local_zone(
    cluster: Cluster, api: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "JST-9")  # nine hours ahead of UTC, no time zone files needed
    time.tzset()
    try:
        cluster.create_claim(claim("big", count=2))
        cluster.create_pod(pod("p", ["big"]))
        daemon = await manual_controller(api, settle_s=0.0)
        try:
            await known(daemon, "p")
            await daemon.reconciler.run_pass()
            await daemon.reconciler.drain()
        finally:
            daemon.stop_watches()
        found = our_condition(cluster, "p")
        assert found is not None
        written = datetime.datetime.fromisoformat(found["lastTransitionTime"])
        assert written.utcoffset() == datetime.timedelta(0)
        now = datetime.datetime.now(datetime.UTC)
        assert abs((now - written).total_seconds()) < 600
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


async def test_a_report_waits_for_the_pass_that_handed_it_over(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("waits", ["big"]))
    cluster.create_pod(pod("fits", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:

        class _Timed(ControllerApi):
            def __init__(self, inner: ControllerApi) -> None:
                self.__dict__.update(inner.__dict__)
                self.event_at: float | None = None

            def post_pod_event(self, pod: Any, kind: str, reason: str, text: str) -> None:
                self.event_at = time.monotonic()
                super().post_pod_event(pod, kind, reason, text)

        timed = _Timed(daemon.calls)
        use(daemon, timed)
        await known(daemon, "waits", "fits")
        await daemon.reconciler.run_pass()
        ended = time.monotonic()
        await daemon.reconciler.drain()
        assert not cluster.gated("fits")
        # The pass wrote, re-checked and lifted a gate before the report of the pod that
        # waits was sent: the report gave way to the allocation work.
        assert timed.event_at is not None and timed.event_at >= ended
        assert [e["reason"] for e in cluster.events_for("waits")] == ["FailedAllocation"]


async def test_a_pod_deleted_before_its_report_is_written_is_not_an_error(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))
    cluster.create_pod(pod("p", ["big"]))
    async with controlled(api, settle_s=0.0) as daemon:

        class _DeletedMeanwhile(ControllerApi):
            def __init__(self, inner: ControllerApi) -> None:
                self.__dict__.update(inner.__dict__)

            def post_pod_event(self, pod: Any, kind: str, reason: str, text: str) -> None:
                cluster.core.delete_namespaced_pod(pod["metadata"]["name"], "default")
                deadline = time.monotonic() + 10
                while ("default", "p") in daemon.view.pods and time.monotonic() < deadline:
                    time.sleep(0.01)  # the watch runs on the loop this call was handed off from
                super().post_pod_event(pod, kind, reason, text)

        use(daemon, _DeletedMeanwhile(daemon.calls))
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the condition patch meets a 404, and says so
        assert ("default", "p") not in daemon.view.pods
        assert daemon.reconciler.passes == 1


def pending(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.pending._value.get()
    return value


async def test_a_pod_changed_while_settling_has_its_gate_lifted_from_its_current_copy(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.gated("p")  # settling
        cluster.core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"x": "y"}}})
        await eventually(
            lambda: daemon.view.pods[("default", "p")]["metadata"].get("labels", {}).get("x"),
            what="the change in the view",
        )
        await settled(daemon)
        await daemon.reconciler.run_pass()  # the lift's precondition is the pod as it is now
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert not cluster.gated("p")


async def test_a_deleted_pod_is_forgotten_and_a_new_one_of_its_name_is_reported_afresh(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster
    cluster.create_pod(pod("p", ["big"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        assert len(cluster.events_for("p")) == 1
        assert pending(daemon) == 1
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(lambda: ("default", "p") not in daemon.view.pods, what="the deletion")
        assert pending(daemon) == 0
        cluster.create_pod(pod("p", ["big"]))
        await known(daemon, "p")
        assert pending(daemon) == 1
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        assert len(cluster.events_for("p")) == 2  # the new pod is told why it waits


async def test_an_earlier_allocation_that_collides_is_held_and_let_go_after_theirs(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    async with controlled(api, settle_s=30.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        allocation = cluster.get_claim("ours")["status"]["allocation"]
        # The lead changes hands while the decision settles; meanwhile another allocator
        # gives the same GPU to another claim.
        daemon.reconciler.step_down()
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
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()  # our earlier allocation is found colliding
        assert conflicts(daemon, "before-write") == 1
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="p")


async def test_a_claim_allocated_by_someone_else_while_settling_keeps_their_allocation(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        # Before the gate lifts, someone deallocates the claim and another allocator allocates
        # it anew: another device, reserved for its own pod (an allocation is immutable once
        # set, so kube-apiserver takes this only as two writes).
        theirs = copy.deepcopy(cluster.get_claim("ours")["status"]["allocation"])
        theirs["devices"]["results"][0]["device"] = "gpu-0-mig-1g10gb-0"
        their_pod = {"resource": "pods", "name": "theirs", "uid": "uid-theirs"}
        status = {"allocation": theirs, "reservedFor": [their_pod]}
        for write in ({"allocation": None, "reservedFor": None}, status):
            cluster.objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, "default", "resourceclaims", "ours", {"status": write}
            )
        await eventually(
            lambda: allocation_of(daemon.view.claims[("default", "ours")]) == theirs,
            what="their allocation in the view",
        )
        # The gate lift starts on its own once the settle time is over (no pass needed).
        await eventually(lambda: conflicts(daemon, "settled") == 1, what="the check at the lift")
        await daemon.reconciler.drain()
        # The decision is dropped, not lifted on a claim that no longer holds what it chose, and
        # the withdrawal leaves their allocation and reservation alone.
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")
        assert cluster.get_claim("ours")["status"] == status


def allocation_in_view(daemon: ControllerDaemon, name: str) -> Any:
    return allocation_of(daemon.view.claims.get(("default", name)))


async def give_to_theirs(cluster: Cluster, daemon: ControllerDaemon, allocation: Any) -> None:
    """Another allocator writes `allocation` (devices we hold) into the claim `theirs`."""
    cluster.objects.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        "resourceclaims",
        "theirs",
        {"status": {"allocation": allocation}},
    )
    await eventually(
        lambda: allocation_in_view(daemon, "theirs") == allocation,
        what="their allocation in the view",
    )


async def test_a_claim_deleted_outright_while_settling_keeps_the_gate_on(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        # Someone strips our finalizer and deletes the claim before the settle time ends.
        cluster.objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "c",
            {"metadata": {"finalizers": []}},
            _content_type="application/merge-patch+json",
        )
        cluster.objects.delete_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", "c"
        )
        await eventually(lambda: ("default", "c") not in daemon.view.claims, what="deletion")
        await settled(daemon)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")  # a pod whose claim is gone must not start


async def collide_after_takeover(
    cluster: Cluster, daemon: ControllerDaemon, earlier: str, *, clear: str | None = None
) -> None:
    """The lead changes hands while a decision settles; meanwhile another allocator gives the
    devices of our claim `earlier` to the claim `theirs` (and, with `clear`, someone removes
    the allocation of our claim `clear`). The new term then runs a pass."""
    allocation = cluster.get_claim(earlier)["status"]["allocation"]
    daemon.reconciler.step_down()
    if clear is not None:
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            clear,
            {"status": {"allocation": None, "reservedFor": None}},
        )
        await eventually(lambda: allocation_in_view(daemon, clear) is None, what="cleared")
    await give_to_theirs(cluster, daemon, allocation)
    daemon.reconciler.take_over()
    await daemon.reconciler.run_pass()


async def test_an_earlier_allocation_that_collides_is_found_behind_a_claim_allocated_anew(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # The pod's first claim is allocated again in the new term; its second, allocated in the
    # last term, now collides: it must still be checked.
    cluster.create_claim(claim("theirs", kind="mig"))
    cluster.create_claim(claim("first", kind="mig"))
    cluster.create_claim(claim("second", kind="mig"))
    cluster.create_pod(pod("p", ["first", "second"]))
    async with controlled(api, settle_s=30.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await collide_after_takeover(cluster, daemon, "second", clear="first")
        assert conflicts(daemon, "before-write") == 1
        assert "allocation" not in cluster.get_claim("first").get("status", {})
        await held_until_theirs_lets_go(cluster, daemon, ours="second", theirs="theirs", pod="p")


async def test_an_earlier_allocation_that_collides_is_found_behind_a_claim_not_ours(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # The pod's first claim was allocated by someone else (no finalizer of ours): it is not
    # ours to question, but our own earlier claim after it still is.
    cluster.create_claim(claim("theirs", kind="mig"))
    cluster.create_claim(claim("shared", kind="mig"))
    cluster.create_claim(claim("ours", kind="mig"))
    cluster.create_pod(pod("p", ["shared", "ours"]))
    async with controlled(api, settle_s=30.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        cluster.objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "shared",
            {"metadata": {"finalizers": []}},
            _content_type="application/merge-patch+json",
        )
        await eventually(
            lambda: not daemon.view.claims[("default", "shared")]["metadata"].get("finalizers"),
            what="the finalizer gone in the view",
        )
        shared = cluster.get_claim("shared")["status"]["allocation"]
        await collide_after_takeover(cluster, daemon, "ours")
        assert conflicts(daemon, "before-write") == 1
        assert cluster.get_claim("shared")["status"]["allocation"] == shared  # not ours: kept
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="p")


async def test_an_earlier_allocation_that_does_not_collide_is_kept_and_the_gate_lifts(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=30.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        allocation = cluster.get_claim("c")["status"]["allocation"]
        daemon.reconciler.step_down()
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()
        assert conflicts(daemon, "before-write") == 0
        assert cluster.get_claim("c")["status"]["allocation"] == allocation
        assert cluster.gated("p")  # the new term's decision settles in its turn


async def test_a_decision_whose_earlier_allocation_collided_does_not_lift_the_gate_later(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await collide_after_takeover(cluster, daemon, "ours")
        assert conflicts(daemon, "before-write") == 1
        # The dropped decision is gone: nothing settles that could lift the gate on a pod whose
        # claim collides, and the pod is not decided again while its claim is held.
        assert daemon.reconciler.next_deadline() is None
        await daemon.reconciler.run_pass()
        assert cluster.gated("p")
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="p")


async def test_a_node_filled_while_settling_drops_the_decision(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.core.patch_node_status(
        "node-1", {"status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
    )
    cluster.create_claim(claim("c"))
    asking = pod("p", ["c"])
    asking["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    cluster.create_pod(asking)
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "p")
        await eventually(
            lambda: (
                (daemon.view.nodes.get(("", "node-1")) or {}).get("status", {}).get("allocatable")
            ),
            what="the node's allocatable in the view",
        )
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        # The kube-scheduler binds another pod to the node before the settle time ends.
        bound = pod("bound", [], gated=False, nodeName="node-1")
        bound["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
        cluster.create_pod(bound)
        await known(daemon, "bound")
        await settled(daemon)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")
        assert "allocation" not in cluster.get_claim("c").get("status", {})


async def test_a_pod_joining_an_allocated_claim_is_let_go_even_when_its_node_filled(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.core.patch_node_status(
        "node-1", {"status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
    )
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("first", ["c"]))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "first")
        await daemon.reconciler.run_pass()
        await settled(daemon)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert not cluster.gated("first")
        # A second pod shares the claim: its node is the claim's, nothing is allocated for it.
        joining = pod("second", ["c"])
        joining["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
        cluster.create_pod(joining)
        await known(daemon, "second")
        await daemon.reconciler.run_pass()
        assert len(cluster.get_claim("c")["status"]["reservedFor"]) == 2
        # The node fills while the decision settles. Holding the gate would choose nothing
        # better (the claim ties the pod to that node): it goes to the kube-scheduler, which
        # waits for room there.
        bound = pod("bound", [], gated=False, nodeName="node-1")
        bound["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
        cluster.create_pod(bound)
        await known(daemon, "bound")
        await settled(daemon)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        assert conflicts(daemon, "settled") == 0
        assert not cluster.gated("second")


class _SecondWriteFails(ControllerApi):
    """The API server fails the allocation write of the claim `second` with a 500."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed = 0

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        if claim["metadata"]["name"] == "second" and status.get("allocation"):
            self.failed += 1
            raise client.ApiException(status=500, reason="Internal Server Error")
        return super().patch_claim_status(claim, status)


async def test_a_write_that_fails_half_way_withdraws_what_it_wrote(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("first", kind="mig"))
    cluster.create_claim(claim("second", kind="mig"))
    cluster.create_pod(pod("p", ["first", "second"]))
    async with controlled(api, settle_s=0.0) as daemon:
        failing = _SecondWriteFails(daemon.calls)
        use(daemon, failing)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert failing.failed == 1
        assert conflicts(daemon, "write") == 1
        # The claim written before the failure holds nothing and is reserved for no one.
        for name in ("first", "second"):
            status = cluster.get_claim(name).get("status") or {}
            assert "allocation" not in status, name
            assert not status.get("reservedFor"), name
        assert cluster.gated("p")
        assert daemon.view.assumed == {}


async def test_a_claim_marked_for_a_pod_that_is_deleted_loses_our_finalizer(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # An earlier attempt of ours marked the claim; the pod then waits for two GPUs on a node
    # with one.
    marked = claim("c", count=2)
    marked["metadata"]["finalizers"] = [FINALIZER]
    cluster.create_claim(marked)
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.gated("p")
        assert cluster.get_claim("c")["metadata"]["finalizers"] == [FINALIZER]  # still wanted
        # The pod goes; nothing changes on the claim itself, yet nothing waits for it now.
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(lambda: ("default", "p") not in daemon.view.pods, what="the deletion")
        await daemon.reconciler.run_pass()
        assert not cluster.get_claim("c")["metadata"].get("finalizers")


def sample(daemon: ControllerDaemon, name: str) -> float | None:
    return daemon.controller_metrics.registry.get_sample_value(name)


async def test_an_allocated_pod_is_timed_and_no_longer_pending(
    cluster: Cluster, api: client.ApiClient
) -> None:
    before = time.monotonic()
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert not cluster.gated("p")
        # Timed from first seeing the pod to its gate coming off: within this test's span.
        assert sample(daemon, "dra_controller_allocation_seconds_count") == 1
        latency = sample(daemon, "dra_controller_allocation_seconds_sum")
        assert latency is not None and 0 < latency <= time.monotonic() - before
        assert sample(daemon, "dra_controller_pending_pods") == 0


class _LiftFailsOnce(ControllerApi):
    """The first gate lift fails before anything changed (no event follows): the API server
    answers 500, or the connection drops."""

    def __init__(self, inner: ControllerApi, error: Exception) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed: list[str] = []
        self._error = error

    def patch_pod(self, pod: Any, spec: Any) -> dict[str, Any]:
        if not self.failed:
            self.failed.append(pod["metadata"]["name"])
            raise self._error
        return super().patch_pod(pod, spec)


@pytest.mark.parametrize(
    "error",
    [
        client.ApiException(status=500, reason="Internal Server Error"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
    ids=["server-error", "connection-reset"],
)
async def test_a_gate_lift_that_fails_is_retried_and_the_other_gang_members_go_on(
    cluster: Cluster, api: client.ApiClient, error: Exception
) -> None:
    gang = {f"{DRIVER}/gang": "g", f"{DRIVER}/gang-size": "2"}
    for name in ("a", "b"):
        cluster.create_claim(claim(f"c-{name}", kind="mig"))
        cluster.create_pod(pod(name, [f"c-{name}"], labels=gang))
    async with controlled(api, settle_s=0.0) as daemon:
        failing = _LiftFailsOnce(daemon.calls, error)
        use(daemon, failing)
        await known(daemon, "a", "b")
        await daemon.reconciler.run_pass()
        (unlucky,) = failing.failed
        lucky = ({"a", "b"} - {unlucky}).pop()
        assert not cluster.gated(lucky)
        assert cluster.gated(unlucky)
        # No watch event brings the unlucky pod back: the failed lift queued it again.
        await daemon.reconciler.run_pass()
        assert not cluster.gated(unlucky)


@pytest.mark.parametrize("deleted", ["a", "b"])
async def test_a_gang_member_deleted_while_settling_does_not_hold_back_the_others(
    cluster: Cluster, api: client.ApiClient, deleted: str
) -> None:
    gang = {f"{DRIVER}/gang": "g", f"{DRIVER}/gang-size": "2"}
    for name in ("a", "b"):
        cluster.create_claim(claim(f"c-{name}", kind="mig"))
        cluster.create_pod(pod(name, [f"c-{name}"], labels=gang))
    async with controlled(api, settle_s=0.3) as daemon:
        await known(daemon, "a", "b")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c-a")["status"]["allocation"]
        # Whichever member the gang's decision lists first, its lift meets a 404; the other's
        # gate still comes off in the same pass (its workload controller makes a new member).
        cluster.core.delete_namespaced_pod(deleted, "default")
        await eventually(lambda: ("default", deleted) not in daemon.view.pods, what="deletion")
        await settled(daemon)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # the lift may have started on its own meanwhile
        kept = ({"a", "b"} - {deleted}).pop()
        assert not cluster.gated(kept)
        assert daemon.reconciler.next_deadline() is None


async def test_a_gated_pod_being_deleted_is_not_allocated(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    body = pod("p", ["c"])
    body["metadata"]["finalizers"] = ["example.com/keep"]  # another controller's
    cluster.create_pod(body)
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p")
        # Deleted, but kept (with its deletionTimestamp) until the other controller lets go.
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(
            lambda: daemon.view.pods[("default", "p")]["metadata"].get("deletionTimestamp"),
            what="the deletion in the view",
        )
        await daemon.reconciler.run_pass()
        assert "allocation" not in (cluster.get_claim("c").get("status") or {})
        assert not cluster.get_claim("c")["metadata"].get("finalizers")
        assert cluster.gated("p")
        assert daemon.view.assumed == {}
    finally:
        daemon.stop_watches()
        cluster.core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})


def gang(name: str, size: str) -> dict[str, str]:
    return {f"{DRIVER}/gang": name, f"{DRIVER}/gang-size": size}


async def test_gang_problems_are_reported_and_the_pods_queued_after_them_still_decided(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # In queue order: a pod whose gang size is no number, a gang of two with three members, a
    # gang of two with one, and a pod on its own.
    members = {"bad": gang("odd", "two"), "big-1": gang("big", "2"), "big-2": gang("big", "2")}
    members |= {"big-3": gang("big", "2"), "pair-1": gang("pair", "2"), "last": {}}
    for name, labels in members.items():
        cluster.create_claim(claim(f"c-{name}", kind="mig"))
        cluster.create_pod(pod(name, [f"c-{name}"], labels=labels))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, *members)
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # reports go out once the pass is over
        assert not cluster.gated("last")
        assert failures(daemon) == 2  # one for the pod, one for its whole gang
        (event,) = cluster.events_for("bad")
        assert (
            event["message"] == f"pod default/bad: label {DRIVER}/gang-size='two' is not a number"
        )
        for name in ("big-1", "big-2", "big-3"):
            (event,) = cluster.events_for(name)
            assert event["message"] == "gang default/big has 3 pods but its size label says 2"
            assert cluster.gated(name)
        # A gang short of members waits quietly for the rest: no event, no condition.
        assert cluster.events_for("pair-1") == []
        assert our_condition(cluster, "pair-1") is None
        assert cluster.gated("pair-1")


async def test_a_pod_settling_does_not_hold_back_the_pods_queued_after_it(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("first", kind="mig"))
    cluster.create_pod(pod("first", ["first"]))
    async with controlled(api, settle_s=30.0) as daemon:
        await known(daemon, "first")
        await daemon.reconciler.run_pass()
        # Our own writes come back through the watch and queue the settling pod again.
        await eventually(
            lambda: ("default", "first") in daemon.reconciler.state.queue,
            what="the pod queued again",
        )
        cluster.create_claim(claim("second", kind="mig"))
        cluster.create_pod(pod("second", ["second"]))
        await known(daemon, "second")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("second")["status"]["allocation"]
        assert cluster.gated("first")  # still settling


async def test_a_claim_still_reserved_for_a_finished_pod_is_kept_until_the_reservation_goes(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert not cluster.gated("p")
        cluster.core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Succeeded"}})
        await eventually(
            lambda: daemon.view.pods[("default", "p")].get("status", {}).get("phase"),
            what="the phase in the view",
        )
        # The pod is done, but the claim is still reserved for it (kubelet may be unpreparing).
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["status"]["allocation"]
        # The reservation goes: now nothing holds the claim.
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "c", {"status": {"reservedFor": None}}
        )
        await eventually(
            lambda: not daemon.view.claims[("default", "c")]["status"].get("reservedFor"),
            what="the reservation gone in the view",
        )
        await daemon.reconciler.run_pass()
        assert "allocation" not in (cluster.get_claim("c").get("status") or {})
        assert not cluster.get_claim("c")["metadata"].get("finalizers")
        assert deallocations(daemon) == 1


async def test_a_claim_deleted_while_its_running_pod_reserves_it_keeps_its_devices(
    cluster: Cluster, api: client.ApiClient
) -> None:
    """Deleting a claim does not take its devices from the pod using them: until the pod lets go
    of the reservation the claim stays allocated (and ours), and another claim waits for the
    node's one GPU instead of being handed it while the pod runs."""
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert not cluster.gated("p")
        assert cluster.get_claim("c")["status"]["reservedFor"]
        cluster.core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
        cluster.objects.delete_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", "c"
        )
        cluster.create_claim(claim("other"))
        cluster.create_pod(pod("q", ["other"]))
        await eventually(
            lambda: daemon.view.claims[("default", "c")]["metadata"].get("deletionTimestamp"),
            what="the deletion in the view",
        )
        await known(daemon, "q")
        await daemon.reconciler.run_pass()
        kept = cluster.get_claim("c")
        assert kept["status"]["allocation"] and kept["status"]["reservedFor"]
        assert kept["metadata"]["finalizers"] == [FINALIZER]
        assert deallocations(daemon) == 0
        assert cluster.gated("q")
        assert "allocation" not in (cluster.get_claim("other").get("status") or {})
        # The pod is gone from the node and the reservation with it: now the claim goes, and
        # its GPU to the claim that waited.
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "c", {"status": {"reservedFor": None}}
        )
        await eventually(
            lambda: (
                ("default", "c") not in daemon.view.claims
                or not daemon.view.claims[("default", "c")]["status"].get("reservedFor")
            ),
            what="the reservation gone in the view",
        )
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()  # a deleted claim is let go in the background
        with pytest.raises(client.ApiException) as gone:
            cluster.get_claim("c")
        assert gone.value.status == 404
        assert deallocations(daemon) == 1
        await eventually(lambda: ("default", "c") not in daemon.view.claims, what="c gone")
        await daemon.reconciler.run_pass()
        assert not cluster.gated("q")
        assert cluster.get_claim("other")["status"]["allocation"]


def marked_claim(name: str) -> dict[str, Any]:
    """A claim for two GPUs (the cluster has one) that an earlier attempt of ours marked."""
    body = claim(name, count=2)
    body["metadata"]["finalizers"] = [FINALIZER]
    return body


async def test_a_claim_being_deleted_is_let_go_though_a_pod_still_waits_for_it(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(marked_claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.0) as daemon:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["metadata"]["finalizers"] == [FINALIZER]
        cluster.objects.delete_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", "c"
        )

        def gone() -> bool:
            try:
                cluster.get_claim("c")
            except client.ApiException as err:
                assert err.status == 404
                return True
            return False

        # Let go as the deletion arrives, without waiting for a pass (`_finalize_now`).
        await eventually(gone, what="the claim gone")
        assert daemon.reconciler.passes == 1


async def test_a_claim_whose_only_pod_is_being_deleted_loses_our_finalizer(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(marked_claim("c"))
    body = pod("p", ["c"])
    body["metadata"]["finalizers"] = ["example.com/keep"]
    cluster.create_pod(body)
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert cluster.get_claim("c")["metadata"]["finalizers"] == [FINALIZER]
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(
            lambda: daemon.view.pods[("default", "p")]["metadata"].get("deletionTimestamp"),
            what="the deletion in the view",
        )
        await daemon.reconciler.run_pass()
        assert not cluster.get_claim("c")["metadata"].get("finalizers")
    finally:
        daemon.stop_watches()
        cluster.core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})


def deallocations(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.deallocations._value.get()
    return value


class _ReleaseFailsOnce(ControllerApi):
    """The API server fails the first finalizer removal of the claim `b-fails` with a 500."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed = 0

    def patch_claim(self, claim: Any, metadata: Any) -> dict[str, Any]:
        if claim["metadata"]["name"] == "b-fails" and not self.failed:
            self.failed += 1
            raise client.ApiException(status=500, reason="Internal Server Error")
        return super().patch_claim(claim, metadata)


async def test_a_release_that_fails_is_retried_and_the_claims_after_it_go_on(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # Three claims an earlier attempt of ours marked, looked at in name order: one a pod still
    # waits for, one whose release fails once, one nobody wants.
    for name in ("a-busy", "b-fails", "c-free"):
        cluster.create_claim(marked_claim(name))
    cluster.create_pod(pod("p", ["a-busy"]))
    async with controlled(api, settle_s=0.0) as daemon:
        failing = _ReleaseFailsOnce(daemon.calls)
        use(daemon, failing)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert failing.failed == 1
        assert cluster.get_claim("a-busy")["metadata"]["finalizers"] == [FINALIZER]
        assert cluster.get_claim("b-fails")["metadata"]["finalizers"] == [FINALIZER]
        assert not cluster.get_claim("c-free")["metadata"].get("finalizers")
        # No event brings b-fails back: the failed release was queued again.
        await daemon.reconciler.run_pass()
        assert not cluster.get_claim("b-fails")["metadata"].get("finalizers")
        assert cluster.get_claim("a-busy")["metadata"]["finalizers"] == [FINALIZER]
        assert deallocations(daemon) == 0  # finalizers only: none of them held devices


class _SlowLift(ControllerApi):
    """The gate lift waits until the test lets it through."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.entered = threading.Event()
        self.release = threading.Event()

    def patch_pod(self, pod: Any, spec: Any) -> dict[str, Any]:
        self.entered.set()
        self.release.wait(10)
        return super().patch_pod(pod, spec)


async def test_a_pass_during_a_gate_lift_leaves_that_pod_alone(
    cluster: Cluster, api: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    async with controlled(api, settle_s=0.1) as daemon:
        slow = _SlowLift(daemon.calls)
        use(daemon, slow)
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        # The settle time ends and the lift starts on its own, with no pass running.
        await eventually(slow.entered.is_set, what="the lift under way")
        chosen: list[list[str]] = []
        units = daemon.reconciler._units

        def recording(keys: Any) -> list[list[dict[str, Any]]]:
            found = units(keys)
            chosen.append([p["metadata"]["name"] for unit in found for p in unit])
            return found

        monkeypatch.setattr(daemon.reconciler, "_units", recording)
        daemon.reconciler.resync()  # the safety net queues every gated pod, p among them
        running = asyncio.ensure_future(daemon.reconciler.run_pass())
        await eventually(lambda: bool(chosen), what="the pass choosing what to decide")
        # p was neither decided nor reported again: it stays queued until its lift is over,
        # and the pass ends with the lift it overlapped.
        assert chosen == [[]]
        assert ("default", "p") in daemon.reconciler.state.queue
        assert not running.done()
        slow.release.set()
        await running
        assert not cluster.gated("p")
        assert daemon.metrics.allocations._value.get() == 1
        assert failures(daemon) == 0
        assert daemon.reconciler.state.lifting == set()
        await daemon.reconciler.run_pass()  # and the next pass forgets it
        assert ("default", "p") not in daemon.reconciler.state.queue
