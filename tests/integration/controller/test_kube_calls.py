"""The controller's own writes keep their meaning under the API server's real patch semantics."""

from __future__ import annotations

import pytest
from kubernetes import client

from controller.kube_calls import ControllerApi

NS = "default"


def test_pod_condition_patch_leaves_other_writers_conditions(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    calls = ControllerApi(api_client, "test")
    stale = api_client.sanitize_for_serialization(core.read_namespaced_pod("p", NS))
    # Another writer (kubelet) sets its condition after the controller's read.
    core.patch_namespaced_pod_status(
        "p",
        NS,
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        _content_type="application/strategic-merge-patch+json",
    )
    mine = {"type": "example.com/Allocated", "status": "False", "reason": "Unallocatable"}
    calls.patch_pod_conditions(stale, [mine])
    # Which comes first is the server's business (kube-apiserver puts the patch's new item
    # first); that both are there, once each, is the controller's.
    conditions = core.read_namespaced_pod("p", NS).status.conditions
    assert sorted((c.type, c.status) for c in conditions) == [
        ("Ready", "True"),
        ("example.com/Allocated", "False"),
    ]
    # Setting it again replaces ours (same type) rather than adding a second one.
    calls.patch_pod_conditions(stale, [{**mine, "status": "True", "reason": "Allocated"}])
    conditions = core.read_namespaced_pod("p", NS).status.conditions
    assert sorted((c.type, c.status) for c in conditions) == [
        ("Ready", "True"),
        ("example.com/Allocated", "True"),
    ]


def test_claim_finalizer_patches_replace_the_list_they_send(api_client: client.ApiClient) -> None:
    # The writer sends the whole list with a resourceVersion (JSON merge patch: lists replace),
    # so removing our finalizer really removes it, and a stale list is refused, not merged.
    custom = client.CustomObjectsApi(api_client)
    claim = custom.create_namespaced_custom_object(
        "resource.k8s.io",
        "v1",
        NS,
        "resourceclaims",
        {
            "metadata": {"name": "c", "finalizers": ["other/keep", "ours/done"]},
            "spec": {"devices": {"requests": []}},
        },
    )
    calls = ControllerApi(api_client, "test")
    written = calls.patch_claim(claim, {"finalizers": ["other/keep"]})
    assert written["metadata"]["finalizers"] == ["other/keep"]
    with pytest.raises(client.ApiException) as caught:
        calls.patch_claim(claim, {"finalizers": ["other/keep", "ours/again"]})
    assert caught.value.status == 409


def test_writes_whose_answer_is_not_needed_give_their_connection_back(
    api_client: client.ApiClient,
) -> None:
    # An answer left unread keeps its connection out of the pool, and the next call opens a
    # new one: a reclaim's hundreds of Events, conditions and evictions each paid a connect.
    core = client.CoreV1Api(api_client)
    calls = ControllerApi(api_client, "test")
    for index in range(10):
        core.create_namespaced_pod(
            NS,
            {
                "metadata": {"name": f"p{index}"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        )
    before = _connections(api_client)
    condition = {"type": "example.com/Allocated", "status": "False", "reason": "Unallocatable"}
    for index in range(10):
        pod = api_client.sanitize_for_serialization(core.read_namespaced_pod(f"p{index}", NS))
        calls.post_pod_event(pod, "Warning", "FailedAllocation", "no room")
        calls.patch_pod_conditions(pod, [condition])
        calls.evict_pod(pod)
    # kube-apiserver writes Events of its own into this namespace (its ClusterIP repair, for
    # one) whenever it likes: only ours are counted.
    ours = [e for e in core.list_namespaced_event(NS).items if e.reason == "FailedAllocation"]
    assert len(ours) == 10
    assert core.list_namespaced_pod(NS).items == []
    assert _connections(api_client) - before <= 1


def _connections(api_client: client.ApiClient) -> int:
    """Connections the client has opened so far, over all its pools."""
    manager = api_client.rest_client.pool_manager
    # urllib3's pool container refuses plain iteration; `keys()` is its way.
    return sum(manager.pools[key].num_connections for key in manager.pools.keys())  # noqa: SIM118
