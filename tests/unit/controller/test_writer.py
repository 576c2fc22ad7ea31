"""`ClaimWriter` against the embedded API server through the official client: what each write
leaves on the objects, and how it meets conflicts (409), missing objects (404) and lost
leadership."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from controller.kube_calls import ControllerApi
from controller.writer import ClaimWriter, NotLeaderError
from localcluster.apiserver import ApiServer

GROUP, VERSION = "resource.k8s.io", "v1"
FINALIZER = "gpu.dra-driver.dev/allocation"
GATE = "gpu.dra-driver.dev/allocation"
OTHER_GATE = "quota.example.com/admission"
ALLOCATION = {
    "devices": {
        "results": [{"request": "r", "driver": "gpu.dra-driver.dev", "pool": "n", "device": "g"}]
    }
}


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer(port=0) as running:
        yield running


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


@pytest.fixture
def calls(api: client.ApiClient) -> ControllerApi:
    return ControllerApi(api, "test")


_names = iter(range(10_000))


def new_claim(api: client.ApiClient, **metadata: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{next(_names)}", "namespace": "default", **metadata},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "g"}}]}},
    }
    made: Any = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", body
    )
    return dict(made)


def new_pod(api: client.ApiClient, gates: list[str]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{next(_names)}", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "schedulingGates": [{"name": g} for g in gates],
        },
    }
    made = client.CoreV1Api(api).create_namespaced_pod("default", body)
    return dict(api.sanitize_for_serialization(made))


def writer(calls: ControllerApi, leader: bool = True) -> ClaimWriter:
    return ClaimWriter(calls, FINALIZER, lambda: leader)


def test_mark_adds_our_finalizer_once_and_keeps_others(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    claim = new_claim(api, finalizers=["example.com/keep"])
    marked = writer(calls).mark(claim)
    assert marked is not None
    assert marked["metadata"]["finalizers"] == ["example.com/keep", FINALIZER]
    assert writer(calls).mark(marked) is None  # already marked: no write


def test_mark_of_a_stale_copy_is_a_conflict(api: client.ApiClient, calls: ControllerApi) -> None:
    claim = new_claim(api)
    writer(calls).mark(claim)
    # The copy predates our own write: the server refuses it rather than merging blindly.
    with pytest.raises(client.ApiException) as raised:
        ClaimWriter(calls, "other.example.com/f", lambda: True).mark(claim)
    assert raised.value.status == 409


def test_allocate_writes_allocation_and_reservation_and_skips_a_repeat(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    pod = new_pod(api, [GATE])
    claim = writer(calls).mark(new_claim(api))
    assert claim is not None
    written = writer(calls).allocate(claim, ALLOCATION, [pod])
    uid = pod["metadata"]["uid"]
    assert written["status"]["allocation"] == ALLOCATION
    assert written["status"]["reservedFor"] == [
        {"resource": "pods", "name": pod["metadata"]["name"], "uid": uid}
    ]
    again = writer(calls).allocate(written, None, [pod])
    assert again is written  # nothing new to write
    assert (
        calls.get_claim("default", written["metadata"]["name"])["metadata"]["resourceVersion"]
        == written["metadata"]["resourceVersion"]
    )


def test_allocate_adds_a_second_pod_to_the_reservation(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    first, second = new_pod(api, [GATE]), new_pod(api, [GATE])
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [first])
    shared = writer(calls).allocate(claim, None, [first, second])
    assert [r["uid"] for r in shared["status"]["reservedFor"]] == [
        first["metadata"]["uid"],
        second["metadata"]["uid"],
    ]
    assert shared["status"]["allocation"] == ALLOCATION


def test_withdraw_clears_our_allocation_but_not_another_pods_reservation(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    ours, theirs = new_pod(api, [GATE]), new_pod(api, [])
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [theirs, ours])
    key = ("default", claim["metadata"]["name"])
    assert writer(calls).withdraw(key, [ours])
    kept = calls.get_claim(*key)
    assert [r["uid"] for r in kept["status"]["reservedFor"]] == [theirs["metadata"]["uid"]]
    assert kept["status"]["allocation"] == ALLOCATION  # still used by the other pod
    assert writer(calls).withdraw(key, [theirs])
    assert "allocation" not in calls.get_claim(*key).get("status", {})


def test_withdraw_of_a_deleted_claim_is_done(api: client.ApiClient, calls: ControllerApi) -> None:
    assert writer(calls).withdraw(("default", "never-existed"), [new_pod(api, [GATE])]) == 0


class _Interfering(ControllerApi):
    """Another writer changes the claim between our read and our patch, `times` times."""

    def __init__(self, inner: ControllerApi, api: client.ApiClient, times: int) -> None:
        self.__dict__.update(inner.__dict__)
        self._api = api
        self.times = times
        self.patches = 0

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        self.patches += 1
        if self.times:
            self.times -= 1
            meta = claim["metadata"]
            client.CustomObjectsApi(self._api).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                meta["namespace"],
                "resourceclaims",
                meta["name"],
                {"metadata": {"labels": {"touched": str(self.patches)}}},
                _content_type="application/merge-patch+json",
            )
        return super().patch_claim_status(claim, status)


def test_withdraw_reads_again_after_a_conflict(api: client.ApiClient, calls: ControllerApi) -> None:
    pod = new_pod(api, [GATE])
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [pod])
    key = ("default", claim["metadata"]["name"])
    racing = _Interfering(calls, api, times=1)
    assert ClaimWriter(racing, FINALIZER, lambda: True).withdraw(key, [pod])
    assert racing.patches == 2
    assert "allocation" not in calls.get_claim(*key).get("status", {})


def test_withdraw_gives_up_after_its_attempts(api: client.ApiClient, calls: ControllerApi) -> None:
    pod = new_pod(api, [GATE])
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [pod])
    key = ("default", claim["metadata"]["name"])
    racing = _Interfering(calls, api, times=5)
    assert ClaimWriter(racing, FINALIZER, lambda: True).withdraw(key, [pod]) is None
    assert racing.patches == 3  # three attempts unless told otherwise
    assert calls.get_claim(*key)["status"]["allocation"] == ALLOCATION


class _Deleting(ControllerApi):
    """The claim is deleted between the controller's read and its patch."""

    def __init__(self, inner: ControllerApi, api: client.ApiClient) -> None:
        self.__dict__.update(inner.__dict__)
        self._api = api

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        client.CustomObjectsApi(self._api).delete_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", claim["metadata"]["name"]
        )
        return super().patch_claim_status(claim, status)


