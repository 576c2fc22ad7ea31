"""The CDI wire form (camelCase mappings, as found in YAML or JSON spec files).

Writing omits empty fields and declares the lowest version the content needs (see `version.py`).
Reading is strict: the driver only reads back files it wrote itself, during recovery, so a field it
does not know, a wrong type or a declared version too low for the content means the file is not
what the driver believes, and saying exactly where beats guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import (
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Hook,
    Mount,
    validate_spec,
)
from dra_driver.cdi.version import KNOWN_VERSIONS, minimum_version, version_key


def spec_to_dict(spec: CdiSpec) -> dict[str, Any]:
    """Validate and encode; validation here keeps a bad spec from ever reaching a runtime."""
    validate_spec(spec)
    data: dict[str, Any] = {"cdiVersion": minimum_version(spec), "kind": spec.kind}
    if spec.annotations:
        data["annotations"] = dict(spec.annotations)
    data["devices"] = [
        {"name": device.name, "containerEdits": edits_to_dict(device.edits)}
        for device in spec.devices
    ]
    if not spec.edits.is_empty():
        data["containerEdits"] = edits_to_dict(spec.edits)
    return data


def edits_to_dict(edits: ContainerEdits) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if edits.env:
        data["env"] = list(edits.env)
    if edits.device_nodes:
        data["deviceNodes"] = [_device_node_to_dict(node) for node in edits.device_nodes]
    if edits.mounts:
        data["mounts"] = [_mount_to_dict(mount) for mount in edits.mounts]
    if edits.hooks:
        data["hooks"] = [_hook_to_dict(hook) for hook in edits.hooks]
    return data


def _device_node_to_dict(node: DeviceNode) -> dict[str, Any]:
    data: dict[str, Any] = {"path": node.path}
    optional = (
        ("hostPath", node.host_path),
        ("type", node.type),
        ("major", node.major),
        ("minor", node.minor),
        ("permissions", node.permissions),
    )
    data.update((key, value) for key, value in optional if value is not None)
    return data


def _mount_to_dict(mount: Mount) -> dict[str, Any]:
    data: dict[str, Any] = {"hostPath": mount.host_path, "containerPath": mount.container_path}
    if mount.options:
        data["options"] = list(mount.options)
    if mount.type is not None:
        data["type"] = mount.type
    return data


def _hook_to_dict(hook: Hook) -> dict[str, Any]:
    data: dict[str, Any] = {"hookName": hook.hook_name, "path": hook.path}
    if hook.args:
        data["args"] = list(hook.args)
    if hook.env:
        data["env"] = list(hook.env)
    return data


def spec_from_dict(data: Mapping[str, Any], source: str) -> CdiSpec:
    """Decode a spec; every error starts with `source` and names the field path."""
    try:
        spec, declared = _decode_spec(data)
        validate_spec(spec)
        needed = minimum_version(spec)
        if version_key(declared) < version_key(needed):
            raise CdiError(
                f"cdiVersion: {declared} is too low for this content, which needs {needed}"
            )
    except CdiError as error:
        raise CdiError(f"{source}: {error}") from None
    return spec


class _Fields:
    """Typed access to one mapping of the wire form that remembers where it is."""

    def __init__(self, value: object, where: str, allowed: frozenset[str]) -> None:
        if not isinstance(value, Mapping):
            raise CdiError(f"{where or 'spec'}: expected a mapping, found {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise CdiError(f"{_join(where, str(key))}: unsupported field")
        self._data: Mapping[str, Any] = value
        self._where = where

    def at(self, key: str) -> str:
        return _join(self._where, key)

    def has(self, key: str) -> bool:
        return key in self._data

    def raw(self, key: str) -> object:
        return self._data.get(key)

    def string(self, key: str) -> str:
        value = self._data.get(key)
        if not isinstance(value, str):
            problem = "is required" if key not in self._data else "must be a string"
            raise CdiError(f"{self.at(key)}: {problem}")
        return value

    def optional_string(self, key: str) -> str | None:
        return self.string(key) if self._data.get(key) is not None else None

    def optional_int(self, key: str) -> int | None:
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise CdiError(f"{self.at(key)}: must be an integer")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise CdiError(f"{self.at(key)}: must be a list of strings")
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise CdiError(f"{self.at(key)}[{index}]: must be a string")
        return tuple(value)

    def items(self, key: str) -> list[tuple[str, object]]:
        value = self._data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise CdiError(f"{self.at(key)}: must be a list")
        return [(f"{self.at(key)}[{index}]", item) for index, item in enumerate(value)]


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


_SPEC_KEYS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_KEYS = frozenset({"name", "containerEdits"})
_EDITS_KEYS = frozenset({"env", "deviceNodes", "mounts", "hooks"})
_NODE_KEYS = frozenset({"path", "hostPath", "type", "major", "minor", "permissions"})
_MOUNT_KEYS = frozenset({"hostPath", "containerPath", "options", "type"})
_HOOK_KEYS = frozenset({"hookName", "path", "args", "env"})


def _decode_spec(data: Mapping[str, Any]) -> tuple[CdiSpec, str]:
    fields = _Fields(data, "", _SPEC_KEYS)
    declared = fields.string("cdiVersion")
    if declared not in KNOWN_VERSIONS:
        raise CdiError(f"cdiVersion: {declared!r} is not one of {', '.join(KNOWN_VERSIONS)}")
    kind = fields.string("kind")
    annotations: dict[str, str] = {}
    raw_annotations = fields.raw("annotations")
    if raw_annotations is not None:
        if not isinstance(raw_annotations, Mapping):
            raise CdiError("annotations: must be a mapping of strings")
        for key, value in raw_annotations.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise CdiError(f"annotations.{key}: keys and values must be strings")
            annotations[key] = value
    if not fields.has("devices"):
        raise CdiError("devices: is required")
    devices = tuple(_decode_device(item, where) for where, item in fields.items("devices"))
    edits = (
        _decode_edits(fields.raw("containerEdits"), "containerEdits")
        if fields.raw("containerEdits") is not None
        else ContainerEdits()
    )
    return CdiSpec(kind=kind, devices=devices, edits=edits, annotations=annotations), declared


def _decode_device(value: object, where: str) -> CdiDevice:
    fields = _Fields(value, where, _DEVICE_KEYS)
    name = fields.string("name")
    if not fields.has("containerEdits"):
        raise CdiError(f"{fields.at('containerEdits')}: is required")
    return CdiDevice(
        name=name, edits=_decode_edits(fields.raw("containerEdits"), fields.at("containerEdits"))
    )


def _decode_edits(value: object, where: str) -> ContainerEdits:
    fields = _Fields(value, where, _EDITS_KEYS)
    return ContainerEdits(
        env=fields.strings("env"),
        device_nodes=tuple(_decode_node(item, at) for at, item in fields.items("deviceNodes")),
        mounts=tuple(_decode_mount(item, at) for at, item in fields.items("mounts")),
        hooks=tuple(_decode_hook(item, at) for at, item in fields.items("hooks")),
    )


def _decode_node(value: object, where: str) -> DeviceNode:
    fields = _Fields(value, where, _NODE_KEYS)
    return DeviceNode(
        path=fields.string("path"),
        host_path=fields.optional_string("hostPath"),
        type=fields.optional_string("type"),
        major=fields.optional_int("major"),
        minor=fields.optional_int("minor"),
        permissions=fields.optional_string("permissions"),
    )


def _decode_mount(value: object, where: str) -> Mount:
    fields = _Fields(value, where, _MOUNT_KEYS)
    return Mount(
        host_path=fields.string("hostPath"),
        container_path=fields.string("containerPath"),
        options=fields.strings("options"),
        type=fields.optional_string("type"),
    )


def _decode_hook(value: object, where: str) -> Hook:
    fields = _Fields(value, where, _HOOK_KEYS)
    return Hook(
        hook_name=fields.string("hookName"),
        path=fields.string("path"),
        args=fields.strings("args"),
        env=fields.strings("env"),
    )
