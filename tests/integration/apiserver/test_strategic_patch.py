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


def test_containers_merge_by_name_and_their_env_and_ports_by_key(
    core: client.CoreV1Api, pod: str
) -> None:
    after = _patch_pod(
        core,
        pod,
        {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "img:2",
                        "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                        "ports": [{"containerPort": 443, "name": "https"}],
                    }
                ]
            }
        },
    )
    main, side = after["spec"]["containers"]
    assert (main["name"], main["image"], side["name"]) == ("main", "img:2", "side")
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]
    assert main["ports"] == [{"containerPort": 80}, {"containerPort": 443, "name": "https"}]


def test_tolerations_are_atomic(core: client.CoreV1Api, pod: str) -> None:
    after = _patch_pod(core, pod, {"spec": {"tolerations": [{"key": "t2", "operator": "Exists"}]}})
    assert after["spec"]["tolerations"] == [{"key": "t2", "operator": "Exists"}]


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
    assert after["metadata"]["finalizers"] == ["a/one", "a/two"]
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
    _patch_pod_status(core, pod, {"status": {"conditions": [{"type": "A", "status": "True"}]}})
    after = _patch_pod_status(
        core, pod, {"status": {"conditions": [{"type": "B", "status": "False"}]}}
    )
    assert [(c["type"], c["status"]) for c in after["status"]["conditions"]] == [
        ("A", "True"),
        ("B", "False"),
    ]
    statuses = [{"name": "gpu", "resourceClaimName": "claim-a"}]
    after = _patch_pod_status(core, pod, {"status": {"resourceClaimStatuses": statuses}})
    assert after["status"]["resourceClaimStatuses"] == statuses
    assert len(after["status"]["conditions"]) == 2


def test_element_without_its_merge_key_is_bad_request(core: client.CoreV1Api, pod: str) -> None:
    with pytest.raises(ApiException) as caught:
        _patch_pod(core, pod, {"spec": {"containers": [{"image": "no-name"}]}})
    assert caught.value.status == 400
    assert "does not contain declared merge key: name" in json.loads(caught.value.body)["message"]


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
    assert [c.type for c in after.status.conditions] == ["Ready", "MemoryPressure"]


def test_claim_reserved_for_merges_by_uid_and_requests_are_atomic(
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
    assert claim["status"]["reservedFor"] == [first, second]
    change = {"spec": {"devices": {"requests": [{"name": "b", "exactly": exactly}]}}}
    # A claim's spec is immutable (as upstream), so the merge is seen without validation.
    with pytest.raises(ApiException) as caught:
        resource.patch_namespaced_resource_claim("smp-claim", NS, change, _content_type=STRATEGIC)
    assert caught.value.status == 422
    with ApiServer(validators={}) as lenient:
        api = client.ResourceV1Api(config.new_client_from_config_dict(lenient.kubeconfig()))
        api.create_namespaced_resource_claim(
            NS, {"metadata": {"name": "smp-claim"}, "spec": claim["spec"]}
        )
        after = api.patch_namespaced_resource_claim(
            "smp-claim", NS, change, _content_type=STRATEGIC, _preload_content=False
        )
    assert [r["name"] for r in json.loads(after.data)["spec"]["devices"]["requests"]] == ["b"]


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


def test_unknown_patch_directive_is_rejected() -> None:
    with pytest.raises(ApiError) as caught:
        strategic_merge_patch({}, {"spec": {"$patch": "frobnicate"}}, POD_RULES)
    assert caught.value.code == 400
