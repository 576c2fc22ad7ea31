"""CDI spec content as immutable values.

Only the parts of the CDI format this driver writes are modelled. Fields are plain tuples so specs
can be compared, hashed and shared between threads without copies. `validate_spec` holds the
rules runtimes apply when they load a file, so a spec the driver writes is never one a runtime
would skip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.names import validate_device_name, validate_kind

DEVICE_NODE_TYPES = frozenset({"b", "c", "u", "p"})
HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    permissions: str | None = None


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    # Added in CDI 0.4.0; left unset unless needed so older runtimes accept the file.
    type: str | None = None


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks)


@dataclass(frozen=True)
class CdiDevice:
    name: str
    edits: ContainerEdits


@dataclass(frozen=True)
class CdiSpec:
    kind: str
    devices: tuple[CdiDevice, ...]
    edits: ContainerEdits = ContainerEdits()
    annotations: Mapping[str, str] = field(default_factory=dict)

    def device(self, name: str) -> CdiDevice | None:
        for device in self.devices:
            if device.name == name:
                return device
        return None


def validate_spec(spec: CdiSpec) -> None:
    """Apply the load-time rules of CDI runtimes; the error names the field path at fault."""
    _at("kind", validate_kind, spec.kind)
    if not spec.devices:
        raise CdiError("devices: a spec needs at least one device")
    for key, value in spec.annotations.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise CdiError(
                f"annotations: entry {key!r}: keys must be non-empty strings, values strings"
            )
    seen: set[str] = set()
    for index, device in enumerate(spec.devices):
        where = f"devices[{index}]"
        _at(f"{where}.name", validate_device_name, device.name)
        if device.name in seen:
            raise CdiError(f"{where}.name: device {device.name!r} is defined twice")
        seen.add(device.name)
        if device.edits.is_empty():
            raise CdiError(f"{where}.containerEdits: a device must edit the container somehow")
        validate_edits(device.edits, f"{where}.containerEdits")
    validate_edits(spec.edits, "containerEdits")


def validate_edits(edits: ContainerEdits, where: str) -> None:
    for index, entry in enumerate(edits.env):
        _check_env(entry, f"{where}.env[{index}]")
    for index, node in enumerate(edits.device_nodes):
        _check_device_node(node, f"{where}.deviceNodes[{index}]")
    for index, mount in enumerate(edits.mounts):
        _check_mount(mount, f"{where}.mounts[{index}]")
    for index, hook in enumerate(edits.hooks):
        _check_hook(hook, f"{where}.hooks[{index}]")


def _at(where: str, check: Callable[[str], None], value: str) -> None:
    try:
        check(value)
    except CdiError as error:
        raise CdiError(f"{where}: {error}") from None


def _check_env(entry: str, where: str) -> None:
    if entry.find("=") <= 0:
        raise CdiError(f"{where}: {entry!r} is not of the form NAME=VALUE")


def _check_absolute(path: str, where: str) -> None:
    if not path.startswith("/"):
        raise CdiError(f"{where}: {path!r} is not an absolute path")


def _check_device_node(node: DeviceNode, where: str) -> None:
    _check_absolute(node.path, f"{where}.path")
    if node.host_path is not None:
        _check_absolute(node.host_path, f"{where}.hostPath")
    if node.type is not None and node.type not in DEVICE_NODE_TYPES:
        raise CdiError(f"{where}.type: {node.type!r} is not one of b, c, u, p")
    for name, number in (("major", node.major), ("minor", node.minor)):
        if number is not None and number < 0:
            raise CdiError(f"{where}.{name}: {number} is negative")
    if node.permissions is not None and (
        not node.permissions or set(node.permissions) - set("rwm")
    ):
        raise CdiError(f"{where}.permissions: {node.permissions!r} must use only r, w and m")


def _check_mount(mount: Mount, where: str) -> None:
    _check_absolute(mount.host_path, f"{where}.hostPath")
    _check_absolute(mount.container_path, f"{where}.containerPath")
    if mount.type is not None and not mount.type:
        raise CdiError(f"{where}.type: must not be empty when set")


def _check_hook(hook: Hook, where: str) -> None:
    if hook.hook_name not in HOOK_NAMES:
        raise CdiError(
            f"{where}.hookName: {hook.hook_name!r} is not one of {', '.join(sorted(HOOK_NAMES))}"
        )
    _check_absolute(hook.path, f"{where}.path")
    for index, entry in enumerate(hook.env):
        _check_env(entry, f"{where}.env[{index}]")
