"""A ResourceClaim's status writes (the `status` subresource), as kube-apiserver's status strategy
handles them (`pkg/registry/resource/resourceclaim/strategy.go`, with `DRAResourceClaimDeviceStatus`
on, as from 1.34):

* `drop_deallocated_devices` is `dropDeallocatedStatusDevices` of the strategy's
  `PrepareForUpdate`: an entry of `status.devices` for a device the old allocation held and the
  new one does not is removed before validation, so a deallocation clears the plugin's entries;
* `validate_claim_status_update` is `ValidateResourceClaimStatusUpdate` of
  `pkg/apis/resource/validation/validation.go`: `reservedFor` (at most 256 consumers with a
  resource, name and unique uid; none without an allocation; no new ones while the claim is
  being deleted), `status.devices` (`validateDeviceStatus`: each entry names an allocated
  device, is there once, has valid conditions, at most 10 KiB of JSON-object `data`, and
  `networkData` within its limits) and the allocation (immutable once set; a new one's results
  are checked by `validateDeviceRequestAllocationResult`).

Left out: a new allocation's `config` and `nodeSelector`, its results' binding conditions and
tolerations (our allocators write none of them), and `ValidateObjectMetaUpdate` (a status write
here never changes metadata). `data` is measured as compact JSON; upstream counts the bytes the
client sent.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.validation import decoding
from dra_driver.validation.claims import ALLOCATION_RESULTS_MAX, driver_name
from dra_driver.validation.conditions import validate_conditions
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import (
    ErrorType,
    FieldError,
    duplicate,
    forbidden,
    invalid,
    required,
    too_long,
    too_many,
)
from dra_driver.validation.names import dns1123_label, dns1123_subdomain

RESERVED_FOR_MAX = 256
DEVICE_CONDITIONS_MAX = 8
DEVICE_DATA_MAX = 10 * 1024
NETWORK_IPS_MAX = 16
INTERFACE_NAME_MAX = 256
HARDWARE_ADDRESS_MAX = 128
POOL_NAME_MAX = 253

_UID_FORM = "must be a lowercase UUID in 8-4-4-4-12 format"
_LOWER_HEX = frozenset("0123456789abcdef")
_REQUEST_REF = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)

SharedDeviceId = tuple[str, str, str, str]
"""(driver, pool, device, shareID or ""): upstream's `structured.SharedDeviceID`."""


def drop_deallocated_devices(claim: Obj, old: Obj) -> dict[str, Any]:
    """The claim with the `status.devices` entries of devices that `old` had allocated and
    `claim` no longer has removed (`dropDeallocatedStatusDevices`). Entries for devices never
    allocated stay, for validation to refuse."""
    gone = _allocated(old) - _allocated(claim)
    result = copy.deepcopy(dict(claim))
    status = result.get("status")
    if not gone or not isinstance(status, dict) or not isinstance(status.get("devices"), list):
        return result
    kept = [
        entry
        for entry in status["devices"]
        if not (isinstance(entry, Mapping) and _device_id(entry) in gone)
    ]
    if kept:
        status["devices"] = kept
    else:
        status.pop("devices")
    return result


