"""Which `cdiVersion` a spec must declare.

Runtimes refuse a file whose declared version is lower than what its fields need, and older
runtimes refuse versions they do not know. Declaring the lowest sufficient version therefore lets
the widest range of runtimes read what the driver writes. The triggers follow the CDI
specification's version history, limited to the fields this package models:

- 0.4.0: a mount `type`;
- 0.5.0: a device name that does not start with a letter, a device node `hostPath`;
- 0.6.0: spec annotations, a `.` in the class part of the kind.
"""

from __future__ import annotations

from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import CdiSpec, ContainerEdits

BASELINE_VERSION = "0.3.0"
# Versions this package knows the rules of; a file declaring another one is not ours.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0")


def version_key(version: str) -> tuple[int, int, int]:
    parts = version.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise CdiError(f"cdiVersion {version!r} is not of the form MAJOR.MINOR.PATCH")
    return int(parts[0]), int(parts[1]), int(parts[2])


def minimum_version(spec: CdiSpec) -> str:
    if spec.annotations or "." in spec.kind.partition("/")[2]:
        return "0.6.0"
    all_edits = (spec.edits, *(device.edits for device in spec.devices))
    if any(device.name[:1] and not _is_ascii_letter(device.name[0]) for device in spec.devices):
        return "0.5.0"
    if any(node.host_path for edits in all_edits for node in edits.device_nodes):
        return "0.5.0"
    if any(_has_mount_type(edits) for edits in all_edits):
        return "0.4.0"
    return BASELINE_VERSION


def _is_ascii_letter(character: str) -> bool:
    return ("a" <= character <= "z") or ("A" <= character <= "Z")


def _has_mount_type(edits: ContainerEdits) -> bool:
    return any(mount.type for mount in edits.mounts)
