"""A claim's `status.devices` (KEP-4817), written through the status subresource with the
official client, is held to kube-apiserver's rules (`ValidateResourceClaimStatusUpdate`,
`validateDeviceStatus`, metav1 `ValidateConditions`) and its status strategy's dropping of
entries for devices that are no longer allocated, so a kubelet plugin that writes a bad entry
fails here as it would on a real cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from dra_driver.device_status import IDLE, idle_condition

NS = "default"
DRIVER = "gpu.example.com"
ALLOCATED = {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}


def _idle() -> dict[str, Any]:
    """The condition the kubelet plugin writes, from the shared vocabulary."""
    return idle_condition(True, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "idle for 10m")


@pytest.fixture
def allocated(resource: client.ResourceV1Api, request: pytest.FixtureRequest) -> str:
    """A claim with one device (`ALLOCATED`) allocated to request `gpu`; its name."""
    name = request.node.name.replace("_", "-").lower()[:60].strip("-")
    resource.create_namespaced_resource_claim(
        NS,
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}
            },
        },
    )
    result = {"request": "gpu", **ALLOCATED}
    _write(resource, name, {"allocation": {"devices": {"results": [result]}}})
    return name


def _write(resource: client.ResourceV1Api, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of the claim's status; the stored claim."""
    response = resource.patch_namespaced_resource_claim_status(
        name, NS, {"status": status}, _preload_content=False
    )
    stored: dict[str, Any] = json.loads(response.data)
    return stored


def _refused(write: Callable[[], object]) -> list[tuple[str, str, str]]:
    """The 422's causes as (field, reason, message)."""
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status == 422
    body = json.loads(caught.value.body)
    assert (body["reason"], body["details"]["kind"]) == ("Invalid", "ResourceClaim")
    return [(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]]


def _entry(**changes: Any) -> dict[str, Any]:
    return {**ALLOCATED, "conditions": [_idle()], **changes}


