"""The embedded API server refuses what kube-apiserver refuses, with its code and its causes:
400 for a value that does not decode, 422 Invalid naming each field for the rest."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.invalid_objects import REFUSED, Refused, claim, fresh, pod


def _create(api_client: client.ApiClient, obj: dict[str, Any]) -> Any:
    if obj["kind"] == "Pod":
        return client.CoreV1Api(api_client).create_namespaced_pod("default", obj)
    return client.ResourceV1Api(api_client).create_namespaced_resource_claim("default", obj)


@pytest.mark.parametrize("row", REFUSED, ids=lambda r: r.label)
def test_each_refused_shape_gets_kube_apiservers_answer(
    api_client: client.ApiClient, row: Refused
) -> None:
    with pytest.raises(ApiException) as caught:
        _create(api_client, fresh(row.obj))
    assert caught.value.status == row.code
    body = json.loads(caught.value.body)
    assert body["kind"] == "Status" and body["code"] == row.code
    if row.code == 400:
        assert body["reason"] == "BadRequest"
        assert body["message"].startswith(f'{row.kind} in version "v1" cannot be handled as a')
        assert row.message in body["message"]
        assert "details" not in body  # the decoder names no field (`simulate` does)
    else:
        causes = body["details"]["causes"]
        assert [c["field"] for c in causes] == [row.field]
        assert body["reason"] == "Invalid"
        assert body["details"]["name"] == row.name and body["details"]["kind"] == row.kind
        assert row.message in causes[0]["message"]
        assert body["message"].startswith(f"{row.kind}")
        assert f"{row.field}: {causes[0]['message']}" in body["message"]
    with pytest.raises(ApiException) as missing:
        _read(api_client, row.kind, row.name)
    assert missing.value.status == 404


def _read(api_client: client.ApiClient, kind: str, name: str) -> Any:
    if kind == "Pod":
        return client.CoreV1Api(api_client).read_namespaced_pod(name, "default")
    return client.ResourceV1Api(api_client).read_namespaced_resource_claim(name, "default")


def test_the_reasons_name_the_kind_of_problem(core: client.CoreV1Api) -> None:
    bad = pod("reasons")
    bad["spec"]["containers"].append({"name": "c", "image": "busybox"})
    bad["spec"]["containers"].append({"name": "", "image": "busybox"})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", bad)
    body = json.loads(caught.value.body)
    assert [(c["reason"], c["field"]) for c in body["details"]["causes"]] == [
        ("FieldValueDuplicate", "spec.containers[1].name"),
        ("FieldValueRequired", "spec.containers[2].name"),
    ]
    # Several causes are listed in brackets, as upstream's aggregate error prints them.
    assert body["message"] == (
        'Pod "reasons" is invalid: [spec.containers[1].name: Duplicate value: "c", '
        "spec.containers[2].name: Required value]"
    )


def test_valid_objects_are_accepted(api_client: client.ApiClient) -> None:
    within = pod("within", resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}})
    assert _create(api_client, within).metadata.uid
    assert _create(api_client, claim("counted", count=2)).metadata.uid


def test_a_zero_count_is_defaulted_to_one_as_resource_v1_does(
    api_client: client.ApiClient,
) -> None:
    """`SetDefaults_ExactDeviceRequest` / `SetDefaults_DeviceSubRequest`: kube-apiserver stores
    `count: 0` (indistinguishable from none) as 1, in `exactly` and in every subrequest."""
    zero = claim("zero", count=0)
    zero["spec"]["devices"]["requests"].append(
        {
            "name": "either",
            "firstAvailable": [
                {"name": "a", "deviceClassName": "gpu", "count": 0},
                {"name": "b", "deviceClassName": "gpu", "allocationMode": "All"},
            ],
        }
    )
    _create(api_client, zero)
    stored = api_client.sanitize_for_serialization(_read(api_client, "ResourceClaim", "zero"))
    exact, either = stored["spec"]["devices"]["requests"]
    assert exact["exactly"]["count"] == 1
    assert exact["exactly"]["allocationMode"] == "ExactCount"
    first, every = either["firstAvailable"]
    assert (first["allocationMode"], first["count"]) == ("ExactCount", 1)
    assert every["allocationMode"] == "All" and "count" not in every


def test_requests_above_limits_are_refused(core: client.CoreV1Api) -> None:
    over = pod("over", resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", over)
    (cause,) = json.loads(caught.value.body)["details"]["causes"]
    assert cause == {
        "reason": "FieldValueInvalid",
        "field": "spec.containers[0].resources.requests",
        "message": 'Invalid value: "2Gi": must be less than or equal to memory limit of 1Gi',
    }


def test_a_container_may_only_name_the_pods_claims(core: client.CoreV1Api) -> None:
    stray = pod("stray", resources={"claims": [{"name": "gpu"}]})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", stray)
    (cause,) = json.loads(caught.value.body)["details"]["causes"]
    assert cause["field"] == "spec.containers[0].resources.claims[0]"
    assert cause["message"] == (
        'Not found: "gpu": must be one of the names in pod.spec.resourceClaims which is empty'
    )


def test_scheduling_gates_may_be_removed_but_not_added(core: client.CoreV1Api) -> None:
    gated = pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/one"}]
    core.create_namespaced_pod("default", gated)
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod(
            "gated",
            "default",
            {
                "spec": {
                    "schedulingGates": [{"name": "example.com/one"}, {"name": "example.com/two"}]
                }
            },
        )
    assert caught.value.status == 422
    (cause,) = json.loads(caught.value.body)["details"]["causes"]
    assert cause == {
        "reason": "FieldValueForbidden",
        "field": "spec.schedulingGates[1].name",
        "message": "Forbidden: only deletion is allowed, but found new scheduling gate "
        "'example.com/two'",
    }
    lifted = core.patch_namespaced_pod("gated", "default", {"spec": {"schedulingGates": None}})
    assert not lifted.spec.scheduling_gates


def test_a_claims_spec_cannot_change(resource: client.ResourceV1Api) -> None:
    resource.create_namespaced_resource_claim("default", claim("fixed"))
    with pytest.raises(ApiException) as caught:
        resource.patch_namespaced_resource_claim(
            "fixed",
            "default",
            {
                "spec": {
                    "devices": {
                        "requests": [{"name": "other", "exactly": {"deviceClassName": "gpu"}}]
                    }
                }
            },
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "spec"


def test_node_allocatable_must_be_quantities(core: client.CoreV1Api) -> None:
    node = {"metadata": {"name": "n-bad"}, "status": {"allocatable": {"cpu": "-2"}}}
    with pytest.raises(ApiException) as caught:
        core.create_node(node)
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == (
        "status.allocatable.cpu"
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "device.capacity.x > 0",
            "compilation failed: ERROR: <input>:1:19: found no matching overload for '_>_' "
            "applied to '(map(string, kubernetes.Quantity), int)'\n"
            " | device.capacity.x > 0\n"
            " | ..................^",
        ),
        (
            "foo == 1",
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in "
            "container '')\n | foo == 1\n | ^",
        ),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        (
            'device.driver.matches("[")',
            "compilation failed: ERROR: <input>:1:23: invalid matches argument\n"
            ' | device.driver.matches("[")\n'
            " | ......................^",
        ),
    ],
    ids=["type-error", "undeclared", "not-bool", "bad-pattern"],
)
def test_a_selector_must_compile(
    resource: client.ResourceV1Api, expression: str, message: str
) -> None:
    # `validateCELSelector`: kube-apiserver type-checks every selector it stores.
    selectors = [{"cel": {"expression": "true"}}, {"cel": {"expression": expression}}]
    with pytest.raises(ApiException) as caught:
        resource.create_device_class(
            {"metadata": {"name": "bad"}, "spec": {"selectors": selectors}}
        )
    body = json.loads(caught.value.body)
    assert (body["code"], body["reason"]) == (422, "Invalid")
    shown = json.dumps(expression)
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.selectors[1].cel.expression",
            "message": f"Invalid value: {shown}: {message}",
        }
    ]
    bad = claim("bad-selector")
    bad["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = selectors
    with pytest.raises(ApiException) as caught:
        resource.create_namespaced_resource_claim("default", bad)
    causes = json.loads(caught.value.body)["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "spec.devices.requests[0].exactly.selectors[1].cel.expression")
    ]