def test_withdraw_of_a_claim_deleted_before_the_patch_is_done(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    pod = new_pod(api, [GATE])
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [pod])
    key = ("default", claim["metadata"]["name"])
    assert ClaimWriter(_Deleting(calls, api), FINALIZER, lambda: True).withdraw(key, [pod]) == 0


def test_deallocate_clears_the_allocation_then_our_finalizer_only(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    claim = writer(calls).mark(new_claim(api, finalizers=["example.com/keep"]))
    assert claim is not None
    # A reservation left by a pod that is gone goes with the allocation.
    claim = writer(calls).allocate(claim, ALLOCATION, [new_pod(api, [])])
    writer(calls).deallocate(claim)
    after = calls.get_claim("default", claim["metadata"]["name"])
    assert "allocation" not in after.get("status", {})
    assert "reservedFor" not in after.get("status", {})
    assert after["metadata"]["finalizers"] == ["example.com/keep"]


class _Counting(ControllerApi):
    def __init__(self, inner: ControllerApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.status_writes = 0

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        self.status_writes += 1
        return super().patch_claim_status(claim, status)


def test_deallocate_of_a_deleted_claim_only_we_hold_is_one_write(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    claim = writer(calls).mark(new_claim(api))
    assert claim is not None
    claim = writer(calls).allocate(claim, ALLOCATION, [])
    name = claim["metadata"]["name"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", name
    )
    deleting = calls.get_claim("default", name)
    assert deleting["metadata"]["deletionTimestamp"]
    counting = _Counting(calls)
    freed = writer(counting).deallocate(deleting)
    assert counting.status_writes == 0
    with pytest.raises(client.ApiException) as raised:
        calls.get_claim("default", name)
    assert raised.value.status == 404
    # The deletion's resourceVersion: what the DELETED event brings, for the watch to catch up to.
    assert freed > int(deleting["metadata"]["resourceVersion"])


def test_deallocate_of_a_deleted_claim_another_finalizer_holds_clears_its_allocation(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    claim = writer(calls).mark(new_claim(api, finalizers=["example.com/keep"]))
    assert claim is not None
    claim = writer(calls).allocate(claim, ALLOCATION, [])
    name = claim["metadata"]["name"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", name
    )
    counting = _Counting(calls)
    assert writer(counting).deallocate(calls.get_claim("default", name)) > 0
    after = calls.get_claim("default", name)
    assert counting.status_writes == 1
    assert "allocation" not in after.get("status", {})
    assert after["metadata"]["finalizers"] == ["example.com/keep"]


def test_deallocate_of_a_stale_copy_is_a_conflict(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    claim = writer(calls).allocate(new_claim(api), ALLOCATION, [])
    writer(calls).allocate(claim, None, [new_pod(api, [GATE])])
    with pytest.raises(client.ApiException) as raised:
        writer(calls).deallocate(claim)
    assert raised.value.status == 409


def test_lift_gate_keeps_other_controllers_gates(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    pod = new_pod(api, [OTHER_GATE, GATE])
    lifted = writer(calls).lift_gate(pod, GATE)
    assert lifted["spec"]["schedulingGates"] == [{"name": OTHER_GATE}]
    alone = new_pod(api, [GATE])
    assert not writer(calls).lift_gate(alone, GATE)["spec"].get("schedulingGates")


def test_lift_gate_of_a_deleted_pod_is_not_found(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    pod = new_pod(api, [GATE])
    client.CoreV1Api(api).delete_namespaced_pod(pod["metadata"]["name"], "default")
    with pytest.raises(client.ApiException) as raised:
        writer(calls).lift_gate(pod, GATE)
    assert raised.value.status == 404


def test_lift_gate_after_a_status_write_reads_the_pod_again_and_lifts(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    # Our own "cannot allocate" condition landed after the copy the lift starts from: the
    # conditional write conflicts, and the lift retries from the pod as it is now.
    pod = new_pod(api, [OTHER_GATE, GATE])
    condition = {"type": "example.com/Allocated", "status": "False", "reason": "Unallocatable"}
    calls.patch_pod_conditions(pod, [condition])
    lifted = writer(calls).lift_gate(pod, GATE)
    assert lifted["spec"]["schedulingGates"] == [{"name": OTHER_GATE}]
    assert lifted["status"]["conditions"][0]["reason"] == "Unallocatable"


def test_lift_gate_never_lifts_a_new_pod_of_the_same_name(
    api: client.ApiClient, calls: ControllerApi
) -> None:
    core = client.CoreV1Api(api)
    pod = new_pod(api, [GATE])
    name = pod["metadata"]["name"]
    core.delete_namespaced_pod(name, "default")
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "schedulingGates": [{"name": GATE}],
            },
        },
    )
    with pytest.raises(client.ApiException) as raised:
        writer(calls).lift_gate(pod, GATE)
    assert raised.value.status == 404
    assert core.read_namespaced_pod(name, "default").spec.scheduling_gates[0].name == GATE


def test_nothing_is_written_without_the_lease(api: client.ApiClient, calls: ControllerApi) -> None:
    pod = new_pod(api, [GATE])
    claim = new_claim(api)
    follower = writer(calls, leader=False)
    with pytest.raises(NotLeaderError, match="no longer holds the leader Lease"):
        follower.mark(claim)
    for write in (
        lambda: follower.mark(claim),
        lambda: follower.allocate(claim, ALLOCATION, [pod]),
        lambda: follower.lift_gate(pod, GATE),
        lambda: follower.deallocate(claim),
    ):
        with pytest.raises(NotLeaderError):
            write()
    assert calls.get_claim("default", claim["metadata"]["name"]) == claim
    assert (
        client.CoreV1Api(api)
        .read_namespaced_pod(pod["metadata"]["name"], "default")
        .spec.scheduling_gates[0]
        .name
        == GATE
    )