def validate_claim_status_update(claim: Obj, old: Obj) -> list[FieldError]:
    """What kube-apiserver reports for this status write (`ValidateResourceClaimStatusUpdate`)."""
    status = decoding.mapping(claim, "status", "status")
    old_status = decoding.mapping(old, "status", "status")
    allocation = status.get("allocation")
    errors = _reserved_for(status)
    results = _results(claim)
    allocated = {_shared_id(r) for r in results}
    errors += _devices(decoding.items(status, "devices", "status.devices"), allocated)
    reserved = decoding.items(status, "reservedFor", "status.reservedFor")
    if reserved:
        if allocation is None:
            errors.append(
                forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        elif decoding.mapping(claim, "metadata", "metadata").get("deletionTimestamp"):
            before = {_consumer(r) for r in old_status.get("reservedFor") or ()}
            if any(_consumer(r) not in before for r in reserved):
                errors.append(
                    forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    old_allocation = old_status.get("allocation")
    new_results: list[Obj] = []
    if allocation is not None and old_allocation is not None:
        if allocation != old_allocation:
            # Declarative validation's `NoModify` (`validate.NoModify` in apimachinery's
            # `pkg/api/validate/update.go`) reports it, with no value.
            errors.append(invalid("status.allocation", None, "field cannot be modified once set"))
    elif allocation is not None:
        errors += _new_results(results, _request_names(claim))
        new_results = results
    return errors + _declarative(new_results, decoding.items(status, "devices", "status.devices"))


def _reserved_for(status: Obj) -> list[FieldError]:
    """`validateSet` of the consumers: the size first (alone), each reference, then uids."""
    field = "status.reservedFor"
    consumers = decoding.items(status, "reservedFor", field)
    if len(consumers) > RESERVED_FOR_MAX:
        return [too_many(field, len(consumers), RESERVED_FOR_MAX)]
    errors: list[FieldError] = []
    for index, raw in enumerate(consumers):
        where = f"{field}[{index}]"
        consumer = decoding.item_mapping(raw, where)
        for key in ("resource", "name", "uid"):
            if not decoding.string(consumer, key, f"{where}.{key}"):
                errors.append(required(f"{where}.{key}"))
    seen: set[str] = set()
    for index, raw in enumerate(consumers):
        uid = str(decoding.item_mapping(raw, field).get("uid") or "")
        if uid in seen:
            errors.append(duplicate(f"{field}[{index}]", uid))
        seen.add(uid)
    return errors


def _devices(entries: Sequence[Any], allocated: set[SharedDeviceId]) -> list[FieldError]:
    """`validateSet` of `status.devices` (no size limit): each entry, then duplicates."""
    errors: list[FieldError] = []
    for index, raw in enumerate(entries):
        where = f"status.devices[{index}]"
        errors += _device_status(decoding.item_mapping(raw, where), where, allocated)
    seen: set[SharedDeviceId] = set()
    for index, raw in enumerate(entries):
        entry = decoding.item_mapping(raw, "status.devices")
        key = _shared_id(entry)
        if key in seen:
            errors.append(_duplicate_entry(f"status.devices[{index}]", entry))
        seen.add(key)
    return errors


def _device_status(entry: Obj, field: str, allocated: set[SharedDeviceId]) -> list[FieldError]:
    """`validateDeviceStatus`: the device's identity, that it is allocated, its conditions, its
    data and its network data."""
    errors = _identity(entry, field)
    key = _shared_id(entry)
    if key not in allocated:
        errors.append(_not_allocated(field, key))
    conditions = decoding.items(entry, "conditions", f"{field}.conditions")
    if len(conditions) > DEVICE_CONDITIONS_MAX:
        errors.append(too_many(f"{field}.conditions", len(conditions), DEVICE_CONDITIONS_MAX))
    errors += validate_conditions(conditions, f"{field}.conditions")
    errors += _data(entry.get("data"), f"{field}.data")
    errors += _network_data(decoding.mapping(entry, "networkData", f"{field}.networkData"), field)
    return errors


def _identity(entry: Obj, field: str) -> list[FieldError]:
    """Driver (a CSI driver name), pool (DNS subdomains joined by '/') and device (a DNS label),
    as in an allocation result."""
    return _driver_and_pool(entry, field) + _device_name(entry, field)


def _driver_and_pool(entry: Obj, field: str) -> list[FieldError]:
    driver = decoding.string(entry, "driver", f"{field}.driver")
    errors = (
        [invalid(f"{field}.driver", driver, p) for p in driver_name(driver)]
        if driver
        else [required(f"{field}.driver")]
    )
    errors += _pool(decoding.string(entry, "pool", f"{field}.pool"), f"{field}.pool")
    return errors


def _device_name(entry: Obj, field: str) -> list[FieldError]:
    device = decoding.string(entry, "device", f"{field}.device")
    return [invalid(f"{field}.device", device, p) for p in dns1123_label(device)]


def _share_id(entry: Obj, field: str) -> list[FieldError]:
    """The optional share id: a lowercase UUID (declarative validation's `format=k8s-uuid`)."""
    if entry.get("shareID") is None:
        return []
    share = decoding.string(entry, "shareID", f"{field}.shareID")
    return _uid(share, f"{field}.shareID")


def _declarative(results: Sequence[Obj], entries: Sequence[Any]) -> list[FieldError]:
    """What kube-apiserver checks by declarative validation, whose errors follow the
    hand-written ones, in field order: a new allocation result's driver, pool and share id,
    then the share id of each `status.devices` entry."""
    errors: list[FieldError] = []
    for index, result in enumerate(results):
        where = f"status.allocation.devices.results[{index}]"
        errors += _driver_and_pool(result, where) + _share_id(result, where)
    for index, raw in enumerate(entries):
        where = f"status.devices[{index}]"
        errors += _share_id(decoding.item_mapping(raw, where), where)
    return errors


def _pool(name: str, field: str) -> list[FieldError]:
    """`validatePoolName`."""
    if not name:
        return [required(field)]
    errors = [too_long(field, POOL_NAME_MAX)] if len(name) > POOL_NAME_MAX else []
    for part in name.split("/"):
        errors += [invalid(field, part, p) for p in dns1123_subdomain(part)]
    return errors


def _uid(uid: str, field: str) -> list[FieldError]:
    """`validate.K8sUUID`: 36 characters, dashes at 8, 13, 18 and 23, lowercase hexadecimal
    digits elsewhere."""
    digits = uid[:8] + uid[9:13] + uid[14:18] + uid[19:23] + uid[24:]
    dashes = len(uid) == 36 and all(uid[i] == "-" for i in (8, 13, 18, 23))
    if not dashes or not set(digits) <= _LOWER_HEX:
        return [invalid(field, uid, _UID_FORM)]
    return []


def _data(data: object, field: str) -> list[FieldError]:
    """`validateRawExtension` of the device's `data`: absent or null is fine; otherwise a JSON
    object of at most 10 KiB."""
    if data is None:
        return []
    if len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()) > DEVICE_DATA_MAX:
        return [too_long(field, DEVICE_DATA_MAX)]
    if not isinstance(data, Mapping):
        return [invalid(field, "<value omitted>", "must be a valid JSON object")]
    return []


def _network_data(network: Obj, field: str) -> list[FieldError]:
    """`validateNetworkDeviceData`: name and address lengths, at most 16 unique interface
    addresses in canonical CIDR form."""
    field = f"{field}.networkData"
    errors: list[FieldError] = []
    name = decoding.string(network, "interfaceName", f"{field}.interfaceName")
    if len(name.encode()) > INTERFACE_NAME_MAX:
        errors.append(too_long(f"{field}.interfaceName", INTERFACE_NAME_MAX))
    address = decoding.string(network, "hardwareAddress", f"{field}.hardwareAddress")
    if len(address.encode()) > HARDWARE_ADDRESS_MAX:
        errors.append(too_long(f"{field}.hardwareAddress", HARDWARE_ADDRESS_MAX))
    ips = decoding.items(network, "ips", f"{field}.ips")
    if len(ips) > NETWORK_IPS_MAX:
        return [*errors, too_many(f"{field}.ips", len(ips), NETWORK_IPS_MAX)]
    seen: set[str] = set()
    duplicates: list[FieldError] = []
    for index, raw in enumerate(ips):
        where = f"{field}.ips[{index}]"
        ip = decoding.string_item(raw, where)
        errors += _interface_address(ip, where)
        if ip in seen:
            duplicates.append(duplicate(where, ip))
        seen.add(ip)
    return errors + duplicates


def _interface_address(value: str, field: str) -> list[FieldError]:
    """`IsValidInterfaceAddress`: an address with its prefix length ("10.9.8.7/24"), written
    the canonical way."""
    try:
        interface = ipaddress.ip_interface(value)
    except ValueError:
        interface = None
    if interface is None or "/" not in value:
        return [
            invalid(
                field,
                value,
                "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)",
            )
        ]
    address: Any = interface.ip
    prefix = interface.network.prefixlen
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address, prefix = mapped, max(prefix - 96, 0)
    canonical = f"{address}/{prefix}"
    if value != canonical:
        return [invalid(field, value, f"must be in canonical form ({json.dumps(canonical)})")]
    return []


def _new_results(results: Sequence[Obj], names: Mapping[str, set[str]]) -> list[FieldError]:
    """`validateDeviceRequestAllocationResult` for each result of a new allocation."""
    field = "status.allocation.devices.results"
    if len(results) > ALLOCATION_RESULTS_MAX:
        return [too_many(field, len(results), ALLOCATION_RESULTS_MAX)]
    errors: list[FieldError] = []
    for index, result in enumerate(results):
        where = f"{field}[{index}]"
        ref = decoding.string(result, "request", f"{where}.request")
        errors += _request_ref(ref, names, f"{where}.request")
        errors += _device_name(result, where)  # its driver and pool: `_declarative`
    return errors


def _request_ref(ref: str, names: Mapping[str, set[str]], field: str) -> list[FieldError]:
    """`validateRequestNameRef`: a request, or a request and its subrequest, of this claim."""
    segments = ref.split("/")
    if len(segments) > 2:
        return [invalid(field, ref, _REQUEST_REF)]
    errors = [invalid(field, s, p) for s in segments for p in dns1123_label(s)]
    request = segments[0]
    known = request in names and (len(segments) == 1 or segments[1] in names[request])
    if not known:
        errors.append(invalid(field, ref, _REQUEST_REF))
    return errors


def _request_names(claim: Obj) -> dict[str, set[str]]:
    """`gatherRequestNames`: each request of the spec and the names of its subrequests."""
    spec = decoding.mapping(claim, "spec", "spec")
    devices = decoding.mapping(spec, "devices", "spec.devices")
    names: dict[str, set[str]] = {}
    for raw in decoding.items(devices, "requests", "spec.devices.requests"):
        request = raw if isinstance(raw, Mapping) else {}
        subs = request.get("firstAvailable") or ()
        names[str(request.get("name", ""))] = {
            str(s.get("name", "")) for s in subs if isinstance(s, Mapping)
        }
    return names


def _results(claim: Obj) -> list[Obj]:
    """The claim's allocation results (none when it is not allocated)."""
    status = decoding.mapping(claim, "status", "status")
    allocation = decoding.mapping(status, "allocation", "status.allocation")
    devices = decoding.mapping(allocation, "devices", "status.allocation.devices")
    field = "status.allocation.devices.results"
    return [
        decoding.item_mapping(raw, f"{field}[{index}]")
        for index, raw in enumerate(decoding.items(devices, "results", field))
    ]


def _allocated(claim: Obj) -> set[tuple[str, str, str]]:
    """The (driver, pool, device) the claim has allocated, without share ids, as the strategy
    compares them."""
    return {_device_id(result) for result in _results(claim)}


def _device_id(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")), str(entry.get("device", "")))


def _shared_id(entry: Mapping[str, Any]) -> SharedDeviceId:
    return (*_device_id(entry), str(entry.get("shareID") or ""))


def _consumer(raw: object) -> tuple[str, str, str, str]:
    """A `reservedFor` entry as a whole, as the deletion rule compares them."""
    ref: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    return (
        str(ref.get("apiGroup", "")),
        str(ref.get("resource", "")),
        str(ref.get("name", "")),
        str(ref.get("uid", "")),
    )


def _not_allocated(field: str, key: SharedDeviceId) -> FieldError:
    """`validateDeviceStatus`'s refusal of an entry for a device the allocation does not hold.
    Its value is a `structured.SharedDeviceID`, a struct without JSON tags, so upstream's
    message shows it with Go's field names."""
    driver, pool, device, share = key
    shown = _go_json({"Driver": driver, "Pool": pool, "Device": device, "ShareID": share})
    text = f"{ErrorType.INVALID.words}: {shown}: must be an allocated device in the claim"
    return FieldError(ErrorType.INVALID, field, key, "", text)


def _duplicate_entry(field: str, entry: Obj) -> FieldError:
    """A second entry for the same device. Declarative validation reports it (upstream's
    uniqueness check of `status.devices` is covered by it) with the whole v1 entry as the value,
    its fields in the Go type's order and empty optional ones left out."""
    text = f"{ErrorType.DUPLICATE.words}: {_go_json(_v1_entry(entry))}"
    return FieldError(ErrorType.DUPLICATE, field, None, "", text)


def _go_json(value: object) -> str:
    """JSON as Go's encoder writes it: compact, non-ASCII as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _present(
    mapping: Mapping[str, Any], keys: Sequence[str], always: Sequence[str]
) -> dict[str, Any]:
    """`keys` of `mapping` in that order; those in `always` even when absent (as ""), the
    others only when set (`omitempty`)."""
    out: dict[str, Any] = {}
    for key in keys:
        value = mapping.get(key)
        if key in always:
            out[key] = "" if value is None else value
        elif value not in (None, "", [], {}, 0):
            out[key] = value
    return out


def _v1_entry(entry: Obj) -> dict[str, Any]:
    """A `status.devices` entry in the field order of `resource/v1.AllocatedDeviceStatus`."""
    shown = _present(
        entry,
        ("driver", "pool", "device", "shareID", "conditions", "data", "networkData"),
        ("driver", "pool", "device"),
    )
    if isinstance(shown.get("conditions"), list):
        shown["conditions"] = [
            _present(
                c,
                ("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"),
                ("type", "status", "lastTransitionTime", "reason", "message"),
            )
            if isinstance(c, Mapping)
            else c
            for c in shown["conditions"]
        ]
    if isinstance(shown.get("networkData"), Mapping):
        shown["networkData"] = _present(
            shown["networkData"], ("interfaceName", "ips", "hardwareAddress"), ()
        )
    return shown
