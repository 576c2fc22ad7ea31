"""The checkpoint file format.

A file is one JSON object: `{"version": N, "checksum": "<hex>", "data": {...}}`. The checksum is
the SHA-256 of the canonical JSON of `data` (sorted keys, no spaces, ASCII), so a torn or edited
file is detected rather than half-trusted. The file itself is written in exactly that canonical
form, which lets the checksum be computed over the same string that is written.

Compatibility rules, so that an upgrade never loses state:

- every format version ever written stays readable: `UPGRADERS` maps each version to a function
  that turns its `data` into the current layout (for version 1, the current one, the identity);
  a test checks that the registry covers every version up to `CURRENT_VERSION`;
- a field added later is optional in the decoder and has a default;
- keys the decoder does not know are ignored, so a file written by a newer plugin of the same
  format version still loads after a downgrade;
- a device kind (`shape`) the decoder does not know is refused rather than guessed at, because
  what recovery undoes depends on it: a new kind of device needs a new format version;
- a version newer than `CURRENT_VERSION` is refused with `NewerCheckpointError`.

Fields that hold their default are not written, which keeps files small and means records that do
not use a new field encode exactly as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from api.device_type import DeviceType
from dra_driver.checkpoint.errors import CorruptCheckpointError, NewerCheckpointError
from dra_driver.checkpoint.model import (
    Checkpoint,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    MpsDaemonRecord,
)
from dra_driver.typed_json import JsonObject, JsonShapeError

CURRENT_VERSION = 1

# The file's word for a pre-created MIG device; every other device is written as its DeviceType.
_PRE_CREATED_MIG = "static-mig"

# A device whose owner refused to lend is written with `"lending": "Never"`, the user's own word
# (files written before owners could refuse have no such key, and lend); "Allowed" reads as lending
# too. Any other value is damage, not a choice to guess at: it decides whether a GPU is lent.
_LENDING = {"Allowed": True, "Never": False}

Upgrader = Callable[[dict[str, Any]], dict[str, Any]]


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data


# Version found in a file -> function that brings its `data` to the current layout. When the
# layout changes: bump CURRENT_VERSION, make the old entries produce the new layout, add an
# identity entry for the new version, and commit a golden file of the new version.
UPGRADERS: Mapping[int, Upgrader] = {1: _upgrade_v1}


def canonical_json(data: object) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def checksum(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def encode_checkpoint(checkpoint: Checkpoint, cache: EncodeCache | None = None) -> str:
    """The file content; with a cache, only claims that changed since the last call are encoded.

    The canonical JSON of `data` is assembled from per-claim pieces in sorted order, which gives
    exactly the text `canonical_json(checkpoint_to_data(checkpoint))` would, at a fraction of the
    cost when most claims are unchanged (prepare saves twice per claim).
    """
    cache = cache if cache is not None else EncodeCache()
    canonical = cache.canonical_data(checkpoint)
    return f'{{"version":{CURRENT_VERSION},"checksum":"{checksum(canonical)}","data":{canonical}}}'


class EncodeCache:
    """Encoded claims by UID, reused while the record is the very same object (records are
    immutable and `Checkpoint.with_claim` keeps the others as they are)."""

    def __init__(self) -> None:
        self._pieces: dict[str, tuple[ClaimRecord, str]] = {}

    def canonical_data(self, checkpoint: Checkpoint) -> str:
        previous = self._pieces
        current: dict[str, tuple[ClaimRecord, str]] = {}
        parts: list[str] = []
        for uid in sorted(checkpoint.claims):
            record = checkpoint.claims[uid]
            cached = previous.get(uid)
            if cached is not None and cached[0] is record:
                piece = cached[1]
            else:
                piece = canonical_json(uid) + ":" + canonical_json(_claim_to_data(record))
            current[uid] = (record, piece)
            parts.append(piece)
        self._pieces = current
        boot_id = canonical_json(checkpoint.boot_id)
        # "mpsDaemons" sorts after "claims"; absent when empty, as in files written before it.
        daemons = ""
        if checkpoint.mps_daemons:
            daemons = ',"mpsDaemons":' + canonical_json(_daemons_to_data(checkpoint))
        return f'{{"bootId":{boot_id},"claims":{{{",".join(parts)}}}{daemons}}}'


def checkpoint_to_data(checkpoint: Checkpoint) -> dict[str, Any]:
    data: dict[str, Any] = {
        "bootId": checkpoint.boot_id,
        "claims": {uid: _claim_to_data(record) for uid, record in checkpoint.claims.items()},
    }
    if checkpoint.mps_daemons:
        data["mpsDaemons"] = _daemons_to_data(checkpoint)
    return data


def _daemons_to_data(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        uuid: {
            "uuid": daemon.uuid,
            "minor": daemon.minor,
            "pid": daemon.pid,
            "pipeDir": daemon.pipe_dir,
            "logDir": daemon.log_dir,
        }
        for uuid, daemon in checkpoint.mps_daemons.items()
    }


def _claim_to_data(record: ClaimRecord) -> dict[str, Any]:
    data: dict[str, Any] = {
        "uid": record.uid,
        "namespace": record.namespace,
        "name": record.name,
        "state": record.state.value,
    }
    if record.devices:
        data["devices"] = [_device_to_data(device) for device in record.devices]
    if record.mig_instances:
        data["migInstances"] = [_mig_to_data(instance) for instance in record.mig_instances]
    if record.cdi_spec is not None:
        data["cdiSpec"] = record.cdi_spec
    return data


def _device_to_data(device: DeviceRecord) -> dict[str, Any]:
    data: dict[str, Any] = {
        "requestNames": list(device.request_names),
        "poolName": device.pool_name,
        "deviceName": device.device_name,
        "cdiDeviceIds": list(device.cdi_device_ids),
    }
    if device.share_id is not None:
        data["shareId"] = device.share_id
    if device.device_type is not None:
        data["shape"] = _PRE_CREATED_MIG if device.pre_created else device.device_type.value
    if device.minor is not None:
        data["minor"] = device.minor
    if device.timeslice_interval is not None:
        data["timesliceInterval"] = device.timeslice_interval
    if device.mps_thread_percentage is not None:
        data["mpsThreadPercentage"] = device.mps_thread_percentage
    if device.mps_pinned_memory_bytes is not None:
        data["mpsPinnedMemoryBytes"] = device.mps_pinned_memory_bytes
    if device.mps_uuid is not None:
        data["mpsUuid"] = device.mps_uuid
    if not device.lends:
        data["lending"] = "Never"
    return data


def _mig_to_data(instance: MigInstanceRecord) -> dict[str, Any]:
    data: dict[str, Any] = {
        "minor": instance.minor,
        "profile": instance.profile,
        "giId": instance.gi_id,
        "placementStart": instance.placement_start,
        "placementSize": instance.placement_size,
    }
    if instance.ci_id is not None:
        data["ciId"] = instance.ci_id
    if instance.uuid is not None:
        data["uuid"] = instance.uuid
    return data


def decode_checkpoint(text: str | bytes, source: str) -> Checkpoint:
    """Decode a file's content; `CorruptCheckpointError` or `NewerCheckpointError` otherwise."""

    def corrupt(detail: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"checkpoint {source}: {detail}")

    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise corrupt(f"not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise corrupt("the top level is not a JSON object")
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise corrupt(f"'version' is missing or not an integer: {version!r}")
    if version > CURRENT_VERSION:
        raise NewerCheckpointError(source, version, CURRENT_VERSION)
    upgrade = UPGRADERS.get(version)
    if upgrade is None:
        raise corrupt(f"format version {version} was never written by any plugin")
    data = document.get("data")
    if not isinstance(data, dict):
        raise corrupt("'data' is missing or not an object")
    recorded = document.get("checksum")
    if not isinstance(recorded, str):
        raise corrupt("'checksum' is missing or not a string")
    actual = checksum(canonical_json(data))
    if recorded != actual:
        raise corrupt(f"checksum mismatch (recorded {recorded[:16]}..., content {actual[:16]}...)")
    try:
        return _checkpoint_from_data(JsonObject(upgrade(data), "data"))
    except JsonShapeError as error:
        raise corrupt(str(error)) from None


# Readers below never call `JsonObject.only`: unknown keys are ignored on purpose (see above).


def _checkpoint_from_data(data: JsonObject) -> Checkpoint:
    boot_id = data.string("bootId")
    raw_claims = data.optional_nested("claims")
    claims: dict[str, ClaimRecord] = {}
    for uid, raw in (raw_claims.object_members() if raw_claims is not None else {}).items():
        record = _claim_from_data(raw)
        if record.uid != uid:
            raise JsonShapeError(raw.path_of("uid"), f"{record.uid!r} differs from its key")
        claims[uid] = record
    raw_daemons = data.optional_nested("mpsDaemons")
    daemons: dict[str, MpsDaemonRecord] = {}
    for uuid, raw in (raw_daemons.object_members() if raw_daemons is not None else {}).items():
        daemon = _daemon_from_data(raw)
        if daemon.uuid != uuid:
            raise JsonShapeError(raw.path_of("uuid"), f"{daemon.uuid!r} differs from its key")
        daemons[uuid] = daemon
    return Checkpoint(boot_id=boot_id, claims=claims, mps_daemons=daemons)


def _daemon_from_data(daemon: JsonObject) -> MpsDaemonRecord:
    return MpsDaemonRecord(
        uuid=daemon.string("uuid"),
        minor=daemon.integer("minor", minimum=0),
        pid=daemon.integer("pid", minimum=0),
        pipe_dir=daemon.string("pipeDir"),
        log_dir=daemon.string("logDir"),
    )


def _claim_from_data(claim: JsonObject) -> ClaimRecord:
    state_text = claim.string("state")
    try:
        state = ClaimState(state_text)
    except ValueError:
        raise JsonShapeError(claim.path_of("state"), f"unknown state {state_text!r}") from None
    return ClaimRecord(
        uid=claim.string("uid"),
        namespace=claim.string("namespace"),
        name=claim.string("name"),
        state=state,
        devices=tuple(_device_from_data(item) for item in _list(claim, "devices")),
        mig_instances=tuple(_mig_from_data(item) for item in _list(claim, "migInstances")),
        cdi_spec=claim.optional_string("cdiSpec"),
    )


def _list(reader: JsonObject, key: str) -> list[JsonObject]:
    return reader.optional_nested_list(key) or []


def _device_from_data(device: JsonObject) -> DeviceRecord:
    device_type, pre_created = _device_kind(device)
    return DeviceRecord(
        request_names=device.strings("requestNames"),
        pool_name=device.string("poolName"),
        device_name=device.string("deviceName"),
        cdi_device_ids=device.strings("cdiDeviceIds"),
        share_id=device.optional_string("shareId"),
        device_type=device_type,
        pre_created=pre_created,
        minor=device.optional_integer("minor", minimum=0),
        timeslice_interval=device.optional_string("timesliceInterval"),
        mps_thread_percentage=device.optional_integer("mpsThreadPercentage", minimum=0),
        mps_pinned_memory_bytes=device.optional_integer("mpsPinnedMemoryBytes", minimum=0),
        mps_uuid=device.optional_string("mpsUuid"),
        lends=_lends(device),
    )


def _lends(device: JsonObject) -> bool:
    """Whether the device's owner lets its GPU be lent; a file without the key lends."""
    word = device.optional_string("lending")
    if word is None:
        return True
    lends = _LENDING.get(word)
    if lends is None:
        known = ", ".join(_LENDING)
        raise JsonShapeError(
            device.path_of("lending"), f"unknown lending choice {word!r} (known: {known})"
        )
    return lends


def _device_kind(device: JsonObject) -> tuple[DeviceType | None, bool]:
    """The device type, and whether it is a pre-created MIG device, from the record's word."""
    word = device.optional_string("shape")
    if not word:
        return None, False
    if word == _PRE_CREATED_MIG:
        return DeviceType.MIG, True
    try:
        return DeviceType(word), False
    except ValueError:
        known = ", ".join([*(kind.value for kind in DeviceType), _PRE_CREATED_MIG])
        raise JsonShapeError(
            device.path_of("shape"), f"unknown device kind {word!r} (known: {known})"
        ) from None


def _mig_from_data(instance: JsonObject) -> MigInstanceRecord:
    return MigInstanceRecord(
        minor=instance.integer("minor", minimum=0),
        profile=instance.string("profile"),
        gi_id=instance.integer("giId", minimum=0),
        ci_id=instance.optional_integer("ciId", minimum=0),
        uuid=instance.optional_string("uuid"),
        placement_start=instance.integer("placementStart", minimum=0),
        placement_size=instance.integer("placementSize", minimum=0),
    )
