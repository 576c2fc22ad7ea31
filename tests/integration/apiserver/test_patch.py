"""PATCH in its three flavours, sent by the official client with an explicit Content-Type."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.patches import json_patch, merge_patch
from tests.integration.apiserver.support import Raw

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def node(core: client.CoreV1Api, request: pytest.FixtureRequest) -> str:
    # A DNS subdomain per test, parametrized ones included (their ids end in `[...]`).
    full = request.node.name.lower()
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    name = f"{re.sub(r'[^a-z0-9-]+', '-', full)[:50].strip('-')}-{digest}"
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"a": "1", "b": "2"},
                "finalizers": ["x/one", "x/two"],
            },
            # One CIDR per IP family at most, and set once (`ValidateNode`, `ValidateNodeUpdate`).
            "spec": {"podCIDRs": ["10.0.0.0/24", "fd00:10::/64"]},
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
    # Upstream's order: the patch's order, with the stored-only x/one placed before x/two.
    assert after.metadata.finalizers == ["x/three", "x/one", "x/two"]
    assert after.spec.pod_cidrs == ["10.0.0.0/24", "fd00:10::/64"]


def test_dict_patch_with_client_default_content_type(core: client.CoreV1Api, node: str) -> None:
    # The client labels a dict body json-patch+json by default, and sends it as a strategic
    # merge patch itself (a JSON object is no JSON patch: see below).
    after = core.patch_node(node, {"metadata": {"labels": {"d": "4"}}})
    assert after.metadata.labels == {"a": "1", "b": "2", "d": "4"}


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        (
            JSON_PATCH,
            {"metadata": {"labels": {"d": "4"}}},
            "error decoding patch: json: cannot unmarshal object into Go value of type "
            "[]handlers.jsonPatchOp",
        ),
        (
            JSON_PATCH,
            [1],
            "error decoding patch: json: cannot unmarshal number into Go value of type "
            "handlers.jsonPatchOp",
        ),
        (
            MERGE,
            ["x"],
            "error decoding patch: json: cannot unmarshal array into Go value of type "
            "map[string]interface {}",
        ),
        (
            STRATEGIC,
            ["x"],
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
    ],
    ids=["object-as-json-patch", "number-as-operation", "array-as-merge", "array-as-strategic"],
)
def test_a_patch_body_of_the_wrong_shape_does_not_decode(
    raw: Raw, node: str, content_type: str, body: Any, message: str
) -> None:
    status, answer = raw.send("PATCH", f"/api/v1/nodes/{node}", body, content_type)
    assert (status, answer["reason"], answer["message"]) == (400, "BadRequest", message)


# Each is applied as kube-apiserver's patch library applies it, leniencies included.
@pytest.mark.parametrize(
    ("ops", "labels", "finalizers"),
    [
        # `replace` of a missing key adds it.
        ([{"op": "replace", "path": "/metadata/labels/c", "value": "3"}], {"c": "3"}, None),
        # Indices may carry a sign or leading zeros, and count from the end when negative.
        (
            [{"op": "add", "path": "/metadata/finalizers/01", "value": "x/mid"}],
            None,
            ["x/one", "x/mid", "x/two"],
        ),
        ([{"op": "remove", "path": "/metadata/finalizers/-1"}], None, ["x/one"]),
        (
            [{"op": "replace", "path": "/metadata/finalizers/-2", "value": "x/first"}],
            None,
            ["x/first", "x/two"],
        ),
        (
            [{"op": "add", "path": "/metadata/finalizers/+0", "value": "x/zero"}],
            None,
            ["x/zero", "x/one", "x/two"],
        ),
        # A missing key tests equal to null.
        ([{"op": "test", "path": "/metadata/labels/zz", "value": None}], None, None),
        # A move onto itself leaves the value where it was.
        ([{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/a"}], None, None),
    ],
    ids=[
        "replace-adds",
        "leading-zero",
        "negative-remove",
        "negative-replace",
        "plus",
        "null",
        "move-in-place",
    ],
)
def test_json_patch_leniencies(
    core: client.CoreV1Api,
    node: str,
    ops: list[dict[str, Any]],
    labels: dict[str, str] | None,
    finalizers: list[str] | None,
) -> None:
    after = core.patch_node(node, ops, _content_type=JSON_PATCH)
    assert after.metadata.labels == {"a": "1", "b": "2", **(labels or {})}
    assert after.metadata.finalizers == (finalizers or ["x/one", "x/two"])


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/metadata/labels/zz"}],
        [{"op": "add", "path": "/metadata/nothere/x", "value": 1}],
        [{"op": "add", "path": "/metadata/finalizers/5", "value": "x/b"}],
        [{"op": "frob", "path": "/metadata/labels/zz", "value": "1"}],
        [{"path": "/metadata/labels/zz", "value": "1"}],
        [{"op": "move", "from": "/metadata/labels/nope", "path": "/metadata/labels/zz"}],
        [{"op": "move", "from": "/metadata/labels", "path": "/metadata/labels/inner"}],
        [{"op": "test", "path": "/metadata/labels/a"}],
        [{"op": "remove", "path": ""}],
        [{"op": "remove", "path": "/metadata/finalizers/x"}],
    ],
    ids=[
        "remove-missing",
        "missing-parent",
        "index-past-the-end",
        "unknown-op",
        "no-op",
        "move-missing",
        "move-into-itself",
        "test-without-value",
        "remove-root",
        "not-an-index",
    ],
)
def test_a_json_patch_that_does_not_apply_is_invalid(
    core: client.CoreV1Api, node: str, ops: list[dict[str, Any]]
) -> None:
    with pytest.raises(ApiException) as caught:
        core.patch_node(node, ops, _content_type=JSON_PATCH)
    body = json.loads(caught.value.body)
    assert (caught.value.status, body["reason"]) == (422, "Invalid")
    # kube-apiserver shows none of the patch library's own words.
    assert body["message"] == "the server rejected our request due to an error in our request"


def test_json_patch_operations(core: client.CoreV1Api, node: str) -> None:
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/k8s.io~1zone", "value": "z"},
        {"op": "replace", "path": "/metadata/labels/b", "value": "20"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/a2"},
        {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/a3"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "x/three"},
    ]
    after = core.patch_node(node, ops, _content_type=JSON_PATCH)
    assert after.metadata.labels == {"b": "20", "k8s.io/zone": "z", "a2": "1", "a3": "1"}
    assert after.metadata.finalizers == ["x/two", "x/three"]


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
    # Server-side apply (`application/apply-patch+yaml`) is served upstream, not here: a
    # documented difference (docs/architecture.md).
    with pytest.raises(ApiException) as caught:
        core.patch_node(node, {"metadata": {}}, _content_type="application/example-patch+json")
    assert caught.value.status == 415
    assert json.loads(caught.value.body)["reason"] == "UnsupportedMediaType"


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
    # The patch library compares an object by its own keys only.
    assert json_patch({"a": {"b": 1}}, [{"op": "test", "path": "/a", "value": {"b": 1, "c": 2}}])
