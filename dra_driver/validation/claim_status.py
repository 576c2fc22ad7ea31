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

_UID_FORM = (
    "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with "
    "lowercase hexadecimal characters"
)
_HEX = frozenset("0123456789abcdefABCDEF")
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
    if allocation is not None and old_allocation is not None:
        if allocation != old_allocation:
            errors.append(invalid("status.allocation", "", "field is immutable"))
    elif allocation is not None:
        errors += _new_results(results, _request_names(claim))
    return errors


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
        key = _shared_id(decoding.item_mapping(raw, "status.devices"))
        if key in seen:
            errors.append(_shown(ErrorType.DUPLICATE, f"status.devices[{index}]", key, ""))
        seen.add(key)
    return errors


def _device_status(entry: Obj, field: str, allocated: set[SharedDeviceId]) -> list[FieldError]:
    """`validateDeviceStatus`: the device's identity, that it is allocated, its conditions, its
    data and its network data."""
    errors = _identity(entry, field)
    key = _shared_id(entry)
    if key not in allocated:
        errors.append(
            _shown(ErrorType.INVALID, field, key, "must be an allocated device in the claim")
        )
    conditions = decoding.items(entry, "conditions", f"{field}.conditions")
    if len(conditions) > DEVICE_CONDITIONS_MAX:
        errors.append(too_many(f"{field}.conditions", len(conditions), DEVICE_CONDITIONS_MAX))
    errors += validate_conditions(conditions, f"{field}.conditions")
    errors += _data(entry.get("data"), f"{field}.data")
    errors += _network_data(decoding.mapping(entry, "networkData", f"{field}.networkData"), field)
    return errors


def _identity(entry: Obj, field: str) -> list[FieldError]:
    """Driver (a CSI driver name), pool (DNS subdomains joined by '/'), device (a DNS label) and
    the optional share id (a normalized UUID), as in an allocation result."""
    driver = decoding.string(entry, "driver", f"{field}.driver")
    errors = (
        [invalid(f"{field}.driver", driver, p) for p in driver_name(driver)]
        if driver
        else [required(f"{field}.driver")]
    )
    errors += _pool(decoding.string(entry, "pool", f"{field}.pool"), f"{field}.pool")
    device = decoding.string(entry, "device", f"{field}.device")
    errors += [invalid(f"{field}.device", device, p) for p in dns1123_label(device)]
    if entry.get("shareID") is not None:
        share = decoding.string(entry, "shareID", f"{field}.shareID")
        errors += _uid(share, f"{field}.shareID")
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
    """`validateUID`: what `uuid.Validate` accepts, and then only the 36-character lowercase
    form."""
    problem = _uuid_problem(uid)
    if problem:
        return [invalid(field, uid, f"error validating uid: {problem}")]
    if len(uid) != 36 or uid != uid.lower():
        return [invalid(field, uid, _UID_FORM)]
    return []


def _uuid_problem(text: str) -> str:
    """`github.com/google/uuid.Validate`'s error for `text` ("" when it accepts it)."""
    if len(text) == 45:
        if text[:9].lower() != "urn:uuid:":
            return f"invalid urn prefix: {json.dumps(text[:9])}"
        text = text[9:]
    elif len(text) == 38:
        if text[0] != "{" or text[-1] != "}":
            return "invalid bracketed UUID format"
        text = text[1:-1]
    elif len(text) == 32:
        return "" if set(text) <= _HEX else "invalid UUID format"
    elif len(text) != 36:
        return f"invalid UUID length: {len(text)}"
    dashes = all(text[i] == "-" for i in (8, 13, 18, 23))
    digits = set(text[:8] + text[9:13] + text[14:18] + text[19:23] + text[24:])
    return "" if dashes and digits <= _HEX else "invalid UUID format"


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
        errors += _identity(result, where)
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


def _shown(kind: ErrorType, field: str, key: SharedDeviceId, detail: str) -> FieldError:
    """An error whose value is a device id, which upstream prints bare through its `String`
    (`driver/pool/device`, then `/shareID` when there is one)."""
    driver, pool, device, share = key
    shown = f"{driver}/{pool}/{device}" + (f"/{share}" if share else "")
    text = f"{kind.words}: {shown}"
    return FieldError(kind, field, key, detail, f"{text}: {detail}" if detail else text)
