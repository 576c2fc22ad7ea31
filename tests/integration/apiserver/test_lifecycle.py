"""Finalizers, deletionTimestamp and owner-reference garbage collection."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.integration.apiserver.support import namespaces_fixture
from tests.support.polling import wait_until

namespaces = namespaces_fixture("fin", "gc", "survivor", "pre")

MERGE = "application/merge-patch+json"


def _slice_names(resource: client.ResourceV1Api) -> list[str]:
    return [s.metadata.name for s in resource.list_resource_slice().items]


def _slice(name: str, node: client.V1Node) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node.metadata.name,
                    "uid": node.metadata.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node.metadata.name,
            "pool": {"name": node.metadata.name, "generation": 0, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def test_finalizers_delay_deletion(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("fin").metadata.resource_version
    core.create_namespaced_config_map(
        "fin", {"metadata": {"name": "held", "finalizers": ["example.com/a", "example.com/b"]}}
    )
    core.delete_namespaced_config_map("held", "fin")
    marked = core.read_namespaced_config_map("held", "fin")
    assert marked.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map(
        "held", "fin", {"metadata": {"finalizers": ["example.com/b"]}}, _content_type=MERGE
    )
    assert core.read_namespaced_config_map("held", "fin").metadata.finalizers == ["example.com/b"]
    current = core.read_namespaced_config_map("held", "fin")
    current.metadata.finalizers = []
    core.replace_namespaced_config_map("held", "fin", current)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_config_map("held", "fin")
    assert caught.value.status == 404
    events = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        "fin",
        resource_version=start,
        field_selector="metadata.name=held",
        timeout_seconds=5,
    ):
        events.append(event["type"])
        if event["type"] == "DELETED":
            break
    assert events == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def test_deleting_a_node_collects_its_resource_slices(
    core: client.CoreV1Api, resource: client.ResourceV1Api
) -> None:
    node = core.create_node({"metadata": {"name": "gc-node"}})
    other = core.create_node({"metadata": {"name": "gc-other"}})
    resource.create_resource_slice(_slice("gc-node-gpu", node))
    resource.create_resource_slice(_slice("gc-other-gpu", other))
    start = resource.list_resource_slice().metadata.resource_version
    core.delete_node("gc-node")
    # The embedded server collects at once; kube-controller-manager's garbage collector soon.
    wait_until(lambda: "gc-node-gpu" not in _slice_names(resource), "gc-node's slice collected")
    assert "gc-other-gpu" in _slice_names(resource)
    for event in watch.Watch().stream(
        resource.list_resource_slice, resource_version=start, timeout_seconds=5
    ):
        assert (event["type"], event["object"].metadata.name) == ("DELETED", "gc-node-gpu")
        break


def test_deleting_a_pod_collects_its_claims(
    core: client.CoreV1Api, resource: client.ResourceV1Api
) -> None:
    pod = core.create_namespaced_pod(
        "gc", {"metadata": {"name": "user"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "user", "uid": pod.metadata.uid}
    claim = {"metadata": {"name": "user-gpu", "ownerReferences": [owner]}, "spec": {"devices": {}}}
    resource.create_namespaced_resource_claim("gc", claim)
    resource.create_namespaced_resource_claim(
        "gc", {"metadata": {"name": "standalone"}, "spec": {"devices": {}}}
    )
    core.delete_namespaced_pod("user", "gc")

    def names() -> list[str]:
        return [c.metadata.name for c in resource.list_namespaced_resource_claim("gc").items]

    wait_until(lambda: names() == ["standalone"], "the pod's claim collected")


def test_deleting_a_namespace_deletes_its_objects(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "inside"}})
    core.create_namespaced_config_map("survivor", {"metadata": {"name": "outside"}})
    core.delete_namespace("doomed")
    # At once here; upstream the namespace controller empties it, then the namespace goes.
    wait_until(lambda: not core.list_namespaced_config_map("doomed").items, "doomed emptied")
    survivors = [c.metadata.name for c in core.list_namespaced_config_map("survivor").items]
    assert "outside" in survivors


def test_delete_precondition_on_uid(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("pre", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_config_map(
            "cm", "pre", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="x"))
        )
    assert caught.value.status == 409
    core.read_namespaced_config_map("cm", "pre")
