"""PATCH in its three flavours, sent by the official client with an explicit Content-Type."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.patches import json_patch, merge_patch

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def node(core: client.CoreV1Api, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-").lower()[:60]
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"a": "1", "b": "2"},
                "finalizers": ["x/one", "x/two"],
            },
            "spec": {"podCIDRs": ["10.0.0.0/24", "10.0.1.0/24"]},
        }
    )
    return name


def test_merge_patch_merges_maps_and_null_deletes(core: client.CoreV1Api, node: str) -> None:
    after = core.patch_node(
        node, {"metadata": {"labels": {"a": None, "c": "3"}}}, _content_type=MERGE
    )
    assert after.metadata.labels == {"b": "2", "c": "3"}


def test_strategic_patch_merges_finalizers(core: client.CoreV1Api, node: str) -> None:
    # metadata.finalizers is `patchStrategy:"merge"`: a patch adds, never replaces.
    after = core.patch_node(
        node,
        {"metadata": {"finalizers": ["x/three", "x/two"]}},
        _content_type=STRATEGIC,
    )
    assert after.metadata.finalizers == ["x/one", "x/two", "x/three"]
    assert after.spec.pod_cidrs == ["10.0.0.0/24", "10.0.1.0/24"]


def test_dict_patch_with_client_default_content_type(core: client.CoreV1Api, node: str) -> None:
    # The client labels a dict body json-patch+json by default; it must still work.
    after = core.patch_node(node, {"metadata": {"labels": {"d": "4"}}})
    assert after.metadata.labels == {"a": "1", "b": "2", "d": "4"}


def test_json_patch_operations(core: client.CoreV1Api, node: str) -> None:
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/k8s.io~1zone", "value": "z"},
        {"op": "replace", "path": "/metadata/labels/b", "value": "20"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/a2"},
        {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/a3"},
        {"op": "add", "path": "/spec/podCIDRs/-", "value": "10.0.2.0/24"},
    ]
    after = core.patch_node(node, ops, _content_type=JSON_PATCH)
    assert after.metadata.labels == {"b": "20", "k8s.io/zone": "z", "a2": "1", "a3": "1"}
    assert after.metadata.finalizers == ["x/two"]
    assert after.spec.pod_cidrs[-1] == "10.0.2.0/24"


def test_failed_json_patch_test_changes_nothing(core: client.CoreV1Api, node: str) -> None:
    before = core.read_node(node)
    ops = [
        {"op": "replace", "path": "/metadata/labels/a", "value": "changed"},
        {"op": "test", "path": "/metadata/labels/b", "value": "wrong"},
    ]
    with pytest.raises(ApiException) as caught:
        core.patch_node(node, ops, _content_type=JSON_PATCH)
    assert caught.value.status == 422
    assert core.read_node(node).metadata.resource_version == before.metadata.resource_version


def test_patch_with_stale_resource_version_conflicts(core: client.CoreV1Api, node: str) -> None:
    patch = {"metadata": {"resourceVersion": "1", "labels": {"z": "z"}}}
    with pytest.raises(ApiException) as caught:
        core.patch_node(node, patch, _content_type=MERGE)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "Conflict"


def test_unsupported_patch_type(core: client.CoreV1Api, node: str) -> None:
    with pytest.raises(ApiException) as caught:
        core.patch_node(node, {"metadata": {}}, _content_type="application/apply-patch+yaml")
    assert caught.value.status == 415


def test_merge_patch_rfc7386_examples() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch(target, ["x"]) == ["x"]
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}


def test_json_patch_bad_paths_are_rejected() -> None:
    from localcluster.errors import ApiError

    with pytest.raises(ApiError):
        json_patch({"a": []}, [{"op": "remove", "path": "/a/0"}])
    with pytest.raises(ApiError):
        json_patch({"a": 1}, [{"op": "add", "path": "/missing/x", "value": 1}])
    with pytest.raises(ApiError):
        json_patch({"a": 1}, [{"op": "frobnicate", "path": "/a"}])
    assert json_patch([1, 2], [{"op": "add", "path": "/0", "value": 0}]) == [0, 1, 2]
