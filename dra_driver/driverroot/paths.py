"""Following symbolic links inside a driver root as if it were `/`.

A containerised driver's root (`/run/nvidia/driver`) holds absolute links such as
`lib -> /usr/lib`, which mean `<root>/usr/lib`, not the plugin's own `/usr/lib`. The operating
system's resolution would leave the root, so links are followed here one component at a time,
with absolute targets taken relative to the root and `..` never climbing above it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

_MAX_LINKS = 40  # the kernel's own limit on links followed while resolving one path


def resolve_in_root(root: Path, path: PurePosixPath | str) -> PurePosixPath | None:
    """The real path (absolute, in the root's terms) that `path` names; None when it, or a link
    on the way, leads nowhere."""
    pending = [part for part in PurePosixPath(path).parts if part != "/"]
    resolved: list[str] = []
    followed = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            followed += 1
            if followed > _MAX_LINKS:
                return None
            target = PurePosixPath(os.readlink(candidate))
            if target.is_absolute():
                resolved = []
            pending[:0] = [p for p in target.parts if p != "/"]
            continue
        if not os.path.lexists(candidate):
            return None
        resolved.append(part)
    return PurePosixPath("/", *resolved)


def in_root(root: Path, path: PurePosixPath) -> Path:
    """Where the plugin finds a root-relative absolute path."""
    return root.joinpath(*path.parts[1:])
