"""Whether a directory lives in memory (tmpfs, ramfs), read from the mount table.

On such a filesystem creating, syncing, renaming and deleting a small file never waits for a
device: it costs a few tens of microseconds of CPU, less than handing the work to a thread. The
kubelet plugin therefore writes CDI specs on its event loop when the spec directory is in memory
(as `/var/run/cdi` is on practically every node) and from a worker thread otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

MOUNT_TABLE = Path("/proc/self/mountinfo")
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def filesystem_type(path: Path, mount_table: Path = MOUNT_TABLE) -> str | None:
    """The type of the filesystem holding `path` (which need not exist yet), or None when the
    mount table cannot be read or names no mount above it."""
    target = os.path.realpath(path)
    try:
        lines = mount_table.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    best_point: str | None = None
    best_type: str | None = None
    for line in lines:
        # Fields: id, parent, major:minor, root, mount point, options, optional fields...,
        # "-", filesystem type, source, super options.
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
            point, fstype = _unescape(fields[4]), fields[separator + 1]
        except (ValueError, IndexError):
            continue
        # Later lines are later mounts: at equal length the last one hides the others.
        if _contains(point, target) and (best_point is None or len(point) >= len(best_point)):
            best_point, best_type = point, fstype
    return best_type


def in_memory(path: Path, mount_table: Path = MOUNT_TABLE) -> bool:
    return filesystem_type(path, mount_table) in MEMORY_FILESYSTEMS


def _contains(mount_point: str, target: str) -> bool:
    if mount_point == "/":
        return True
    return target == mount_point or target.startswith(mount_point + "/")


def _unescape(field: str) -> str:
    """Mount points escape space, tab, newline and backslash as octal (`\\040`)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    index = 0
    while index < len(field):
        chunk = field[index + 1 : index + 4]
        if field[index] == "\\" and len(chunk) == 3 and all(c in "01234567" for c in chunk):
            out.append(chr(int(chunk, 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)
