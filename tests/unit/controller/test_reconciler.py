"""The reconciler's pass against the embedded API server, through the real client, driven one
pass at a time: conflicts (409) and missing objects (404) on the way, retries, other controllers'
gates, and the re-check at the end of the settle time."""

from __future__ import annotations

import copy
import datetime
import time
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from controller.view import allocation_of
from tests.integration.allocation.harness import (
    DRIVER,
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
    daemon = await manual_controller(api, settle_s=0.0)
    failing = _ServerError(daemon.calls)
    use(daemon, failing)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert failing.failed == 1
        assert conflicts(daemon, "write") == 1
        assert cluster.gated("p")
        await daemon.reconciler.run_pass()  # no event brought it back: the retry did
        assert cluster.get_claim("c")["status"]["allocation"]
        assert not cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_a_pod_that_cannot_be_allocated_is_reported_once_and_retried_on_change_only(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert failures(daemon) == 1
        assert len(cluster.events_for("p")) == 1
        found = our_condition(cluster, "p")
        assert found is not None and found["status"] == "False"
        assert found["reason"] == "Unallocatable"
        # Our own condition write changes the view: the pod is decided again, not reported again.
        await eventually(
            lambda: daemon.view.pods[("default", "p")].get("status", {}).get("conditions"),
            what="the condition in the view",
        )
        await daemon.reconciler.run_pass()
        assert failures(daemon) == 2
        assert len(cluster.events_for("p")) == 1
        # Nothing changed since: the pod waits without being decided again.
        await daemon.reconciler.run_pass()
        assert failures(daemon) == 2
    finally:
        daemon.stop_watches()


async def test_a_pod_allocated_after_waiting_gets_its_condition_turned_true(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("first"))
    cluster.create_claim(claim("second"))
    cluster.create_pod(pod("p1", ["first"]))
    cluster.create_pod(pod("p2", ["second"]))
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p1", "p2")
        await daemon.reconciler.run_pass()  # one GPU: p1 gets it, p2 waits
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
    finally:
        daemon.stop_watches()


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


async def test_a_pod_deleted_before_its_report_is_written_is_not_an_error(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0)

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
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()  # the condition patch meets a 404, and says so
        assert ("default", "p") not in daemon.view.pods
        assert daemon.reconciler.passes == 1
    finally:
        daemon.stop_watches()


def pending(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.pending._value.get()
    return value


async def test_a_pod_changed_while_settling_has_its_gate_lifted_from_its_current_copy(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.3)
    try:
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
        assert not cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_a_deleted_pod_is_forgotten_and_a_new_one_of_its_name_is_reported_afresh(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert len(cluster.events_for("p")) == 1
        assert pending(daemon) == 1
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(lambda: ("default", "p") not in daemon.view.pods, what="the deletion")
        assert pending(daemon) == 0
        cluster.create_pod(pod("p", ["big"]))
        await known(daemon, "p")
        assert pending(daemon) == 1
        await daemon.reconciler.run_pass()
        assert len(cluster.events_for("p")) == 2  # the new pod is told why it waits
    finally:
        daemon.stop_watches()


async def test_an_earlier_allocation_that_collides_is_withdrawn_before_the_gate_lifts(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    daemon = await manual_controller(api, settle_s=30.0)
    try:
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
        assert "allocation" not in cluster.get_claim("ours").get("status", {})
        assert cluster.gated("p")
        assert conflicts(daemon, "before-write") == 1
    finally:
        daemon.stop_watches()


async def test_a_claim_allocated_by_someone_else_while_settling_keeps_their_allocation(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    daemon = await manual_controller(api, settle_s=0.3)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        # Another allocator's write lands on the claim before the gate lifts: another device,
        # reserved for its own pod.
        theirs = copy.deepcopy(cluster.get_claim("ours")["status"]["allocation"])
        theirs["devices"]["results"][0]["device"] = "gpu-0-mig-1g10gb-0"
        their_pod = {"resource": "pods", "name": "theirs", "uid": "uid-theirs"}
        status = {"allocation": theirs, "reservedFor": [their_pod]}
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "ours", {"status": status}
        )
        await eventually(
            lambda: allocation_of(daemon.view.claims[("default", "ours")]) == theirs,
            what="their allocation in the view",
        )
        await settled(daemon)
        await daemon.reconciler.run_pass()
        # The decision is dropped, not lifted on a claim that no longer holds what it chose, and
        # the withdrawal leaves their allocation and reservation alone.
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")
        assert cluster.get_claim("ours")["status"] == status
    finally:
        daemon.stop_watches()


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
    daemon = await manual_controller(api, settle_s=0.3)
    try:
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
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")  # a pod whose claim is gone must not start
    finally:
        daemon.stop_watches()


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
            GROUP, VERSION, "default", "resourceclaims", clear, {"status": {"allocation": None}}
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
    daemon = await manual_controller(api, settle_s=30.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await collide_after_takeover(cluster, daemon, "second", clear="first")
        assert conflicts(daemon, "before-write") == 1
        assert "allocation" not in cluster.get_claim("second").get("status", {})
        assert "allocation" not in cluster.get_claim("first").get("status", {})
        assert cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_an_earlier_allocation_that_collides_is_found_behind_a_claim_not_ours(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # The pod's first claim was allocated by someone else (no finalizer of ours): it is not
    # ours to question, but our own earlier claim after it still is.
    cluster.create_claim(claim("theirs", kind="mig"))
    cluster.create_claim(claim("shared", kind="mig"))
    cluster.create_claim(claim("ours", kind="mig"))
    cluster.create_pod(pod("p", ["shared", "ours"]))
    daemon = await manual_controller(api, settle_s=30.0)
    try:
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
        assert "allocation" not in cluster.get_claim("ours").get("status", {})
        assert cluster.get_claim("shared")["status"]["allocation"] == shared  # not ours: kept
        assert cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_an_earlier_allocation_that_does_not_collide_is_kept_and_the_gate_lifts(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=30.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        allocation = cluster.get_claim("c")["status"]["allocation"]
        daemon.reconciler.step_down()
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()
        assert conflicts(daemon, "before-write") == 0
        assert cluster.get_claim("c")["status"]["allocation"] == allocation
        assert cluster.gated("p")  # the new term's decision settles in its turn
    finally:
        daemon.stop_watches()


async def test_a_decision_whose_earlier_allocation_collided_does_not_lift_the_gate_later(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("p", ["ours"]))
    daemon = await manual_controller(api, settle_s=0.3)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        await collide_after_takeover(cluster, daemon, "ours")
        assert conflicts(daemon, "before-write") == 1
        # The dropped decision is gone: nothing settles that could lift the gate on a pod whose
        # claim was just withdrawn. Deciding it again finds no free GPU (theirs holds the only
        # one), so the pod keeps waiting.
        assert daemon.reconciler.next_deadline() is None
        await daemon.reconciler.run_pass()
        assert cluster.gated("p")
        assert "allocation" not in cluster.get_claim("ours").get("status", {})
    finally:
        daemon.stop_watches()


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
    daemon = await manual_controller(api, settle_s=0.3)
    try:
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
        assert conflicts(daemon, "settled") == 1
        assert cluster.gated("p")
        assert "allocation" not in cluster.get_claim("c").get("status", {})
    finally:
        daemon.stop_watches()


def sample(daemon: ControllerDaemon, name: str) -> float | None:
    return daemon.controller_metrics.registry.get_sample_value(name)


async def test_an_allocated_pod_is_timed_and_no_longer_pending(
    cluster: Cluster, api: client.ApiClient
) -> None:
    before = time.monotonic()
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.0)
    try:
        await known(daemon, "p")
        await daemon.reconciler.run_pass()
        assert not cluster.gated("p")
        # Timed from first seeing the pod to its gate coming off: within this test's span.
        assert sample(daemon, "dra_controller_allocation_seconds_count") == 1
        latency = sample(daemon, "dra_controller_allocation_seconds_sum")
        assert latency is not None and 0 < latency <= time.monotonic() - before
        assert sample(daemon, "dra_controller_pending_pods") == 0
    finally:
        daemon.stop_watches()


class _LiftFailsOnce(ControllerApi):
    """The API server fails the first gate lift with a 500: nothing changed, no event."""

    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed: list[str] = []

    def patch_pod(self, pod: Any, spec: Any) -> dict[str, Any]:
        if not self.failed:
            self.failed.append(pod["metadata"]["name"])
            raise client.ApiException(status=500, reason="Internal Server Error")
        return super().patch_pod(pod, spec)


async def test_a_gate_lift_that_fails_is_retried_and_the_other_gang_members_go_on(
    cluster: Cluster, api: client.ApiClient
) -> None:
    gang = {f"{DRIVER}/gang": "g", f"{DRIVER}/gang-size": "2"}
    for name in ("a", "b"):
        cluster.create_claim(claim(f"c-{name}", kind="mig"))
        cluster.create_pod(pod(name, [f"c-{name}"], labels=gang))
    daemon = await manual_controller(api, settle_s=0.0)
    failing = _LiftFailsOnce(daemon.calls)
    use(daemon, failing)
    try:
        await known(daemon, "a", "b")
        await daemon.reconciler.run_pass()
        (unlucky,) = failing.failed
        lucky = ({"a", "b"} - {unlucky}).pop()
        assert not cluster.gated(lucky)
        assert cluster.gated(unlucky)
        # No watch event brings the unlucky pod back: the failed lift queued it again.
        await daemon.reconciler.run_pass()
        assert not cluster.gated(unlucky)
    finally:
        daemon.stop_watches()
