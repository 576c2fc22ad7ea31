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
- a version newer than `CURRENT_VERSION` is refused with `NewerCheckpointError`.

Fields that hold their default are not written, which keeps files small and means records that do
not use a new field encode exactly as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from dra_driver.checkpoint.errors import CorruptCheckpointError, NewerCheckpointError
from dra_driver.checkpoint.model import (
    Checkpoint,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    MpsDaemonRecord,
)

CURRENT_VERSION = 1

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
    if device.shape:
        data["shape"] = device.shape
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
        return _checkpoint_from_data(upgrade(data))
    except _ShapeError as error:
        raise corrupt(str(error)) from None


class _ShapeError(ValueError):
    pass


class _Reader:
    """Typed access to one object of `data`; unknown keys are ignored on purpose."""

    def __init__(self, value: object, where: str) -> None:
        if not isinstance(value, dict):
            raise _ShapeError(f"{where}: expected an object, found {_type_name(value)}")
        self._data: dict[str, Any] = value
        self._where = where

    def _fail(self, key: str, expected: str) -> _ShapeError:
        if key not in self._data:
            return _ShapeError(f"{self._where}.{key}: missing")
        return _ShapeError(
            f"{self._where}.{key}: expected {expected}, found {_type_name(self._data[key])}"
        )

    def string(self, key: str) -> str:
        value = self._data.get(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def optional_string(self, key: str) -> str | None:
        return None if self._data.get(key) is None else self.string(key)

    def integer(self, key: str) -> int:
        value = self._data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(key, "a non-negative integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self._data.get(key) is None else self.integer(key)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._data.get(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, "a list of strings")
        return tuple(value)

    def objects(self, key: str) -> list[tuple[str, object]]:
        """Items of an optional list of objects, each with its path for messages."""
        value = self._data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "a list")
        return [(f"{self._where}.{key}[{index}]", item) for index, item in enumerate(value)]

    def raw(self, key: str) -> object:
        return self._data.get(key)


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _checkpoint_from_data(data: dict[str, Any]) -> Checkpoint:
    reader = _Reader(data, "data")
    boot_id = reader.string("bootId")
    raw_claims = reader.raw("claims")
    if raw_claims is None:
        raw_claims = {}
    if not isinstance(raw_claims, dict):
        raise _ShapeError(f"data.claims: expected an object, found {_type_name(raw_claims)}")
    claims: dict[str, ClaimRecord] = {}
    for uid, raw in raw_claims.items():
        record = _claim_from_data(raw, f"data.claims[{uid!r}]")
        if record.uid != uid:
            raise _ShapeError(f"data.claims[{uid!r}].uid: {record.uid!r} differs from its key")
        claims[uid] = record
    raw_daemons = reader.raw("mpsDaemons")
    if raw_daemons is None:
        raw_daemons = {}
    if not isinstance(raw_daemons, dict):
        raise _ShapeError(f"data.mpsDaemons: expected an object, found {_type_name(raw_daemons)}")
    daemons: dict[str, MpsDaemonRecord] = {}
    for uuid, raw in raw_daemons.items():
        daemon = _daemon_from_data(raw, f"data.mpsDaemons[{uuid!r}]")
        if daemon.uuid != uuid:
            raise _ShapeError(
                f"data.mpsDaemons[{uuid!r}].uuid: {daemon.uuid!r} differs from its key"
            )
        daemons[uuid] = daemon
    return Checkpoint(boot_id=boot_id, claims=claims, mps_daemons=daemons)


def _daemon_from_data(value: object, where: str) -> MpsDaemonRecord:
    reader = _Reader(value, where)
    return MpsDaemonRecord(
        uuid=reader.string("uuid"),
        minor=reader.integer("minor"),
        pid=reader.integer("pid"),
        pipe_dir=reader.string("pipeDir"),
        log_dir=reader.string("logDir"),
    )


def _claim_from_data(value: object, where: str) -> ClaimRecord:
    reader = _Reader(value, where)
    state_text = reader.string("state")
    try:
        state = ClaimState(state_text)
    except ValueError:
        raise _ShapeError(f"{where}.state: unknown state {state_text!r}") from None
    return ClaimRecord(
        uid=reader.string("uid"),
        namespace=reader.string("namespace"),
        name=reader.string("name"),
        state=state,
        devices=tuple(_device_from_data(item, at) for at, item in reader.objects("devices")),
        mig_instances=tuple(
            _mig_from_data(item, at) for at, item in reader.objects("migInstances")
        ),
        cdi_spec=reader.optional_string("cdiSpec"),
    )


def _device_from_data(value: object, where: str) -> DeviceRecord:
    reader = _Reader(value, where)
    return DeviceRecord(
        request_names=reader.strings("requestNames"),
        pool_name=reader.string("poolName"),
        device_name=reader.string("deviceName"),
        cdi_device_ids=reader.strings("cdiDeviceIds"),
        share_id=reader.optional_string("shareId"),
        shape=reader.optional_string("shape") or "",
        minor=reader.optional_integer("minor"),
        timeslice_interval=reader.optional_string("timesliceInterval"),
        mps_thread_percentage=reader.optional_integer("mpsThreadPercentage"),
        mps_pinned_memory_bytes=reader.optional_integer("mpsPinnedMemoryBytes"),
        mps_uuid=reader.optional_string("mpsUuid"),
    )


def _mig_from_data(value: object, where: str) -> MigInstanceRecord:
    reader = _Reader(value, where)
    return MigInstanceRecord(
        minor=reader.integer("minor"),
        profile=reader.string("profile"),
        gi_id=reader.integer("giId"),
        ci_id=reader.optional_integer("ciId"),
        uuid=reader.optional_string("uuid"),
        placement_start=reader.integer("placementStart"),
        placement_size=reader.integer("placementSize"),
    )
