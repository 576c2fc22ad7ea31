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
from dra_driver.typed_json import JsonObject, JsonShapeError


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
        spec, declared = _decode_spec(JsonObject(data))
        validate_spec(spec)
        needed = minimum_version(spec)
        if version_key(declared) < version_key(needed):
            raise CdiError(
                f"cdiVersion: {declared} is too low for this content, which needs {needed}"
            )
    except (CdiError, JsonShapeError) as error:
        raise CdiError(f"{source}: {error}") from None
    return spec


# Every mapping of the wire form refuses keys it does not list: see the module docstring.
_SPEC_KEYS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_KEYS = frozenset({"name", "containerEdits"})
_EDITS_KEYS = frozenset({"env", "deviceNodes", "mounts", "hooks"})
_NODE_KEYS = frozenset({"path", "hostPath", "type", "major", "minor", "permissions"})
_MOUNT_KEYS = frozenset({"hostPath", "containerPath", "options", "type"})
_HOOK_KEYS = frozenset({"hookName", "path", "args", "env"})


def _decode_spec(fields: JsonObject) -> tuple[CdiSpec, str]:
    fields.only(_SPEC_KEYS)
    declared = fields.string("cdiVersion")
    if declared not in KNOWN_VERSIONS:
        raise CdiError(f"cdiVersion: {declared!r} is not one of {', '.join(KNOWN_VERSIONS)}")
    kind = fields.string("kind")
    raw_annotations = fields.optional_nested("annotations")
    annotations = raw_annotations.string_members() if raw_annotations is not None else {}
    devices = tuple(_decode_device(device) for device in fields.nested_list("devices"))
    raw_edits = fields.optional_nested("containerEdits")
    edits = _decode_edits(raw_edits) if raw_edits is not None else ContainerEdits()
    return CdiSpec(kind=kind, devices=devices, edits=edits, annotations=annotations), declared


def _decode_device(fields: JsonObject) -> CdiDevice:
    fields.only(_DEVICE_KEYS)
    name = fields.string("name")
    return CdiDevice(name=name, edits=_decode_edits(fields.nested("containerEdits")))


def _decode_edits(fields: JsonObject) -> ContainerEdits:
    fields.only(_EDITS_KEYS)
    return ContainerEdits(
        env=fields.optional_strings("env") or (),
        device_nodes=tuple(_decode_node(item) for item in _list(fields, "deviceNodes")),
        mounts=tuple(_decode_mount(item) for item in _list(fields, "mounts")),
        hooks=tuple(_decode_hook(item) for item in _list(fields, "hooks")),
    )


def _list(fields: JsonObject, key: str) -> list[JsonObject]:
    return fields.optional_nested_list(key) or []


def _decode_node(fields: JsonObject) -> DeviceNode:
    fields.only(_NODE_KEYS)
    return DeviceNode(
        path=fields.string("path"),
        host_path=fields.optional_string("hostPath"),
        type=fields.optional_string("type"),
        major=fields.optional_integer("major"),
        minor=fields.optional_integer("minor"),
        permissions=fields.optional_string("permissions"),
    )


def _decode_mount(fields: JsonObject) -> Mount:
    fields.only(_MOUNT_KEYS)
    return Mount(
        host_path=fields.string("hostPath"),
        container_path=fields.string("containerPath"),
        options=fields.optional_strings("options") or (),
        type=fields.optional_string("type"),
    )


def _decode_hook(fields: JsonObject) -> Hook:
    fields.only(_HOOK_KEYS)
    return Hook(
        hook_name=fields.string("hookName"),
        path=fields.string("path"),
        args=fields.optional_strings("args") or (),
        env=fields.optional_strings("env") or (),
    )
