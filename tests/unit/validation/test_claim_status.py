"""The claim status rules that are cheaper to check without a server: `validate_status_update`
on plain dicts, with kube-apiserver's field paths and words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.validation import UndecodableError, validate_status_update

DRIVER = "gpu.example.com"
RESULT = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
CONDITION = {
    "type": "Idle",
    "status": "True",
    "reason": "NoActivity",
    "message": "",
    "lastTransitionTime": "2026-01-02T03:04:05Z",
}


def _claim(**status: Any) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    return {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
        "status": status,
    }


def _allocated(**status: Any) -> dict[str, Any]:
    return _claim(allocation={"devices": {"results": [RESULT]}}, **status)


def _problems(new: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    _, problems = validate_status_update("ResourceClaim", new, old or _claim())
    return [str(p) for p in problems]


def _entry(**changes: Any) -> dict[str, Any]:
    return {"driver": DRIVER, "pool": "node-a", "device": "gpu-0", **changes}


def test_a_plain_allocation_and_reservation_pass() -> None:
    consumer = {"resource": "pods", "name": "p", "uid": "u1"}
    assert _problems(_allocated(reservedFor=[consumer])) == []


def test_reservations_need_resource_name_and_a_unique_uid() -> None:
    consumers = [{"resource": "pods", "name": "p", "uid": "u1"}, {"uid": "u1"}]
    assert _problems(_allocated(reservedFor=consumers)) == [
        "status.reservedFor[1].resource: Required value",
        "status.reservedFor[1].name: Required value",
        'status.reservedFor[1]: Duplicate value: "u1"',
    ]


def test_at_most_256_reservations() -> None:
    consumers = [{"resource": "pods", "name": "p", "uid": f"u{i}"} for i in range(257)]
    assert _problems(_allocated(reservedFor=consumers)) == [
        "status.reservedFor: Too many: 257: must have at most 256 items"
    ]


def test_no_new_reservation_while_the_claim_is_being_deleted() -> None:
    kept = {"resource": "pods", "name": "p", "uid": "u1"}
    old = _allocated(reservedFor=[kept])
    new = copy.deepcopy(old)
    new["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"
    assert _problems(new, old) == []
    new["status"]["reservedFor"].append({"resource": "pods", "name": "q", "uid": "u2"})
    assert _problems(new, old) == [
        "status.reservedFor: Forbidden: new entries may not be added while "
        "`deallocationRequested` or `deletionTimestamp` are set"
    ]


def test_a_new_allocation_names_requests_of_the_claim_and_valid_devices() -> None:
    bad = {"request": "other", "driver": "Not_A_Driver", "pool": "", "device": "GPU 0"}
    problems = _problems(_claim(allocation={"devices": {"results": [bad]}}))
    fields = [p.split(": ")[0] for p in problems]
    # Driver and pool are checked by declarative validation (1.37), whose errors come last.
    assert fields == [
        "status.allocation.devices.results[0].request",
        "status.allocation.devices.results[0].device",
        "status.allocation.devices.results[0].driver",
        "status.allocation.devices.results[0].pool",
    ]
    assert problems[3] == "status.allocation.devices.results[0].pool: Required value"


def test_a_subrequest_is_named_with_its_request() -> None:
    claim = _claim(allocation={"devices": {"results": [{**RESULT, "request": "gpu/small"}]}})
    claim["spec"]["devices"]["requests"] = [
        {"name": "gpu", "firstAvailable": [{"name": "small", "deviceClassName": "gpu"}]}
    ]
    assert _problems(claim) == []


@pytest.mark.parametrize(
    "share",
    [
        "abc",
        "0f4a8c0e3b4e4c559a1b7f4d2b1c9e10",
        "0f4a8c0e-3b4e-4c55-9a1b-7f4d2b1c9e1g",
        "0F4A8C0E-3B4E-4C55-9A1B-7F4D2B1C9E10",
        "{0f4a8c0e-3b4e-4c55-9a1b-7f4d2b1c9e1}",
        "0f4a8c0e-3b4e-4c55-9a1b+7f4d2b1c9e10",
    ],
)
def test_share_ids_are_lowercase_uuids(share: str) -> None:
    # Declarative validation's `format=k8s-uuid` (1.37): one message for every other form.
    result = {**RESULT, "shareID": share}
    (problem,) = _problems(_claim(allocation={"devices": {"results": [result]}}))
    assert problem == (
        f'status.allocation.devices.results[0].shareID: Invalid value: "{share}": '
        "must be a lowercase UUID in 8-4-4-4-12 format"
    )


def test_a_lowercase_uuid_is_a_share_id() -> None:
    result = {**RESULT, "shareID": "0f4a8c0e-3b4e-4c55-9a1b-7f4d2b1c9e10"}
    assert _problems(_claim(allocation={"devices": {"results": [result]}})) == []


def test_conditions_at_most_eight_and_reason_and_message_lengths() -> None:
    conditions = [{**CONDITION, "type": f"T{i}"} for i in range(9)]
    conditions[0] = {**conditions[0], "reason": "R" * 1025, "message": "m" * (32 * 1024 + 1)}
    problems = _problems(_allocated(devices=[_entry(conditions=conditions)]))
    assert problems == [
        "status.devices[0].conditions: Too many: 9: must have at most 8 items",
        "status.devices[0].conditions[0].reason: Too long: may not be more than 1024 bytes",
        "status.devices[0].conditions[0].message: Too long: may not be more than 32768 bytes",
    ]


def test_a_condition_type_is_a_qualified_name_and_generations_are_not_negative() -> None:
    condition = {**CONDITION, "type": "not a name", "observedGeneration": -1}
    problems = _problems(_allocated(devices=[_entry(conditions=[condition])]))
    assert [p.split(": ")[0] for p in problems] == [
        "status.devices[0].conditions[0].type",
        "status.devices[0].conditions[0].observedGeneration",
    ]
    assert problems[1].endswith("Invalid value: -1: must be greater than or equal to zero")


def test_a_zero_transition_time_counts_as_unset() -> None:
    condition = {**CONDITION, "lastTransitionTime": "0001-01-01T00:00:00Z"}
    assert _problems(_allocated(devices=[_entry(conditions=[condition])])) == [
        "status.devices[0].conditions[0].lastTransitionTime: Required value"
    ]


def test_a_transition_time_that_is_not_rfc3339_is_undecodable() -> None:
    condition = {**CONDITION, "lastTransitionTime": "2026-01-02 03:04:05"}
    with pytest.raises(UndecodableError) as caught:
        _problems(_allocated(devices=[_entry(conditions=[condition])]))
    assert caught.value.field == "status.devices[0].conditions[0].lastTransitionTime"


def test_network_data_limits() -> None:
    network = {
        "interfaceName": "i" * 257,
        "hardwareAddress": "h" * 129,
        "ips": [f"10.0.0.{i}/24" for i in range(17)],
    }
    assert _problems(_allocated(devices=[_entry(networkData=network)])) == [
        "status.devices[0].networkData.interfaceName: Too long: may not be more than 256 bytes",
        "status.devices[0].networkData.hardwareAddress: Too long: may not be more than 128 bytes",
        "status.devices[0].networkData.ips: Too many: 17: must have at most 16 items",
    ]


def test_an_ipv4_mapped_address_is_written_as_ipv4() -> None:
    network = {"ips": ["::ffff:192.168.0.1/120", "192.168.0.1/24", "2001:db8::1/64"]}
    problems = _problems(_allocated(devices=[_entry(networkData=network)]))
    assert problems == [
        'status.devices[0].networkData.ips[0]: Invalid value: "::ffff:192.168.0.1/120": '
        'must be in canonical form ("192.168.0.1/24")'
    ]


def test_only_entries_of_devices_the_update_frees_are_dropped() -> None:
    old = _allocated(devices=[_entry(), _entry(device="gpu-9")])
    new = _claim(devices=[_entry(), _entry(device="gpu-9")])
    stored, problems = validate_status_update("ResourceClaim", new, old)
    # gpu-0 was allocated and is no more: its entry goes; gpu-9 never was: it stays, refused.
    assert stored["status"]["devices"] == [_entry(device="gpu-9")]
    assert [str(p) for p in problems] == [
        'status.devices[0]: Invalid value: {"Driver":"gpu.example.com","Pool":"node-a",'
        '"Device":"gpu-9","ShareID":""}: must be an allocated device in the claim'
    ]


def test_other_kinds_take_any_status() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Nonsense"}}
    assert validate_status_update("Pod", pod, pod) == (pod, [])
