"""Strategic merge patch with the real list strategies of the kinds served, through the client.

Each case is one a lenient "lists replace whole" server gets wrong: the assertions keep what a
replace would have dropped, or drop what a merge must not keep.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from localcluster import ApiServer
from localcluster.errors import ApiError
from localcluster.patch_strategies import STRATEGIES
from localcluster.resources import DEFAULT_RESOURCES, ResourceType
from localcluster.strategic_merge import strategic_merge_patch
from tests.integration.apiserver.support import namespaces_fixture

namespaces = namespaces_fixture("smp")

STRATEGIC = "application/strategic-merge-patch+json"
NS = "smp"
POD_RULES = STRATEGIES["pods"]


@pytest.fixture
def pod(core: client.CoreV1Api, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-").lower()[:60]
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name, "finalizers": ["a/one"]},
            "spec": {
                "schedulingGates": [{"name": "g/one"}, {"name": "g/two"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "img:1",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80}, {"containerPort": 443}],
                    },
                    {"name": "side", "image": "side:1"},
                ],
                "tolerations": [{"key": "t1", "operator": "Exists"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-a"}],
            },
        },
    )
    return name


def _patch_pod(core: client.CoreV1Api, name: str, body: Any) -> dict[str, Any]:
    response = core.patch_namespaced_pod(
        name, NS, body, _content_type=STRATEGIC, _preload_content=False
    )
    result: dict[str, Any] = json.loads(response.data)
    return result


def _patch_pod_status(core: client.CoreV1Api, name: str, body: Any) -> dict[str, Any]:
    response = core.patch_namespaced_pod_status(
        name, NS, body, _content_type=STRATEGIC, _preload_content=False
    )
    result: dict[str, Any] = json.loads(response.data)
    return result


def test_containers_merge_by_name(core: client.CoreV1Api, pod: str) -> None:
    # Of a pod's containers only the image may change (`ValidatePodUpdate`); a replacing list
    # would drop `main`, a lenient merge its env and ports.
    after = _patch_pod(core, pod, {"spec": {"containers": [{"name": "side", "image": "side:2"}]}})
    main, side = after["spec"]["containers"]
    assert (main["name"], main["image"], side["name"], side["image"]) == (
        "main",
        "img:1",
        "side",
        "side:2",
    )
    assert [e["name"] for e in main["env"]] == ["A", "B"]
    assert [p["containerPort"] for p in main["ports"]] == [80, 443]


DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for taint in ("not-ready", "unreachable")
]


def test_tolerations_are_atomic(core: client.CoreV1Api, pod: str) -> None:
    # The patch's list is the new list, whole; then the DefaultTolerationSeconds admission
    # adds the two it adds to every pod, on update as on create.
    created = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(pod, NS))
    assert created["spec"]["tolerations"] == [
        {"key": "t1", "operator": "Exists"},
        *DEFAULT_TOLERATIONS,
    ]
    tolerations = [{"key": "t2", "operator": "Exists"}, {"key": "t1", "operator": "Exists"}]
    after = _patch_pod(core, pod, {"spec": {"tolerations": tolerations}})
    assert after["spec"]["tolerations"] == tolerations + DEFAULT_TOLERATIONS
    # Tolerations may only be added to (`validateOnlyAddedTolerations`): dropping t2 is refused.
    with pytest.raises(ApiException) as caught:
        _patch_pod(core, pod, {"spec": {"tolerations": tolerations[1:]}})
    status = json.loads(caught.value.body)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
        ("FieldValueForbidden", "spec.tolerations")
    ]


def test_scheduling_gates_merge_and_delete_by_name(core: client.CoreV1Api, pod: str) -> None:
    # Gates may only be removed (as upstream), so the merge is shown with a gate already there:
    # a replacing list would drop g/two.
    after = _patch_pod(core, pod, {"spec": {"schedulingGates": [{"name": "g/one"}]}})
    assert [g["name"] for g in after["spec"]["schedulingGates"]] == ["g/one", "g/two"]
    after = _patch_pod(
        core, pod, {"spec": {"schedulingGates": [{"name": "g/one", "$patch": "delete"}]}}
    )
    assert [g["name"] for g in after["spec"]["schedulingGates"]] == ["g/two"]


def test_patch_replace_directive_replaces_the_list(core: client.CoreV1Api, pod: str) -> None:
    after = _patch_pod(
        core,
        pod,
        {"spec": {"schedulingGates": [{"$patch": "replace"}, {"name": "g/two"}]}},
    )
    assert after["spec"]["schedulingGates"] == [{"name": "g/two"}]


def test_finalizers_merge_and_delete_from_primitive_list(core: client.CoreV1Api, pod: str) -> None:
    after = _patch_pod(core, pod, {"metadata": {"finalizers": ["a/two"]}})
    # What the stored list lacks comes first (apimachinery's `mergeSortedSlice`).
    assert after["metadata"]["finalizers"] == ["a/two", "a/one"]
    after = _patch_pod(
        core,
        pod,
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["a/one"],
                "$setElementOrder/finalizers": ["a/two"],
            }
        },
    )
    assert after["metadata"]["finalizers"] == ["a/two"]


def test_set_element_order_orders_a_merge_list(core: client.CoreV1Api, pod: str) -> None:
    after = _patch_pod(
        core,
        pod,
        {
            "spec": {
                "$setElementOrder/schedulingGates": [{"name": "g/two"}, {"name": "g/one"}],
                "schedulingGates": [{"name": "g/two"}],
            }
        },
    )
    assert [g["name"] for g in after["spec"]["schedulingGates"]] == ["g/two", "g/one"]


def test_status_conditions_merge_by_type(core: client.CoreV1Api, pod: str) -> None:
    # The gated pod's PodScheduled condition is kube-apiserver's, written on create.
    (gated,) = core.read_namespaced_pod(pod, NS).status.conditions
    assert (gated.type, gated.status, gated.reason) == ("PodScheduled", "False", "SchedulingGated")
    _patch_pod_status(core, pod, {"status": {"conditions": [{"type": "A", "status": "True"}]}})
    after = _patch_pod_status(
        core, pod, {"status": {"conditions": [{"type": "B", "status": "False"}]}}
    )
    assert [(c["type"], c["status"]) for c in after["status"]["conditions"]] == [
        ("B", "False"),
        ("A", "True"),
        ("PodScheduled", "False"),
    ]
    statuses = [{"name": "gpu", "resourceClaimName": "claim-a"}]
    after = _patch_pod_status(core, pod, {"status": {"resourceClaimStatuses": statuses}})
    assert after["status"]["resourceClaimStatuses"] == statuses
    assert len(after["status"]["conditions"]) == 3


def test_element_without_its_merge_key_is_a_server_error(core: client.CoreV1Api, pod: str) -> None:
    # kube-apiserver passes the merge's error on unclassified: 500, no reason.
    with pytest.raises(ApiException) as caught:
        _patch_pod(core, pod, {"spec": {"containers": [{"image": "no-name"}]}})
    assert caught.value.status == 500
    body = json.loads(caught.value.body)
    assert "reason" not in body
    assert body["message"] == "map: map[image:no-name] does not contain declared merge key: name"


def test_node_taints_are_atomic_and_conditions_merge_by_type(core: client.CoreV1Api) -> None:
    core.create_node(
        {
            "metadata": {"name": "smp-node"},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    after = core.patch_node(
        "smp-node",
        {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}},
        _content_type=STRATEGIC,
    )
    assert [t.key for t in after.spec.taints] == ["b"]
    after = core.patch_node_status(
        "smp-node",
        {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}},
        _content_type=STRATEGIC,
    )
    assert [c.type for c in after.status.conditions] == ["MemoryPressure", "Ready"]


def test_claim_reserved_for_merges_by_uid_and_its_spec_is_immutable(
    resource: client.ResourceV1Api,
) -> None:
    exactly = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
    resource.create_namespaced_resource_claim(
        NS,
        {
            "metadata": {"name": "smp-claim"},
            "spec": {"devices": {"requests": [{"name": "a", "exactly": exactly}]}},
        },
    )
    first = {"resource": "pods", "name": "p1", "uid": "u1"}
    second = {"resource": "pods", "name": "p2", "uid": "u2"}
    # A reservation needs an allocation (as upstream's status validation requires).
    result = {"request": "a", "driver": "gpu.example.com", "pool": "n", "device": "d0"}
    allocation = {"devices": {"results": [result]}}
    for consumer in (first, second):
        resource.patch_namespaced_resource_claim_status(
            "smp-claim",
            NS,
            {"status": {"allocation": allocation, "reservedFor": [consumer]}},
            _content_type=STRATEGIC,
        )
    response = resource.read_namespaced_resource_claim("smp-claim", NS, _preload_content=False)
    claim = json.loads(response.data)
    assert claim["status"]["reservedFor"] == [second, first]
    change = {"spec": {"devices": {"requests": [{"name": "b", "exactly": exactly}]}}}
    # A claim's spec is immutable (as upstream).
    with pytest.raises(ApiException) as caught:
        resource.patch_namespaced_resource_claim("smp-claim", NS, change, _content_type=STRATEGIC)
    assert caught.value.status == 422


@pytest.mark.embedded_only  # a server of its own, without validators, to see the merge itself
def test_claim_requests_are_atomic() -> None:
    exactly = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
    spec = {"devices": {"requests": [{"name": "a", "exactly": exactly}]}}
    change = {"spec": {"devices": {"requests": [{"name": "b", "exactly": exactly}]}}}
    with ApiServer(validators={}) as lenient:
        api = client.ResourceV1Api(config.new_client_from_config_dict(lenient.kubeconfig()))
        api.create_namespaced_resource_claim(
            "default", {"metadata": {"name": "smp-claim"}, "spec": spec}
        )
        after = api.patch_namespaced_resource_claim(
            "smp-claim", "default", change, _content_type=STRATEGIC, _preload_content=False
        )
    assert [r["name"] for r in json.loads(after.data)["spec"]["devices"]["requests"]] == ["b"]


@pytest.mark.embedded_only  # `resources=`: a kind served without a CRD
def test_strategic_patch_of_a_custom_resource_is_unsupported_media_type() -> None:
    widget = ResourceType("example.com", "v1", "widgets", "Widget", True)
    with ApiServer(resources=[*DEFAULT_RESOURCES, widget]) as server:
        api = config.new_client_from_config_dict(server.kubeconfig())  # type: ignore[no-untyped-call]
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", {"metadata": {"name": "w"}}
        )
        with pytest.raises(ApiException) as caught:
            custom.patch_namespaced_custom_object(
                "example.com",
                "v1",
                "default",
                "widgets",
                "w",
                {"spec": {"x": 1}},
                _content_type=STRATEGIC,
            )
        assert caught.value.status == 415
        assert json.loads(caught.value.body)["reason"] == "UnsupportedMediaType"
        merged = custom.patch_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            "w",
            {"spec": {"x": 1}},
            _content_type="application/merge-patch+json",
        )
        assert merged["spec"] == {"x": 1}


# ---- the merge itself, without HTTP ----------------------------------------------------------


def test_retain_keys_clears_other_union_members() -> None:
    target = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    patch = {
        "spec": {
            "volumes": [
                {"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}
            ]
        }
    }
    merged = strategic_merge_patch(target, patch, POD_RULES)
    assert merged["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]


def test_map_directives_and_nulls() -> None:
    target = {"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}}
    replaced = strategic_merge_patch(
        target, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}, POD_RULES
    )
    assert replaced["metadata"]["labels"] == {"c": "3"}
    deleted = strategic_merge_patch(
        target,
        {"metadata": {"annotations": {"$patch": "delete"}, "labels": {"a": None}}},
        POD_RULES,
    )
    assert deleted["metadata"] == {"labels": {"b": "2"}}
    assert target["metadata"]["labels"] == {"a": "1", "b": "2"}  # the input is untouched


def test_new_elements_lose_their_directives() -> None:
    merged = strategic_merge_patch(
        {},
        {"spec": {"containers": [{"name": "c", "env": [{"name": "E", "value": None}]}]}},
        POD_RULES,
    )
    assert merged == {"spec": {"containers": [{"name": "c", "env": [{"name": "E"}]}]}}


def test_unknown_patch_directive_is_a_server_error() -> None:
    with pytest.raises(ApiError) as caught:
        strategic_merge_patch({}, {"spec": {"$patch": "frobnicate"}}, POD_RULES)
    assert caught.value.code == 500
    assert caught.value.message == "unknown patch type: frobnicate in map: map[$patch:frobnicate]"


def test_env_and_ports_merge_by_their_keys() -> None:
    target = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80}, {"containerPort": 443}],
                }
            ]
        }
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                    "ports": [{"containerPort": 443, "name": "https"}],
                }
            ]
        }
    }
    (main,) = strategic_merge_patch(target, patch, POD_RULES)["spec"]["containers"]
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]
    assert main["ports"] == [{"containerPort": 80}, {"containerPort": 443, "name": "https"}]


@pytest.mark.parametrize(
    ("stored", "patched", "merged"),
    [
        (["a"], ["b"], ["b", "a"]),  # new elements before the stored ones not yet placed
        (["a", "b"], ["b"], ["a", "b"]),  # a stored element before a later stored one
        (["a", "b", "c"], ["c", "x"], ["a", "b", "c", "x"]),
        (["a", "b", "c"], ["x", "b"], ["x", "a", "b", "c"]),
        (["b", "a"], ["a", "b"], ["a", "b"]),  # the patch's own order wins
    ],
)
def test_merged_lists_take_upstreams_order(
    stored: list[str], patched: list[str], merged: list[str]
) -> None:
    result = strategic_merge_patch(
        {"metadata": {"finalizers": stored}}, {"metadata": {"finalizers": patched}}, POD_RULES
    )
    assert result["metadata"]["finalizers"] == merged