def test_an_idle_condition_on_an_allocated_device_is_stored_and_read_back(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    entry = _entry(data={"utilisation": 0}, networkData={"ips": ["10.9.8.7/24"]})
    _write(resource, allocated, {"devices": [entry]})
    claim = resource.read_namespaced_resource_claim(allocated, NS)
    (device,) = claim.status.devices
    assert (device.driver, device.pool, device.device) == (DRIVER, "node-a", "gpu-0")
    (condition,) = device.conditions
    assert (condition.type, condition.status, condition.reason) == (IDLE, "True", "NoActivity")
    assert device.data == {"utilisation": 0}
    assert device.network_data.ips == ["10.9.8.7/24"]


def test_an_entry_for_a_device_not_allocated_is_refused(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    causes = _refused(lambda: _write(resource, allocated, {"devices": [_entry(device="gpu-1")]}))
    assert causes == [
        (
            "status.devices[0]",
            "FieldValueInvalid",
            # Upstream shows its device id struct, with Go's field names.
            'Invalid value: {"Driver":"gpu.example.com","Pool":"node-a","Device":"gpu-1",'
            '"ShareID":""}: must be an allocated device in the claim',
        )
    ]


def test_a_share_id_is_part_of_the_device_it_names(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    share = "0f4a8c0e-3b4e-4c55-9a1b-7f4d2b1c9e10"
    causes = _refused(lambda: _write(resource, allocated, {"devices": [_entry(shareID=share)]}))
    assert causes == [
        (
            "status.devices[0]",
            "FieldValueInvalid",
            'Invalid value: {"Driver":"gpu.example.com","Pool":"node-a","Device":"gpu-0",'
            f'"ShareID":"{share}"}}: must be an allocated device in the claim',
        )
    ]
    upper = share.upper()
    causes = _refused(lambda: _write(resource, allocated, {"devices": [_entry(shareID=upper)]}))
    # The share id's form is checked by declarative validation, whose errors come last.
    assert causes == [
        (
            "status.devices[0]",
            "FieldValueInvalid",
            'Invalid value: {"Driver":"gpu.example.com","Pool":"node-a","Device":"gpu-0",'
            f'"ShareID":"{upper}"}}: must be an allocated device in the claim',
        ),
        (
            "status.devices[0].shareID",
            "FieldValueInvalid",
            f'Invalid value: "{upper}": must be a lowercase UUID in 8-4-4-4-12 format',
        ),
    ]


def test_the_same_device_twice_is_a_duplicate(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    causes = _refused(lambda: _write(resource, allocated, {"devices": [_entry(), _entry()]}))
    # The value is the whole entry, its fields in the v1 type's order.
    entry = (
        '{"driver":"gpu.example.com","pool":"node-a","device":"gpu-0","conditions":[{"type":'
        '"Idle","status":"True","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"NoActivity",'
        '"message":"idle for 10m"}]}'
    )
    assert causes == [("status.devices[1]", "FieldValueDuplicate", f"Duplicate value: {entry}")]


def _condition_causes(
    resource: client.ResourceV1Api, claim: str, conditions: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    return _refused(lambda: _write(resource, claim, {"devices": [_entry(conditions=conditions)]}))


def test_a_condition_needs_a_reason(resource: client.ResourceV1Api, allocated: str) -> None:
    condition = {k: v for k, v in _idle().items() if k != "reason"}
    assert _condition_causes(resource, allocated, [condition]) == [
        (
            "status.devices[0].conditions[0].reason",
            "FieldValueRequired",
            "Required value",
        )
    ]


def test_a_reason_must_be_camel_case_words(resource: client.ResourceV1Api, allocated: str) -> None:
    ((field, reason, message),) = _condition_causes(
        resource, allocated, [{**_idle(), "reason": "no activity"}]
    )
    assert (field, reason) == ("status.devices[0].conditions[0].reason", "FieldValueInvalid")
    assert message.startswith('Invalid value: "no activity": a condition reason must start')


def test_a_condition_status_is_true_false_or_unknown(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    assert _condition_causes(resource, allocated, [{**_idle(), "status": "Yes"}]) == [
        (
            "status.devices[0].conditions[0].status",
            "FieldValueNotSupported",
            'Unsupported value: "Yes": supported values: "False", "True", "Unknown"',
        )
    ]


def test_a_condition_needs_a_transition_time(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    condition = {k: v for k, v in _idle().items() if k != "lastTransitionTime"}
    assert _condition_causes(resource, allocated, [condition]) == [
        (
            "status.devices[0].conditions[0].lastTransitionTime",
            "FieldValueRequired",
            "Required value",
        )
    ]


def test_a_transition_time_that_is_not_rfc3339_does_not_decode(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    # The patched object does not decode: upstream reports that as an invalid `patch` (a body
    # sent whole that does not decode is 400 instead, see test_object_validation).
    entry = _entry(conditions=[{**_idle(), "lastTransitionTime": "yesterday"}])
    with pytest.raises(ApiException) as caught:
        _write(resource, allocated, {"devices": [entry]})
    assert caught.value.status == 422
    body = json.loads(caught.value.body)
    assert body["reason"] == "Invalid"
    (cause,) = body["details"]["causes"]
    assert cause["field"] == "patch"
    assert 'parsing time "yesterday"' in cause["message"]


def test_a_condition_type_may_appear_once(resource: client.ResourceV1Api, allocated: str) -> None:
    assert _condition_causes(resource, allocated, [_idle(), _idle()]) == [
        (
            "status.devices[0].conditions[1]",
            "FieldValueDuplicate",
            f'Duplicate value: "{IDLE}"',
        )
    ]


def test_data_is_a_json_object_of_at_most_10_kib(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    big = {"blob": "x" * (10 * 1024)}
    assert _refused(lambda: _write(resource, allocated, {"devices": [_entry(data=big)]})) == [
        (
            "status.devices[0].data",
            "FieldValueTooLong",
            "Too long: may not be more than 10240 bytes",
        )
    ]
    assert _refused(lambda: _write(resource, allocated, {"devices": [_entry(data=[1])]})) == [
        (
            "status.devices[0].data",
            "FieldValueInvalid",
            'Invalid value: "<value omitted>": must be a valid JSON object',
        )
    ]


def test_network_addresses_are_canonical_cidrs(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    network = {"ips": ["10.9.8.7", "2001:DB8::1/64", "10.0.0.1/8", "10.0.0.1/8"]}
    causes = _refused(
        lambda: _write(resource, allocated, {"devices": [_entry(networkData=network)]})
    )
    assert [(field, reason) for field, reason, _ in causes] == [
        ("status.devices[0].networkData.ips[0]", "FieldValueInvalid"),
        ("status.devices[0].networkData.ips[1]", "FieldValueInvalid"),
        ("status.devices[0].networkData.ips[3]", "FieldValueDuplicate"),
    ]
    assert causes[1][2].endswith('must be in canonical form ("2001:db8::1/64")')


def test_deallocation_removes_the_entries_of_the_devices_it_frees(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    _write(resource, allocated, {"devices": [_entry()]})
    claim = _write(resource, allocated, {"allocation": None})
    assert "devices" not in claim["status"]
    read = resource.read_namespaced_resource_claim(allocated, NS)
    assert read.status.devices is None


def test_an_entry_cannot_be_written_without_an_allocation(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    _write(resource, allocated, {"allocation": None})
    causes = _refused(lambda: _write(resource, allocated, {"devices": [_entry()]}))
    assert causes[0][:2] == ("status.devices[0]", "FieldValueInvalid")


def test_reservations_need_an_allocation_and_the_allocation_is_immutable(
    resource: client.ResourceV1Api, allocated: str
) -> None:
    consumer = {"resource": "pods", "name": "p", "uid": "u1"}
    _write(resource, allocated, {"reservedFor": [consumer]})
    other = {"request": "gpu", **ALLOCATED, "device": "gpu-1"}
    assert _refused(
        lambda: _write(resource, allocated, {"allocation": {"devices": {"results": [other]}}})
    ) == [
        (
            "status.allocation",
            "FieldValueInvalid",
            "Invalid value: null: field cannot be modified once set",
        )
    ]
    assert _refused(lambda: _write(resource, allocated, {"allocation": None})) == [
        (
            "status.reservedFor",
            "FieldValueForbidden",
            "Forbidden: may not be specified when `allocated` is not set",
        )
    ]
